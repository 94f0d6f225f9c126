//! neardup-segment: native word segmentation, as [`Tokenizer`]s of word-n-gram shingles.
//!
//! Character shingles cut Chinese and Japanese text into overlapping runs of characters, and
//! Unicode words (UAX #29) into single ideographs or whole runs of kana; a word segmenter finds
//! the words. This crate owns the segmenters the engine runs natively, by name ([`by_name`]):
//!
//! - `jieba`: Chinese words by [jieba-rs](https://docs.rs/jieba-rs), a port of Python's `jieba`
//!   with the same dictionary (embedded in the crate: nothing is downloaded or read at build or
//!   run time) and the same HMM for words not in it, so it cuts as `jieba.lcut(text)` does.
//!
//! Japanese has no segmenter here: the crates that analyse it either download their dictionary
//! while building (lindera's embedded dictionaries) or are not published on crates.io
//! (sudachi.rs), so Japanese words come from a Python tokenizer (fugashi, sudachipy) handed to
//! the Python package (`docs/tokenizers.md`).
//!
//! It does not own shingling (the n-grams of tokens are `neardup_sketch::Shingler::Tokens`) or
//! the settings that choose a tokenizer (`neardup::Config`).

#![deny(missing_docs)]

use std::sync::{Arc, OnceLock};

use neardup_sketch::Tokenizer;

/// The names of the native segmenters, for settings' error messages.
pub const NAMES: &[&str] = &["jieba"];

/// The native segmenter called `name`, or `None` when there is none by that name. Each is built
/// once per process and shared (jieba's dictionary takes a few hundred milliseconds to load).
pub fn by_name(name: &str) -> Option<Arc<dyn Tokenizer>> {
    match name {
        "jieba" => Some(jieba()),
        _ => None,
    }
}

/// Chinese words by jieba ([`Jieba`]), loaded once per process.
pub fn jieba() -> Arc<dyn Tokenizer> {
    static JIEBA: OnceLock<Arc<Jieba>> = OnceLock::new();
    JIEBA.get_or_init(|| Arc::new(Jieba::new())).clone()
}

/// Chinese word segmentation by jieba's dictionary and HMM (Python's `jieba.lcut(text)`, accurate
/// mode with the HMM on), leaving out the tokens that are only whitespace: words joined by one
/// space must not hold runs of spaces that a text's layout put there.
pub struct Jieba {
    jieba: jieba_rs::Jieba,
}

impl std::fmt::Debug for Jieba {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Jieba")
    }
}

impl Jieba {
    /// Loads jieba's embedded dictionary.
    pub fn new() -> Jieba {
        Jieba {
            jieba: jieba_rs::Jieba::new(),
        }
    }
}

impl Default for Jieba {
    fn default() -> Jieba {
        Jieba::new()
    }
}

impl Tokenizer for Jieba {
    fn name(&self) -> &str {
        "jieba"
    }

    fn tokenize(&self, text: &str, emit: &mut dyn FnMut(&str)) {
        for token in self.jieba.cut(text, true) {
            if !token.word.trim().is_empty() {
                emit(token.word);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(text: &str) -> Vec<String> {
        let mut out = Vec::new();
        jieba().tokenize(text, &mut |w| out.push(w.to_string()));
        out
    }

    #[test]
    fn jieba_finds_chinese_words_and_drops_whitespace() {
        assert_eq!(
            words("我来到北京清华大学"),
            ["我", "来到", "北京", "清华大学"]
        );
        assert_eq!(words("  文件  不存在 \n"), ["文件", "不", "存在"]);
        assert!(words("   ").is_empty());
    }

    #[test]
    fn names_resolve() {
        assert_eq!(by_name("jieba").unwrap().name(), "jieba");
        assert!(by_name("mecab").is_none());
        assert!(Arc::ptr_eq(&jieba(), &jieba()), "loaded once");
    }
}
