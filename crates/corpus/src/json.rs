//! A validating, allocation-free JSON line scanner that extracts selected fields.
//!
//! Why not serde_json: a fresh `serde_json::Deserializer` per line allocates its scratch buffer
//! for every line with an escaped string (nearly every line of real text, which is full of `\n`),
//! and it decodes strings it is about to ignore byte by byte. This scanner validates the whole
//! line against the JSON grammar (RFC 8259: strings, escapes, numbers, literals, nesting up to
//! [`MAX_DEPTH`], nothing but whitespace after the value) while only decoding the strings that
//! were selected, into a caller-owned scratch buffer that is reused across lines. Selected
//! strings are decoded by vector loops over runs of plain bytes and one-character escapes, and
//! by a scalar loop over runs of `\u` escapes (text in a non-Latin script written by an encoder
//! that escapes every non-ASCII char).
//!
//! The line must already be valid UTF-8 (checked by the caller, so invalid bytes are reported as
//! `InvalidUtf8` rather than as malformed JSON). Lone UTF-16 surrogates in `\u` escapes are
//! accepted (as most JSON parsers do) and decode to U+FFFD. Duplicate keys: the last one wins.

use neardup_cpu::{Feature, Features};

use crate::select::FieldPath;

/// Nesting limit, the same as serde_json's, so deeply nested junk cannot exhaust the stack.
pub(crate) const MAX_DEPTH: usize = 128;

/// One key of the selection tree: the slots (selected fields) that end at this key and the keys
/// selected below it.
#[derive(Debug, Clone)]
pub(crate) struct Node {
    key: String,
    targets: Vec<usize>,
    children: Vec<Node>,
}

/// Builds the selection tree; slot `i` is `paths[i]`.
pub(crate) fn build_plan<'p>(paths: impl IntoIterator<Item = &'p FieldPath>) -> Vec<Node> {
    let mut roots: Vec<Node> = Vec::new();
    for (slot, path) in paths.into_iter().enumerate() {
        let mut level = &mut roots;
        let segs = path.segments();
        for (i, seg) in segs.iter().enumerate() {
            let pos = match level.iter().position(|n| &n.key == seg) {
                Some(p) => p,
                None => {
                    level.push(Node {
                        key: seg.clone(),
                        targets: Vec::new(),
                        children: Vec::new(),
                    });
                    level.len() - 1
                }
            };
            if i + 1 == segs.len() {
                level[pos].targets.push(slot);
            }
            level = &mut level[pos].children;
        }
    }
    roots
}

/// What a selected path held in the line. Spans are byte ranges into the line (`Str`, `Other`)
/// or into the scratch buffer (`Decoded`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Slot {
    Missing,
    Null,
    /// A non-string, non-null value; the span is its JSON text.
    Other(usize, usize),
    /// A string without escapes; the span is its content between the quotes.
    Str(usize, usize),
    /// A string with escapes, decoded into scratch.
    Decoded(usize, usize),
}

impl Slot {
    /// The slot's string content, if it is a string (`decoded` holds the strings
    /// [`parse_line`] decoded from `line`).
    pub(crate) fn text<'a>(&self, line: &'a str, decoded: &'a DecodedStrings) -> Option<&'a str> {
        match *self {
            Slot::Str(a, b) => Some(&line[a..b]),
            Slot::Decoded(a, b) => decoded.get(a, b),
            _ => None,
        }
    }
}

/// The strings with escapes that [`parse_line`] decoded, back to back: reused across lines.
///
/// Only the parser writes here, and what it writes is UTF-8: it copies the bytes of a string of
/// its line, which is UTF-8, with each escape sequence (ASCII bytes only, so never inside a
/// multi-byte char) replaced by the UTF-8 of the char it stands for. So a string read back at
/// char boundaries needs no second validation, which would cost a measurable share of a run. The
/// decoding paths are held to serde_json's output by this module's tests, where a debug
/// assertion checks every string read back.
#[derive(Default, Debug)]
pub(crate) struct DecodedStrings {
    /// UTF-8 after every [`parse_line`] (cleared when it fails).
    bytes: Vec<u8>,
}

impl DecodedStrings {
    /// The decoded string at `a..b`, if that range lies within the buffer at char boundaries.
    fn get(&self, a: usize, b: usize) -> Option<&str> {
        let bytes = self.bytes.get(a..b)?;
        // A char starts at any byte but a continuation byte (0b10xx_xxxx).
        let starts_char = |i: usize| self.bytes.get(i).is_none_or(|&x| (x as i8) >= -0x40);
        if !(starts_char(a) && starts_char(b)) {
            return None;
        }
        debug_assert!(std::str::from_utf8(bytes).is_ok(), "decoded to bad UTF-8");
        // SAFETY: `self.bytes` is UTF-8 (the type's doc), and `a..b` is cut at char boundaries.
        Some(unsafe { std::str::from_utf8_unchecked(bytes) })
    }
}

/// Parses `line` as one JSON object, filling `slots` (reset to `Missing` first) for the paths of
/// `plan`. Strings with escapes are decoded into `decoded` (emptied first). On error returns a
/// message with the byte column; slot contents are then unspecified.
pub(crate) fn parse_line(
    line: &str,
    plan: &[Node],
    slots: &mut [Slot],
    decoded: &mut DecodedStrings,
    paths: StringPaths,
) -> Result<(), String> {
    decoded.bytes.clear();
    let parsed = parse_line_into(line, plan, slots, &mut decoded.bytes, paths);
    if parsed.is_err() {
        // A string cut short by the error is UTF-8 too, but nothing may read it.
        decoded.bytes.clear();
    }
    parsed
}

/// [`parse_line`] decoding into `scratch` (empty).
fn parse_line_into(
    line: &str,
    plan: &[Node],
    slots: &mut [Slot],
    scratch: &mut Vec<u8>,
    paths: StringPaths,
) -> Result<(), String> {
    slots.fill(Slot::Missing);
    let mut p = Parser {
        s: line,
        b: line.as_bytes(),
        i: 0,
        paths,
    };
    if p.b.starts_with(b"\xEF\xBB\xBF") {
        p.i = 3; // a UTF-8 byte-order mark on the first line of a file
    }
    p.ws();
    if p.peek() != Some(b'{') {
        return Err(match p.peek() {
            None => p.err("EOF while parsing a value"),
            Some(_) => {
                // Distinguish "valid JSON, wrong type" from garbage for the report.
                let start = p.i;
                match p.skip_value(0) {
                    Ok(()) => {
                        p.ws();
                        if p.i == p.b.len() {
                            format!(
                                "not a JSON object (starts with {:?})",
                                &line[start..start + 1]
                            )
                        } else {
                            p.err("trailing characters")
                        }
                    }
                    Err(e) => e,
                }
            }
        });
    }
    p.object(plan, slots, scratch, 1)?;
    p.ws();
    if p.i != p.b.len() {
        return Err(p.err("trailing characters"));
    }
    Ok(())
}

struct Parser<'a> {
    s: &'a str,
    b: &'a [u8],
    i: usize,
    paths: StringPaths,
}

/// Which of the vector paths over string contents the parser takes, chosen once from the CPU's
/// [`Features`] (tests force each combination; all of them give the same results).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct StringPaths {
    /// Sixteen bytes at a time with SSE2 ([`special_mask16`], [`unescape_simple_x16`]), else
    /// eight with plain integer operations.
    sixteen: bool,
    /// [`unescape_simple_x64`] ahead of the sixteen-byte path.
    sixty_four: bool,
    /// [`unescape_packed_x32`] ahead of the sixteen-byte path
    /// (AVX2 CPUs; after the sixty-four-byte path where that runs).
    packed_thirty_two: bool,
}

impl StringPaths {
    /// The fastest paths this CPU has.
    pub(crate) fn detected() -> StringPaths {
        StringPaths::for_features(Features::detected())
    }

    /// The fastest paths a CPU with `features` has.
    pub(crate) fn for_features(features: Features) -> StringPaths {
        let x86 = cfg!(target_arch = "x86_64");
        StringPaths {
            sixteen: x86 && features.has(Feature::Sse2),
            sixty_four: x86
                && features.has_all(&[
                    Feature::Avx512Bw,
                    Feature::Avx512Vbmi,
                    Feature::Avx512Vbmi2,
                    Feature::Popcnt,
                ]),
            packed_thirty_two: x86 && features.has_all(&[Feature::Avx2, Feature::Popcnt]),
        }
    }
}

const HI: u64 = 0x8080_8080_8080_8080;
const LO: u64 = 0x0101_0101_0101_0101;

/// Bit 7 set in the lowest byte of `w` that is `"`, `\` or a control character (< 0x20); bytes
/// above the first hit may be false positives, so only the lowest set bit is meaningful.
#[inline(always)]
fn special_mask(w: u64) -> u64 {
    let q = w ^ (LO * b'"' as u64);
    let bs = w ^ (LO * b'\\' as u64);
    let ctl = w.wrapping_sub(LO * 0x20) & !w;
    let q = q.wrapping_sub(LO) & !q;
    let bs = bs.wrapping_sub(LO) & !bs;
    (q | bs | ctl) & HI
}

/// Decoded byte of the one-character escapes (`\\n`, `\\"`, ...); 0 where the escape is `\\u` or
/// invalid and needs the full path.
const SIMPLE_ESCAPE: [u8; 256] = {
    let mut t = [0u8; 256];
    t[b'"' as usize] = b'"';
    t[b'\\' as usize] = b'\\';
    t[b'/' as usize] = b'/';
    t[b'b' as usize] = 0x08;
    t[b'f' as usize] = 0x0c;
    t[b'n' as usize] = b'\n';
    t[b'r' as usize] = b'\r';
    t[b't' as usize] = b'\t';
    t
};

/// The byte a one-character escape starting at `b[i]` decodes to, or 0 when no such escape
/// starts there (not a backslash, `\\u`, invalid, or cut by the end of the input).
#[inline(always)]
fn simple_escape_at(b: &[u8], i: usize) -> u8 {
    match b.get(i..i + 2) {
        Some(&[b'\\', c]) => SIMPLE_ESCAPE[c as usize],
        _ => 0,
    }
}

/// The value of each hex digit; 0x10 (above every digit's) for any other byte.
const HEX_DIGIT: [u8; 256] = {
    let mut t = [0x10u8; 256];
    let mut d = 0;
    while d < 10 {
        t[b'0' as usize + d] = d as u8;
        d += 1;
    }
    let mut d = 0;
    while d < 6 {
        t[b'a' as usize + d] = 10 + d as u8;
        t[b'A' as usize + d] = 10 + d as u8;
        d += 1;
    }
    t
};

/// Plain bytes [`unescape_dense`] copies after an escape before it leaves the rest to the
/// vector paths: a word's worth, so the space between two words of escaped letters does not
/// send the parser back to them.
const DENSE_PLAIN_RUN: usize = 4;

/// Decodes escape-dense string contents from the escape at `b[i]` on, one byte or escape at a
/// time, appending to `out`; returns where it stopped: `i` itself when nothing it decodes starts
/// there. It takes `\u` escapes of chars of the Basic Multilingual Plane but surrogates,
/// one-character escapes and plain bytes, and stops at
/// anything the general path must see (a closing quote, a control byte, a surrogate, which may
/// pair with the next escape, a bad digit or escape, the end of the input) and after
/// [`DENSE_PLAIN_RUN`] plain bytes in a row, where the vector paths take over again.
///
/// Text in a non-Latin script written by an encoder that escapes every non-ASCII char (Python's
/// `json.dumps` does by default) is one such escape per letter: through the general path each
/// cost a stop of the vector loops, a call and a variable-length copy, and such a corpus parsed
/// several times slower than the same text written as UTF-8 (docs/benchmarks.md).
#[inline]
fn unescape_dense(b: &[u8], mut i: usize, out: &mut Vec<u8>) -> usize {
    let mut plain = 0;
    while let Some(&c) = b.get(i) {
        if c == b'\\' {
            if let Some(&[_, b'u', d0, d1, d2, d3]) = b.get(i..i + 6) {
                let digits = [d0, d1, d2, d3].map(|d| HEX_DIGIT[d as usize]);
                if digits.iter().fold(0, |any, &d| any | d) > 0xf {
                    break;
                }
                let c = digits.iter().fold(0u32, |c, &d| c << 4 | u32::from(d));
                if (0xd800..0xe000).contains(&c) {
                    break;
                }
                // UTF-8 written here, not through `char::encode_utf8` and a copy of its bytes:
                // that copy's length varies, and it was a `memmove` call per letter.
                if c < 0x80 {
                    out.push(c as u8);
                } else if c < 0x800 {
                    out.extend_from_slice(&[0xc0 | (c >> 6) as u8, 0x80 | (c & 0x3f) as u8]);
                } else {
                    out.extend_from_slice(&[
                        0xe0 | (c >> 12) as u8,
                        0x80 | ((c >> 6) & 0x3f) as u8,
                        0x80 | (c & 0x3f) as u8,
                    ]);
                }
                i += 6;
            } else {
                let simple = simple_escape_at(b, i);
                if simple == 0 {
                    break;
                }
                out.push(simple);
                i += 2;
            }
            plain = 0;
        } else if c == b'"' || c < 0x20 || plain == DENSE_PLAIN_RUN {
            break;
        } else {
            out.push(c);
            plain += 1;
            i += 1;
        }
    }
    i
}

/// Bit `k` set when byte `k` of `w` is `"`, `\\` or a control byte: [`special_mask`] sixteen
/// bytes at a time with SSE2, which every x86-64 CPU has (callers still ask
/// [`StringPaths::sixteen`], so that tests can take the eight-byte path instead).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn special_mask16(w: &[u8; 16]) -> u32 {
    use std::arch::x86_64::*;
    // SAFETY: reads exactly the 16 bytes of `w`; SSE2 is part of the x86-64 baseline, so every
    // intrinsic here is available on every CPU this code can run on.
    unsafe {
        let x = _mm_loadu_si128(w.as_ptr().cast::<__m128i>());
        let q = _mm_cmpeq_epi8(x, _mm_set1_epi8(b'"' as i8));
        let bs = _mm_cmpeq_epi8(x, _mm_set1_epi8(b'\\' as i8));
        // x <= 0x1f (unsigned) exactly when min(x, 0x1f) == x.
        let ctl = _mm_cmpeq_epi8(_mm_min_epu8(x, _mm_set1_epi8(0x1f)), x);
        _mm_movemask_epi8(_mm_or_si128(_mm_or_si128(q, bs), ctl)) as u32
    }
}

/// Decodes `b[i..]` into `out` sixteen bytes at a time for as long as the only special bytes met
/// are one-character escapes (`\\n`, `\\"`, …, the bulk of escapes in real text), and returns
/// where it stopped: at a `"`, a `\\u` or invalid escape, a control byte, or fewer than sixteen
/// bytes before the end, all left to the general loop. Escape-dense text (code, markup) has one
/// every dozen bytes, so this path keeps each escape to one unaligned load, one store and one
/// table lookup, without a call or a capacity check.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn unescape_simple_x16(b: &[u8], mut i: usize, out: &mut Vec<u8>) -> usize {
    // Decoding never lengthens the text, so the output grows by at most the input consumed;
    // the 16 extra bytes cover the full-width store at the last position.
    out.reserve(b.len().saturating_sub(i) + 16);
    let start_len = out.len();
    let start_i = i;
    let mut len = out.len();
    let dst = out.as_mut_ptr();
    while let Some(chunk) = b.get(i..i + 16) {
        let w: &[u8; 16] = chunk.try_into().expect("16 bytes");
        let m = special_mask16(w);
        // SAFETY: len - start_len <= i - start_i (each step writes at most what it reads), and
        // i + 16 <= b.len(), so len + 16 <= start_len + b.len() - start_i + 16 <= capacity.
        unsafe { std::ptr::copy_nonoverlapping(w.as_ptr(), dst.add(len), 16) };
        if m == 0 {
            i += 16;
            len += 16;
            continue;
        }
        let k = m.trailing_zeros() as usize;
        i += k;
        len += k;
        let simple = simple_escape_at(b, i);
        if simple == 0 {
            break;
        }
        // SAFETY: as above; this byte lies within the 16 just written.
        unsafe { *dst.add(len) = simple };
        len += 1;
        i += 2;
    }
    debug_assert!(len - start_len <= i - start_i);
    // SAFETY: every byte below `len` was written: the first `start_len` were initialised
    // before, and each step initialised at least the bytes it counted.
    unsafe { out.set_len(len) };
    i
}

/// Where a window of [`unescape_simple_x64`] or [`unescape_packed_x32`] stopped at `b[*i]`:
/// a stop that is only the window's limit (a pair of backslashes, or an escape cut by the
/// window's end) is one simple escape, decoded to `dst[*len]` and passed (`true`); any other is
/// left to the caller (`false`).
///
/// # Safety
/// `dst` is valid for a write at `*len`.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn decode_window_stop(b: &[u8], i: &mut usize, dst: *mut u8, len: &mut usize) -> bool {
    let simple = simple_escape_at(b, *i);
    if simple == 0 {
        return false;
    }
    // SAFETY: the caller's contract.
    unsafe { *dst.add(*len) = simple };
    *len += 1;
    *i += 2;
    true
}

/// [`unescape_simple_x16`] sixty-four bytes at a time, with every one-character escape of a
/// window decoded at once: backslashes are dropped by a byte compress, and the characters after
/// them mapped through a 128-entry table. A window is taken only up to its first closing quote,
/// control byte, `\u` or invalid escape, pair of adjacent backslashes (`\\`, whose second
/// backslash starts nothing) or escape cut by the window's end; what follows is left to the
/// caller, like the narrower path's stops. On text with an escape every dozen bytes this
/// replaces five unpredictable branches per window with one.
///
/// # Safety
/// The CPU must have AVX-512 BW, VBMI and VBMI2 and POPCNT ([`StringPaths::sixty_four`]).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512bw,avx512vbmi,avx512vbmi2,popcnt")]
unsafe fn unescape_simple_x64(b: &[u8], mut i: usize, out: &mut Vec<u8>) -> usize {
    use std::arch::x86_64::*;
    /// `SIMPLE_ESCAPE` over the 7-bit characters: the decoded byte, 0 where no one-character
    /// escape ends (so one lookup both decodes and validates).
    const DECODE: [u8; 128] = {
        let mut t = [0u8; 128];
        let mut c = 0;
        while c < 128 {
            t[c] = SIMPLE_ESCAPE[c];
            c += 1;
        }
        t
    };
    // Decoding never lengthens the text; 64 extra bytes cover the full-width store.
    out.reserve(b.len().saturating_sub(i) + 64);
    let mut len = out.len();
    let dst = out.as_mut_ptr();
    // SAFETY (whole block): loads read `b[i..i + 64]`, in bounds by the loop condition; each
    // store writes 64 bytes at `len`, and `len` grows by at most what `i` consumed, so
    // `len + 64` stays within the reserved capacity.
    unsafe {
        let decode_lo = _mm512_loadu_si512(DECODE.as_ptr().cast());
        let decode_hi = _mm512_loadu_si512(DECODE.as_ptr().add(64).cast());
        let quote = _mm512_set1_epi8(b'"' as i8);
        let backslash = _mm512_set1_epi8(b'\\' as i8);
        let last_control = _mm512_set1_epi8(0x1f);
        while i + 64 <= b.len() {
            let v = _mm512_loadu_si512(b.as_ptr().add(i).cast());
            let bs = _mm512_cmpeq_epi8_mask(v, backslash);
            let escaped = bs << 1;
            let quotes = _mm512_cmpeq_epi8_mask(v, quote) & !escaped;
            let controls = _mm512_cmple_epu8_mask(v, last_control);
            // Characters after a backslash that complete no one-character escape: `u`, an
            // invalid escape, or a non-ASCII byte.
            let ascii = !_mm512_movepi8_mask(v);
            let decoded_escapes = _mm512_permutex2var_epi8(decode_lo, v, decode_hi);
            let simple = ascii & _mm512_test_epi8_mask(decoded_escapes, decoded_escapes);
            let bad_escape = escaped & !simple;
            let pairs = bs & (bs >> 1);
            // Stop before the first backslash of a bad escape or of a pair, at a closing quote
            // or control byte, and before a backslash in the last lane (its character is in the
            // next window).
            let stops = quotes | controls | (bad_escape >> 1) | pairs | (bs & (1 << 63));
            let limit = stops.trailing_zeros() as usize;
            let take = if limit == 64 {
                u64::MAX
            } else {
                (1u64 << limit) - 1
            };
            let decoded = _mm512_mask_blend_epi8(escaped & take, v, decoded_escapes);
            let keep = take & !bs;
            let packed = _mm512_maskz_compress_epi8(keep, decoded);
            _mm512_storeu_si512(dst.add(len).cast(), packed);
            len += keep.count_ones() as usize;
            // Tested on `stops`, as in `unescape_packed_x32`.
            if stops == 0 {
                i += 64;
                continue;
            }
            i += limit;
            if !decode_window_stop(b, &mut i, dst, &mut len) {
                break;
            }
        }
        out.set_len(len);
    }
    i
}

/// [`unescape_simple_x16`] with every one-character escape of a thirty-two-byte window decoded
/// at once, for CPUs without the sixty-four-byte path's byte compress: the escaped characters
/// are mapped by five compares, and the backslashes dropped by a byte shuffle per eight-byte
/// group from a table of the 256 ways to keep bytes of eight, the two sixteen-byte halves stored
/// one after the other. A window stops where [`unescape_simple_x64`]'s does (closing quote,
/// control byte, `\u` or invalid escape, pair of backslashes, escape cut by the window's end);
/// real text has an escape every dozen bytes, so this takes one window where the narrower path
/// takes one step per escape (a sixteen-byte version measured slower: docs/benchmarks.md,
/// "Measurements behind the code").
///
/// # Safety
/// The CPU must have AVX2 and POPCNT ([`StringPaths::packed_thirty_two`]).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,popcnt")]
unsafe fn unescape_packed_x32(b: &[u8], mut i: usize, out: &mut Vec<u8>) -> usize {
    use std::arch::x86_64::*;
    /// For each 8-bit mask of bytes to keep, the shuffle moving those bytes to the front.
    static PACK_8: [[u8; 8]; 256] = neardup_cpu::kept_lanes_first();
    // Decoding never lengthens the text; 32 extra bytes cover the full-width stores.
    out.reserve(b.len().saturating_sub(i) + 32);
    let mut len = out.len();
    let dst = out.as_mut_ptr();
    let eq = |v: __m256i, c: u8| _mm256_cmpeq_epi8(v, _mm256_set1_epi8(c as i8));
    let bits = |m: __m256i| u64::from(_mm256_movemask_epi8(m) as u32);
    let order = |keep: u64, group: u32| {
        let shuffle = u64::from_le_bytes(PACK_8[((keep >> (8 * group)) & 0xff) as usize]);
        // The second group of each sixteen-byte half takes its bytes from lanes 8..16.
        (if group % 2 == 1 {
            shuffle | 0x0808_0808_0808_0808
        } else {
            shuffle
        }) as i64
    };
    // SAFETY (whole block): loads read `b[i..i + 32]`, in bounds by the loop condition; each
    // window stores 16 bytes at `len`, 8 at `len + kept_0 <= len + 8`, 16 at `len + kept_01 <=
    // len + 16` and 8 at `len + kept_012 <= len + 24`, and `len` grows by at most what `i`
    // consumed, so every store stays within the reserved capacity; the table indices are below
    // 256.
    unsafe {
        while i + 32 <= b.len() {
            let v = _mm256_loadu_si256(b.as_ptr().add(i).cast());
            let bs_lanes = eq(v, b'\\');
            let bs = bits(bs_lanes);
            let escaped = (bs << 1) & 0xffff_ffff;
            let quote_lanes = eq(v, b'"');
            let quotes = bits(quote_lanes) & !escaped;
            // x <= 0x1f (unsigned) exactly when min(x, 0x1f) == x.
            let controls = bits(_mm256_cmpeq_epi8(
                _mm256_min_epu8(v, _mm256_set1_epi8(0x1f)),
                v,
            ));
            let (n, t, r, bk, f) = (
                eq(v, b'n'),
                eq(v, b't'),
                eq(v, b'r'),
                eq(v, b'b'),
                eq(v, b'f'),
            );
            let same = _mm256_or_si256(_mm256_or_si256(quote_lanes, bs_lanes), eq(v, b'/'));
            let simple = bits(_mm256_or_si256(
                _mm256_or_si256(_mm256_or_si256(n, t), _mm256_or_si256(r, bk)),
                _mm256_or_si256(f, same),
            ));
            let bad_escape = escaped & !simple;
            let pairs = bs & (bs >> 1);
            // The same stops as the sixty-four-byte path.
            let stops = quotes | controls | (bad_escape >> 1) | pairs | (bs & (1 << 31));
            let limit = (stops | 1 << 32).trailing_zeros() as usize;
            let take = (1u64 << limit) - 1;
            let mut mapped = v;
            for (lanes, byte) in [(n, b'\n'), (t, b'\t'), (r, b'\r'), (bk, 0x08), (f, 0x0c)] {
                mapped = _mm256_blendv_epi8(mapped, _mm256_set1_epi8(byte as i8), lanes);
            }
            // Lane j is escaped when lane j - 1 is a backslash: the backslash lanes moved up one
            // byte across the two halves (the high half's first lane takes the low half's last).
            let low_half_up = _mm256_permute2x128_si256::<0x08>(bs_lanes, bs_lanes);
            let after_bs = _mm256_alignr_epi8::<15>(bs_lanes, low_half_up);
            let decoded = _mm256_blendv_epi8(v, mapped, after_bs);
            let keep = take & !bs;
            let shuffle = _mm256_set_epi64x(
                order(keep, 3),
                order(keep, 2),
                order(keep, 1),
                order(keep, 0),
            );
            let packed = _mm256_shuffle_epi8(decoded, shuffle);
            let (low, high) = (
                _mm256_castsi256_si128(packed),
                _mm256_extracti128_si256::<1>(packed),
            );
            let kept = |group: u32| ((keep >> (8 * group)) & 0xff).count_ones() as usize;
            _mm_storeu_si128(dst.add(len).cast(), low);
            _mm_storel_epi64(dst.add(len + kept(0)).cast(), _mm_unpackhi_epi64(low, low));
            len += kept(0) + kept(1);
            _mm_storeu_si128(dst.add(len).cast(), high);
            _mm_storel_epi64(
                dst.add(len + kept(2)).cast(),
                _mm_unpackhi_epi64(high, high),
            );
            len += kept(2) + kept(3);
            // Tested on `stops`, not `limit`: the next window's load then waits only for the
            // branch's prediction, not for the masks of this one (the loop ran at the latency
            // of a window's compares, bit tests and `i += limit`).
            if stops == 0 {
                i += 32;
                continue;
            }
            i += limit;
            if !decode_window_stop(b, &mut i, dst, &mut len) {
                break;
            }
        }
        out.set_len(len);
    }
    i
}

/// Index of the next `"`, `\\` or control byte at or after `i` (or `b.len()`), sixteen bytes at
/// a time when `sixteen` ([`StringPaths`]).
#[inline(always)]
fn scan_plain(b: &[u8], mut i: usize, sixteen: bool) -> usize {
    #[cfg(not(target_arch = "x86_64"))]
    let _ = sixteen;
    #[cfg(target_arch = "x86_64")]
    while sixteen && let Some(chunk) = b.get(i..i + 16) {
        let m = special_mask16(chunk.try_into().expect("16 bytes"));
        if m != 0 {
            return i + m.trailing_zeros() as usize;
        }
        i += 16;
    }
    while let Some(chunk) = b.get(i..i + 8) {
        let w = u64::from_le_bytes(chunk.try_into().expect("8 bytes"));
        let m = special_mask(w);
        if m != 0 {
            return i + (m.trailing_zeros() / 8) as usize;
        }
        i += 8;
    }
    while i < b.len() && !matches!(b[i], b'"' | b'\\' | 0..=0x1f) {
        i += 1;
    }
    i
}

impl<'a> Parser<'a> {
    #[inline]
    fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }

    fn err(&self, what: &str) -> String {
        format!("{what} at column {}", self.i + 1)
    }

    #[inline]
    fn ws(&mut self) {
        while let Some(&c) = self.b.get(self.i) {
            if matches!(c, b' ' | b'\t' | b'\r' | b'\n') {
                self.i += 1;
            } else {
                break;
            }
        }
    }

    #[inline]
    fn expect(&mut self, c: u8, what: &str) -> Result<(), String> {
        if self.peek() == Some(c) {
            self.i += 1;
            Ok(())
        } else if self.peek().is_none() {
            Err(self.err("EOF while parsing"))
        } else {
            Err(self.err(what))
        }
    }

    /// Validates one escape sequence starting at the backslash; returns the decoded char, if
    /// `decode`. Leaves `i` after the sequence.
    fn escape(&mut self) -> Result<char, String> {
        self.i += 1; // backslash
        let Some(c) = self.peek() else {
            return Err(self.err("EOF while parsing a string"));
        };
        self.i += 1;
        Ok(match c {
            b'"' => '"',
            b'\\' => '\\',
            b'/' => '/',
            b'b' => '\u{8}',
            b'f' => '\u{c}',
            b'n' => '\n',
            b'r' => '\r',
            b't' => '\t',
            b'u' => {
                let hi = self.hex4()?;
                if (0xD800..0xDC00).contains(&hi) {
                    if self.b[self.i..].starts_with(b"\\u") {
                        let save = self.i;
                        self.i += 2;
                        let lo = self.hex4()?;
                        if (0xDC00..0xE000).contains(&lo) {
                            let cp = 0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00);
                            return Ok(char::from_u32(cp).unwrap_or('\u{FFFD}'));
                        }
                        // Not a low surrogate: leave it to be decoded on its own.
                        self.i = save;
                    }
                    '\u{FFFD}'
                } else {
                    char::from_u32(hi).unwrap_or('\u{FFFD}')
                }
            }
            _ => {
                self.i -= 1;
                return Err(self.err("invalid escape"));
            }
        })
    }

    fn hex4(&mut self) -> Result<u32, String> {
        let mut v = 0u32;
        for _ in 0..4 {
            let Some(c) = self.peek() else {
                return Err(self.err("EOF while parsing a string"));
            };
            let d = HEX_DIGIT[c as usize];
            if d > 0xf {
                return Err(self.err("invalid \\u escape"));
            }
            v = v * 16 + d as u32;
            self.i += 1;
        }
        Ok(v)
    }

    /// Parses a string whose opening quote is at `i`. With `scratch`, a string containing escapes
    /// is decoded into it. Returns the span (in scratch if decoded, else the raw content in the
    /// line) and whether the string contained escapes.
    #[inline]
    fn string(&mut self, scratch: Option<&mut Vec<u8>>) -> Result<(usize, usize, bool), String> {
        let b = self.b;
        let start = self.i + 1;
        let i = scan_plain(b, start, self.paths.sixteen);
        if b.get(i) == Some(&b'"') {
            self.i = i + 1;
            return Ok((start, i, false));
        }
        // Escapes (or an error) ahead: the slow path, kept out of line.
        self.string_escaped(start, i, scratch)
    }

    #[inline(never)]
    fn string_escaped(
        &mut self,
        start: usize,
        i: usize,
        scratch: Option<&mut Vec<u8>>,
    ) -> Result<(usize, usize, bool), String> {
        let Some(out) = scratch else {
            return self.skip_escaped(start, i);
        };
        let b = self.b;
        let dec_start = out.len();
        out.extend_from_slice(&b[start..i]);
        let mut i = i;
        loop {
            // Copy 16 (else 8) bytes at a time and drop what lies past the first special byte:
            // fixed-size stores instead of a memcpy call per short run between escapes.
            #[cfg(target_arch = "x86_64")]
            {
                if self.paths.sixty_four {
                    // SAFETY: `StringPaths::for_features` sets `sixty_four` only when the CPU
                    // has the features (`Features` never holds one the CPU lacks).
                    i = unsafe { unescape_simple_x64(b, i, out) };
                }
                if self.paths.packed_thirty_two {
                    // SAFETY: `StringPaths::for_features` sets `packed_thirty_two` only when the CPU
                    // has the features.
                    i = unsafe { unescape_packed_x32(b, i, out) };
                }
                if self.paths.sixteen {
                    i = unescape_simple_x16(b, i, out);
                }
            }
            while let Some(chunk) = b.get(i..i + 8) {
                let w: [u8; 8] = chunk.try_into().expect("8 bytes");
                let m = special_mask(u64::from_le_bytes(w));
                out.extend_from_slice(&w);
                if m != 0 {
                    let k = (m.trailing_zeros() / 8) as usize;
                    out.truncate(out.len() - 8 + k);
                    i += k;
                    break;
                }
                i += 8;
            }
            let j = scan_plain(b, i, self.paths.sixteen);
            out.extend_from_slice(&b[i..j]);
            i = j;
            match b.get(i) {
                Some(b'"') => {
                    self.i = i + 1;
                    return Ok((dec_start, out.len(), true));
                }
                Some(b'\\') => {
                    let after = unescape_dense(b, i, out);
                    if after > i {
                        i = after;
                    } else {
                        self.i = i;
                        let c = self.escape()?;
                        out.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes());
                        i = self.i;
                    }
                }
                Some(_) => {
                    self.i = i;
                    return Err(self
                        .err("control character (\\u0000-\\u001F) found while parsing a string"));
                }
                None => {
                    self.i = i;
                    return Err(self.err("EOF while parsing a string"));
                }
            }
        }
    }

    /// Validates the rest of a string with escapes without decoding it.
    fn skip_escaped(&mut self, start: usize, mut i: usize) -> Result<(usize, usize, bool), String> {
        let b = self.b;
        loop {
            match b.get(i) {
                Some(b'"') => {
                    self.i = i + 1;
                    return Ok((start, i, true));
                }
                Some(b'\\') => {
                    if simple_escape_at(b, i) != 0 {
                        i += 2;
                    } else {
                        self.i = i;
                        self.escape()?;
                        i = self.i;
                    }
                    i = scan_plain(b, i, self.paths.sixteen);
                }
                Some(_) => {
                    self.i = i;
                    return Err(self
                        .err("control character (\\u0000-\\u001F) found while parsing a string"));
                }
                None => {
                    self.i = i;
                    return Err(self.err("EOF while parsing a string"));
                }
            }
        }
    }

    fn number(&mut self) -> Result<(), String> {
        let b = self.b;
        if self.peek() == Some(b'-') {
            self.i += 1;
        }
        match self.peek() {
            Some(b'0') => self.i += 1,
            Some(b'1'..=b'9') => {
                while matches!(b.get(self.i), Some(b'0'..=b'9')) {
                    self.i += 1;
                }
            }
            _ => return Err(self.err("invalid number")),
        }
        if self.peek() == Some(b'.') {
            self.i += 1;
            if !matches!(self.peek(), Some(b'0'..=b'9')) {
                return Err(self.err("invalid number"));
            }
            while matches!(b.get(self.i), Some(b'0'..=b'9')) {
                self.i += 1;
            }
        }
        if matches!(self.peek(), Some(b'e' | b'E')) {
            self.i += 1;
            if matches!(self.peek(), Some(b'+' | b'-')) {
                self.i += 1;
            }
            if !matches!(self.peek(), Some(b'0'..=b'9')) {
                return Err(self.err("invalid number"));
            }
            while matches!(b.get(self.i), Some(b'0'..=b'9')) {
                self.i += 1;
            }
        }
        Ok(())
    }

    fn literal(&mut self, word: &[u8]) -> Result<(), String> {
        if self.b[self.i..].starts_with(word) {
            self.i += word.len();
            Ok(())
        } else {
            Err(self.err("expected value"))
        }
    }

    /// Validates and skips any value starting at `i` (after whitespace).
    fn skip_value(&mut self, depth: usize) -> Result<(), String> {
        match self.peek() {
            Some(b'"') => self.string(None).map(|_| ()),
            Some(b'{') => self.object(&[], &mut [], &mut Vec::new(), depth + 1),
            Some(b'[') => self.array(depth + 1),
            Some(b't') => self.literal(b"true"),
            Some(b'f') => self.literal(b"false"),
            Some(b'n') => self.literal(b"null"),
            Some(b'-' | b'0'..=b'9') => self.number(),
            Some(_) => Err(self.err("expected value")),
            None => Err(self.err("EOF while parsing a value")),
        }
    }

    fn array(&mut self, depth: usize) -> Result<(), String> {
        if depth > MAX_DEPTH {
            return Err(self.err("recursion limit exceeded"));
        }
        self.i += 1;
        self.ws();
        if self.peek() == Some(b']') {
            self.i += 1;
            return Ok(());
        }
        loop {
            self.ws();
            self.skip_value(depth)?;
            self.ws();
            match self.peek() {
                Some(b',') => self.i += 1,
                Some(b']') => {
                    self.i += 1;
                    return Ok(());
                }
                None => return Err(self.err("EOF while parsing a list")),
                Some(_) => return Err(self.err("expected `,` or `]`")),
            }
        }
    }

    /// Parses an object at `i`, capturing the values of `plan`'s keys into `slots`.
    fn object(
        &mut self,
        plan: &[Node],
        slots: &mut [Slot],
        scratch: &mut Vec<u8>,
        depth: usize,
    ) -> Result<(), String> {
        if depth > MAX_DEPTH {
            return Err(self.err("recursion limit exceeded"));
        }
        self.i += 1;
        self.ws();
        if self.peek() == Some(b'}') {
            self.i += 1;
            return Ok(());
        }
        loop {
            self.ws();
            if self.peek() != Some(b'"') {
                return Err(if self.peek().is_none() {
                    self.err("EOF while parsing an object")
                } else {
                    self.err("key must be a string")
                });
            }
            let (ks, ke, escaped) = self.string(None)?;
            let node = if plan.is_empty() {
                None
            } else if escaped {
                let key = decode_key(&self.s[ks..ke], self.paths);
                plan.iter().find(|n| n.key == key)
            } else {
                let key = &self.s[ks..ke];
                plan.iter().find(|n| n.key == key)
            };
            self.ws();
            self.expect(b':', "expected `:`")?;
            self.ws();
            match node {
                None => self.skip_value(depth)?,
                Some(n) => self.capture(n, slots, scratch, depth)?,
            }
            self.ws();
            match self.peek() {
                Some(b',') => self.i += 1,
                Some(b'}') => {
                    self.i += 1;
                    return Ok(());
                }
                None => return Err(self.err("EOF while parsing an object")),
                Some(_) => return Err(self.err("expected `,` or `}`")),
            }
        }
    }

    fn capture(
        &mut self,
        n: &Node,
        slots: &mut [Slot],
        scratch: &mut Vec<u8>,
        depth: usize,
    ) -> Result<(), String> {
        let start = self.i;
        let slot = match self.peek() {
            Some(b'"') if !n.targets.is_empty() => {
                let (a, b, dec) = self.string(Some(scratch))?;
                if dec {
                    Slot::Decoded(a, b)
                } else {
                    Slot::Str(a, b)
                }
            }
            Some(b'{') if !n.children.is_empty() => {
                // Children are reset so a duplicate key's later object replaces an earlier one.
                clear_children(n, slots);
                self.object(&n.children, slots, scratch, depth + 1)?;
                Slot::Other(start, self.i)
            }
            Some(b'n') => {
                self.skip_value(depth)?;
                Slot::Null
            }
            _ => {
                self.skip_value(depth)?;
                Slot::Other(start, self.i)
            }
        };
        for &t in &n.targets {
            slots[t] = slot;
        }
        Ok(())
    }
}

fn clear_children(n: &Node, slots: &mut [Slot]) {
    for c in &n.children {
        for &t in &c.targets {
            slots[t] = Slot::Missing;
        }
        clear_children(c, slots);
    }
}

/// Decodes an escaped key (already validated); rare, so allocating is fine.
fn decode_key(raw: &str, paths: StringPaths) -> String {
    let quoted = format!("\"{raw}\"");
    let mut p = Parser {
        s: &quoted,
        b: quoted.as_bytes(),
        i: 0,
        paths,
    };
    let mut out = Vec::new();
    match p.string(Some(&mut out)) {
        Ok((a, b, true)) => String::from_utf8_lossy(&out[a..b]).into_owned(),
        _ => raw.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paths(ps: &[&str]) -> Vec<FieldPath> {
        ps.iter().map(|p| p.parse().unwrap()).collect()
    }

    /// Every combination of string paths this CPU can run, fastest first, down to the portable
    /// eight-byte code.
    fn every_string_paths() -> Vec<StringPaths> {
        let mut all: Vec<StringPaths> = Features::detected()
            .levels()
            .into_iter()
            .map(StringPaths::for_features)
            .collect();
        all.dedup();
        all
    }

    fn run_with(
        line: &str,
        ps: &[&str],
        string_paths: StringPaths,
    ) -> Result<Vec<Option<String>>, String> {
        let fp = paths(ps);
        let plan = build_plan(&fp);
        let mut slots = vec![Slot::Missing; fp.len()];
        let mut scratch = DecodedStrings::default();
        parse_line(line, &plan, &mut slots, &mut scratch, string_paths)?;
        Ok(slots
            .iter()
            .map(|s| s.text(line, &scratch).map(str::to_owned))
            .collect())
    }

    /// Parses `line` with every combination of string paths, checks that they all agree (values
    /// and error messages) and returns the result.
    fn run(line: &str, ps: &[&str]) -> Result<Vec<Option<String>>, String> {
        let mut every = every_string_paths().into_iter();
        let fastest = every.next().expect("at least the portable paths");
        let want = run_with(line, ps, fastest);
        for string_paths in every {
            assert_eq!(
                run_with(line, ps, string_paths),
                want,
                "{string_paths:?} against {fastest:?} on {line:?}"
            );
        }
        want
    }

    #[test]
    fn extracts_and_decodes() {
        let r = run(
            r#"{"id": 1, "text": "a\nb\u00e9\ud83d\ude00", "meta": {"body": "x\"y", "n": [1, {"a": null}]}}"#,
            &["text", "meta.body", "nope"],
        )
        .unwrap();
        assert_eq!(r[0].as_deref(), Some("a\nbé😀"));
        assert_eq!(r[1].as_deref(), Some("x\"y"));
        assert_eq!(r[2], None);
    }

    #[test]
    fn agrees_with_serde_json_on_validity() {
        let cases = [
            r#"{}"#,
            r#"{"a":1}"#,
            r#"{"a":-0.5e+10,"b":[true,false,null,"x"]}"#,
            r#"  {"a" : { } , "b" : [ ] }  "#,
            r#"{"a":1,}"#,
            r#"{"a":01}"#,
            r#"{"a":1.}"#,
            r#"{"a":.5}"#,
            r#"{"a":-}"#,
            r#"{"a":1e}"#,
            r#"{"a":tru}"#,
            r#"{"a":"\x"}"#,
            r#"{"a":"\u12G4"}"#,
            "{\"a\":\"tab\there\"}",
            r#"{"a":"x"} x"#,
            r#"{"a" 1}"#,
            r#"{a:1}"#,
            r#"{"a":[1,2}"#,
            r#"{"a":[1 2]}"#,
            r#"{"a":"unterminated}"#,
            r#"{"a":1"#,
            r#"{"a":NaN}"#,
            r#"{"a":{"b":{"c":[[[]]]}}}"#,
        ];
        for c in cases {
            let ours = run(c, &["a"]).is_ok();
            let theirs =
                serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(c).is_ok();
            assert_eq!(ours, theirs, "{c}");
        }
    }

    #[test]
    fn non_objects_and_depth() {
        assert!(
            run("[1,2]", &["a"])
                .unwrap_err()
                .contains("not a JSON object")
        );
        assert!(
            run("\"s\"", &["a"])
                .unwrap_err()
                .contains("not a JSON object")
        );
        let deep = format!("{{\"a\":{}{}}}", "[".repeat(200), "]".repeat(200));
        assert!(run(&deep, &["a"]).unwrap_err().contains("recursion"));
    }

    #[test]
    fn slot_kinds_and_duplicates() {
        let fp = paths(&["a", "b", "c", "d.e"]);
        let plan = build_plan(&fp);
        let mut slots = vec![Slot::Missing; 4];
        let mut scratch = DecodedStrings::default();
        let line = r#"{"a":null,"b":12.50,"d":"str","a":"last"}"#;
        parse_line(
            line,
            &plan,
            &mut slots,
            &mut scratch,
            StringPaths::detected(),
        )
        .unwrap();
        assert_eq!(slots[0].text(line, &scratch), Some("last"));
        assert_eq!(slots[1], Slot::Other(14, 19));
        assert_eq!(&line[14..19], "12.50");
        assert_eq!(slots[2], Slot::Missing);
        assert_eq!(slots[3], Slot::Missing);
    }

    #[test]
    fn escaped_keys_match() {
        let r = run(r#"{"te\u0078t":"v"}"#, &["text"]).unwrap();
        assert_eq!(r[0].as_deref(), Some("v"));
    }

    #[test]
    fn decoded_strings_are_read_back_only_at_char_boundaries() {
        let fp = paths(&["a"]);
        let plan = build_plan(&fp);
        let mut slots = vec![Slot::Missing; 1];
        let mut decoded = DecodedStrings::default();
        let line = r#"{"a":"é\nx\u00e9"}"#;
        parse_line(
            line,
            &plan,
            &mut slots,
            &mut decoded,
            StringPaths::detected(),
        )
        .unwrap();
        let Slot::Decoded(a, b) = slots[0] else {
            panic!("an escaped string is decoded: {:?}", slots[0]);
        };
        assert_eq!(decoded.get(a, b), Some("é\nxé"));
        // Inside the first é, inside the last one, and past the end.
        assert_eq!(decoded.get(a + 1, b), None);
        assert_eq!(decoded.get(a, b - 1), None);
        assert_eq!(decoded.get(a, b + 1), None);
        assert_eq!(decoded.get(a + 2, b), Some("\nxé"));
        // A line that fails leaves nothing to read back.
        let bad = r#"{"a":"é\nx\q"}"#;
        assert!(
            parse_line(
                bad,
                &plan,
                &mut slots,
                &mut decoded,
                StringPaths::detected()
            )
            .is_err()
        );
        assert_eq!(decoded.get(0, 1), None);
    }

    #[test]
    fn lone_surrogate_becomes_replacement() {
        let r = run(r#"{"a":"x\ud800y"}"#, &["a"]).unwrap();
        assert_eq!(r[0].as_deref(), Some("x\u{FFFD}y"));
    }

    fn json_value() -> impl proptest::strategy::Strategy<Value = serde_json::Value> {
        use proptest::prelude::*;
        let leaf = prop_oneof![
            Just(serde_json::Value::Null),
            any::<bool>().prop_map(serde_json::Value::from),
            any::<i64>().prop_map(serde_json::Value::from),
            any::<f64>()
                .prop_filter("finite", |f| f.is_finite())
                .prop_map(serde_json::Value::from),
            "\\PC{0,12}|[\\x00-\\x1f\"\\\\/\\n]{0,6}".prop_map(serde_json::Value::from),
        ];
        leaf.prop_recursive(4, 40, 6, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..5).prop_map(serde_json::Value::from),
                proptest::collection::btree_map("[a-z\\n\"]{0,3}", inner, 0..5)
                    .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest::proptest! {
        #[test]
        fn extraction_matches_serde_json(
            doc in proptest::collection::btree_map("[a-z]{1,2}|text", json_value(), 0..6),
            text in "\\PC{0,40}",
        ) {
            let mut obj: serde_json::Map<String, serde_json::Value> = doc.into_iter().collect();
            obj.insert("text".into(), serde_json::Value::from(text.clone()));
            let line = serde_json::to_string(&obj).unwrap();
            let got = run(&line, &["text", "a"]).unwrap();
            proptest::prop_assert_eq!(got[0].as_deref(), Some(text.as_str()));
            let want_a = obj.get("a").and_then(|v| v.as_str());
            proptest::prop_assert_eq!(got[1].as_deref(), want_a);
        }

        /// Escape-dense strings of every length (the 16-byte path, its tail and the general
        /// loop all take turns) decode to exactly what they encode.
        #[test]
        fn escape_dense_strings_decode_exactly(
            pieces in proptest::collection::vec(0usize..18, 0..60),
        ) {
            const PIECES: [(&str, &str); 18] = [
                ("a", "a"),
                ("\\n", "\n"),
                ("\\/", "/"),
                ("\\u00e9", "é"),
                ("\\ud83d\\ude00", "😀"),
                ("\\\"", "\""),
                ("\\\\", "\\"),
                ("plain text run ", "plain text run "),
                ("é文", "é文"),
                ("\\t\\r\\b\\f", "\t\r\u{8}\u{c}"),
                // Letters of non-Latin scripts escaped one by one, as Python's json writes them.
                ("\\u0432\\u043e\\u0441\\u0434", "восд"),
                ("\\u6587\\u5B57\\u4E00", "文字一"),
                (" ", " "),
                ("\\u0041\\u005c\\u0022\\u007f", "A\\\"\u{7f}"),
                ("\\u0080\\u07ff\\u0800\\uffff", "\u{80}\u{7ff}\u{800}\u{ffff}"),
                ("\\ud7ff\\ue000\\udbff\\udfff", "\u{d7ff}\u{e000}\u{10ffff}"),
                // Lone surrogates (module docs).
                ("\\u0432\\udc00\\u0432", "в\u{fffd}в"),
                ("\\u0432\\ud800\\u0432", "в\u{fffd}в"),
            ];
            let mut raw = String::from("{\"text\": \"");
            let mut want = String::new();
            for p in pieces {
                raw.push_str(PIECES[p].0);
                want.push_str(PIECES[p].1);
            }
            raw.push_str("\"}");
            let got = run(&raw, &["text"]).unwrap();
            proptest::prop_assert_eq!(got[0].as_deref(), Some(want.as_str()), "{}", raw);
        }

        /// Long escape-dense strings with one byte changed (a stray backslash, quote, control
        /// byte or escape letter anywhere, across the 64-byte windows of the wide path): valid
        /// exactly when serde_json says so, and then decoded to what serde_json decodes.
        #[test]
        fn long_escape_dense_strings_agree_with_serde_json_after_an_edit(
            pieces in proptest::collection::vec(0usize..10, 20..200),
            edit in (0usize..2000, proptest::sample::select(b"\\\"\x01unx/8G0f".to_vec())),
        ) {
            const PIECES: [&str; 10] = [
                "a",
                "\\n",
                "\\\\",
                "\\\"",
                "\\u00e9",
                "é",
                "text run ",
                "\\\\\\n",
                "\\u0432\\u043e\\u0441 ",
                // No surrogates here, and no `d` among the edits: a lone one is rejected by
                // serde_json and decoded to U+FFFD here (module docs).
                "\\u6587\\u5B57",
            ];
            let mut raw = String::from("{\"text\": \"");
            for p in pieces {
                raw.push_str(PIECES[p]);
            }
            raw.push_str("\"}");
            let mut bytes = raw.into_bytes();
            // Edit inside the string value only (after `{"text": "`, before `"}`).
            let span = bytes.len() - 12;
            let at = 10 + edit.0 % span;
            bytes[at] = edit.1;
            if let Ok(line) = std::str::from_utf8(&bytes) {
                let ours = run(line, &["text"]);
                let theirs = serde_json::from_str::<serde_json::Value>(line);
                proptest::prop_assert_eq!(ours.is_ok(), theirs.is_ok(), "{}", line);
                if let (Ok(ours), Ok(theirs)) = (ours, theirs) {
                    proptest::prop_assert_eq!(ours[0].as_deref(), theirs["text"].as_str(), "{}", line);
                }
            }
        }

        #[test]
        fn validity_matches_serde_json_under_mutation(
            doc in proptest::collection::btree_map("[a-z]{1,2}", json_value(), 0..5),
            edits in proptest::collection::vec((0usize..400, proptest::sample::select(
                b"{}[]\",:\\ 0123456789.-+eEtrufalsn\t\n".to_vec())), 1..3),
        ) {
            let obj: serde_json::Map<String, serde_json::Value> = doc.into_iter().collect();
            let mut bytes = serde_json::to_string(&obj).unwrap().into_bytes();
            for (pos, c) in edits {
                if !bytes.is_empty() {
                    let p = pos % bytes.len();
                    bytes[p] = c;
                }
            }
            if let Ok(line) = std::str::from_utf8(&bytes) {
                // serde_json rejects lone surrogates, which this scanner accepts on purpose.
                if !line.contains("\\ud") && !line.contains("\\uD") && !line.contains('\n') {
                    let ours = run(line, &["a"]).is_ok();
                    let theirs = serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(line);
                    // Numbers beyond f64 are valid JSON grammar; serde_json refuses to represent
                    // them, this scanner never converts numbers.
                    let overflow = theirs.as_ref().is_err_and(|e| e.to_string().contains("number out of range"));
                    if !overflow {
                        proptest::prop_assert_eq!(ours, theirs.is_ok(), "{}", line);
                    }
                }
            }
        }
    }

    #[test]
    fn special_mask_finds_first() {
        for pos in 0..8 {
            for c in [b'"', b'\\', 0u8, 0x1f] {
                let mut w = [b'a'; 8];
                w[pos] = c;
                if pos < 7 {
                    w[pos + 1] = 0x80; // high bytes must not confuse the control-char test
                }
                let m = special_mask(u64::from_le_bytes(w));
                assert_eq!((m.trailing_zeros() / 8) as usize, pos);
            }
        }
        assert_eq!(special_mask(u64::from_le_bytes(*b"abc\xc3\xa9 ~\x7f")), 0);
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn sixteen_byte_mask_agrees_with_the_scalar_test_on_every_byte() {
        for c in 0..=255u8 {
            for pos in 0..16 {
                let mut w = [b'a'; 16];
                w[pos] = c;
                let special = matches!(c, b'"' | b'\\' | 0..=0x1f);
                let want = if special { 1u32 << pos } else { 0 };
                assert_eq!(special_mask16(&w), want, "byte {c:#x} at {pos}");
            }
        }
    }
}
