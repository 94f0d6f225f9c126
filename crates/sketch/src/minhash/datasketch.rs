//! The `datasketch` scheme (module docs of [`super`]): its shingle hash (the first 4 bytes of
//! SHA-1, sixteen at a time on AVX-512 through [`crate::sha1x16`]), its min kernels over the
//! Mersenne prime 2^61 - 1, and the `(a, b)` permutations drawn as numpy's legacy
//! `RandomState` (MT19937) draws them.

use sha1::digest::generic_array::GenericArray;
use sha1::{Digest, Sha1};

use super::{EMPTY_SLOT, Kernel};
use crate::sha1_block::{H0, MAX_LEN, padded_block};
use crate::shingle::Shingler;

pub(super) const MERSENNE_61: u64 = (1 << 61) - 1;

/// The datasketch scheme's shingle hashes, sixteen SHA-1s at a time ([`sha1x16`]): shingles
/// are queued in text order with a placeholder in `hashes`, which each full batch fills in.
#[cfg(target_arch = "x86_64")]
pub(super) fn hash_shingles_x16(shingler: &Shingler, text: &str, hashes: &mut Vec<u64>) {
    use crate::sha1x16::{Batch, LANES};

    /// Fills in the placeholders `slots[..batch.len()]`; a batch of a few messages (the end of
    /// a text) is cheaper one by one.
    fn finish(batch: &mut Batch, slots: &[usize; LANES], hashes: &mut [u64]) {
        let n = batch.len();
        match (n >= 4).then(|| batch.first_words()).flatten() {
            Some(words) => {
                for (&slot, word) in slots[..n].iter().zip(words) {
                    // The digest is the state words big-endian, read as LE like the scalar path.
                    hashes[slot] = u64::from(word.swap_bytes());
                }
            }
            None => {
                for (i, &slot) in slots[..n].iter().enumerate() {
                    hashes[slot] = shingle_hash(batch.message(i));
                }
            }
        }
        batch.clear();
    }

    hashes.clear();
    let mut batch = Batch::new();
    let mut slots = [0usize; LANES];
    shingler.for_each(text, |s| {
        if s.len() > MAX_LEN {
            hashes.push(shingle_hash(s));
            return;
        }
        slots[batch.len()] = hashes.len();
        hashes.push(0);
        batch.push(s);
        if batch.len() == LANES {
            finish(&mut batch, &slots, hashes);
        }
    });
    finish(&mut batch, &slots, hashes);
}

/// The first 4 bytes of `sha1(shingle)` as a little-endian u32. A shingle of at most
/// [`MAX_LEN`] bytes is one padded block: building it here and calling the compression function
/// directly skips the `Digest` buffering, which costs more than the compression itself for short
/// inputs.
#[inline]
pub(super) fn shingle_hash(shingle: &[u8]) -> u64 {
    let digest_word = if shingle.len() <= MAX_LEN {
        let block = padded_block(shingle);
        let mut state = H0;
        sha1::compress(
            &mut state,
            std::slice::from_ref(GenericArray::from_slice(&block)),
        );
        state[0]
    } else {
        let digest = Sha1::digest(shingle);
        u32::from_be_bytes([digest[0], digest[1], digest[2], digest[3]])
    };
    // The digest is the state words big-endian; datasketch reads its first 4 bytes as LE.
    u64::from(digest_word.swap_bytes())
}

/// `x mod (2^61 - 1)` for any u64, with shifts: 2^61 ≡ 1, so fold the top 3 bits onto the rest.
#[inline(always)]
fn mod_mersenne61(x: u64) -> u64 {
    let y = (x & MERSENNE_61) + (x >> 61);
    if y >= MERSENNE_61 { y - MERSENNE_61 } else { y }
}

/// datasketch's permuted value, written as its definition: the reference kernel's formula.
#[inline(always)]
fn value(h: u64, a: u64, b: u64) -> u64 {
    mod_mersenne61(a.wrapping_mul(h).wrapping_add(b)) & 0xffff_ffff
}

/// `(x mod (2^61 - 1)) as u32` without a compare: after the fold, `y <= M + 7`, and `y >= M`
/// exactly when `y + 1` reaches 2^61; subtracting M then adds 1 to the low 32 bits (M's low 32
/// bits are all ones). The vector kernels compute the same lane-wise.
#[inline(always)]
fn mod_mersenne61_low32(x: u64) -> u32 {
    let y = (x & MERSENNE_61) + (x >> 61);
    y.wrapping_add((y + 1) >> 61) as u32
}

fn reference<const W: usize>(hashes: &[u64], a: &[u64; W], b: &[u64; W], out: &mut [u32; W]) {
    for i in 0..W {
        let mut m = u64::from(EMPTY_SLOT);
        for &h in hashes {
            m = m.min(value(h, a[i], b[i]));
        }
        out[i] = m as u32;
    }
}

/// u64 lanes need twice the registers of the fast scheme, so work in sub-blocks of 16.
const DS_SUB: usize = 16;

#[inline(always)]
fn blocked<const W: usize>(hashes: &[u64], a: &[u64; W], b: &[u64; W], out: &mut [u32; W]) {
    for sub in 0..W / DS_SUB {
        let a: &[u64; DS_SUB] = a[sub * DS_SUB..][..DS_SUB].try_into().expect("sub-block");
        let b: &[u64; DS_SUB] = b[sub * DS_SUB..][..DS_SUB].try_into().expect("sub-block");
        let mut acc = [EMPTY_SLOT; DS_SUB];
        for &h in hashes {
            for j in 0..DS_SUB {
                acc[j] = acc[j].min(mod_mersenne61_low32(
                    a[j].wrapping_mul(h).wrapping_add(b[j]),
                ));
            }
        }
        out[sub * DS_SUB..][..DS_SUB].copy_from_slice(&acc);
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn avx2<const W: usize>(hashes: &[u64], a: &[u64; W], b: &[u64; W], out: &mut [u32; W]) {
    blocked(hashes, a, b, out)
}

/// Explicit intrinsics: 64-bit lanes (`vpmullq` is AVX-512DQ), 32 permutations per pass over
/// the hashes (8 parameter registers, 2 accumulators of 16 u32 lanes).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512dq")]
fn avx512<const W: usize>(hashes: &[u64], a: &[u64; W], b: &[u64; W], out: &mut [u32; W]) {
    let mut start = 0;
    while start < W {
        let end = (start + 32).min(W);
        let (a, b, out) = (&a[start..end], &b[start..end], &mut out[start..end]);
        if end - start == 32 {
            avx512_pass::<2>(hashes, a, b, out);
        } else {
            avx512_pass::<1>(hashes, a, b, out);
        }
        start = end;
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512dq")]
fn avx512_pass<const R: usize>(hashes: &[u64], a: &[u64], b: &[u64], out: &mut [u32]) {
    use std::arch::x86_64::*;
    assert!(a.len() == R * 16 && b.len() == R * 16 && out.len() == R * 16);
    // SAFETY: the loads and stores stay within the R * 16 elements asserted above.
    unsafe {
        let av: [[__m512i; 2]; R] = std::array::from_fn(|i| {
            std::array::from_fn(|j| _mm512_loadu_si512(a.as_ptr().add(i * 16 + j * 8).cast()))
        });
        let bv: [[__m512i; 2]; R] = std::array::from_fn(|i| {
            std::array::from_fn(|j| _mm512_loadu_si512(b.as_ptr().add(i * 16 + j * 8).cast()))
        });
        let m61 = _mm512_set1_epi64(MERSENNE_61 as i64);
        let one = _mm512_set1_epi64(1);
        // The low dwords of two u64 vectors, in lane order: one vector of 16 u32.
        let low_halves =
            _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
        let mut acc = [_mm512_set1_epi32(-1); R];
        for h in hashes {
            let hv = _mm512_set1_epi64((h as *const u64).cast::<i64>().read());
            for i in 0..R {
                let [lo, hi] = [0, 1].map(|j| {
                    let x = _mm512_add_epi64(_mm512_mullo_epi64(av[i][j], hv), bv[i][j]);
                    let y = _mm512_add_epi64(_mm512_and_si512(x, m61), _mm512_srli_epi64::<61>(x));
                    _mm512_add_epi64(y, _mm512_srli_epi64::<61>(_mm512_add_epi64(y, one)))
                });
                let v = _mm512_permutex2var_epi32(lo, low_halves, hi);
                acc[i] = _mm512_min_epu32(acc[i], v);
            }
        }
        for (i, v) in acc.iter().enumerate() {
            _mm512_storeu_si512(out.as_mut_ptr().add(i * 16).cast(), *v);
        }
    }
}

/// Signs one block of `W` positions with `kernel`, whose parameters are `a` and `b`.
pub(super) fn sign_block<const W: usize>(
    kernel: Kernel,
    hashes: &[u64],
    a: &[u64; W],
    b: &[u64; W],
    out: &mut [u32; W],
) {
    match kernel {
        Kernel::Reference => reference(hashes, a, b, out),
        Kernel::Portable => blocked(hashes, a, b, out),
        // SAFETY: MinHasher::with_kernel only accepts kernels the CPU supports.
        #[cfg(target_arch = "x86_64")]
        Kernel::Avx2 => unsafe { avx2(hashes, a, b, out) },
        #[cfg(target_arch = "x86_64")]
        Kernel::Avx512 => unsafe { avx512(hashes, a, b, out) },
        #[cfg(not(target_arch = "x86_64"))]
        Kernel::Avx2 | Kernel::Avx512 => unreachable!("x86 kernel on another architecture"),
    }
}

/// MT19937 as numpy's legacy `RandomState` seeds and draws it.
struct Mt19937 {
    state: [u32; 624],
    pos: usize,
}

impl Mt19937 {
    /// numpy's `mt19937_seed` (Matsumoto & Nishimura's `init_genrand`).
    fn new(seed: u32) -> Self {
        let mut state = [0u32; 624];
        state[0] = seed;
        for i in 1..624 {
            let prev = state[i - 1];
            state[i] = 1_812_433_253u32
                .wrapping_mul(prev ^ (prev >> 30))
                .wrapping_add(i as u32);
        }
        Mt19937 { state, pos: 624 }
    }

    fn regenerate(&mut self) {
        const UPPER: u32 = 0x8000_0000;
        const LOWER: u32 = 0x7fff_ffff;
        const MATRIX_A: u32 = 0x9908_b0df;
        for i in 0..624 {
            let y = (self.state[i] & UPPER) | (self.state[(i + 1) % 624] & LOWER);
            let mag = if y & 1 == 1 { MATRIX_A } else { 0 };
            self.state[i] = self.state[(i + 397) % 624] ^ (y >> 1) ^ mag;
        }
        self.pos = 0;
    }

    fn next_u32(&mut self) -> u32 {
        if self.pos == 624 {
            self.regenerate();
        }
        let mut y = self.state[self.pos];
        self.pos += 1;
        y ^= y >> 11;
        y ^= (y << 7) & 0x9d2c_5680;
        y ^= (y << 15) & 0xefc6_0000;
        y ^ (y >> 18)
    }

    /// numpy's `mt19937_next64`: the first 32-bit draw is the high half.
    fn next_u64(&mut self) -> u64 {
        let hi = u64::from(self.next_u32());
        (hi << 32) | u64::from(self.next_u32())
    }

    /// numpy legacy `randint(low, high, dtype=uint64)` for a range wider than 32 bits:
    /// masked rejection sampling on 64-bit draws (`bounded_masked_uint64`).
    fn randint_u64(&mut self, low: u64, high: u64) -> u64 {
        let rng = high - 1 - low;
        debug_assert!(rng > u64::from(u32::MAX) && rng < u64::MAX);
        let mask = u64::MAX >> rng.leading_zeros();
        loop {
            let v = self.next_u64() & mask;
            if v <= rng {
                return low + v;
            }
        }
    }
}

/// numpy legacy `RandomState(seed)` -> datasketch 1.9 MinHash permutations `(a, b)`, as
/// datasketch draws them: for each position, `a = randint(1, 2^61-1)` then
/// `b = randint(0, 2^61-1)`.
///
/// # Panics
/// When `seed > 2^32 - 1` (numpy refuses such seeds too).
pub fn datasketch_permutations(num_perm: usize, seed: u64) -> (Vec<u64>, Vec<u64>) {
    let seed = u32::try_from(seed).expect("numpy RandomState seeds must be <= 2^32-1");
    let mut mt = Mt19937::new(seed);
    let mut a = Vec::with_capacity(num_perm);
    let mut b = Vec::with_capacity(num_perm);
    for _ in 0..num_perm {
        a.push(mt.randint_u64(1, MERSENNE_61));
        b.push(mt.randint_u64(0, MERSENNE_61));
    }
    (a, b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::minhash::splitmix64;

    #[test]
    fn mt19937_matches_the_reference_sequence() {
        // First outputs of init_genrand(5489), from the MT19937 reference implementation.
        let mut mt = Mt19937::new(5489);
        let got: Vec<u32> = (0..3).map(|_| mt.next_u32()).collect();
        assert_eq!(got, [3_499_211_612, 581_869_302, 3_890_346_734]);
    }

    #[test]
    fn one_block_sha1_equals_the_digest_for_every_length() {
        let bytes: Vec<u8> = (0..80u8)
            .map(|i| i.wrapping_mul(151).wrapping_add(7))
            .collect();
        for len in 0..=bytes.len() {
            let digest = Sha1::digest(&bytes[..len]);
            let want = u32::from_le_bytes([digest[0], digest[1], digest[2], digest[3]]);
            assert_eq!(shingle_hash(&bytes[..len]), u64::from(want), "len {len}");
        }
    }

    #[test]
    fn low32_reduction_equals_remainder_at_the_wraparound() {
        let m = MERSENNE_61;
        let mut cases = vec![0, 1, m - 1, m, m + 1, 2 * m, u64::MAX, u64::MAX - 7];
        // Every x whose fold lands on M..=M+7, the only inputs the correction term changes.
        for top in 0..8u64 {
            for d in 0..=8u64 {
                cases.push((top << 61) | ((m - top + d.min(top)) & m));
                cases.push((top << 61) | (m - d));
            }
        }
        let mut state = 3;
        cases.extend((0..100_000).map(|_| splitmix64(&mut state)));
        for x in cases {
            assert_eq!(
                u64::from(mod_mersenne61_low32(x)),
                (x % m) & 0xffff_ffff,
                "{x:#x}"
            );
        }
    }

    #[test]
    fn datasketch_kernels_agree_at_the_wraparound() {
        // With a = 1, x = h + b: choose b so that x hits the folds that land on M..=M+7.
        let m = MERSENNE_61;
        let h = 12_345u64;
        let targets: Vec<u64> = (0..8u64)
            .flat_map(|top| (0..4u64).map(move |d| (top << 61) | (m - d)))
            .collect();
        let a = [1u64; 32];
        let b: [u64; 32] = std::array::from_fn(|i| targets[i].wrapping_sub(h));
        let mut want = [0u32; 32];
        reference(&[h], &a, &b, &mut want);
        for (i, &x) in targets.iter().enumerate() {
            assert_eq!(u64::from(want[i]), (x % m) & 0xffff_ffff);
        }
        let mut got = [0u32; 32];
        blocked(&[h], &a, &b, &mut got);
        assert_eq!(got, want);
        #[cfg(target_arch = "x86_64")]
        if Kernel::Avx512.is_supported() {
            let mut got = [0u32; 32];
            // SAFETY: the CPU supports the kernel's features (checked just above).
            unsafe { avx512(&[h], &a, &b, &mut got) };
            assert_eq!(got, want);
        }
    }

    #[test]
    fn mersenne_reduction_equals_remainder() {
        let cases = [
            0,
            1,
            MERSENNE_61 - 1,
            MERSENNE_61,
            MERSENNE_61 + 1,
            2 * MERSENNE_61,
            u64::MAX,
            u64::MAX - 7,
            (1 << 63) + 12345,
        ];
        for x in cases {
            assert_eq!(mod_mersenne61(x), x % MERSENNE_61, "{x}");
        }
        let mut state = 1;
        for _ in 0..100_000 {
            let x = splitmix64(&mut state);
            assert_eq!(mod_mersenne61(x), x % MERSENNE_61);
        }
    }
}
