//! Shingling: cutting a text into the overlapping pieces whose set MinHash estimates.
//!
//! Character and byte modes reproduce lshcurator 0.2.3 exactly (`text[i:i+k].encode()` for
//! `i in range(0, n-k+1, step)`, over characters or over UTF-8 bytes). A text shorter than the
//! window yields no shingle at all (not one short shingle), again as lshcurator does.

use std::fmt;
use std::sync::Arc;

use unicode_segmentation::UnicodeSegmentation;

use crate::SketchError;

/// User-pluggable tokenizer (e.g. a Japanese morphological analyser).
pub trait Tokenizer: Send + Sync + fmt::Debug {
    /// Calls `emit` once per shingle in text order (repeats allowed); each shingle is bytes.
    fn shingles(&self, text: &str, emit: &mut dyn FnMut(&[u8]));
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
    /// A user tokenizer; its shingles are used as they are.
    Custom(Arc<dyn Tokenizer>),
}

impl Shingler {
    /// Errors for k/n == 0 or step == 0.
    pub fn validate(&self) -> Result<(), SketchError> {
        let (what, width, step) = match self {
            Shingler::Chars { k, step } => ("char k", *k, *step),
            Shingler::Bytes { k, step } => ("byte k", *k, *step),
            Shingler::Words { n, step } => ("word n", *n, *step),
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
            Shingler::Words { n, step } => word_windows(text, n, step, &mut f),
            Shingler::Custom(ref t) => t.shingles(text, &mut f),
        }
    }

    /// Stable short description for reports and fingerprints, e.g. `"char:5:1"`, `"byte:5:1"`,
    /// `"word:3:1"`, `"custom:<debug>"`.
    pub fn describe(&self) -> String {
        match self {
            Shingler::Chars { k, step } => format!("char:{k}:{step}"),
            Shingler::Bytes { k, step } => format!("byte:{k}:{step}"),
            Shingler::Words { n, step } => format!("word:{n}:{step}"),
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

fn word_windows(text: &str, n: usize, step: usize, f: &mut impl FnMut(&[u8])) {
    check(n, step);
    let words: Vec<&str> = text.unicode_words().collect();
    if words.len() < n {
        return;
    }
    let mut buf = String::new();
    let mut i = 0;
    while i + n <= words.len() {
        buf.clear();
        for (j, w) in words[i..i + n].iter().enumerate() {
            if j > 0 {
                buf.push(' ');
            }
            buf.push_str(w);
        }
        f(buf.as_bytes());
        i += step;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[derive(Debug)]
    struct Spaces;
    impl Tokenizer for Spaces {
        fn shingles(&self, text: &str, emit: &mut dyn FnMut(&[u8])) {
            text.split(' ').for_each(|w| emit(w.as_bytes()));
        }
    }

    #[test]
    fn custom_tokenizer_and_descriptions() {
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
