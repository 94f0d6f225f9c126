//! Word segmentation for word shingles: the words of [`Shingler::Words`] (exactly
//! unicode-segmentation's `unicode_words`, UAX #29 word boundaries) with a fast path over ASCII,
//! and the tokens of [`Shingler::AsciiWords`] (hojichar's `non_alpha_num_splitter`).
//!
//! Both report each word as its byte range in the text, in text order.
//!
//! [`Shingler::Words`]: crate::Shingler::Words
//! [`Shingler::AsciiWords`]: crate::Shingler::AsciiWords

use unicode_segmentation::UnicodeSegmentation;

/// ASCII letters, digits and `_`: the bytes that make ASCII words in both schemes.
const CORE: u8 = 1;
/// ASCII letters (UAX #29 ALetter within ASCII).
const LETTER: u8 = 2;
/// ASCII digits (UAX #29 Numeric within ASCII).
const DIGIT: u8 = 4;
/// `'`, `.` and `:`: MidLetter and MidNumLetQ, which join two letters (WB6, WB7).
const JOINS_LETTERS: u8 = 8;
/// `'`, `.`, `,` and `;`: MidNum and MidNumLetQ, which join two digits (WB11, WB12).
const JOINS_DIGITS: u8 = 16;

/// Word-break roles of the 128 ASCII bytes; 0 for every byte with none (non-ASCII included).
static ASCII_CLASS: [u8; 256] = {
    let mut table = [0u8; 256];
    let mut b = 0;
    while b < 128 {
        let c = b as u8;
        table[b] = if c.is_ascii_alphabetic() {
            CORE | LETTER
        } else if c.is_ascii_digit() {
            CORE | DIGIT
        } else if c == b'_' {
            CORE
        } else if c == b'\'' || c == b'.' {
            JOINS_LETTERS | JOINS_DIGITS
        } else if c == b':' {
            JOINS_LETTERS
        } else if c == b',' || c == b';' {
            JOINS_DIGITS
        } else {
            0
        };
        b += 1;
    }
    table
};

#[inline(always)]
fn class(b: u8) -> u8 {
    ASCII_CLASS[b as usize]
}

/// Calls `word(start, end)` for every word of `text` in text order: exactly the byte ranges of
/// `text.unicode_word_indices()`, found without the Unicode tables wherever that is provably
/// the same.
///
/// The text is cut into spans at positions where UAX #29 always breaks and where no rule looks
/// across (see [`is_hard_cut`]); spans of ASCII and separators ([`separator_len`]) go through
/// [`ascii_words`] (or its bit-mask twin), the rest through unicode-segmentation, span by span.
pub(crate) fn unicode_words(text: &str, word: &mut impl FnMut(usize, usize)) {
    #[cfg(target_arch = "x86_64")]
    let scanner = AsciiScanner::Masks(BlockClasses::sse2);
    #[cfg(not(target_arch = "x86_64"))]
    let scanner = AsciiScanner::Bytewise;
    unicode_words_with(text, scanner, word)
}

/// How [`unicode_words_with`] finds the words of its ASCII spans (the same words every way).
#[derive(Clone, Copy, Debug)]
pub(crate) enum AsciiScanner {
    /// [`ascii_words`], byte by byte: the definition, and the path off x86-64.
    #[cfg_attr(target_arch = "x86_64", allow(dead_code))]
    Bytewise,
    /// [`WordMasks`] of the whole text with this classifier, words read as runs of set bits.
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    Masks(fn(&[u8; 64]) -> BlockClasses),
}

/// [`unicode_words`] with a chosen scanner (tests run every scanner on every machine).
pub(crate) fn unicode_words_with(
    text: &str,
    scanner: AsciiScanner,
    word: &mut impl FnMut(usize, usize),
) {
    let bytes = text.as_bytes();
    let masks = match scanner {
        AsciiScanner::Bytewise => None,
        AsciiScanner::Masks(classify) => Some(WordMasks::new(bytes, classify)),
    };
    let mut pos = 0;
    while pos < bytes.len() {
        let first_high = fast_run_end(bytes, pos);
        if first_high == bytes.len() {
            ascii_span(bytes, masks.as_ref(), pos, bytes.len(), word);
            return;
        }
        // The general span reaches back to the last cut before the multi-byte character and
        // forward to the first cut after it; everything before it is ASCII or separators.
        let general_start = (pos + 1..first_high)
            .rev()
            .find(|&p| is_hard_cut(bytes, p))
            .unwrap_or(pos);
        ascii_span(bytes, masks.as_ref(), pos, general_start, word);
        let general_end = (first_high + 1..bytes.len())
            .find(|&p| is_hard_cut(bytes, p))
            .unwrap_or(bytes.len());
        for (offset, w) in text[general_start..general_end].unicode_word_indices() {
            let start = general_start + offset;
            word(start, start + w.len());
        }
        pos = general_end;
    }
}

/// The words of `from..end`, a span of ASCII and separators, by the chosen scanner.
#[inline(always)]
fn ascii_span(
    bytes: &[u8],
    masks: Option<&WordMasks>,
    from: usize,
    end: usize,
    word: &mut impl FnMut(usize, usize),
) {
    match masks {
        Some(masks) => masks.words(from, end, word),
        None => ascii_words(bytes, from, end, word),
    }
}

/// One bit per byte of a text: `word` is set on the bytes that [`ascii_words`] puts in words
/// (letters, digits, `_`, and a joining `'` `.` `:` `,` `;` between two letters or digits),
/// `alphanumeric` on letters and digits. Bit `i % 64` of element `i / 64` is byte `i`.
pub(crate) struct WordMasks {
    word: Vec<u64>,
    alphanumeric: Vec<u64>,
}

/// The classes of 64 bytes, one bit per byte.
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub(crate) struct BlockClasses {
    core: u64,
    letter: u64,
    digit: u64,
    joins_letters: u64,
    joins_digits: u64,
}

impl BlockClasses {
    /// Byte by byte from [`ASCII_CLASS`]: the portable classifier and the reference for
    /// [`BlockClasses::sse2`].
    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) fn bytewise(block: &[u8; 64]) -> BlockClasses {
        let mut c = BlockClasses::default();
        for (i, &b) in block.iter().enumerate() {
            let class = class(b);
            let bit = |flag: u8| u64::from(class & flag != 0) << i;
            c.core |= bit(CORE);
            c.letter |= bit(LETTER);
            c.digit |= bit(DIGIT);
            c.joins_letters |= bit(JOINS_LETTERS);
            c.joins_digits |= bit(JOINS_DIGITS);
        }
        c
    }

    /// Sixteen bytes per step with SSE2 (always present on x86-64: no run-time check needed).
    /// Bytes of 0x80 and above are negative as `i8`, so the signed range tests leave them out.
    #[cfg(target_arch = "x86_64")]
    pub(crate) fn sse2(block: &[u8; 64]) -> BlockClasses {
        use std::arch::x86_64::*;
        let mut c = BlockClasses::default();
        for part in 0..4 {
            // SAFETY: SSE2 is part of the x86-64 baseline; the load reads block[16 * part..][..16].
            let bits = unsafe {
                let x = _mm_loadu_si128(block.as_ptr().add(16 * part).cast());
                let splat = |b: u8| _mm_set1_epi8(b as i8);
                let within = |v: __m128i, lo: u8, hi: u8| {
                    _mm_and_si128(
                        _mm_cmpgt_epi8(v, splat(lo - 1)),
                        _mm_cmpgt_epi8(splat(hi + 1), v),
                    )
                };
                let is = |b: u8| _mm_cmpeq_epi8(x, splat(b));
                let letter = within(_mm_or_si128(x, splat(0x20)), b'a', b'z');
                let digit = within(x, b'0', b'9');
                let dot_or_quote = _mm_or_si128(is(b'.'), is(b'\''));
                let mask = |v: __m128i| u64::from(_mm_movemask_epi8(v) as u16);
                [
                    mask(_mm_or_si128(_mm_or_si128(letter, digit), is(b'_'))),
                    mask(letter),
                    mask(digit),
                    mask(_mm_or_si128(dot_or_quote, is(b':'))),
                    mask(_mm_or_si128(dot_or_quote, _mm_or_si128(is(b','), is(b';')))),
                ]
            };
            let shift = 16 * part;
            c.core |= bits[0] << shift;
            c.letter |= bits[1] << shift;
            c.digit |= bits[2] << shift;
            c.joins_letters |= bits[3] << shift;
            c.joins_digits |= bits[4] << shift;
        }
        c
    }
}

impl WordMasks {
    /// Classifies `bytes` 64 at a time with `classify`.
    pub(crate) fn new(bytes: &[u8], classify: fn(&[u8; 64]) -> BlockClasses) -> WordMasks {
        let blocks = bytes.len().div_ceil(64);
        let block = |b: usize| -> BlockClasses {
            match bytes.get(64 * b..64 * b + 64) {
                Some(full) => classify(full.try_into().expect("64 bytes")),
                None if 64 * b < bytes.len() => {
                    // The last block, zero-padded: NUL is of no class.
                    let mut padded = [0u8; 64];
                    padded[..bytes.len() - 64 * b].copy_from_slice(&bytes[64 * b..]);
                    classify(&padded)
                }
                None => BlockClasses::default(),
            }
        };
        let mut masks = WordMasks {
            word: Vec::with_capacity(blocks),
            alphanumeric: Vec::with_capacity(blocks),
        };
        let (mut current, mut before) = (block(0), BlockClasses::default());
        for b in 0..blocks {
            let after = block(b + 1);
            // Neighbour classes: bit i of `letter_before` is byte i - 1's, of `letter_after`
            // byte i + 1's, across block edges.
            let letter_before = current.letter << 1 | before.letter >> 63;
            let letter_after = current.letter >> 1 | after.letter << 63;
            let digit_before = current.digit << 1 | before.digit >> 63;
            let digit_after = current.digit >> 1 | after.digit << 63;
            let joining = (current.joins_letters & letter_before & letter_after)
                | (current.joins_digits & digit_before & digit_after);
            masks.word.push(current.core | joining);
            masks.alphanumeric.push(current.letter | current.digit);
            (before, current) = (current, after);
        }
        masks
    }

    /// The words in `from..end` ([`ascii_words`]'s contract): runs of `word` bits with an
    /// `alphanumeric` bit.
    #[inline(always)]
    fn words(&self, from: usize, end: usize, word: &mut impl FnMut(usize, usize)) {
        let mut i = from;
        while i < end {
            let start = next_bit(&self.word, i, end, false);
            if start >= end {
                return;
            }
            let stop = next_bit(&self.word, start, end, true);
            if any_bit(&self.alphanumeric, start, stop) {
                word(start, stop);
            }
            i = stop;
        }
    }
}

/// The first position in `from..end` whose bit is set (`clear == false`) or clear
/// (`clear == true`), or `end`.
#[inline(always)]
fn next_bit(bits: &[u64], from: usize, end: usize, clear: bool) -> usize {
    let flip = if clear { u64::MAX } else { 0 };
    let mut element = from / 64;
    let mut word = (bits[element] ^ flip) >> (from % 64);
    if word != 0 {
        return (from + word.trailing_zeros() as usize).min(end);
    }
    loop {
        element += 1;
        if 64 * element >= end {
            return end;
        }
        word = bits[element] ^ flip;
        if word != 0 {
            return (64 * element + word.trailing_zeros() as usize).min(end);
        }
    }
}

/// Whether any bit in `from..to` is set (`from < to`).
#[inline(always)]
fn any_bit(bits: &[u64], from: usize, to: usize) -> bool {
    let (first, last) = (from / 64, (to - 1) / 64);
    let low = u64::MAX << (from % 64);
    let high = u64::MAX >> (63 - (to - 1) % 64);
    if first == last {
        return bits[first] & low & high != 0;
    }
    bits[first] & low != 0
        || bits[first + 1..last].iter().any(|&b| b != 0)
        || bits[last] & high != 0
}

/// UTF-8 length of the separator that `rest` starts with, 0 if none.
///
/// Separators are non-ASCII characters the fast path reads like ASCII: § ¶ – — “ ” • … ← → ─
/// (U+00A7, U+00B6, U+2013, U+2014, U+201C, U+201D, U+2022, U+2026, U+2190, U+2192, U+2500,
/// common in documentation and web text). Each has the UAX #29 word-break class Other and is
/// neither a letter, a digit nor Extended_Pictographic, so no rule treats it differently from
/// an ASCII Other character such as `!` (WB4 attaches a following Extend, Format or ZWJ to it as
/// to `!`, and those send their span to the general path anyway), and it is no word of its own.
#[inline]
fn separator_len(rest: &[u8]) -> usize {
    match rest {
        [0xc2, 0xa7 | 0xb6, ..] => 2,
        [0xe2, 0x80, 0x93 | 0x94 | 0x9c | 0x9d | 0xa2 | 0xa6, ..]
        | [0xe2, 0x86, 0x90 | 0x92, ..]
        | [0xe2, 0x94, 0x80, ..] => 3,
        _ => 0,
    }
}

/// Index of the first character at or after `from` that is neither ASCII nor a separator (see
/// [`separator_len`]), or `bytes.len()`.
#[inline]
fn fast_run_end(bytes: &[u8], mut from: usize) -> usize {
    loop {
        let high = ascii_run_end(bytes, from);
        match separator_len(&bytes[high..]) {
            0 => return high,
            len => from = high + len,
        }
    }
}

/// Whether UAX #29 breaks between `bytes[p - 1]` and `bytes[p]` whatever the rest of the text,
/// and no boundary elsewhere depends on the text across `p`; `0 < p < bytes.len()`.
///
/// True when `bytes[p - 1]` is a space, tab or line feed, `bytes[p]` is ASCII and the two are
/// not both spaces. Then:
/// - there is a break at `p`: no rule keeps a space (WSegSpace), tab (Other) or LF before an
///   ASCII character, except WB3d between two spaces (WB4 only absorbs Extend, Format and ZWJ,
///   none of which is ASCII; WB5–WB13b, WB15–WB16 need a letter, digit, `_`, Katakana, Hebrew
///   letter, ZWJ or regional indicator on the left);
/// - no boundary before `p` looks past `bytes[p - 1]`: the only look-ahead rules (WB6, WB12)
///   look one character past a MidLetter, MidNum or MidNumLet, and `bytes[p - 1]` is none;
/// - no boundary after `p` looks back before `bytes[p]`: the look-behind rules (WB7, WB7c,
///   WB11) need a letter or digit two characters back, `bytes[p - 1]` is neither, and WB4's
///   skipping (and the regional-indicator count of WB15–WB16) cannot pass the ASCII `bytes[p]`.
///
/// So the words of the text are the words of the two sides, each segmented on its own.
#[inline(always)]
fn is_hard_cut(bytes: &[u8], p: usize) -> bool {
    let (before, at) = (bytes[p - 1], bytes[p]);
    at < 0x80 && matches!(before, b' ' | b'\t' | b'\n') && !(before == b' ' && at == b' ')
}

/// The words of the span `bytes[from..end]` of ASCII and separators, where `end` is the end
/// of the text or a [hard cut](is_hard_cut): UAX #29 restricted to ASCII, as
/// unicode-segmentation implements it (a separator's bytes are all of no class, like `!`).
///
/// A word is a run of letters, digits and `_` (WB5, WB8–WB10, WB13a–b) that may continue over
/// one `'`, `.` or `:` between two letters (WB6–WB7) and over one `'`, `.`, `,` or `;` between
/// two digits (WB11–WB12), kept only if it has a letter or digit (a run of `_` is no word).
/// Every other ASCII byte ends a word and belongs to no word.
pub(crate) fn ascii_words(
    bytes: &[u8],
    from: usize,
    end: usize,
    word: &mut impl FnMut(usize, usize),
) {
    let mut i = from;
    while i < end {
        if class(bytes[i]) & CORE == 0 {
            i += 1;
            continue;
        }
        let start = i;
        let mut alphanumeric = bytes[i] != b'_';
        i += 1;
        while i < end {
            let c = class(bytes[i]);
            if c & CORE != 0 {
                alphanumeric |= bytes[i] != b'_';
                i += 1;
            } else if i + 1 < end && joins(c, class(bytes[i - 1]), class(bytes[i + 1])) {
                // Both neighbours are letters or digits.
                alphanumeric = true;
                i += 2;
            } else {
                break;
            }
        }
        if alphanumeric {
            word(start, i);
        }
    }
}

/// Whether a byte of class `mid` between classes `before` and `after` stays inside a word.
#[inline(always)]
fn joins(mid: u8, before: u8, after: u8) -> bool {
    (mid & JOINS_LETTERS != 0 && before & after & LETTER != 0)
        || (mid & JOINS_DIGITS != 0 && before & after & DIGIT != 0)
}

/// Calls `word(start, end)` for every maximal run of ASCII letters, digits and `_` in `text`
/// (the tokens of hojichar's `non_alpha_num_splitter`, `re.split("[^A-Za-z_0-9]", text)`
/// without its empty strings): every other character, including every non-ASCII one, separates.
pub(crate) fn ascii_alphanumeric_runs(text: &str, word: &mut impl FnMut(usize, usize)) {
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if class(bytes[i]) & CORE == 0 {
            i += 1;
            continue;
        }
        let start = i;
        i += 1;
        while i < bytes.len() && class(bytes[i]) & CORE != 0 {
            i += 1;
        }
        word(start, i);
    }
}

/// Index of the first non-ASCII byte at or after `from` (or `bytes.len()`).
#[inline]
pub(crate) fn ascii_run_end(bytes: &[u8], from: usize) -> usize {
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let word = |b: &[u8]| u64::from_le_bytes(b.try_into().expect("8 bytes"));
    let mut i = from;
    // Skip clean 32-byte blocks first (runs are ~140 bytes on real text), then locate the
    // first high byte word by word.
    while let Some(block) = bytes.get(i..i + 32) {
        let any =
            word(&block[..8]) | word(&block[8..16]) | word(&block[16..24]) | word(&block[24..]);
        if any & HIGH != 0 {
            break;
        }
        i += 32;
    }
    while let Some(word) = bytes.get(i..i + 8) {
        let high = u64::from_le_bytes(word.try_into().expect("8 bytes")) & HIGH;
        if high != 0 {
            return i + (high.trailing_zeros() / 8) as usize;
        }
        i += 8;
    }
    while i < bytes.len() && bytes[i] < 0x80 {
        i += 1;
    }
    i
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The characters [`separator_len`] recognises.
    const SEPARATORS: [char; 11] = [
        '\u{a7}', '\u{b6}', '\u{2013}', '\u{2014}', '\u{201c}', '\u{201d}', '\u{2022}', '\u{2026}',
        '\u{2190}', '\u{2192}', '\u{2500}',
    ];

    fn fast(text: &str) -> Vec<&str> {
        let mut words = Vec::new();
        unicode_words(text, &mut |s, e| words.push(&text[s..e]));
        words
    }

    /// The general path over the whole text, whatever its characters: UAX #29 segments with a
    /// letter or digit (what `unicode_words` does for a text that is not all ASCII).
    fn general(text: &str) -> Vec<&str> {
        text.split_word_bounds()
            .filter(|w| w.chars().any(char::is_alphanumeric))
            .collect()
    }

    fn library(text: &str) -> Vec<&str> {
        text.unicode_words().collect()
    }

    /// Every scanner this machine can run: the default one's fallbacks too.
    fn scanners() -> Vec<AsciiScanner> {
        let mut all = vec![
            AsciiScanner::Bytewise,
            AsciiScanner::Masks(BlockClasses::bytewise),
        ];
        #[cfg(target_arch = "x86_64")]
        all.push(AsciiScanner::Masks(BlockClasses::sse2));
        all
    }

    fn check(text: &str) {
        let want = library(text);
        assert_eq!(fast(text), want, "{text:?}");
        let indices: Vec<(usize, &str)> = text.unicode_word_indices().collect();
        for scanner in scanners() {
            let mut got = Vec::new();
            unicode_words_with(text, scanner, &mut |s, e| got.push((s, &text[s..e])));
            assert_eq!(got, indices, "{text:?} {scanner:?}");
        }
    }

    #[test]
    fn word_masks_cross_block_edges() {
        // Words and joining punctuation across the 64-byte edges of the masks.
        for shift in 0..70 {
            let text = format!(
                "{}ab'cd 12,345 e.f g:h _x_ {}1.5 i'j{}",
                " ".repeat(shift),
                "z".repeat(shift),
                ".".repeat(shift % 3)
            );
            check(&text);
        }
        let long = "word ".repeat(40) + &"x".repeat(150) + " tail";
        check(&long);
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn sse2_classes_equal_the_bytewise_ones() {
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut block = [0u8; 64];
        for round in 0..20_000 {
            for b in block.iter_mut() {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                // Mostly the bytes with a class, and every byte value now and then.
                *b = if round % 2 == 0 {
                    b"aZ09_'.:,;!\x7f\x80\xff`@[{/"[(state % 19) as usize]
                } else {
                    state as u8
                };
            }
            assert_eq!(
                BlockClasses::sse2(&block),
                BlockClasses::bytewise(&block),
                "{block:?}"
            );
        }
    }

    #[test]
    fn ascii_words_follow_uax29() {
        for (text, want) in [
            (
                "The quick (\"brown\") fox can't jump 32.3 feet, right?",
                &[
                    "The", "quick", "brown", "fox", "can't", "jump", "32.3", "feet", "right",
                ][..],
            ),
            (
                "e.g. a:b a::b std::io 1,000 1,,0 3;4 1'5 x'",
                &[
                    "e.g", "a:b", "a", "b", "std", "io", "1,000", "1", "0", "3;4", "1'5", "x",
                ],
            ),
            (
                "__ _a a_ 1_a a1.b a.1 1.a _.a a._",
                &["_a", "a_", "1_a", "a1", "b", "a", "1", "1", "a", "a", "a"],
            ),
            ("", &[]),
            ("   \t\r\n", &[]),
        ] {
            assert_eq!(fast(text), want, "{text:?}");
            assert_eq!(library(text), want, "{text:?}");
        }
    }

    #[test]
    fn mixed_script_words_equal_unicode_segmentation() {
        for text in [
            "café's menu: naïve, résumé. Ünïcödé 文字 テキスト 🙂 mixed",
            "日本語のテキストと English words 混在 2024年1月",
            "ภาษาไทย ไม่มีช่องว่าง and Thai",
            "مرحبا بالعالم hello عربي",
            "a\u{301}b c\u{301} \u{301}d e \u{200d}f g\u{200c}h i\u{ad}j",
            "👨\u{200d}👩\u{200d}👧 family 🇯🇵🇺🇸🇫🇷 flags a🇯🇵b",
            "x.é y.é é.z 1.٣ ٣.1 a'é é'a",
            "  \u{a0}\u{a0} a\u{a0}b \u{3000}c",
            "\r\n\u{85}\u{2028}a\u{2029}b\u{b}c\u{c}d",
            "a \u{301}b \t\u{301}c \n\u{301}d",
            "a \u{93f}b \t\u{e31}c \n\u{bbe}d क\u{93f} \u{200d}",
        ] {
            check(text);
        }
    }

    #[test]
    fn hard_cuts_are_only_after_a_space_tab_or_newline_before_ascii() {
        let text = b"a b  c\td\n\xc3\xa9 e\r\nf,g";
        let cuts: Vec<usize> = (1..text.len()).filter(|&p| is_hard_cut(text, p)).collect();
        // After "a ", after "  " (before c), after "\t", after the space before e, after "\n"
        // before f; never inside "  ", never before the multi-byte é.
        assert_eq!(cuts, vec![2, 5, 7, 12, 15]);
    }

    #[test]
    fn separators_are_recognised_by_their_utf8_bytes_and_nothing_else() {
        for c in SEPARATORS {
            assert!(!c.is_alphanumeric(), "{c}");
            let mut buf = [0; 4];
            let encoded = c.encode_utf8(&mut buf).as_bytes();
            assert_eq!(separator_len(encoded), encoded.len(), "{c}");
        }
        for c in ('\u{80}'..='\u{3000}').filter(|c| !SEPARATORS.contains(c)) {
            let mut buf = [0; 4];
            assert_eq!(separator_len(c.encode_utf8(&mut buf).as_bytes()), 0, "{c}");
        }
        let text = "a§b—c…é d";
        assert_eq!(fast_run_end(text.as_bytes(), 0), text.find('é').unwrap());
    }

    #[test]
    fn ascii_alphanumeric_runs_split_on_everything_else() {
        let text = "Don't stop: café_au_lait, x1__y ÜBER 文字abc é-z __ 42";
        let mut got = Vec::new();
        ascii_alphanumeric_runs(text, &mut |s, e| got.push(&text[s..e]));
        assert_eq!(
            got,
            [
                "Don", "t", "stop", "caf", "_au_lait", "x1__y", "BER", "abc", "z", "__", "42"
            ]
        );
    }

    /// Pieces UAX #29 treats specially, in every script the property tests mix.
    const PIECES: &[&str] = &[
        "a",
        "Z",
        "word",
        "x9",
        "0",
        "42",
        "_",
        " ",
        "  ",
        "\t",
        "\n",
        "\r",
        "\r\n",
        "\u{b}",
        "\u{c}",
        ".",
        ",",
        ";",
        ":",
        "'",
        "\"",
        "-",
        "!",
        "/",
        "(",
        "#",
        "*",
        "é",
        "ß",
        "Ü",
        "ÿ",
        "\u{a0}",
        "\u{ad}",
        "·",
        "文",
        "字",
        "テ",
        "キ",
        "ー",
        "ひ",
        "한",
        "ภ",
        "า",
        "ไ",
        "ม",
        "م",
        "ر",
        "ب",
        "١",
        "٣",
        "ש",
        "ל",
        "\u{5f3}",
        "\u{5f4}",
        "🙂",
        "👍",
        "\u{1f3fd}",
        "\u{1f1ef}",
        "\u{1f1f5}",
        "\u{301}",
        "\u{308}",
        "\u{93f}",
        "\u{e31}",
        "\u{bbe}",
        "क",
        "\u{200b}",
        "\u{200c}",
        "\u{200d}",
        "\u{2018}",
        "\u{2019}",
        "\u{2024}",
        "\u{2028}",
        "\u{3000}",
        "\u{ff0e}",
        "\u{ff07}",
        "\u{fe52}",
        "\u{85}",
        "\u{2060}",
        "\u{feff}",
        "©",
        "\u{2764}",
        "\u{fe0f}",
        "§",
        "¶",
        "–",
        "—",
        "“",
        "”",
        "•",
        "…",
        "←",
        "→",
        "─",
        "\u{2191}",
        "\u{2194}",
        "\u{2015}",
    ];

    pub(crate) fn mixed_text() -> impl Strategy<Value = String> {
        prop::collection::vec(prop::sample::select(PIECES), 0..40).prop_map(|p| p.concat())
    }

    /// Mostly ASCII prose with a few pieces of other scripts, like real text.
    pub(crate) fn mostly_ascii_text() -> impl Strategy<Value = String> {
        prop::collection::vec(
            prop_oneof![
                8 => "[a-zA-Z0-9 ._,:;'\"\t\n-]{1,12}",
                1 => prop::sample::select(PIECES).prop_map(str::to_string),
            ],
            0..30,
        )
        .prop_map(|p| p.concat())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4000))]

        #[test]
        fn fast_path_equals_the_general_path_on_mixed_scripts(text in mixed_text()) {
            check(&text);
        }

        #[test]
        fn fast_path_equals_the_general_path_on_mostly_ascii(text in mostly_ascii_text()) {
            check(&text);
        }

        #[test]
        fn ascii_fast_path_equals_the_general_segmenter(text in "[ -~\t\r\n]{0,60}") {
            // On an all-ASCII text unicode-segmentation takes its own ASCII path; the spans of
            // a mixed text go through its general one. Both must agree with ours.
            prop_assert_eq!(fast(&text), general(&text));
            check(&text);
        }

        #[test]
        fn separators_segment_as_an_ascii_other_character(
            text in mixed_text(),
            separator in prop::sample::select(&SEPARATORS[..]),
            at in 0usize..40,
        ) {
            // Inserted anywhere, a separator gives the words that `!` gives in its place (with
            // `!` in a word where WB4 attached an Extend, Format or ZWJ to it).
            let at = text.char_indices().map(|(i, _)| i).nth(at).unwrap_or(text.len());
            let separated = format!("{}{separator}{}", &text[..at], &text[at..]);
            let banged = separated.replace(separator, "!");
            let renamed: Vec<String> = library(&separated)
                .iter()
                .map(|w| w.replace(separator, "!"))
                .collect();
            prop_assert_eq!(renamed, library(&banged));
            prop_assert_eq!(fast(&separated), library(&separated));
        }

        #[test]
        fn runs_equal_the_regex_split(text in mixed_text()) {
            let mut got = Vec::new();
            ascii_alphanumeric_runs(&text, &mut |s, e| got.push(&text[s..e]));
            // re.split("[^A-Za-z_0-9]", text) without its empty strings.
            let want: Vec<&str> = text
                .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .filter(|t| !t.is_empty())
                .collect();
            prop_assert_eq!(got, want);
        }
    }

    #[test]
    fn ascii_run_end_finds_the_first_high_byte() {
        let text = "0123456789abcdef§xyz".as_bytes();
        for from in 0..=16 {
            assert_eq!(ascii_run_end(text, from), 16);
        }
        assert_eq!(ascii_run_end(b"abc", 0), 3);
        let long = format!("{}é{}", "x".repeat(70), "y".repeat(40));
        for from in 0..=70 {
            assert_eq!(ascii_run_end(long.as_bytes(), from), 70);
        }
        assert_eq!(ascii_run_end(long.as_bytes(), 72), long.len());
        assert_eq!(ascii_run_end(b"", 0), 0);
    }
}
