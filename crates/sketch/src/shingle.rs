//! Shingling: cutting a text into the overlapping pieces whose set MinHash estimates.
//!
//! Character and byte modes reproduce lshcurator 0.2.3 exactly (`text[i:i+k].encode()` for
//! `i in range(0, n-k+1, step)`, over characters or over UTF-8 bytes). A text shorter than the
//! window yields no shingle at all (not one short shingle), again as lshcurator does.

use std::fmt;
use std::sync::Arc;

use crate::SketchError;

/// A user's own way to cut a text into shingles (e.g. words from a Japanese morphological
/// analyser, joined into n-grams), for [`Shingler::Custom`].
pub trait CustomShingler: Send + Sync + fmt::Debug {
    /// Calls `emit` once per shingle in text order (repeats allowed); each shingle is bytes.
    fn shingles(&self, text: &str, emit: &mut dyn FnMut(&[u8]));
}

/// Something that cuts a text into tokens (words of a segmenter such as jieba, a Japanese
/// morphological analyser, a user's own function), for [`Shingler::Tokens`], whose shingles are
/// n-grams of the tokens joined by one space, as hojichar joins them.
pub trait Tokenizer: Send + Sync + fmt::Debug {
    /// A stable name: it enters [`Shingler::describe`] and so the settings fingerprint, so two
    /// tokenizers that cut texts differently must never share one.
    fn name(&self) -> &str;

    /// Calls `emit` once per token of `text`, in text order.
    fn tokenize(&self, text: &str, emit: &mut dyn FnMut(&str));

    /// Told the texts this thread is about to tokenize, in one call: a tokenizer whose every
    /// call is costly (one that takes a lock, such as Python's GIL) does the whole batch at once
    /// and answers [`Tokenizer::tokenize`] from what it kept. Only a hint: a text left out is
    /// tokenized on its own, and the tokens are the same either way.
    fn prefetch(&self, texts: &[&str]) {
        let _ = texts;
    }

    /// Whether [`Tokenizer::prefetch`] does anything, so callers skip gathering texts for those
    /// that would ignore it.
    fn wants_batches(&self) -> bool {
        false
    }

    /// The tokenizer as its own type, for the program that handed it in and looks after it (the
    /// Python package reads back what its callable raised); `None` by default.
    fn as_any(&self) -> Option<&dyn std::any::Any> {
        None
    }
}

/// How a text is cut into shingles.
#[derive(Clone, Debug)]
pub enum Shingler {
    /// k consecutive Unicode scalar values, window moved by `step` chars; shingle = UTF-8 bytes
    /// of the window (exactly lshcurator's `text[i:i+k].encode()` for
    /// `i in range(0, n-k+1, step)`).
    Chars {
        /// Window width in characters.
        k: usize,
        /// Window stride in characters.
        step: usize,
    },
    /// k consecutive bytes of the UTF-8 text, moved by `step` bytes (lshcurator byte mode).
    /// Windows may split multi-byte characters; shingles are raw bytes.
    Bytes {
        /// Window width in bytes.
        k: usize,
        /// Window stride in bytes.
        step: usize,
    },
    /// n consecutive words (Unicode word boundaries, unicode-segmentation `unicode_words`),
    /// moved by `step` words; shingle = words joined by one ASCII space.
    Words {
        /// Window width in words.
        n: usize,
        /// Window stride in words.
        step: usize,
    },
    /// n consecutive tokens moved by `step` tokens, a token being a maximal run of ASCII
    /// letters, digits and `_` (every other character, non-ASCII ones included, separates; no
    /// case folding): hojichar's `non_alpha_num_splitter`. Shingle = tokens joined by one ASCII
    /// space, as hojichar joins them.
    AsciiWords {
        /// Window width in tokens.
        n: usize,
        /// Window stride in tokens.
        step: usize,
    },
    /// n consecutive tokens of a [`Tokenizer`], moved by `step` tokens; shingle = tokens
    /// joined by one ASCII space (hojichar's n-grams).
    Tokens {
        /// Window width in tokens.
        n: usize,
        /// Window stride in tokens.
        step: usize,
        /// What cuts the text into tokens.
        tokenizer: Arc<dyn Tokenizer>,
    },
    /// A user's shingler; its shingles are used as they are.
    Custom(Arc<dyn CustomShingler>),
}

impl Shingler {
    /// Errors for k/n == 0 or step == 0.
    pub fn validate(&self) -> Result<(), SketchError> {
        let (what, width, step) = match self {
            Shingler::Chars { k, step } => ("char k", *k, *step),
            Shingler::Bytes { k, step } => ("byte k", *k, *step),
            Shingler::Words { n, step } => ("word n", *n, *step),
            Shingler::AsciiWords { n, step } => ("ascii-word n", *n, *step),
            Shingler::Tokens { n, step, .. } => ("token n", *n, *step),
            Shingler::Custom(_) => return Ok(()),
        };
        if width == 0 {
            return Err(SketchError::InvalidShingler(format!("{what} must be >= 1")));
        }
        if step == 0 {
            return Err(SketchError::InvalidShingler("step must be >= 1".into()));
        }
        Ok(())
    }

    /// Calls `f` once per shingle in text order. A text shorter than k (or n words) yields no
    /// shingle at all.
    ///
    /// # Panics
    /// On a zero width or step (see [`Shingler::validate`]).
    pub fn for_each<F: FnMut(&[u8])>(&self, text: &str, mut f: F) {
        match *self {
            Shingler::Bytes { k, step } => byte_windows(text.as_bytes(), k, step, &mut f),
            // On ASCII text characters are bytes, so the cheap byte windows are exact.
            Shingler::Chars { k, step } if text.is_ascii() => {
                byte_windows(text.as_bytes(), k, step, &mut f)
            }
            Shingler::Chars { k, step } => char_windows(text, k, step, &mut f),
            Shingler::Words { n, step } => word_windows(text, n, step, &mut f, WordSplit::Unicode),
            Shingler::AsciiWords { n, step } => {
                word_windows(text, n, step, &mut f, WordSplit::AsciiAlphanumeric)
            }
            Shingler::Tokens {
                n,
                step,
                ref tokenizer,
            } => token_windows(tokenizer.as_ref(), text, n, step, &mut f),
            Shingler::Custom(ref t) => t.shingles(text, &mut f),
        }
    }

    /// The tokenizer of [`Shingler::Tokens`], when it asks for batches
    /// ([`Tokenizer::wants_batches`]).
    pub fn batching_tokenizer(&self) -> Option<&dyn Tokenizer> {
        match self {
            Shingler::Tokens { tokenizer, .. } if tokenizer.wants_batches() => {
                Some(tokenizer.as_ref())
            }
            _ => None,
        }
    }

    /// Stable short description for reports and fingerprints, e.g. `"char:5:1"`, `"byte:5:1"`,
    /// `"word:3:1"`, `"ascii-word:3:1"`, `"token:jieba:2:1"` (the tokenizer's name),
    /// `"custom:<debug>"`.
    pub fn describe(&self) -> String {
        match self {
            Shingler::Chars { k, step } => format!("char:{k}:{step}"),
            Shingler::Bytes { k, step } => format!("byte:{k}:{step}"),
            Shingler::Words { n, step } => format!("word:{n}:{step}"),
            Shingler::AsciiWords { n, step } => format!("ascii-word:{n}:{step}"),
            Shingler::Tokens { n, step, tokenizer } => {
                format!("token:{}:{n}:{step}", tokenizer.name())
            }
            Shingler::Custom(t) => format!("custom:{t:?}"),
        }
    }
}

fn check(width: usize, step: usize) {
    assert!(width > 0 && step > 0, "shingle width and step must be >= 1");
}

fn byte_windows(bytes: &[u8], k: usize, step: usize, f: &mut impl FnMut(&[u8])) {
    check(k, step);
    if bytes.len() < k {
        return;
    }
    let mut i = 0;
    while i + k <= bytes.len() {
        f(&bytes[i..i + k]);
        i += step;
    }
}

/// Char starts remembered by [`char_windows`]'s ring; wider windows use the iterator path.
const RING: usize = 64;

fn char_windows(text: &str, k: usize, step: usize, f: &mut impl FnMut(&[u8])) {
    check(k, step);
    if k >= RING {
        return wide_char_windows(text, k, step, f);
    }
    // One pass over the bytes: every char start (and the end of the text) is a boundary b_n, and
    // window n-k spans b_{n-k}..b_n. A ring of the last RING boundaries avoids collecting them.
    let bytes = text.as_bytes();
    let mut ring = [0usize; RING];
    let mut n = 0usize;
    let mut boundary = |pos: usize, n: &mut usize| {
        if *n >= k && (step == 1 || (*n - k).is_multiple_of(step)) {
            f(&bytes[ring[(*n - k) % RING]..pos]);
        }
        ring[*n % RING] = pos;
        *n += 1;
    };
    for (pos, &b) in bytes.iter().enumerate() {
        // UTF-8 continuation bytes are 0b10xx_xxxx; every other byte starts a char.
        if (b as i8) >= -0x40 {
            boundary(pos, &mut n);
        }
    }
    boundary(bytes.len(), &mut n);
}

/// Char windows of any width: two boundary iterators k apart.
fn wide_char_windows(text: &str, k: usize, step: usize, f: &mut impl FnMut(&[u8])) {
    let boundaries = || text.char_indices().map(|(i, _)| i).chain([text.len()]);
    let mut starts = boundaries();
    let mut ends = boundaries();
    let (mut start, mut end) = (starts.next(), ends.nth(k));
    while let (Some(s), Some(e)) = (start, end) {
        f(&text.as_bytes()[s..e]);
        start = starts.nth(step - 1);
        end = ends.nth(step - 1);
    }
}

/// Token `n`-gram windows moved by `step` tokens, each the tokens joined by one space. The
/// tokens are copied once into one buffer, each followed by a space, so every window is a slice
/// of it.
fn token_windows(
    tokenizer: &dyn Tokenizer,
    text: &str,
    n: usize,
    step: usize,
    f: &mut impl FnMut(&[u8]),
) {
    check(n, step);
    let mut joined = String::with_capacity(text.len() + text.len() / 2);
    // Where each token starts in `joined`; the next token's start, less its space, is where a
    // token ends.
    let mut starts = Vec::new();
    tokenizer.tokenize(text, &mut |token| {
        starts.push(joined.len());
        joined.push_str(token);
        joined.push(' ');
    });
    if starts.len() < n {
        return;
    }
    starts.push(joined.len());
    let bytes = joined.as_bytes();
    let mut first = 0;
    while first + n < starts.len() {
        f(&bytes[starts[first]..starts[first + n] - 1]);
        first += step;
    }
}

/// What a word is for [`word_windows`].
#[derive(Clone, Copy)]
enum WordSplit {
    /// [`Shingler::Words`].
    Unicode,
    /// [`Shingler::AsciiWords`].
    AsciiAlphanumeric,
}

/// Word `n`-gram windows moved by `step` words.
///
/// The words are copied once, each followed by one space, into a buffer in which every window
/// is a slice: each word is copied once however many windows hold it.
fn word_windows(text: &str, n: usize, step: usize, f: &mut impl FnMut(&[u8]), split: WordSplit) {
    check(n, step);
    let bytes = text.as_bytes();
    // Short words are copied as one 16-byte block, which may write past the word (the bytes
    // after it are overwritten by the next word or never read); the buffer keeps that room.
    const BLOCK: usize = 16;
    let mut joined = vec![0u8; bytes.len() + BLOCK + 1];
    let mut len = 0;
    // Where the last n words start in `joined`: a ring whose next slot to write is `next`, which
    // once n words are in is also the oldest word's.
    let mut starts = vec![0usize; n];
    let mut next = 0;
    // Words to read before the next emitted window ends (counts, not remainders: no division
    // per word).
    let mut until_window = n;
    let mut on_word = |start: usize, end: usize| {
        let word = end - start;
        // Words of the general path may touch (CJK ideographs are one word each), so the
        // joined text can outgrow the text.
        if len + word.max(BLOCK) + 1 > joined.len() {
            joined.resize((2 * joined.len()).max(len + word + BLOCK + 1), 0);
        }
        if word <= BLOCK && start + BLOCK <= bytes.len() {
            joined[len..len + BLOCK].copy_from_slice(&bytes[start..start + BLOCK]);
        } else {
            joined[len..len + word].copy_from_slice(&bytes[start..end]);
        }
        starts[next] = len;
        next = if next + 1 == n { 0 } else { next + 1 };
        len += word;
        until_window -= 1;
        if until_window == 0 {
            f(&joined[starts[next]..len]);
            until_window = step;
        }
        joined[len] = b' ';
        len += 1;
    };
    match split {
        WordSplit::Unicode => crate::words::unicode_words(text, &mut on_word),
        WordSplit::AsciiAlphanumeric => crate::words::ascii_alphanumeric_runs(text, &mut on_word),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use unicode_segmentation::UnicodeSegmentation;

    fn collect(s: &Shingler, text: &str) -> Vec<Vec<u8>> {
        let mut v = Vec::new();
        s.for_each(text, |b| v.push(b.to_vec()));
        v
    }

    /// Python's `[t[i:i+k].encode() for i in range(0, len(t)-k+1, step)]`, written naively.
    fn python_chars(text: &str, k: usize, step: usize) -> Vec<Vec<u8>> {
        let chars: Vec<char> = text.chars().collect();
        if chars.len() < k {
            return Vec::new();
        }
        (0..chars.len() - k + 1)
            .step_by(step)
            .map(|i| chars[i..i + k].iter().collect::<String>().into_bytes())
            .collect()
    }

    #[test]
    fn chars_match_python_slicing_on_ascii_and_multibyte_text() {
        for text in [
            "",
            "abcd",
            "abcde",
            "hello world",
            "Ünïcödé 文字 テキスト 🙂 mixed",
            "🙂🙂🙂",
        ] {
            for k in (1..7).chain([RING - 1, RING, RING + 3]) {
                for step in 1..4 {
                    let s = Shingler::Chars { k, step };
                    assert_eq!(
                        collect(&s, text),
                        python_chars(text, k, step),
                        "{text:?} {k} {step}"
                    );
                }
            }
        }
    }

    #[test]
    fn bytes_are_raw_windows() {
        let s = Shingler::Bytes { k: 3, step: 2 };
        assert_eq!(
            collect(&s, "abcdefg"),
            vec![b"abc".to_vec(), b"cde".to_vec(), b"efg".to_vec()]
        );
        assert_eq!(collect(&s, "é").len(), 0);
        assert_eq!(
            collect(&Shingler::Bytes { k: 2, step: 1 }, "é"),
            vec!["é".as_bytes().to_vec()]
        );
    }

    #[test]
    fn words_join_with_single_spaces() {
        let s = Shingler::Words { n: 2, step: 1 };
        assert_eq!(
            collect(&s, "The  quick, brown fox."),
            vec![
                b"The quick".to_vec(),
                b"quick brown".to_vec(),
                b"brown fox".to_vec()
            ]
        );
        assert!(collect(&Shingler::Words { n: 3, step: 1 }, "two words").is_empty());
        let s = Shingler::Words { n: 1, step: 2 };
        assert_eq!(
            collect(&s, "a b c d e"),
            vec![b"a".to_vec(), b"c".to_vec(), b"e".to_vec()]
        );
    }

    /// Words of `words` joined by one space per window: word shingles as written before the
    /// shared buffer (and as hojichar and datatrove join their n-grams).
    fn joined_windows(words: &[&str], n: usize, step: usize) -> Vec<Vec<u8>> {
        if words.len() < n {
            return Vec::new();
        }
        (0..=words.len() - n)
            .step_by(step)
            .map(|i| words[i..i + n].join(" ").into_bytes())
            .collect()
    }

    #[test]
    fn ascii_words_are_hojichar_tokens_joined_by_spaces() {
        let s = Shingler::AsciiWords { n: 2, step: 1 };
        assert_eq!(
            collect(&s, "Don't stop: café_au_lait, 文字 x1__y"),
            vec![
                b"Don t".to_vec(),
                b"t stop".to_vec(),
                b"stop caf".to_vec(),
                b"caf _au_lait".to_vec(),
                b"_au_lait x1__y".to_vec(),
            ]
        );
        assert_eq!(s.describe(), "ascii-word:2:1");
        assert!(Shingler::AsciiWords { n: 0, step: 1 }.validate().is_err());
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(1500))]

        #[test]
        fn word_shingles_join_unicode_words(
            text in proptest::prop_oneof![
                crate::words::tests::mixed_text(),
                crate::words::tests::mostly_ascii_text(),
            ],
            n in 1usize..7,
            step in 1usize..4,
        ) {
            let words: Vec<&str> = text.unicode_words().collect();
            let s = Shingler::Words { n, step };
            proptest::prop_assert_eq!(collect(&s, &text), joined_windows(&words, n, step));
        }

        #[test]
        fn ascii_word_shingles_join_the_regex_split(
            text in crate::words::tests::mixed_text(),
            n in 1usize..7,
            step in 1usize..4,
        ) {
            let tokens: Vec<&str> = text
                .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .filter(|t| !t.is_empty())
                .collect();
            let s = Shingler::AsciiWords { n, step };
            proptest::prop_assert_eq!(collect(&s, &text), joined_windows(&tokens, n, step));
        }
    }

    /// Tokens split at spaces, empty ones left out: a stand-in for a segmenter.
    #[derive(Debug)]
    struct SpaceTokens;
    impl Tokenizer for SpaceTokens {
        fn name(&self) -> &str {
            "spaces"
        }
        fn tokenize(&self, text: &str, emit: &mut dyn FnMut(&str)) {
            text.split(' ').filter(|t| !t.is_empty()).for_each(emit);
        }
    }

    #[test]
    fn token_shingles_are_n_grams_joined_by_one_space() {
        let tokens = |n, step| Shingler::Tokens {
            n,
            step,
            tokenizer: Arc::new(SpaceTokens),
        };
        let text = "文字  列 の テキスト a b";
        let words: Vec<&str> = text.split(' ').filter(|t| !t.is_empty()).collect();
        for n in 1..8 {
            for step in 1..4 {
                assert_eq!(
                    collect(&tokens(n, step), text),
                    joined_windows(&words, n, step),
                    "{n} {step}"
                );
            }
        }
        assert_eq!(
            collect(&tokens(2, 1), "一 二 三"),
            vec!["一 二".as_bytes().to_vec(), "二 三".as_bytes().to_vec()]
        );
        assert!(collect(&tokens(1, 1), "   ").is_empty());
        assert_eq!(tokens(3, 1).describe(), "token:spaces:3:1");
        assert!(tokens(0, 1).validate().is_err());
        assert!(tokens(1, 0).validate().is_err());
        assert!(tokens(2, 1).batching_tokenizer().is_none());
    }

    #[derive(Debug)]
    struct Spaces;
    impl CustomShingler for Spaces {
        fn shingles(&self, text: &str, emit: &mut dyn FnMut(&[u8])) {
            text.split(' ').for_each(|w| emit(w.as_bytes()));
        }
    }

    #[test]
    fn custom_shinglers_and_descriptions() {
        let s = Shingler::Custom(Arc::new(Spaces));
        assert_eq!(collect(&s, "a b"), vec![b"a".to_vec(), b"b".to_vec()]);
        assert_eq!(s.describe(), "custom:Spaces");
        assert_eq!(Shingler::Chars { k: 5, step: 1 }.describe(), "char:5:1");
        assert_eq!(Shingler::Bytes { k: 5, step: 2 }.describe(), "byte:5:2");
        assert_eq!(Shingler::Words { n: 3, step: 1 }.describe(), "word:3:1");
    }

    #[test]
    fn validate_refuses_zero_width_and_step() {
        assert!(Shingler::Chars { k: 0, step: 1 }.validate().is_err());
        assert!(Shingler::Bytes { k: 1, step: 0 }.validate().is_err());
        assert!(Shingler::Words { n: 0, step: 1 }.validate().is_err());
        assert!(Shingler::Words { n: 1, step: 1 }.validate().is_ok());
    }
}
