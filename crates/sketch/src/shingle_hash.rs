//! Shingling fused with the fast scheme's per-shingle hash (`xxh3_64`, seed 0).
//!
//! [`Shingler::for_each`] hands every shingle to a closure and the closure calls the xxhash-rust
//! `xxh3_64`, which dispatches on the input length per call and is not inlined. Shingles are
//! short (a char 5-gram of ASCII text is 5 bytes), so that call and the window bookkeeping cost
//! more than the hash itself. Here the windows of one length class are hashed in a tight loop
//! with xxh3's short-input path written out (bit-exact: tested against xxhash-rust for every
//! length 0..=16), and character windows take byte windows over ASCII runs, so only windows that
//! touch a multi-byte character walk characters. Long stretches of them (text in a non-Latin
//! script) are hashed four windows per vector from a list of char starts, each lane taking
//! whichever of xxh3's 4..=8- and 9..=16-byte paths its window's length needs
//! ([`hash_mixed_windows_avx2`]). Inputs longer than 16 bytes still go to xxhash-rust.

use crate::shingle::Shingler;
use crate::words::ascii_run_end;

/// The first 128 bytes of xxh3's default secret (`XXH3_kSecret`), all the paths up to 128
/// bytes of input read.
const SECRET: [u8; 128] = [
    0xb8, 0xfe, 0x6c, 0x39, 0x23, 0xa4, 0x4b, 0xbe, 0x7c, 0x01, 0x81, 0x2c, 0xf7, 0x21, 0xad, 0x1c,
    0xde, 0xd4, 0x6d, 0xe9, 0x83, 0x90, 0x97, 0xdb, 0x72, 0x40, 0xa4, 0xa4, 0xb7, 0xb3, 0x67, 0x1f,
    0xcb, 0x79, 0xe6, 0x4e, 0xcc, 0xc0, 0xe5, 0x78, 0x82, 0x5a, 0xd0, 0x7d, 0xcc, 0xff, 0x72, 0x21,
    0xb8, 0x08, 0x46, 0x74, 0xf7, 0x43, 0x24, 0x8e, 0xe0, 0x35, 0x90, 0xe6, 0x81, 0x3a, 0x26, 0x4c,
    0x3c, 0x28, 0x52, 0xbb, 0x91, 0xc3, 0x00, 0xcb, 0x88, 0xd0, 0x65, 0x8b, 0x1b, 0x53, 0x2e, 0xa3,
    0x71, 0x64, 0x48, 0x97, 0xa2, 0x0d, 0xf9, 0x4e, 0x38, 0x19, 0xef, 0x46, 0xa9, 0xde, 0xac, 0xd8,
    0xa8, 0xfa, 0x76, 0x3f, 0xe3, 0x9c, 0x34, 0x3f, 0xf9, 0xdc, 0xbb, 0xc7, 0xc7, 0x0b, 0x4f, 0x1d,
    0x8a, 0x51, 0xe0, 0x4b, 0xcd, 0xb4, 0x59, 0x31, 0xc8, 0x9f, 0x7e, 0xc9, 0xd9, 0x78, 0x73, 0x64,
];

const fn secret64(offset: usize) -> u64 {
    let mut v = 0u64;
    let mut i = 0;
    while i < 8 {
        v |= (SECRET[offset + i] as u64) << (8 * i);
        i += 1;
    }
    v
}

const fn secret32(offset: usize) -> u32 {
    secret64(offset) as u32
}

const PRIME64_1: u64 = 0x9E37_79B1_85EB_CA87;
const PRIME64_2: u64 = 0xC2B2_AE3D_27D4_EB4F;
const PRIME64_3: u64 = 0x1656_67B1_9E37_79F9;
const PRIME_MX1: u64 = 0x1656_6791_9E37_79F9;
const PRIME_MX2: u64 = 0x9FB2_1C65_1E98_DF25;

// Seed 0 folds every seed term of the short path into these constants.
const FLIP_1TO3: u64 = (secret32(0) ^ secret32(4)) as u64;
const FLIP_4TO8: u64 = secret64(8) ^ secret64(16);
const FLIP_9TO16_LO: u64 = secret64(24) ^ secret64(32);
const FLIP_9TO16_HI: u64 = secret64(40) ^ secret64(48);
const HASH_OF_EMPTY: u64 = xxh64_avalanche(secret64(56) ^ secret64(64));

#[inline(always)]
const fn xxh64_avalanche(mut h: u64) -> u64 {
    h ^= h >> 33;
    h = h.wrapping_mul(PRIME64_2);
    h ^= h >> 29;
    h = h.wrapping_mul(PRIME64_3);
    h ^ (h >> 32)
}

#[inline(always)]
fn xxh3_avalanche(mut h: u64) -> u64 {
    h ^= h >> 37;
    h = h.wrapping_mul(PRIME_MX1);
    h ^ (h >> 32)
}

#[inline(always)]
fn rrmxmx(mut h: u64, len: u64) -> u64 {
    h ^= h.rotate_left(49) ^ h.rotate_left(24);
    h = h.wrapping_mul(PRIME_MX2);
    h ^= (h >> 35).wrapping_add(len);
    h = h.wrapping_mul(PRIME_MX2);
    h ^ (h >> 28)
}

#[inline(always)]
fn read32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

#[inline(always)]
fn read64(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// xxh3_64 of 1..=3 bytes.
#[inline(always)]
pub(crate) fn xxh3_1to3(b: &[u8]) -> u64 {
    let len = b.len();
    let combo = (u32::from(b[0]) << 16)
        | (u32::from(b[len >> 1]) << 24)
        | u32::from(b[len - 1])
        | ((len as u32) << 8);
    xxh64_avalanche(u64::from(combo) ^ FLIP_1TO3)
}

/// xxh3_64 of 4..=8 bytes.
#[inline(always)]
pub(crate) fn xxh3_4to8(b: &[u8]) -> u64 {
    let len = b.len();
    let input = u64::from(read32(b, len - 4)).wrapping_add(u64::from(read32(b, 0)) << 32);
    rrmxmx(input ^ FLIP_4TO8, len as u64)
}

/// xxh3_64 of 9..=16 bytes.
#[inline(always)]
pub(crate) fn xxh3_9to16(b: &[u8]) -> u64 {
    let len = b.len();
    let lo = read64(b, 0) ^ FLIP_9TO16_LO;
    let hi = read64(b, len - 8) ^ FLIP_9TO16_HI;
    let product = u128::from(lo) * u128::from(hi);
    let acc = (len as u64)
        .wrapping_add(lo.swap_bytes())
        .wrapping_add(hi)
        .wrapping_add(product as u64 ^ (product >> 64) as u64);
    xxh3_avalanche(acc)
}

/// xxh3's 16-byte mix of `b[at..at + 16]` with the secret at `secret_at` (seed 0).
#[inline(always)]
fn mix16(b: &[u8], at: usize, secret_at: usize) -> u64 {
    let lo = read64(b, at) ^ read64(&SECRET, secret_at);
    let hi = read64(b, at + 8) ^ read64(&SECRET, secret_at + 8);
    let product = u128::from(lo) * u128::from(hi);
    product as u64 ^ (product >> 64) as u64
}

/// xxh3_64 of 17..=128 bytes (word shingles are mostly 20 to 60 bytes long).
#[inline(always)]
pub(crate) fn xxh3_17to128(b: &[u8]) -> u64 {
    let len = b.len();
    debug_assert!((17..=128).contains(&len));
    let mut acc = (len as u64).wrapping_mul(PRIME64_1);
    if len > 32 {
        if len > 64 {
            if len > 96 {
                acc = acc.wrapping_add(mix16(b, 48, 96));
                acc = acc.wrapping_add(mix16(b, len - 64, 112));
            }
            acc = acc.wrapping_add(mix16(b, 32, 64));
            acc = acc.wrapping_add(mix16(b, len - 48, 80));
        }
        acc = acc.wrapping_add(mix16(b, 16, 32));
        acc = acc.wrapping_add(mix16(b, len - 32, 48));
    }
    acc = acc.wrapping_add(mix16(b, 0, 0));
    acc = acc.wrapping_add(mix16(b, len - 16, 16));
    xxh3_avalanche(acc)
}

/// `xxh3_64(bytes)` with seed 0: inputs up to 16 bytes inline, longer ones through xxhash-rust.
#[inline(always)]
pub(crate) fn xxh3_64(b: &[u8]) -> u64 {
    match b.len() {
        0 => HASH_OF_EMPTY,
        1..=3 => xxh3_1to3(b),
        4..=8 => xxh3_4to8(b),
        9..=16 => xxh3_9to16(b),
        _ => xxhash_rust::xxh3::xxh3_64(b),
    }
}

/// `xxh3_64(bytes)` with seed 0 with the 17..=128-byte path inline too: for word shingles,
/// which are mostly that long (a larger function than [`xxh3_64`], so only where it pays).
#[inline(always)]
pub(crate) fn xxh3_64_up_to_128(b: &[u8]) -> u64 {
    match b.len() {
        17..=128 => xxh3_17to128(b),
        _ => xxh3_64(b),
    }
}

/// Hashes every `k`-byte window of `bytes[..end]` starting at a multiple of `step`. It may read
/// the bytes after `end` (a vector loop then hashes a run's last windows with the others, and
/// drops those that reach past it), but never hashes them.
pub(crate) type ByteWindowHasher =
    fn(bytes: &[u8], end: usize, k: usize, step: usize, out: &mut Vec<u64>);

/// Hashes the `k`-char windows of UTF-8 `bytes` at step 1 from the char boundary `p` on, in
/// text order, while they hold a multi-byte char: stops before the first window of exactly `k`
/// bytes (all ASCII) and returns its start, or returns `None` when no window is left.
pub(crate) type MixedWindowHasher =
    fn(bytes: &[u8], p: usize, k: usize, out: &mut Vec<u64>) -> Option<usize>;

/// One kernel's window hashing paths, chosen once per `MinHasher`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct WindowHasher {
    /// Byte windows: byte mode, and the ASCII runs of char mode.
    pub bytes: ByteWindowHasher,
    /// Char windows over multi-byte chars (step 1).
    pub mixed: MixedWindowHasher,
}

/// The portable paths, on every CPU.
pub(crate) const PORTABLE_WINDOWS: WindowHasher = WindowHasher {
    bytes: hash_windows,
    mixed: hash_mixed_windows,
};

/// The AVX2 paths (each falls back to the portable one on a CPU without AVX2).
#[cfg(target_arch = "x86_64")]
pub(crate) const AVX2_WINDOWS: WindowHasher = WindowHasher {
    bytes: hash_windows_avx2,
    mixed: hash_mixed_windows_avx2,
};

/// The AVX-512 paths: byte windows eight per vector, multi-byte windows as with AVX2 (each falls
/// back to the portable one on a CPU without its features).
#[cfg(target_arch = "x86_64")]
pub(crate) const AVX512_WINDOWS: WindowHasher = WindowHasher {
    bytes: hash_windows_avx512,
    mixed: hash_mixed_windows_avx2,
};

/// Portable [`ByteWindowHasher`]: one tight loop per xxh3 length class.
pub(crate) fn hash_windows(bytes: &[u8], end: usize, k: usize, step: usize, out: &mut Vec<u64>) {
    let bytes = &bytes[..end];
    #[inline(always)]
    fn each(bytes: &[u8], k: usize, step: usize, out: &mut Vec<u64>, hash: impl Fn(&[u8]) -> u64) {
        // `Windows` is exact-size, so `extend` reserves once and writes without capacity checks.
        if step == 1 {
            out.extend(bytes.windows(k).map(hash));
        } else {
            out.extend(bytes.windows(k).step_by(step).map(hash));
        }
    }
    match k {
        1..=3 => each(bytes, k, step, out, xxh3_1to3),
        4..=8 => each(bytes, k, step, out, xxh3_4to8),
        9..=16 => each(bytes, k, step, out, xxh3_9to16),
        _ => each(bytes, k, step, out, xxhash_rust::xxh3::xxh3_64),
    }
}

/// Whether [`hash_windows_avx512`] can run on this CPU.
#[cfg(target_arch = "x86_64")]
pub(crate) fn avx512_windows_supported() -> bool {
    use neardup_cpu::{Feature, Features};
    Features::detected().has_all(&[Feature::Avx512F, Feature::Avx512Bw, Feature::Avx512Dq])
}

/// How the vector window hashers cover the `k`-byte windows of the first `end` of `readable`
/// bytes: `(windows, vector_windows)`, where the vector loop hashes windows `0..vector_windows`
/// eight at a time (each step loads 16 bytes from its first window's start, so it needs
/// `vector_windows + 8 <= readable`) and windows `vector_windows..windows`, if any, are hashed
/// one by one ([`hash_windows_from`]); `None` when no window fits. The vector loop goes on
/// past `windows` to the next multiple of eight when the bytes after `end` allow the loads:
/// then a run inside a longer text (an ASCII run between multi-byte chars) has no windows
/// left to hash one by one.
#[cfg(target_arch = "x86_64")]
fn window_steps(end: usize, readable: usize, k: usize) -> Option<(usize, usize)> {
    let windows = end.checked_sub(k - 1)?;
    let loadable = if readable >= 16 {
        ((readable - 16) / 8 + 1) * 8
    } else {
        0
    };
    Some((windows, windows.next_multiple_of(8).min(loadable)))
}

/// The byte shuffle of the vector window hashers: with a 16-byte load repeated in every
/// 128-bit lane, 64-bit lane `j` (of eight) gets `read32(j + k - 4) + (read32(j) << 32)`,
/// xxh3's input word for the `k`-byte window at `j` (the shuffle indexes within each 128-bit
/// lane, so the same bytes serve one 512-bit or two 256-bit vectors).
#[cfg(target_arch = "x86_64")]
fn window_shuffle(k: usize) -> [u8; 64] {
    let mut control = [0u8; 64];
    for (j, lane) in control.chunks_exact_mut(8).enumerate() {
        for i in 0..4 {
            lane[i] = (j + k - 4 + i) as u8;
            lane[4 + i] = (j + i) as u8;
        }
    }
    control
}

/// Whether a vector loop may hash windows `0..vector_windows` of `bytes` into `dst`: whole
/// steps of eight, each with 16 bytes to load and eight slots to fill.
#[cfg(target_arch = "x86_64")]
fn vector_fits(bytes: &[u8], dst: &[std::mem::MaybeUninit<u64>], vector_windows: usize) -> bool {
    vector_windows.is_multiple_of(8)
        && vector_windows <= dst.len()
        && (vector_windows == 0 || vector_windows + 8 <= bytes.len())
}

/// Hashes the 4..=8-byte windows `from..dst.len()` of `bytes` into `dst[from..]` one by one:
/// what the vector loops leave.
#[cfg(target_arch = "x86_64")]
fn hash_windows_from(bytes: &[u8], k: usize, dst: &mut [std::mem::MaybeUninit<u64>], from: usize) {
    for (p, slot) in dst.iter_mut().enumerate().skip(from) {
        slot.write(xxh3_4to8(&bytes[p..p + k]));
    }
}

/// AVX-512 [`ByteWindowHasher`]: for 4..=8-byte windows at step 1 (char 5-grams of ASCII text),
/// eight windows per vector; everything else, or a CPU without AVX-512, goes to
/// [`hash_windows`]. `MinHasher` picks it only where it is supported; the check here (one
/// load of the cached features) keeps the function sound on its own.
#[cfg(target_arch = "x86_64")]
pub(crate) fn hash_windows_avx512(
    bytes: &[u8],
    end: usize,
    k: usize,
    step: usize,
    out: &mut Vec<u64>,
) {
    hash_windows_vectorised(
        bytes,
        end,
        k,
        step,
        out,
        avx512_windows_supported(),
        hash_vector_windows_avx512,
    )
}

/// A vector loop of a [`ByteWindowHasher`]: hashes the `k`-byte windows `0..vector_windows` of
/// `bytes` ([`window_steps`]) into `dst`. Unsafe: it needs its CPU features.
#[cfg(target_arch = "x86_64")]
type VectorWindows = unsafe fn(
    bytes: &[u8],
    k: usize,
    dst: &mut [std::mem::MaybeUninit<u64>],
    vector_windows: usize,
);

/// The [`ByteWindowHasher`] around a vector loop: 4..=8-byte windows at step 1 go to `vector_loop`
/// (the windows it leaves are hashed one by one), everything else, or a CPU without the loop's
/// features (`supported` false), to [`hash_windows`]. `MinHasher` picks a vector hasher only
/// where it is supported; the check here (one load of the cached features) keeps the hashers
/// sound on their own.
#[cfg(target_arch = "x86_64")]
fn hash_windows_vectorised(
    bytes: &[u8],
    end: usize,
    k: usize,
    step: usize,
    out: &mut Vec<u64>,
    supported: bool,
    vector_loop: VectorWindows,
) {
    if step != 1 || !(4..=8).contains(&k) || !supported {
        return hash_windows(bytes, end, k, step, out);
    }
    let Some((windows, vector_windows)) = window_steps(end, bytes.len(), k) else {
        return;
    };
    let written = windows.max(vector_windows);
    out.reserve(written);
    let start = out.len();
    let dst = &mut out.spare_capacity_mut()[..written];
    // SAFETY: `supported` says this CPU has the loop's features.
    unsafe { vector_loop(bytes, k, dst, vector_windows) };
    hash_windows_from(&bytes[..end], k, &mut dst[..windows], vector_windows);
    // SAFETY: all `windows` slots after `start` were written above (the vector loop's windows
    // past them reach beyond `end`, and are left out).
    unsafe { out.set_len(start + windows) };
}

/// xxh3's 4..=8-byte path, eight windows (starts `p..p + 8`) per iteration: one 16-byte load
/// covers them all (the last one ends at `p + 7 + k <= p + 15`), broadcast to the four 128-bit
/// lanes and shuffled so that 64-bit lane `j` holds `read32(p + j + k - 4) +
/// (read32(p + j) << 32)`, xxh3's input word. The rest is the scalar arithmetic, lane-wise.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512dq")]
fn hash_vector_windows_avx512(
    bytes: &[u8],
    k: usize,
    dst: &mut [std::mem::MaybeUninit<u64>],
    vector_windows: usize,
) {
    use std::arch::x86_64::*;
    debug_assert!((4..=8).contains(&k));
    let control = window_shuffle(k);
    assert!(vector_fits(bytes, dst, vector_windows));
    // SAFETY: the CPU features are enabled on this function; every load reads
    // `bytes[p..p + 16]` with `p + 16 <= bytes.len()` (p < vector_windows, p % 8 == 0), and
    // every store writes `dst[p..p + 8]` with `p + 8 <= vector_windows <= dst.len()`.
    unsafe {
        let control = _mm512_loadu_si512(control.as_ptr().cast());
        let flip = _mm512_set1_epi64(FLIP_4TO8 as i64);
        let mx2 = _mm512_set1_epi64(PRIME_MX2 as i64);
        let len = _mm512_set1_epi64(k as i64);
        let mut p = 0;
        while p < vector_windows {
            let raw = _mm512_broadcast_i32x4(_mm_loadu_si128(bytes.as_ptr().add(p).cast()));
            let mut h = _mm512_xor_si512(_mm512_shuffle_epi8(raw, control), flip);
            // h ^= rotl(h, 49) ^ rotl(h, 24): 0x96 is the three-way xor.
            h = _mm512_ternarylogic_epi64::<0x96>(
                h,
                _mm512_rol_epi64::<49>(h),
                _mm512_rol_epi64::<24>(h),
            );
            h = _mm512_mullo_epi64(h, mx2);
            h = _mm512_xor_si512(h, _mm512_add_epi64(_mm512_srli_epi64::<35>(h), len));
            h = _mm512_mullo_epi64(h, mx2);
            h = _mm512_xor_si512(h, _mm512_srli_epi64::<28>(h));
            _mm512_storeu_si512(dst.as_mut_ptr().add(p).cast(), h);
            p += 8;
        }
    }
}

/// Whether [`hash_windows_avx2`] can run on this CPU.
#[cfg(target_arch = "x86_64")]
pub(crate) fn avx2_windows_supported() -> bool {
    use neardup_cpu::{Feature, Features};
    Features::detected().has(Feature::Avx2)
}

/// AVX2 [`ByteWindowHasher`]: for 4..=8-byte windows at step 1, eight windows per iteration in two
/// vectors of four; everything else, or a CPU without AVX2, goes to [`hash_windows`]. The
/// scalar loop spends most of its time in its two 64-bit multiplications per window; AVX2 has
/// no 64-bit multiplication, but three 32-bit ones per lane still do four windows in about the
/// time the scalar loop does one and a half.
#[cfg(target_arch = "x86_64")]
pub(crate) fn hash_windows_avx2(
    bytes: &[u8],
    end: usize,
    k: usize,
    step: usize,
    out: &mut Vec<u64>,
) {
    hash_windows_vectorised(
        bytes,
        end,
        k,
        step,
        out,
        avx2_windows_supported(),
        hash_vector_windows_avx2,
    )
}

/// [`hash_vector_windows_avx512`] on AVX2: one 16-byte load per eight windows, broadcast to both
/// 128-bit lanes and shuffled into two vectors, the first holding windows `p..p + 4`, the second
/// `p + 4..p + 8`; 64-bit products are put together from 32-bit ones ([`mul64_avx2`]).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn hash_vector_windows_avx2(
    bytes: &[u8],
    k: usize,
    dst: &mut [std::mem::MaybeUninit<u64>],
    vector_windows: usize,
) {
    use std::arch::x86_64::*;
    debug_assert!((4..=8).contains(&k));
    // Windows 0..4 in the first half of the shuffle, 4..8 in the second.
    let control = window_shuffle(k);
    assert!(vector_fits(bytes, dst, vector_windows));
    // SAFETY: AVX2 is enabled on this function; every load reads `bytes[p..p + 16]` with
    // `p + 16 <= bytes.len()` (p < vector_windows, p % 8 == 0), and every store writes
    // `dst[p..p + 8]` with `p + 8 <= vector_windows <= dst.len()`.
    unsafe {
        let first = _mm256_loadu_si256(control.as_ptr().cast());
        let second = _mm256_loadu_si256(control.as_ptr().add(32).cast());
        let flip = _mm256_set1_epi64x(FLIP_4TO8 as i64);
        let mx2_lo = _mm256_set1_epi64x(PRIME_MX2 as i64);
        let mx2_hi = _mm256_set1_epi64x((PRIME_MX2 >> 32) as i64);
        let len = _mm256_set1_epi64x(k as i64);
        let mut p = 0;
        while p < vector_windows {
            let raw = _mm256_broadcastsi128_si256(_mm_loadu_si128(bytes.as_ptr().add(p).cast()));
            let a = _mm256_xor_si256(_mm256_shuffle_epi8(raw, first), flip);
            let b = _mm256_xor_si256(_mm256_shuffle_epi8(raw, second), flip);
            let a = rrmxmx_avx2(a, mx2_lo, mx2_hi, len);
            let b = rrmxmx_avx2(b, mx2_lo, mx2_hi, len);
            _mm256_storeu_si256(dst.as_mut_ptr().add(p).cast(), a);
            _mm256_storeu_si256(dst.as_mut_ptr().add(p + 4).cast(), b);
            p += 8;
        }
    }
}

/// `a * m mod 2^64` lane-wise, with `m_lo` and `m_hi` holding the low and high halves of `m`
/// in every lane: `lo(a)·lo(m) + (hi(a)·lo(m) + lo(a)·hi(m)) << 32` (the `hi·hi` term is shifted
/// out).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn mul64_avx2(
    a: std::arch::x86_64::__m256i,
    m_lo: std::arch::x86_64::__m256i,
    m_hi: std::arch::x86_64::__m256i,
) -> std::arch::x86_64::__m256i {
    use std::arch::x86_64::*;
    // SAFETY: the caller runs with AVX2 enabled.
    unsafe {
        let low = _mm256_mul_epu32(a, m_lo);
        let cross = _mm256_add_epi64(
            _mm256_mul_epu32(_mm256_srli_epi64::<32>(a), m_lo),
            _mm256_mul_epu32(a, m_hi),
        );
        _mm256_add_epi64(low, _mm256_slli_epi64::<32>(cross))
    }
}

/// [`rrmxmx`] on four lanes (`len` in every lane).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn rrmxmx_avx2(
    h: std::arch::x86_64::__m256i,
    m_lo: std::arch::x86_64::__m256i,
    m_hi: std::arch::x86_64::__m256i,
    len: std::arch::x86_64::__m256i,
) -> std::arch::x86_64::__m256i {
    use std::arch::x86_64::*;
    // SAFETY: the caller runs with AVX2 enabled.
    unsafe {
        // h ^= rotl(h, 49) ^ rotl(h, 24): the two halves of a rotation share no bit, so they
        // are xored in separately instead of or-ed together first.
        let rotated = _mm256_xor_si256(
            _mm256_xor_si256(_mm256_slli_epi64::<49>(h), _mm256_srli_epi64::<15>(h)),
            _mm256_xor_si256(_mm256_slli_epi64::<24>(h), _mm256_srli_epi64::<40>(h)),
        );
        let mut h = _mm256_xor_si256(h, rotated);
        h = mul64_avx2(h, m_lo, m_hi);
        h = _mm256_xor_si256(h, _mm256_add_epi64(_mm256_srli_epi64::<35>(h), len));
        h = mul64_avx2(h, m_lo, m_hi);
        _mm256_xor_si256(h, _mm256_srli_epi64::<28>(h))
    }
}

/// Length of the UTF-8 sequence led by `lead` (which must be a lead byte).
#[inline(always)]
fn utf8_len(lead: u8) -> usize {
    match lead {
        0x00..=0x7f => 1,
        0x80..=0xdf => 2,
        0xe0..=0xef => 3,
        _ => 4,
    }
}

/// Character `k`-gram windows of `text` moved by `step` characters, hashed in text order into
/// `out` (appended): exactly the hashes of [`Shingler::Chars`]'s shingles.
///
/// Alternates between two modes. Over an ASCII run characters are bytes, so every window that
/// fits in the run is a byte window and `hasher.bytes` hashes them in one call. Windows that
/// contain a multi-byte character (or start too close to one) go to `hasher.mixed` at step 1,
/// and are walked character by character at larger steps; as soon as a window is k bytes long
/// it is all ASCII and the fast mode resumes.
pub(crate) fn hash_char_windows(
    text: &str,
    k: usize,
    step: usize,
    out: &mut Vec<u64>,
    hasher: WindowHasher,
) {
    assert!(k > 0 && step > 0, "shingle width and step must be >= 1");
    let bytes = text.as_bytes();
    let n = bytes.len();
    out.reserve(n / step + 1);
    // `p` is always a char boundary: the start of the next window not yet hashed.
    let mut p = 0;
    loop {
        let run_end = ascii_run_end(bytes, p);
        if run_end >= p + k {
            let count = if step == 1 {
                run_end - p - k + 1
            } else {
                (run_end - p - k) / step + 1
            };
            (hasher.bytes)(&bytes[p..], run_end - p, k, step, out);
            let next = p + count * step;
            if next <= run_end {
                p = next;
            } else {
                // The stride crosses the multi-byte char at `run_end`: the run's chars were
                // bytes, the rest of the stride must be walked as chars.
                p = run_end;
                for _ in 0..next - run_end {
                    if p >= n {
                        return;
                    }
                    p += utf8_len(bytes[p]);
                }
            }
        }
        // The window at `p` reaches a multi-byte char (or the end of the text). In mostly-ASCII
        // text most such stretches are a few windows around one accented letter: those are
        // walked here, and only a longer stretch goes to `hasher.mixed`.
        let limit = if step == 1 {
            MIXED_FIRST_WALKED
        } else {
            usize::MAX
        };
        p = match walk_windows(bytes, p, k, step, limit, out) {
            Walked::Ascii(next) => next,
            Walked::Limit(next) => match (hasher.mixed)(bytes, next, k, out) {
                Some(next) => next,
                None => return,
            },
            Walked::End => return,
        };
    }
}

/// Where [`walk_windows`] stopped.
enum Walked {
    /// At the start of a window of exactly `k` bytes (all ASCII).
    Ascii(usize),
    /// At the start of the first window past its limit.
    Limit(usize),
    /// With no window left in the text.
    End,
}

/// Hashes the `k`-char windows of UTF-8 `bytes` from the char boundary `p` on, moved by `step`
/// chars, while they hold a multi-byte char, walking each window's two ends char by char; at
/// most `limit` of them.
#[inline(always)]
fn walk_windows(
    bytes: &[u8],
    mut p: usize,
    k: usize,
    step: usize,
    limit: usize,
    out: &mut Vec<u64>,
) -> Walked {
    let n = bytes.len();
    let mut e = p;
    for _ in 0..k {
        if e >= n {
            return Walked::End;
        }
        e += utf8_len(bytes[e]);
    }
    let mut walked = 0;
    while e - p > k {
        if walked == limit {
            return Walked::Limit(p);
        }
        out.push(xxh3_64(&bytes[p..e]));
        walked += 1;
        for _ in 0..step {
            if e >= n {
                return Walked::End;
            }
            p += utf8_len(bytes[p]);
            e += utf8_len(bytes[e]);
        }
    }
    Walked::Ascii(p)
}

/// How many windows of a stretch that holds multi-byte chars [`hash_char_windows`] walks itself
/// before it hands the rest to [`WindowHasher::mixed`]: the call and a vector path's set-up cost
/// more than a few windows save on text with an accented letter here and there, about six
/// windows per stretch (docs/benchmarks.md, "Measurements behind the code").
const MIXED_FIRST_WALKED: usize = 8;

/// Portable [`MixedWindowHasher`]: walks the chars of each window's two ends.
pub(crate) fn hash_mixed_windows(
    bytes: &[u8],
    p: usize,
    k: usize,
    out: &mut Vec<u64>,
) -> Option<usize> {
    match walk_windows(bytes, p, k, 1, usize::MAX, out) {
        Walked::Ascii(p) => Some(p),
        Walked::End => None,
        Walked::Limit(_) => unreachable!("no limit"),
    }
}

/// For each byte, the positions of its set bits, lowest first (then zeros): a char-start mask's
/// offsets, 8 bytes at a time.
#[cfg(target_arch = "x86_64")]
static SET_BITS: [[u8; 8]; 256] = neardup_cpu::kept_lanes_first();

/// Windows a batch of [`hash_mixed_windows_avx2`] hashes, unless its stretch of multi-byte text
/// ends first (a few more when its last block of bytes lists more char starts): the starts are
/// one stack array. Batches of 32 and 128 measured slower on Cyrillic and CJK pages.
#[cfg(target_arch = "x86_64")]
const MIXED_BATCH: usize = 64;

/// The widest `k` the vector path of [`hash_mixed_windows_avx2`] takes: a window that holds a
/// multi-byte char is longer than `k` bytes, and xxh3's vector paths here go to 16 bytes.
#[cfg(target_arch = "x86_64")]
const MIXED_MAX_K: usize = 15;

/// AVX2 [`MixedWindowHasher`]: for `4..=15`-char windows, four windows per vector; other
/// widths, or a CPU without AVX2, go to [`hash_mixed_windows`].
///
/// The scalar walk spent most of its time on branches: each window's byte length decides
/// xxh3's path (4..=8 or 9..=16 bytes), and in Cyrillic or mixed text that length changes from
/// one window to the next at random. Here the char starts of a stretch are listed from a
/// byte-class mask, each lane computes both xxh3 paths and keeps the one its length takes.
#[cfg(target_arch = "x86_64")]
pub(crate) fn hash_mixed_windows_avx2(
    bytes: &[u8],
    p: usize,
    k: usize,
    out: &mut Vec<u64>,
) -> Option<usize> {
    if !(4..=MIXED_MAX_K).contains(&k) || !avx2_windows_supported() {
        return hash_mixed_windows(bytes, p, k, out);
    }
    // SAFETY: this CPU has AVX2 (checked above).
    unsafe { mixed_windows_avx2(bytes, p, k, out) }
}

/// [`hash_mixed_windows_avx2`]'s work, a batch at a time: lists the char starts from `p` (as
/// offsets from `p`; the end of the text counts as one), 32 bytes at a time, until it has
/// `MIXED_BATCH + k` of them or the text ends; hashes the windows they delimit up to the first
/// all-ASCII one; and goes on from the first window it did not hash.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn mixed_windows_avx2(bytes: &[u8], mut p: usize, k: usize, out: &mut Vec<u64>) -> Option<usize> {
    use std::arch::x86_64::*;
    debug_assert!((4..=MIXED_MAX_K).contains(&k));
    let n = bytes.len();
    let cap = MIXED_BATCH + k;
    // Room for a whole block past `cap`, the end of the text, and the cut search's last loads.
    let mut starts = [0u32; MIXED_BATCH + MIXED_MAX_K + 32 + 1 + 8];
    loop {
        let mut count = 0;
        let mut at_end = false;
        let mut i = p;
        while count < cap {
            if let Some(block) = bytes.get(i..i + 32) {
                // SAFETY: `block` is 32 readable bytes; each store writes 8 slots from `count`,
                // which is below `cap` before the block and grows by at most 8 per group, so
                // every store ends by `cap + 31`, inside `starts`.
                unsafe {
                    let v = _mm256_loadu_si256(block.as_ptr().cast());
                    // A char starts at every byte but a continuation byte (0x80..=0xbf, which
                    // as a signed byte is below -64).
                    let mask =
                        _mm256_movemask_epi8(_mm256_cmpgt_epi8(v, _mm256_set1_epi8(-65))) as u32;
                    for group in 0..4 {
                        let bits = (mask >> (8 * group)) & 0xff;
                        let offsets = _mm256_cvtepu8_epi32(_mm_loadl_epi64(
                            SET_BITS[bits as usize].as_ptr().cast(),
                        ));
                        let at = _mm256_set1_epi32((i - p + 8 * group) as i32);
                        _mm256_storeu_si256(
                            starts.as_mut_ptr().add(count).cast(),
                            _mm256_add_epi32(offsets, at),
                        );
                        count += bits.count_ones() as usize;
                    }
                }
                i += 32;
            } else {
                while i < n {
                    if (bytes[i] as i8) >= -0x40 {
                        starts[count] = (i - p) as u32;
                        count += 1;
                    }
                    i += 1;
                }
                starts[count] = (n - p) as u32;
                count += 1;
                at_end = true;
                break;
            }
        }
        if count <= k {
            return None;
        }
        let windows = count - k;
        let mut cut = windows;
        let mut j = 0;
        while j < windows {
            // SAFETY: the loads read `starts[j..j + 8]` and `starts[j + k..j + k + 8]`, which end
            // by `count + 7 <= cap + 38`, inside the array; slots past `count` hold stale
            // values, and what they give is ignored below.
            let ascii = unsafe {
                let first = _mm256_loadu_si256(starts.as_ptr().add(j).cast());
                let last = _mm256_loadu_si256(starts.as_ptr().add(j + k).cast());
                let len = _mm256_sub_epi32(last, first);
                _mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpeq_epi32(
                    len,
                    _mm256_set1_epi32(k as i32),
                ))) as u32
            };
            if ascii != 0 {
                cut = windows.min(j + ascii.trailing_zeros() as usize);
                break;
            }
            j += 8;
        }
        // SAFETY: AVX2 is enabled here; `starts[..cut + k]` are ascending char starts of
        // `bytes` from `p` on (the last one may be its end), as `listed_windows_avx2` needs.
        unsafe { listed_windows_avx2(bytes, p, &starts[..cut + k], k, out) };
        if cut < windows {
            return Some(p + starts[cut] as usize);
        }
        if at_end {
            return None;
        }
        p += starts[windows] as usize;
    }
}

/// Hashes the `k`-char windows whose starts are `starts[..starts.len() - k]` (offsets from `p`
/// in `bytes`; window `j` ends where `starts[j + k]` is), four per vector where the loads stay
/// inside `bytes`, one by one elsewhere and for the rare window longer than 16 bytes.
///
/// # Safety
/// The CPU has AVX2; `starts` are ascending, and `p + starts[j]` is at most `bytes.len()`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn listed_windows_avx2(
    bytes: &[u8],
    p: usize,
    starts: &[u32],
    k: usize,
    out: &mut Vec<u64>,
) {
    use std::arch::x86_64::*;
    let windows = starts.len() - k;
    let n = bytes.len();
    let at = |j: usize| p + starts[j] as usize;
    let window = |j: usize| &bytes[at(j)..at(j + k)];
    out.reserve(windows);
    let first_slot = out.len();
    let dst = &mut out.spare_capacity_mut()[..windows];
    let base = bytes[p..].as_ptr();
    let mut j = 0;
    while j + 4 <= windows {
        // Each lane loads the 8 bytes at its window's start and the 8 before its end: inside
        // `bytes` when the first window starts 8 bytes in and the last one 8 before the end.
        if at(j) >= 8 && at(j + 3) + 8 <= n {
            // SAFETY: `starts[j..j + k + 4]` are in the slice (j + 4 <= windows); the loads
            // read 8 bytes at `base + starts[j + i]` and at `base + starts[j + k + i] - 8`, within
            // `bytes` by the test above (window starts ascend, and every end is at most `n`);
            // the store writes `dst[j..j + 4]`.
            unsafe {
                let first = _mm_loadu_si128(starts.as_ptr().add(j).cast());
                let last = _mm_loadu_si128(starts.as_ptr().add(j + k).cast());
                let len32 = _mm_sub_epi32(last, first);
                let word = |offset: u32| base.add(offset as usize).cast::<i64>().read_unaligned();
                let lo = _mm256_setr_epi64x(
                    word(starts[j]),
                    word(starts[j + 1]),
                    word(starts[j + 2]),
                    word(starts[j + 3]),
                );
                let end_word = |offset: u32| {
                    base.add(offset as usize)
                        .sub(8)
                        .cast::<i64>()
                        .read_unaligned()
                };
                let hi = _mm256_setr_epi64x(
                    end_word(starts[j + k]),
                    end_word(starts[j + k + 1]),
                    end_word(starts[j + k + 2]),
                    end_word(starts[j + k + 3]),
                );
                let h = xxh3_4to16_avx2(lo, hi, _mm256_cvtepu32_epi64(len32));
                _mm256_storeu_si256(dst.as_mut_ptr().add(j).cast(), h);
                let long =
                    _mm_movemask_ps(_mm_castsi128_ps(_mm_cmpgt_epi32(len32, _mm_set1_epi32(16))));
                if long != 0 {
                    for lane in 0..4 {
                        if long & (1 << lane) != 0 {
                            dst[j + lane].write(xxh3_64(window(j + lane)));
                        }
                    }
                }
            }
        } else {
            for lane in 0..4 {
                dst[j + lane].write(xxh3_64(window(j + lane)));
            }
        }
        j += 4;
    }
    for (slot, j) in dst[j..].iter_mut().zip(j..) {
        slot.write(xxh3_64(window(j)));
    }
    // SAFETY: all `windows` slots after `first_slot` were written above.
    unsafe { out.set_len(first_slot + windows) };
}

/// xxh3_64 of four inputs of 4..=16 bytes at once: `len` holds their lengths, `lo` the 8 bytes
/// at each one's start and `hi` the 8 bytes that end it (for inputs shorter than 8 bytes, the
/// bytes before it complete the word; only its last 4 are used). Both short paths run and each
/// lane keeps its own.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn xxh3_4to16_avx2(
    lo: std::arch::x86_64::__m256i,
    hi: std::arch::x86_64::__m256i,
    len: std::arch::x86_64::__m256i,
) -> std::arch::x86_64::__m256i {
    use std::arch::x86_64::*;
    // SAFETY: the caller runs with AVX2 enabled.
    unsafe {
        // Both paths always: choosing by the lanes' lengths mispredicted on Cyrillic text with
        // spaces, where window lengths cross 8 bytes at random.
        _mm256_blendv_epi8(
            xxh3_4to8_avx2(lo, hi, len),
            xxh3_9to16_avx2(lo, hi, len),
            _mm256_cmpgt_epi64(len, _mm256_set1_epi64x(8)),
        )
    }
}

/// [`xxh3_4to8`] on four lanes, from the words [`xxh3_4to16_avx2`] takes.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn xxh3_4to8_avx2(
    lo: std::arch::x86_64::__m256i,
    hi: std::arch::x86_64::__m256i,
    len: std::arch::x86_64::__m256i,
) -> std::arch::x86_64::__m256i {
    use std::arch::x86_64::*;
    // SAFETY: the caller runs with AVX2 enabled.
    unsafe {
        // read32(end - 4) + (read32(start) << 32).
        let input = _mm256_or_si256(_mm256_srli_epi64::<32>(hi), _mm256_slli_epi64::<32>(lo));
        rrmxmx_avx2(
            _mm256_xor_si256(input, _mm256_set1_epi64x(FLIP_4TO8 as i64)),
            _mm256_set1_epi64x(PRIME_MX2 as i64),
            _mm256_set1_epi64x((PRIME_MX2 >> 32) as i64),
            len,
        )
    }
}

/// [`xxh3_9to16`] on four lanes, from the words [`xxh3_4to16_avx2`] takes.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn xxh3_9to16_avx2(
    lo: std::arch::x86_64::__m256i,
    hi: std::arch::x86_64::__m256i,
    len: std::arch::x86_64::__m256i,
) -> std::arch::x86_64::__m256i {
    use std::arch::x86_64::*;
    // SAFETY: the caller runs with AVX2 enabled.
    unsafe {
        let lo = _mm256_xor_si256(lo, _mm256_set1_epi64x(FLIP_9TO16_LO as i64));
        let hi = _mm256_xor_si256(hi, _mm256_set1_epi64x(FLIP_9TO16_HI as i64));
        let swapped = _mm256_shuffle_epi8(
            lo,
            _mm256_setr_epi8(
                7, 6, 5, 4, 3, 2, 1, 0, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 15,
                14, 13, 12, 11, 10, 9, 8,
            ),
        );
        let acc = _mm256_add_epi64(
            _mm256_add_epi64(len, swapped),
            _mm256_add_epi64(hi, mul128_fold64_avx2(lo, hi)),
        );
        // xxh3_avalanche.
        let h = _mm256_xor_si256(acc, _mm256_srli_epi64::<37>(acc));
        let h = mul64_avx2(
            h,
            _mm256_set1_epi64x(PRIME_MX1 as i64),
            _mm256_set1_epi64x((PRIME_MX1 >> 32) as i64),
        );
        _mm256_xor_si256(h, _mm256_srli_epi64::<32>(h))
    }
}

/// The low and high halves of the 128-bit products `a * b`, xored, lane-wise (xxh3's
/// `mul128_fold64`) from four 32-bit products.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn mul128_fold64_avx2(
    a: std::arch::x86_64::__m256i,
    b: std::arch::x86_64::__m256i,
) -> std::arch::x86_64::__m256i {
    use std::arch::x86_64::*;
    // SAFETY: the caller runs with AVX2 enabled.
    unsafe {
        let a_hi = _mm256_srli_epi64::<32>(a);
        let b_hi = _mm256_srli_epi64::<32>(b);
        let low_low = _mm256_mul_epu32(a, b);
        let low_high = _mm256_mul_epu32(a, b_hi);
        let high_low = _mm256_mul_epu32(a_hi, b);
        let high_high = _mm256_mul_epu32(a_hi, b_hi);
        let low32 = _mm256_set1_epi64x(0xffff_ffff);
        // Bits 32..96 of the product before carries; below 3 * 2^32, so no overflow.
        let middle = _mm256_add_epi64(
            _mm256_srli_epi64::<32>(low_low),
            _mm256_add_epi64(
                _mm256_and_si256(low_high, low32),
                _mm256_and_si256(high_low, low32),
            ),
        );
        let product_lo = _mm256_or_si256(
            _mm256_and_si256(low_low, low32),
            _mm256_slli_epi64::<32>(middle),
        );
        let product_hi = _mm256_add_epi64(
            _mm256_add_epi64(high_high, _mm256_srli_epi64::<32>(middle)),
            _mm256_add_epi64(
                _mm256_srli_epi64::<32>(low_high),
                _mm256_srli_epi64::<32>(high_low),
            ),
        );
        _mm256_xor_si256(product_lo, product_hi)
    }
}

/// The fast scheme's shingle hashes of `text` into `out` (cleared first), in text order, with
/// `hasher` hashing the windows of char and byte mode.
pub(crate) fn fast_hash_shingles(
    shingler: &Shingler,
    text: &str,
    out: &mut Vec<u64>,
    hasher: WindowHasher,
) {
    out.clear();
    match *shingler {
        Shingler::Chars { k, step } => hash_char_windows(text, k, step, out, hasher),
        Shingler::Bytes { k, step } => {
            assert!(k > 0 && step > 0, "shingle width and step must be >= 1");
            (hasher.bytes)(text.as_bytes(), text.len(), k, step, out);
        }
        Shingler::Words { .. } | Shingler::AsciiWords { .. } | Shingler::Tokens { .. } => {
            shingler.for_each(text, |s| out.push(xxh3_64_up_to_128(s)))
        }
        Shingler::Custom(_) => shingler.for_each(text, |s| out.push(xxh3_64(s))),
    }
}

/// Texts longer than this many bytes are hashed a piece at a time where their shingles allow it
/// ([`fast_hash_in_pieces`]): a piece's hashes (8 bytes per shingle, at most 128 KiB) are still
/// in the core's L2 cache when they are signed, and the per-thread buffers stop growing with the
/// longest text, which every thread faulted in again (docs/benchmarks.md).
pub(crate) const PIECE_BYTES: usize = 16 * 1024;

/// The fast scheme's shingle hashes of `text`, handed to `each` a piece of the text at a time:
/// `hashes` is cleared and filled with one piece's hashes before each call, and the pieces'
/// hashes, in call order, are [`fast_hash_shingles`]'s, every shingle in exactly one piece.
/// Returns `false`, having hashed nothing, when the shingles do not split at a place known
/// without shingling (words, custom shinglers): then the caller hashes the whole text.
///
/// A piece ends `k - 1` characters (bytes) past where the next one starts, so the windows that
/// start in a piece are whole in it; pieces start a multiple of `step` characters apart.
pub(crate) fn fast_hash_in_pieces(
    shingler: &Shingler,
    text: &str,
    hashes: &mut Vec<u64>,
    hasher: WindowHasher,
    piece_bytes: usize,
    mut each: impl FnMut(&[u64]),
) -> bool {
    let (k, step, chars) = match *shingler {
        Shingler::Chars { k, step } => (k, step, true),
        Shingler::Bytes { k, step } => (k, step, false),
        Shingler::Words { .. }
        | Shingler::AsciiWords { .. }
        | Shingler::Tokens { .. }
        | Shingler::Custom(_) => {
            return false;
        }
    };
    assert!(k > 0 && step > 0, "shingle width and step must be >= 1");
    let bytes = text.as_bytes();
    let n = bytes.len();
    // A place a window can start: a char boundary in char mode, any byte in byte mode.
    let starts_unit = |i: usize| !chars || i == n || (bytes[i] as i8) >= -0x40;
    let unit_len = |i: usize| if chars { utf8_len(bytes[i]) } else { 1 };
    let mut hash = |from: usize, to: usize, hashes: &mut Vec<u64>| {
        hashes.clear();
        if chars {
            hash_char_windows(&text[from..to], k, step, hashes, hasher);
        } else {
            // The bytes after the piece are readable (never hashed), so the vector loop takes
            // the piece's last windows too.
            (hasher.bytes)(&bytes[from..], to - from, k, step, hashes);
        }
        each(hashes);
    };
    let mut p = 0;
    loop {
        let mut next = if n - p > piece_bytes {
            p + piece_bytes
        } else {
            n
        };
        while !starts_unit(next) {
            next -= 1;
        }
        if step > 1 && next < n {
            let units = if chars {
                bytes[p..next]
                    .iter()
                    .filter(|&&b| (b as i8) >= -0x40)
                    .count()
            } else {
                next - p
            };
            for _ in 0..units % step {
                next -= 1;
                while !starts_unit(next) {
                    next -= 1;
                }
            }
        }
        if next <= p || next == n {
            hash(p, n, hashes);
            return true;
        }
        let mut end = next;
        for _ in 1..k {
            if end == n {
                break;
            }
            end += unit_len(end);
        }
        hash(p, end, hashes);
        if end == n {
            // Fewer than k units from `next` on: no window starts there or later.
            return true;
        }
        p = next;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn library(b: &[u8]) -> u64 {
        xxhash_rust::xxh3::xxh3_64(b)
    }

    #[test]
    fn short_xxh3_equals_xxhash_rust_for_every_length() {
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut buf = [0u8; 140];
        for round in 0..2000 {
            for byte in buf.iter_mut() {
                state = state
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1_442_695_040_888_963_407);
                *byte = (state >> 56) as u8;
            }
            // Edge bytes too: all zeros and all ones.
            if round == 0 {
                buf.fill(0);
            } else if round == 1 {
                buf.fill(0xff);
            }
            for len in 0..=buf.len() {
                let b = &buf[..len];
                assert_eq!(xxh3_64(b), library(b), "len {len} {b:02x?}");
                assert_eq!(xxh3_64_up_to_128(b), library(b), "len {len} {b:02x?}");
            }
        }
    }

    /// The window hashers this CPU can run: the portable one first.
    fn hashers() -> Vec<WindowHasher> {
        let mut hashers = vec![PORTABLE_WINDOWS];
        #[cfg(target_arch = "x86_64")]
        {
            if avx2_windows_supported() {
                hashers.push(AVX2_WINDOWS);
            }
            if avx512_windows_supported() {
                hashers.push(AVX512_WINDOWS);
            }
        }
        hashers
    }

    fn reference(shingler: &Shingler, text: &str) -> Vec<u64> {
        let mut v = Vec::new();
        shingler.for_each(text, |s| v.push(library(s)));
        v
    }

    #[test]
    fn fused_hashing_equals_shingling_then_hashing() {
        let texts = [
            "",
            "a",
            "abcd",
            "abcde",
            "hello world, this is a test",
            "Ünïcödé 文字 テキスト 🙂 mixed text",
            "🙂🙂🙂🙂🙂🙂",
            "ascii run then é then a long ascii run again, and 文 at the end文",
            "é",
            "xé",
            "abcdefghijklmnopqrstuvwxyz§abcdefghijklmnopqrstuvwxyz·0123456789",
            "a·b·c·d·e·f·g·h·i·j·k·l·m·n",
        ];
        for text in texts {
            for k in (1..=18).chain([31, 64, 70]) {
                for step in 1..=5 {
                    for shingler in [
                        Shingler::Chars { k, step },
                        Shingler::Bytes { k, step },
                        Shingler::Words { n: k, step },
                        Shingler::AsciiWords { n: k, step },
                    ] {
                        for hasher in hashers() {
                            let mut got = vec![7];
                            fast_hash_shingles(&shingler, text, &mut got, hasher);
                            assert_eq!(got, reference(&shingler, text), "{text:?} {shingler:?}");
                        }
                    }
                }
            }
        }
    }

    /// Long stretches of multi-byte text (past one batch of listed char starts), with the byte
    /// length of a window changing from one window to the next across xxh3's 8- and 16-byte
    /// limits, all-ASCII windows between them, 4-byte chars that make windows longer than 16
    /// bytes, and every place the text may end: every window hasher gives the shingles' hashes.
    #[test]
    fn multi_byte_windows_equal_shingling_then_hashing() {
        let alphabet = [
            "а", "ж", " ", "x", "文", "🙂", ".", "ё", "Ω", "\n", "テ", "1",
        ];
        let mut state = 17u64;
        let mut text = String::new();
        for i in 0..700 {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            // Mostly Cyrillic with spaces; now and then a run of one kind of char.
            let pick = (state >> 33) as usize;
            let c = if i % 97 < 8 {
                alphabet[3]
            } else if i % 131 < 6 {
                alphabet[4]
            } else if i % 211 < 5 {
                alphabet[5]
            } else if pick.is_multiple_of(4) {
                alphabet[2]
            } else {
                alphabet[pick % alphabet.len()]
            };
            text.push_str(c);
        }
        let cuts: Vec<usize> = (0..=text.len())
            .filter(|&i| text.is_char_boundary(i))
            .step_by(7)
            .chain([text.len()])
            .collect();
        for k in 1..=17 {
            let shingler = Shingler::Chars { k, step: 1 };
            for &end in &cuts {
                let text = &text[..end];
                let want = reference(&shingler, text);
                for hasher in hashers() {
                    let mut got = Vec::new();
                    fast_hash_shingles(&shingler, text, &mut got, hasher);
                    assert_eq!(got, want, "k {k}, {end} bytes, {hasher:?}");
                }
            }
        }
    }

    /// `hasher` gives [`hash_windows`]'s hashes for every prefix of `text`, every width 1..=10
    /// and step 1..=2, whether the prefix is all it may read or the rest of `text` follows (an
    /// ASCII run inside a text: the same windows, none reaching past the prefix).
    #[cfg(target_arch = "x86_64")]
    fn check_against_portable(hasher: ByteWindowHasher, text: &[u8]) {
        for len in 0..text.len() {
            for k in 1..=10 {
                for step in 1..=2 {
                    let (mut want, mut got) = (vec![1], vec![1]);
                    hash_windows(&text[..len], len, k, step, &mut want);
                    hasher(&text[..len], len, k, step, &mut got);
                    assert_eq!(got, want, "len {len} k {k} step {step}");
                    let (mut ahead, mut beyond) = (vec![1], vec![1]);
                    hash_windows(text, len, k, step, &mut ahead);
                    hasher(text, len, k, step, &mut beyond);
                    assert_eq!(ahead, want, "len {len} k {k} step {step}");
                    assert_eq!(beyond, want, "len {len} k {k} step {step}, more to read");
                }
            }
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn avx512_window_hasher_equals_the_portable_one() {
        if !avx512_windows_supported() {
            return;
        }
        let text: Vec<u8> = (0..300u32).map(|i| (i * 37 % 95 + 32) as u8).collect();
        check_against_portable(hash_windows_avx512, &text);
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn avx2_window_hasher_equals_the_portable_one() {
        if !avx2_windows_supported() {
            return;
        }
        // Every byte value, so the shuffles and the 32-bit halves of the products see high bits.
        let text: Vec<u8> = (0..300u32).map(|i| (i * 131 + 7) as u8).collect();
        check_against_portable(hash_windows_avx2, &text);
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(256))]

        /// Hashing a text a piece at a time gives its hashes, in order, each once, for pieces
        /// down to a few bytes (many boundaries per text, some inside multi-byte characters) and
        /// any width and stride; word shinglers are not split.
        #[test]
        fn hashing_in_pieces_gives_the_whole_texts_hashes(
            text in "([a-z ]{0,30}|[é文🙂·]{0,4}){0,16}",
            piece_bytes in 1usize..48,
            k in 1usize..9,
            step in 1usize..4,
        ) {
            for shingler in [Shingler::Chars { k, step }, Shingler::Bytes { k, step }] {
                let mut hashers: Vec<WindowHasher> = vec![PORTABLE_WINDOWS];
                #[cfg(target_arch = "x86_64")]
                if avx2_windows_supported() {
                    hashers.push(AVX2_WINDOWS);
                }
                for ascii in hashers {
                    let mut want = Vec::new();
                    fast_hash_shingles(&shingler, &text, &mut want, ascii);
                    let (mut got, mut scratch) = (Vec::new(), vec![7]);
                    let split = fast_hash_in_pieces(&shingler, &text, &mut scratch, ascii, piece_bytes, |piece| {
                        got.extend_from_slice(piece)
                    });
                    proptest::prop_assert!(split);
                    proptest::prop_assert_eq!(&got, &want, "{:?} pieces of {}", shingler, piece_bytes);
                }
            }
            let words = Shingler::Words { n: 2, step: 1 };
            let mut calls = 0;
            proptest::prop_assert!(!fast_hash_in_pieces(&words, &text, &mut Vec::new(), PORTABLE_WINDOWS, piece_bytes, |_| calls += 1));
            proptest::prop_assert_eq!(calls, 0);
        }
    }
}
