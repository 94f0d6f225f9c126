//! MinHash signatures, in three schemes.
//!
//! # `fast` (v1) — neardup's own scheme; its values are an on-disk format
//!
//! Each shingle is hashed once: `h = xxh3_64(shingle_bytes)` (seed 0). Permutation parameters
//! come from `seed` through splitmix64 (`state += 0x9E3779B97F4A7C15; z = state;
//! z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9; z = (z ^ (z >> 27)) * 0x94D049BB133111EB;
//! z ^ (z >> 31)`), drawing, for each position `i` in order, first `a_i = (next as u32) | 1` and
//! then `s_i = next as u32`. Position `i` of the signature is
//!
//! ```text
//! sig[i] = min over shingles h of  ((h as u32 ^ s_i).wrapping_mul(a_i)) ^ (h >> 32) as u32
//! ```
//!
//! and `EMPTY_SLOT` (`u32::MAX`) for a text without shingles. For a fixed `h`, each position is a
//! bijection of the xxh3 output's low half (xor, then multiplication by an odd number mod 2^32),
//! and the high half is mixed in afterwards, so each position is an unbiased Jaccard estimator;
//! the tests check that positions are not measurably correlated (estimate variance ≈ binomial).
//!
//! # `oph` (v1) — one-permutation hashing with optimal densification; an on-disk format too
//!
//! The default scheme. Each shingle is hashed once, `h = xxh3_64(shingle_bytes)` as in `fast`,
//! and then lands in **one** position instead of updating all of them (Li, Owen & Zhang 2012,
//! "One permutation hashing"). Keys come from `seed` through the same splitmix64 stream as
//! `fast`: `k0 = next`, `k1 = next | 1`, `kd = next`. For each shingle
//!
//! ```text
//! z = ((h ^ k0) * k1 mod 2^64);  z ^= z >> 32
//! position = ((z >> 32) * num_perm) >> 32        value = z as u32
//! sig[position] = min(sig[position], value)
//! ```
//!
//! Positions that no shingle reached are filled by optimal densification (Shrivastava 2017,
//! "Optimal densification for fast and accurate minwise hashing"): empty position `i` takes the
//! value that position `j` got from shingles, for the first `j` in the sequence
//! `j_a = ((splitmix64(kd ^ (i << 32 | a)) >> 32) * num_perm) >> 32`, `a = 1, 2, …` that some
//! shingle reached (`splitmix64(x)` is one step of the generator from state `x`). After
//! `64 × num_perm` fruitless draws (probability below e^-64) the first reached position at or
//! after `i`, cyclically, is taken instead, so signing always ends. A text without shingles gets
//! `EMPTY_SLOT` everywhere.
//!
//! Because `z` is a bijection of `h`, the shingle with the least value in a position is the same
//! for two texts exactly when the least element of their union in that position is shared, and
//! the densification sequence depends only on the position, never on the text: every position,
//! densified or not, agrees for two texts with probability equal to their Jaccard similarity
//! (Shrivastava 2017, theorem 2). Positions are sampled without replacement, so for texts with
//! many more shingles than `num_perm` the estimate's variance is at most the binomial
//! `J(1-J)/num_perm` of independent permutations; for short texts densification copies values
//! and the variance grows (the tests bound it).
//!
//! # How signing runs (either scheme; none of this changes a value)
//!
//! 1. Shingle hashes into a reusable `Vec<u64>` (text order, repeats kept). For `fast`,
//!    shingling and xxh3 are fused (module `shingle_hash`): ASCII runs of char mode and byte
//!    mode hash their windows in a tight loop (eight per AVX-512 vector for 4..=8-byte
//!    windows). For `datasketch`, SHA-1 runs sixteen shingles at a time on AVX-512.
//! 2. A branch-free direct-mapped filter drops most repeats (`min` is idempotent, and real text
//!    repeats about half of its char 5-grams); a repeat it misses is signed twice, harmlessly.
//! 3. A min kernel over blocks of permutations held in SIMD registers (AVX-512, AVX2 or
//!    portable, chosen once per [`MinHasher`]). With AVX-512 and the fast scheme, the filter
//!    runs interleaved with the kernel's first block, on otherwise idle scalar units.
//!
//! [`Kernel::Reference`] skips all of that (generic shingling, library xxh3, no filter, scalar
//! loops with permutations outer): it is the oracle every other path is tested against.
//!
//! # `datasketch` — bit-exact datasketch 1.9 `MinHash(num_perm, seed)`
//!
//! `h = u32::from_le_bytes(sha1(shingle)[..4])`, `(a, b)` drawn as datasketch draws them from
//! numpy's legacy `RandomState(seed)` (see [`datasketch_permutations`]), and
//! `sig[i] = min(((a_i * h + b_i) mod 2^64) mod (2^61 - 1)) & 0xffff_ffff` with an initial value
//! of `2^32 - 1` (numpy's uint64 product wraps, so this does too).

use std::mem::MaybeUninit;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use sha1::digest::generic_array::GenericArray;
use sha1::{Digest, Sha1};

use crate::SketchError;
use crate::shingle::Shingler;
use crate::shingle_hash::{self, WindowHasher};

/// The fastest window hasher for a kernel, chosen once per [`MinHasher`].
fn window_hasher(kernel: Kernel) -> WindowHasher {
    #[cfg(target_arch = "x86_64")]
    if kernel == Kernel::Avx512 && shingle_hash::avx512_windows_supported() {
        return shingle_hash::hash_windows_avx512;
    }
    let _ = kernel;
    shingle_hash::hash_windows
}

/// Which MinHash hashing scheme to use.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum HashScheme {
    /// neardup's SIMD scheme (xxh3 + multiply-xor permutations); see the module docs.
    Fast,
    /// Bit-exact datasketch 1.9 (sha1 + `(a*h + b) mod (2^61-1)`), for lshcurator compatibility.
    Datasketch,
    /// One-permutation hashing with optimal densification (the default): one hash per shingle
    /// picks a position and a value, so signing costs O(shingles + num_perm) instead of
    /// O(shingles × num_perm); see the module docs.
    Oph,
}

/// Value of every signature position for an empty shingle set (datasketch's initial max,
/// 2^32-1).
pub const EMPTY_SLOT: u32 = u32::MAX;

const MERSENNE_61: u64 = (1 << 61) - 1;

/// A signing kernel implementation. All kernels give identical signatures; they differ only in
/// speed. [`MinHasher::new`] picks the best one the CPU supports.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kernel {
    /// Plain scalar loops, permutations outer and shingles inner: the test oracle and benchmark
    /// baseline.
    Reference,
    /// Blocked loops with the baseline instruction set of the build target.
    Portable,
    /// Blocked loops compiled for AVX2.
    Avx2,
    /// Blocked loops with AVX-512 F, DQ and BW (every AVX-512 CPU since Skylake-SP and Zen 4).
    Avx512,
}

impl Kernel {
    /// Whether this CPU can run the kernel.
    pub fn is_supported(self) -> bool {
        match self {
            Kernel::Reference | Kernel::Portable => true,
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx2 => std::arch::is_x86_feature_detected!("avx2"),
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx512 => {
                std::arch::is_x86_feature_detected!("avx512f")
                    && std::arch::is_x86_feature_detected!("avx512dq")
                    && std::arch::is_x86_feature_detected!("avx512bw")
            }
            #[cfg(not(target_arch = "x86_64"))]
            Kernel::Avx2 | Kernel::Avx512 => false,
        }
    }

    /// The fastest kernel this CPU supports.
    pub fn best() -> Kernel {
        [Kernel::Avx512, Kernel::Avx2]
            .into_iter()
            .find(|k| k.is_supported())
            .unwrap_or(Kernel::Portable)
    }

    /// Every kernel this CPU supports.
    pub fn supported() -> Vec<Kernel> {
        [
            Kernel::Reference,
            Kernel::Portable,
            Kernel::Avx2,
            Kernel::Avx512,
        ]
        .into_iter()
        .filter(|k| k.is_supported())
        .collect()
    }
}

#[derive(Debug)]
enum Params {
    /// Multipliers and xor masks, zero-padded to a multiple of [`BLOCK`] so kernels never handle
    /// a ragged block (padded positions are computed and dropped).
    Fast { a: Vec<u32>, s: Vec<u32> },
    /// datasketch's (a, b), padded likewise.
    Datasketch { a: Vec<u64>, b: Vec<u64> },
    /// The one-permutation scheme's keys.
    Oph(OphKeys),
}

/// Keys of the `oph` scheme (module docs).
#[derive(Clone, Debug)]
struct OphKeys {
    xor: u64,
    mul: u64,
    densify: u64,
    /// The first [`OPH_DRAWS`] densification draws of every position, `draws[i * OPH_DRAWS + a]`
    /// = `j_(a+1)` of position `i`; empty when `num_perm` is too wide to tabulate
    /// ([`OPH_TABULATED_MAX`]). The sequence never depends on the text, so signing looks draws
    /// up instead of computing a splitmix64 step per draw.
    draws: Box<[u16]>,
}

/// Densification draws tested at once (one bit mask): a short text's empty position finds a
/// reached one among the first eight unless fewer than about a quarter of the positions were
/// reached (each draw hits with probability reached / num_perm).
const OPH_DRAW_GROUP: usize = 8;

/// Densification draws tabulated per position: two groups cover texts down to a few shingles
/// before the computed sequence takes over.
const OPH_DRAWS: usize = 2 * OPH_DRAW_GROUP;

/// Widest signature whose draws are tabulated (positions fit `u16`; the table takes
/// `2 × OPH_DRAWS` bytes per position, 4 KB at 128).
const OPH_TABULATED_MAX: usize = 1 << 16;

impl OphKeys {
    fn new(num_perm: usize, seed: u64) -> OphKeys {
        let mut state = seed;
        let xor = splitmix64(&mut state);
        let mul = splitmix64(&mut state) | 1;
        let densify = splitmix64(&mut state);
        let draws = if num_perm <= OPH_TABULATED_MAX {
            (0..num_perm)
                .flat_map(|i| {
                    (1..=OPH_DRAWS as u64).map(move |a| oph_draw(densify, i, a, num_perm) as u16)
                })
                .collect()
        } else {
            Box::default()
        };
        OphKeys {
            xor,
            mul,
            densify,
            draws,
        }
    }
}

#[derive(Debug)]
struct Inner {
    scheme: HashScheme,
    num_perm: usize,
    seed: u64,
    kernel: Kernel,
    /// Hashes byte windows (byte mode and the ASCII runs of char mode); chosen with the kernel.
    window_hasher: WindowHasher,
    params: Params,
}

/// Signature hashing with precomputed permutation parameters. `Send + Sync`; cloning is cheap
/// (the parameters are shared).
#[derive(Clone, Debug)]
pub struct MinHasher {
    inner: Arc<Inner>,
}

/// Reusable buffers so signing allocates nothing per text in steady state.
#[derive(Default, Debug)]
pub struct SignScratch {
    pub(crate) hashes: Vec<u64>,
    unique: Vec<u64>,
    /// The recent-shingle filter of [`drop_recent_repeats`]; empty until first used.
    filter: Vec<u64>,
    /// Whether `unique` holds the last signed text's filtered hashes.
    filtered: bool,
    /// Per-position minima of the `oph` scheme before densification.
    bins: Vec<u64>,
    /// Whether the caller will want [`SignScratch::mostly_distinct_hashes`] after signing.
    collect_distinct: bool,
}

/// The filter has 2^FILTER_BITS slots (64 KB). On the rustdocs corpus 8192 slots pass 50 % of
/// char 5-grams to the kernel (45 % are distinct per text); 4096 pass 53 % and measured ~6 %
/// slower overall, 2048 pass 58 %; 16384 and more (48 %) measured no faster.
const FILTER_BITS: u32 = 13;
const FILTER_SLOTS: usize = 1 << FILTER_BITS;

/// A hash's slot: its low bits, which are uniform for both schemes (xxh3 outputs, and the
/// datasketch scheme's 32-bit sha1 prefixes, whose high bits are all zero).
#[inline(always)]
fn filter_slot(h: u64) -> usize {
    h as usize & (FILTER_SLOTS - 1)
}

/// The value of an empty slot: one that belongs to another slot, so it never equals a hash
/// stored in this one.
#[inline(always)]
fn filter_empty(slot: usize) -> u64 {
    (slot ^ 1) as u64
}

/// Below this many shingles the kernel is cheap enough that filtering first does not pay.
const DEDUP_MIN: usize = 32;

/// Writes `hashes` minus repeats of recently seen values to `unique`, in order.
///
/// MinHash is a set function (`min` is idempotent), and real text repeats about half of its
/// character 5-grams, so dropping repeats before the kernel saves kernel work — but only if
/// dropping is much cheaper than the kernel. An exact set costs probes and branches; this is a
/// direct-mapped cache of the last value per slot, without branches: a repeat whose slot was
/// overwritten in between is signed twice, which changes nothing. `filter` is all empty
/// before and after the call.
fn drop_recent_repeats(hashes: &[u64], unique: &mut Vec<u64>, filter: &mut Vec<u64>) {
    let filter = ready_filter(filter);
    // A local slice keeps the output pointer in a register (stores through a `&mut Vec` make
    // the compiler reload its header every iteration).
    let dst = output_slots(unique, hashes.len());
    let mut len = 0;
    for &h in hashes {
        filter_step(filter, dst, &mut len, h);
    }
    // SAFETY: `filter_step` wrote every `dst[i]` with `i < len`.
    unsafe { unique.set_len(len) };
    reset_filter(filter, unique);
}

/// The filter as an array, built on first use.
fn ready_filter(filter: &mut Vec<u64>) -> &mut [u64; FILTER_SLOTS] {
    if filter.len() != FILTER_SLOTS {
        *filter = (0..FILTER_SLOTS).map(filter_empty).collect();
    }
    filter
        .as_mut_slice()
        .try_into()
        .expect("filter has FILTER_SLOTS slots")
}

/// Empties `v` and returns its first `n` (uninitialised) slots; the filter writes into them
/// without zeroing them first.
fn output_slots(v: &mut Vec<u64>, n: usize) -> &mut [MaybeUninit<u64>] {
    v.clear();
    v.reserve(n);
    &mut v.spare_capacity_mut()[..n]
}

/// One shingle through the filter: `h` is written to `dst[*len]`, and kept (`*len` advanced)
/// unless its slot already holds it. No branch: repeats are as frequent as new values. Every
/// `dst[i]` with `i < *len` has been written.
#[inline(always)]
fn filter_step(
    filter: &mut [u64; FILTER_SLOTS],
    dst: &mut [MaybeUninit<u64>],
    len: &mut usize,
    h: u64,
) {
    let slot = &mut filter[filter_slot(h)];
    dst[*len].write(h);
    *len += usize::from(*slot != h);
    *slot = h;
}

/// Empties the filter again after a text whose kept values are `kept`: only their slots were
/// written.
fn reset_filter(filter: &mut [u64; FILTER_SLOTS], kept: &[u64]) {
    for &h in kept {
        let slot = filter_slot(h);
        filter[slot] = filter_empty(slot);
    }
}

impl SignScratch {
    /// Scratch for callers who take each text's shingle set after signing it: the `oph` scheme
    /// then drops repeats before signing (work the set needs anyway) and signs only the rest.
    /// Signatures are the same either way.
    pub fn collecting_distinct() -> SignScratch {
        SignScratch {
            collect_distinct: true,
            ..SignScratch::default()
        }
    }

    /// The shingle hashes of the last signed text, in text order (repeats kept).
    pub fn hashes(&self) -> &[u64] {
        &self.hashes
    }

    /// Marks [`SignScratch::hashes`] as replaced by another text's (not signed): the next
    /// [`SignScratch::mostly_distinct_hashes`] filters them anew.
    pub(crate) fn hashes_replaced(&mut self) {
        self.filtered = false;
    }

    /// The same values as [`SignScratch::hashes`] as a set, with most repeats dropped (by the
    /// signing path's filter, run now if signing did not): the cheapest input for building the
    /// text's shingle set, as real text repeats about half of its shingles.
    pub fn mostly_distinct_hashes(&mut self) -> &[u64] {
        if !self.filtered && self.hashes.len() >= DEDUP_MIN {
            drop_recent_repeats(&self.hashes, &mut self.unique, &mut self.filter);
            self.filtered = true;
        }
        if self.filtered {
            &self.unique
        } else {
            &self.hashes
        }
    }
}

/// Permutations per kernel block: 128 u32 lanes are 8 AVX-512 registers of accumulators, which
/// together with the parameters still fit the 32 vector registers.
const BLOCK: usize = 128;

fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn padded_len(n: usize) -> usize {
    n.div_ceil(BLOCK) * BLOCK
}

impl MinHasher {
    /// Precomputes the permutation parameters and picks the fastest kernel for this CPU.
    ///
    /// Errors when `num_perm == 0`, or for the datasketch scheme when `seed` does not fit numpy's
    /// `RandomState` (> 2^32 - 1).
    pub fn new(scheme: HashScheme, num_perm: usize, seed: u64) -> Result<MinHasher, SketchError> {
        Self::with_kernel(scheme, num_perm, seed, Kernel::best())
    }

    /// Like [`MinHasher::new`] with an explicit kernel (for tests and benchmarks); errors when
    /// the CPU does not support it.
    pub fn with_kernel(
        scheme: HashScheme,
        num_perm: usize,
        seed: u64,
        kernel: Kernel,
    ) -> Result<MinHasher, SketchError> {
        if num_perm == 0 {
            return Err(SketchError::InvalidMinHash("num_perm must be >= 1".into()));
        }
        if !kernel.is_supported() {
            return Err(SketchError::InvalidMinHash(format!(
                "kernel {kernel:?} is not supported by this CPU"
            )));
        }
        let padded = padded_len(num_perm);
        let params = match scheme {
            HashScheme::Fast => {
                let mut state = seed;
                let mut a = vec![0u32; padded];
                let mut s = vec![0u32; padded];
                for i in 0..num_perm {
                    a[i] = splitmix64(&mut state) as u32 | 1;
                    s[i] = splitmix64(&mut state) as u32;
                }
                Params::Fast { a, s }
            }
            HashScheme::Datasketch => {
                if seed > u64::from(u32::MAX) {
                    return Err(SketchError::InvalidMinHash(format!(
                        "datasketch seeds must be <= 2^32-1 (numpy RandomState), got {seed}"
                    )));
                }
                let (mut a, mut b) = datasketch_permutations(num_perm, seed);
                a.resize(padded, 0);
                b.resize(padded, 0);
                Params::Datasketch { a, b }
            }
            HashScheme::Oph => Params::Oph(OphKeys::new(num_perm, seed)),
        };
        Ok(MinHasher {
            inner: Arc::new(Inner {
                scheme,
                num_perm,
                seed,
                kernel,
                window_hasher: window_hasher(kernel),
                params,
            }),
        })
    }

    /// The hashing scheme.
    pub fn scheme(&self) -> HashScheme {
        self.inner.scheme
    }

    /// Signature length.
    pub fn num_perm(&self) -> usize {
        self.inner.num_perm
    }

    /// The seed the permutations were drawn from.
    pub fn seed(&self) -> u64 {
        self.inner.seed
    }

    /// The kernel in use.
    pub fn kernel(&self) -> Kernel {
        self.inner.kernel
    }

    /// The per-shingle base hash (fast: xxh3_64 of the bytes; datasketch: first 4 bytes of sha1
    /// as LE u32).
    #[inline]
    pub fn shingle_hash(&self, shingle: &[u8]) -> u64 {
        match self.inner.scheme {
            HashScheme::Fast | HashScheme::Oph => shingle_hash::xxh3_64(shingle),
            HashScheme::Datasketch => datasketch_shingle_hash(shingle),
        }
    }

    /// Signature from base hashes; `out.len() == num_perm`. Empty input -> all `EMPTY_SLOT`.
    ///
    /// # Panics
    /// When `out.len() != num_perm`.
    pub fn sign_hashes(&self, hashes: &[u64], out: &mut [u32]) {
        let inner = &*self.inner;
        assert_eq!(
            out.len(),
            inner.num_perm,
            "signature buffer length != num_perm"
        );
        if hashes.is_empty() {
            out.fill(EMPTY_SLOT);
            return;
        }
        if let Params::Oph(keys) = &inner.params {
            oph_sign(hashes, keys, out, &mut Vec::new());
            return;
        }
        self.sign_blocks_from(hashes, 0, out);
    }

    /// Signs positions `first..` of `out` (`first` a multiple of [`BLOCK`]), block by block.
    fn sign_blocks_from(&self, hashes: &[u64], first: usize, out: &mut [u32]) {
        let mut start = first;
        while start < out.len() {
            // Full blocks of BLOCK; the last, ragged block uses the narrowest width that covers
            // it, so small signatures do not pay for a whole block.
            let left = out.len() - start;
            let chunk = &mut out[start..start + left.min(BLOCK)];
            match left {
                0..=16 => self.sign_block::<16>(hashes, start, chunk),
                17..=32 => self.sign_block::<32>(hashes, start, chunk),
                33..=64 => self.sign_block::<64>(hashes, start, chunk),
                _ => self.sign_block::<BLOCK>(hashes, start, chunk),
            }
            start += BLOCK;
        }
    }

    /// Signs positions `start..start + W` (parameters are padded, so they exist) and copies the
    /// first `chunk.len()` of them into `chunk`.
    fn sign_block<const W: usize>(&self, hashes: &[u64], start: usize, chunk: &mut [u32]) {
        let inner = &*self.inner;
        let mut block_out = [0u32; W];
        let range = start..start + W;
        match &inner.params {
            Params::Fast { a, s } => {
                let a = a[range.clone()].try_into().expect("padded block");
                let s = s[range].try_into().expect("padded block");
                fast_dispatch::<W>(inner.kernel, hashes, a, s, &mut block_out);
            }
            Params::Datasketch { a, b } => {
                let a = a[range.clone()].try_into().expect("padded block");
                let b = b[range].try_into().expect("padded block");
                datasketch_dispatch::<W>(inner.kernel, hashes, a, b, &mut block_out);
            }
            Params::Oph(_) => unreachable!("oph signatures are not signed in blocks"),
        }
        chunk.copy_from_slice(&block_out[..chunk.len()]);
    }

    /// Shingles `text` (already normalised) and signs it; returns the number of shingles
    /// (repeats counted).
    pub fn sign(
        &self,
        shingler: &Shingler,
        text: &str,
        scratch: &mut SignScratch,
        out: &mut [u32],
    ) -> usize {
        let SignScratch {
            hashes,
            unique,
            filter,
            filtered,
            bins,
            collect_distinct,
        } = scratch;
        let inner = &*self.inner;
        assert_eq!(
            out.len(),
            inner.num_perm,
            "signature buffer length != num_perm"
        );
        self.hash_shingles(shingler, text, hashes);
        if let Params::Oph(keys) = &inner.params {
            // One cheap update per shingle: filtering repeats first would cost as much.
            *filtered = false;
            if hashes.is_empty() {
                out.fill(EMPTY_SLOT);
            } else if *collect_distinct && hashes.len() >= DEDUP_MIN {
                drop_recent_repeats(hashes, unique, filter);
                *filtered = true;
                oph_sign(unique, keys, out, bins);
            } else {
                oph_sign(hashes, keys, out, bins);
            }
            return hashes.len();
        }
        // The reference kernel is the test oracle: it signs the plain multiset.
        if inner.kernel == Kernel::Reference || hashes.len() < DEDUP_MIN {
            *filtered = false;
            self.sign_hashes(hashes, out);
            return hashes.len();
        }
        *filtered = true;
        #[cfg(target_arch = "x86_64")]
        if let (Kernel::Avx512, Params::Fast { a, s }) = (inner.kernel, &inner.params) {
            // The first block of positions is signed while filtering; the others, if any, sign
            // the filtered hashes afterwards.
            let filter = ready_filter(filter);
            let head = out.len().min(BLOCK);
            let mut block_out = [0u32; BLOCK];
            // SAFETY: `with_kernel` only accepts `Kernel::Avx512` where AVX-512F is supported.
            unsafe {
                match head {
                    0..=16 => {
                        fast_avx512_filtered::<1>(hashes, filter, unique, a, s, &mut block_out)
                    }
                    17..=32 => {
                        fast_avx512_filtered::<2>(hashes, filter, unique, a, s, &mut block_out)
                    }
                    33..=64 => {
                        fast_avx512_filtered::<4>(hashes, filter, unique, a, s, &mut block_out)
                    }
                    _ => fast_avx512_filtered::<8>(hashes, filter, unique, a, s, &mut block_out),
                }
            }
            out[..head].copy_from_slice(&block_out[..head]);
            self.sign_blocks_from(unique, BLOCK, out);
            reset_filter(filter, unique);
            return hashes.len();
        }
        drop_recent_repeats(hashes, unique, filter);
        self.sign_hashes(unique, out);
        hashes.len()
    }

    /// Replaces `hashes` with the base hashes of `text`'s shingles, in text order.
    pub fn hash_shingles(&self, shingler: &Shingler, text: &str, hashes: &mut Vec<u64>) {
        let inner = &*self.inner;
        match (inner.scheme, inner.kernel) {
            // The oracle for the fused paths: generic shingling, then the library hash.
            (HashScheme::Fast | HashScheme::Oph, Kernel::Reference) => {
                hashes.clear();
                shingler.for_each(text, |s| hashes.push(xxhash_rust::xxh3::xxh3_64(s)));
            }
            (HashScheme::Fast | HashScheme::Oph, _) => {
                shingle_hash::fast_hash_shingles(shingler, text, hashes, inner.window_hasher)
            }
            #[cfg(target_arch = "x86_64")]
            (HashScheme::Datasketch, Kernel::Avx512) => {
                datasketch_hash_shingles_x16(shingler, text, hashes)
            }
            (HashScheme::Datasketch, _) => {
                hashes.clear();
                shingler.for_each(text, |s| hashes.push(datasketch_shingle_hash(s)));
            }
        }
    }
}

/// Signs non-empty `hashes` with the `oph` scheme (module docs). `bins` is scratch space.
fn oph_sign(hashes: &[u64], keys: &OphKeys, out: &mut [u32], bins: &mut Vec<u64>) {
    let n = out.len();
    debug_assert!(!hashes.is_empty() && n > 0);
    // u64 minima so that "no shingle here" (u64::MAX) differs from every 32-bit value.
    bins.clear();
    bins.resize(n, u64::MAX);
    let bins = bins.as_mut_slice();
    let mix = (keys.xor, keys.mul);
    if n.is_power_of_two() && n <= 1 << 32 {
        // ((x >> 32) * 2^k) >> 32 == (x >> 32) >> (32 - k): the same positions without the
        // second multiplication, which halves the multiplier pressure of the loop.
        let shift = 32 - n.trailing_zeros();
        oph_update(hashes, mix, bins, |z| ((z >> 32) >> shift) as usize);
    } else {
        oph_update(hashes, mix, bins, |z| oph_position(z, n));
    }
    oph_densify(bins, keys, out);
}

/// Writes the signature from the per-position minima `bins`, filling the positions no shingle
/// reached (`u64::MAX`) from their donors ([`oph_donor`] gives the same donors, draw by draw).
///
/// Short texts leave many positions empty, and looking each donor up draw by draw (a branch
/// whose outcome is a coin flip, after a splitmix64 step) cost more than all of their shingles'
/// updates. Here the empty positions are first listed without a branch, and each one tests its
/// tabulated draws a group at a time (one load per draw makes a bit mask, whose lowest set bit is
/// the first draw that hits); only when every tabulated draw misses does it go on draw by draw.
fn oph_densify(bins: &[u64], keys: &OphKeys, out: &mut [u32]) {
    let n = bins.len();
    if keys.draws.is_empty() {
        for (i, slot) in out.iter_mut().enumerate() {
            *slot = match bins[i] {
                u64::MAX => bins[oph_donor(bins, i, keys.densify)] as u32,
                v => v as u32,
            };
        }
        return;
    }
    assert_eq!(
        keys.draws.len(),
        n * OPH_DRAWS,
        "draws tabulated for another width"
    );
    // Positions are below 2^16 here, so the empty ones list into a small stack buffer per pass.
    let mut empty = [0u16; 256];
    for start in (0..n).step_by(empty.len()) {
        let end = (start + empty.len()).min(n);
        let mut found = 0;
        for i in start..end {
            out[i] = bins[i] as u32;
            empty[found] = i as u16;
            found += usize::from(bins[i] == u64::MAX);
        }
        for &i in &empty[..found] {
            let i = usize::from(i);
            let draws = &keys.draws[i * OPH_DRAWS..(i + 1) * OPH_DRAWS];
            let donor = draws
                .chunks_exact(OPH_DRAW_GROUP)
                .find_map(|group| first_reached(bins, group))
                .unwrap_or_else(|| oph_donor_from(bins, i, keys.densify, OPH_DRAWS as u64 + 1));
            out[i] = bins[donor] as u32;
        }
    }
}

/// The first of a group of draws that a shingle reached, from one bit mask (no branch per draw).
#[inline(always)]
fn first_reached(bins: &[u64], draws: &[u16]) -> Option<usize> {
    let draws: &[u16; OPH_DRAW_GROUP] = draws.try_into().expect("one group of draws");
    let mut mask = 0u32;
    for (a, &j) in draws.iter().enumerate() {
        // SAFETY: tabulated draws are positions below num_perm == bins.len() (checked by oph_densify).
        mask |= u32::from(unsafe { *bins.get_unchecked(usize::from(j)) } != u64::MAX) << a;
    }
    (mask != 0).then(|| usize::from(draws[mask.trailing_zeros() as usize]))
}

/// The per-shingle minima of the `oph` scheme, with `position` computing
/// [`oph_position`] (or an equal shortcut).
#[inline(always)]
fn oph_update(
    hashes: &[u64],
    (xor, mul): (u64, u64),
    bins: &mut [u64],
    position: impl Fn(u64) -> usize,
) {
    for &h in hashes {
        let mut z = (h ^ xor).wrapping_mul(mul);
        z ^= z >> 32;
        let pos = position(z);
        // Branch-free: whether a value is a new minimum is a coin flip early in a text. (The
        // bounds check stays, but it is never taken, so it costs no misprediction.)
        bins[pos] = bins[pos].min(z & 0xFFFF_FFFF);
    }
}

/// `((x >> 32) * n) >> 32`: a position below `n` from the high half of `x`.
#[inline(always)]
fn oph_position(x: u64, n: usize) -> usize {
    (((x >> 32) * n as u64) >> 32) as usize
}

/// The position an empty position `i` copies from (optimal densification, module docs).
fn oph_donor(bins: &[u64], i: usize, key: u64) -> usize {
    oph_donor_from(bins, i, key, 1)
}

/// Draw `a` of empty position `i`'s densification sequence (module docs).
#[inline(always)]
fn oph_draw(key: u64, i: usize, a: u64, n: usize) -> usize {
    let mut state = key ^ ((i as u64) << 32 | a);
    oph_position(splitmix64(&mut state), n)
}

/// [`oph_donor`] when draws before `first_attempt` are known to have missed.
fn oph_donor_from(bins: &[u64], i: usize, key: u64, first_attempt: u64) -> usize {
    let n = bins.len();
    for attempt in first_attempt..=(64 * n as u64) {
        let j = oph_draw(key, i, attempt, n);
        if bins[j] != u64::MAX {
            return j;
        }
    }
    (0..n)
        .map(|d| (i + d) % n)
        .find(|&j| bins[j] != u64::MAX)
        .expect("a non-empty text reaches at least one position")
}

/// The datasketch scheme's shingle hashes, sixteen SHA-1s at a time ([`sha1x16`]): shingles
/// are queued in text order with a placeholder in `hashes`, which each full batch fills in.
#[cfg(target_arch = "x86_64")]
fn datasketch_hash_shingles_x16(shingler: &Shingler, text: &str, hashes: &mut Vec<u64>) {
    use crate::sha1x16::{Batch, LANES, MAX_LEN};

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
                    hashes[slot] = datasketch_shingle_hash(batch.message(i));
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
            hashes.push(datasketch_shingle_hash(s));
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

/// The first 4 bytes of `sha1(shingle)` as a little-endian u32. A shingle of at most 55 bytes
/// is one padded block: building it here and calling the compression function directly skips
/// the `Digest` buffering, which costs more than the compression itself for short inputs.
#[inline]
fn datasketch_shingle_hash(shingle: &[u8]) -> u64 {
    const H0: [u32; 5] = [
        0x6745_2301,
        0xEFCD_AB89,
        0x98BA_DCFE,
        0x1032_5476,
        0xC3D2_E1F0,
    ];
    let digest_word = if shingle.len() <= 55 {
        let mut block = [0u8; 64];
        block[..shingle.len()].copy_from_slice(shingle);
        block[shingle.len()] = 0x80;
        block[56..].copy_from_slice(&(shingle.len() as u64 * 8).to_be_bytes());
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

// ---------- fast kernels ----------

#[inline(always)]
fn fast_value(h: u64, a: u32, s: u32) -> u32 {
    ((h as u32 ^ s).wrapping_mul(a)) ^ (h >> 32) as u32
}

fn fast_reference<const W: usize>(hashes: &[u64], a: &[u32; W], s: &[u32; W], out: &mut [u32; W]) {
    for i in 0..W {
        let mut m = EMPTY_SLOT;
        for &h in hashes {
            m = m.min(fast_value(h, a[i], s[i]));
        }
        out[i] = m;
    }
}

/// Shingles outer, a block of permutations inner, for whatever vector width the build target
/// has (SSE2 on x86_64); the x86 kernels below are the same loop written with intrinsics.
#[inline(always)]
fn fast_blocked<const W: usize>(hashes: &[u64], a: &[u32; W], s: &[u32; W], out: &mut [u32; W]) {
    let mut acc = [EMPTY_SLOT; W];
    for &h in hashes {
        for j in 0..W {
            acc[j] = acc[j].min(fast_value(h, a[j], s[j]));
        }
    }
    *out = acc;
}

/// Explicit intrinsics: `R` accumulators of 8 lanes live in registers for the whole pass over
/// the hashes. 16 ymm registers hold at most 4 accumulators + 8 parameter vectors, so wider
/// blocks take several passes.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn fast_avx2<const W: usize>(hashes: &[u64], a: &[u32; W], s: &[u32; W], out: &mut [u32; W]) {
    const LANES: usize = 8;
    const PASS: usize = 4 * LANES;
    let mut start = 0;
    while start < W {
        let end = (start + PASS).min(W);
        match (end - start) / LANES {
            1 => fast_avx2_pass::<1>(hashes, &a[start..end], &s[start..end], &mut out[start..end]),
            2 => fast_avx2_pass::<2>(hashes, &a[start..end], &s[start..end], &mut out[start..end]),
            _ => fast_avx2_pass::<4>(hashes, &a[start..end], &s[start..end], &mut out[start..end]),
        }
        start = end;
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn fast_avx2_pass<const R: usize>(hashes: &[u64], a: &[u32], s: &[u32], out: &mut [u32]) {
    use std::arch::x86_64::*;
    assert!(a.len() == R * 8 && s.len() == R * 8 && out.len() == R * 8);
    // SAFETY: the loads and stores stay within the R * 8 elements asserted above.
    unsafe {
        let av: [__m256i; R] =
            std::array::from_fn(|i| _mm256_loadu_si256(a.as_ptr().add(i * 8).cast()));
        let sv: [__m256i; R] =
            std::array::from_fn(|i| _mm256_loadu_si256(s.as_ptr().add(i * 8).cast()));
        let mut acc = [_mm256_set1_epi32(-1); R];
        for h in hashes {
            // As in the AVX-512 kernel: broadcast the halves from memory.
            // x86 is little-endian: the low half comes first.
            let halves: *const i32 = (h as *const u64).cast();
            let lo = _mm256_set1_epi32(halves.read());
            let hi = _mm256_set1_epi32(halves.add(1).read());
            for i in 0..R {
                let v =
                    _mm256_xor_si256(_mm256_mullo_epi32(_mm256_xor_si256(lo, sv[i]), av[i]), hi);
                acc[i] = _mm256_min_epu32(acc[i], v);
            }
        }
        for (i, v) in acc.iter().enumerate() {
            _mm256_storeu_si256(out.as_mut_ptr().add(i * 8).cast(), *v);
        }
    }
}

/// Explicit intrinsics: all `W / 16` accumulators (8 for a 128-permutation block) and their
/// parameters stay in the 32 zmm registers for one pass over the hashes.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn fast_avx512<const W: usize>(hashes: &[u64], a: &[u32; W], s: &[u32; W], out: &mut [u32; W]) {
    match W / 16 {
        1 => fast_avx512_pass::<1>(hashes, a, s, out),
        2 => fast_avx512_pass::<2>(hashes, a, s, out),
        4 => fast_avx512_pass::<4>(hashes, a, s, out),
        8 => fast_avx512_pass::<8>(hashes, a, s, out),
        _ => unreachable!("block widths are 16, 32, 64 or 128"),
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn fast_avx512_pass<const R: usize>(hashes: &[u64], a: &[u32], s: &[u32], out: &mut [u32]) {
    use std::arch::x86_64::*;
    assert!(a.len() == R * 16 && s.len() == R * 16 && out.len() == R * 16);
    // SAFETY: the loads and stores stay within the R * 16 elements asserted above.
    unsafe {
        let av: [__m512i; R] =
            std::array::from_fn(|i| _mm512_loadu_si512(a.as_ptr().add(i * 16).cast()));
        let sv: [__m512i; R] =
            std::array::from_fn(|i| _mm512_loadu_si512(s.as_ptr().add(i * 16).cast()));
        let mut acc = [_mm512_set1_epi32(-1); R];
        for h in hashes {
            // Broadcasting each 32-bit half straight from memory is a load-unit operation;
            // going through a general register costs vector-pipe work the kernel is short of.
            // x86 is little-endian: the low half comes first.
            let halves: *const i32 = (h as *const u64).cast();
            let lo = _mm512_set1_epi32(halves.read());
            let hi = _mm512_set1_epi32(halves.add(1).read());
            for i in 0..R {
                let v =
                    _mm512_xor_si512(_mm512_mullo_epi32(_mm512_xor_si512(lo, sv[i]), av[i]), hi);
                acc[i] = _mm512_min_epu32(acc[i], v);
            }
        }
        for (i, v) in acc.iter().enumerate() {
            _mm512_storeu_si512(out.as_mut_ptr().add(i * 16).cast(), *v);
        }
    }
}

/// Hashes per step of [`fast_avx512_filtered`]'s pipeline: small enough that a block's hashes
/// and kept values stay in L1.
#[cfg(target_arch = "x86_64")]
const FUSED_BLOCK: usize = 256;

/// [`drop_recent_repeats`] and the AVX-512 kernel for positions `0..R * 16` in one loop: the
/// filter (scalar loads, compares and stores) runs on block `t + 1` of `hashes` while the
/// kernel (vector multiplies and minima) runs on block `t`'s kept values, two filter steps per
/// kernel step since about half the values are kept. The two use different execution units, so
/// the filter costs almost nothing extra. Leaves the kept values in `unique` (for further
/// position blocks) and their slots set in `filter` (the caller resets them).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn fast_avx512_filtered<const R: usize>(
    hashes: &[u64],
    filter: &mut [u64; FILTER_SLOTS],
    unique: &mut Vec<u64>,
    a: &[u32],
    s: &[u32],
    out: &mut [u32; BLOCK],
) {
    use std::arch::x86_64::*;
    assert!(a.len() >= R * 16 && s.len() >= R * 16 && R * 16 <= BLOCK);
    let dst = output_slots(unique, hashes.len());
    let mut len = 0;
    let mut done = 0;
    // SAFETY: the parameter loads and accumulator stores stay within the first R * 16
    // elements of `a`, `s` and `out` (asserted above); hash broadcasts read `dst[done]`,
    // which is in bounds and written (`done < len`, see `filter_step`).
    unsafe {
        let av: [__m512i; R] =
            std::array::from_fn(|i| _mm512_loadu_si512(a.as_ptr().add(i * 16).cast()));
        let sv: [__m512i; R] =
            std::array::from_fn(|i| _mm512_loadu_si512(s.as_ptr().add(i * 16).cast()));
        let mut acc = [_mm512_set1_epi32(-1); R];
        // A macro rather than a closure, so that the body is compiled with AVX-512 enabled.
        macro_rules! kernel_step {
            () => {{
                let halves: *const i32 = dst[done].as_ptr().cast();
                let lo = _mm512_set1_epi32(halves.read());
                let hi = _mm512_set1_epi32(halves.add(1).read());
                for i in 0..R {
                    let v = _mm512_xor_si512(
                        _mm512_mullo_epi32(_mm512_xor_si512(lo, sv[i]), av[i]),
                        hi,
                    );
                    acc[i] = _mm512_min_epu32(acc[i], v);
                }
                done += 1;
            }};
        }
        for block in hashes.chunks(FUSED_BLOCK) {
            // The kept values of the previous block: dst[done..ready].
            let ready = len;
            let mut pairs = block.chunks_exact(2);
            while done < ready {
                let Some(pair) = pairs.next() else { break };
                kernel_step!();
                filter_step(filter, dst, &mut len, pair[0]);
                filter_step(filter, dst, &mut len, pair[1]);
            }
            for pair in pairs.by_ref() {
                filter_step(filter, dst, &mut len, pair[0]);
                filter_step(filter, dst, &mut len, pair[1]);
            }
            for &h in pairs.remainder() {
                filter_step(filter, dst, &mut len, h);
            }
            while done < ready {
                kernel_step!();
            }
        }
        while done < len {
            kernel_step!();
        }
        for (i, v) in acc.iter().enumerate() {
            _mm512_storeu_si512(out.as_mut_ptr().add(i * 16).cast(), *v);
        }
        // `filter_step` wrote every `dst[i]` with `i < len`.
        unique.set_len(len);
    }
}

fn fast_dispatch<const W: usize>(
    kernel: Kernel,
    hashes: &[u64],
    a: &[u32; W],
    s: &[u32; W],
    out: &mut [u32; W],
) {
    match kernel {
        Kernel::Reference => fast_reference(hashes, a, s, out),
        Kernel::Portable => fast_blocked(hashes, a, s, out),
        // SAFETY: MinHasher::with_kernel only accepts kernels the CPU supports.
        #[cfg(target_arch = "x86_64")]
        Kernel::Avx2 => unsafe { fast_avx2(hashes, a, s, out) },
        #[cfg(target_arch = "x86_64")]
        Kernel::Avx512 => unsafe { fast_avx512(hashes, a, s, out) },
        #[cfg(not(target_arch = "x86_64"))]
        Kernel::Avx2 | Kernel::Avx512 => unreachable!("x86 kernel on another architecture"),
    }
}

// ---------- datasketch kernels ----------

/// `x mod (2^61 - 1)` for any u64, with shifts: 2^61 ≡ 1, so fold the top 3 bits onto the rest.
#[inline(always)]
fn mod_mersenne61(x: u64) -> u64 {
    let y = (x & MERSENNE_61) + (x >> 61);
    if y >= MERSENNE_61 { y - MERSENNE_61 } else { y }
}

/// datasketch's permuted value, written as its definition: the reference kernel's formula.
#[inline(always)]
fn datasketch_value(h: u64, a: u64, b: u64) -> u64 {
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

fn datasketch_reference<const W: usize>(
    hashes: &[u64],
    a: &[u64; W],
    b: &[u64; W],
    out: &mut [u32; W],
) {
    for i in 0..W {
        let mut m = u64::from(EMPTY_SLOT);
        for &h in hashes {
            m = m.min(datasketch_value(h, a[i], b[i]));
        }
        out[i] = m as u32;
    }
}

/// u64 lanes need twice the registers of the fast scheme, so work in sub-blocks of 16.
const DS_SUB: usize = 16;

#[inline(always)]
fn datasketch_blocked<const W: usize>(
    hashes: &[u64],
    a: &[u64; W],
    b: &[u64; W],
    out: &mut [u32; W],
) {
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
fn datasketch_avx2<const W: usize>(hashes: &[u64], a: &[u64; W], b: &[u64; W], out: &mut [u32; W]) {
    datasketch_blocked(hashes, a, b, out)
}

/// Explicit intrinsics: 64-bit lanes (`vpmullq` is AVX-512DQ), 32 permutations per pass over
/// the hashes (8 parameter registers, 2 accumulators of 16 u32 lanes).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512dq")]
fn datasketch_avx512<const W: usize>(
    hashes: &[u64],
    a: &[u64; W],
    b: &[u64; W],
    out: &mut [u32; W],
) {
    let mut start = 0;
    while start < W {
        let end = (start + 32).min(W);
        let (a, b, out) = (&a[start..end], &b[start..end], &mut out[start..end]);
        if end - start == 32 {
            datasketch_avx512_pass::<2>(hashes, a, b, out);
        } else {
            datasketch_avx512_pass::<1>(hashes, a, b, out);
        }
        start = end;
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512dq")]
fn datasketch_avx512_pass<const R: usize>(hashes: &[u64], a: &[u64], b: &[u64], out: &mut [u32]) {
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

fn datasketch_dispatch<const W: usize>(
    kernel: Kernel,
    hashes: &[u64],
    a: &[u64; W],
    b: &[u64; W],
    out: &mut [u32; W],
) {
    match kernel {
        Kernel::Reference => datasketch_reference(hashes, a, b, out),
        Kernel::Portable => datasketch_blocked(hashes, a, b, out),
        // SAFETY: MinHasher::with_kernel only accepts kernels the CPU supports.
        #[cfg(target_arch = "x86_64")]
        Kernel::Avx2 => unsafe { datasketch_avx2(hashes, a, b, out) },
        #[cfg(target_arch = "x86_64")]
        Kernel::Avx512 => unsafe { datasketch_avx512(hashes, a, b, out) },
        #[cfg(not(target_arch = "x86_64"))]
        Kernel::Avx2 | Kernel::Avx512 => unreachable!("x86 kernel on another architecture"),
    }
}

// ---------- numpy legacy RandomState ----------

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

    #[test]
    fn tabulated_densification_equals_drawing_one_by_one() {
        // Every width class (tiny, ragged, power of two, past one pass of the empty list, past
        // the tabulated limit) and every fill from one reached position to all of them.
        let mut state = 11;
        for n in [
            1,
            2,
            3,
            7,
            64,
            100,
            128,
            256,
            300,
            1000,
            OPH_TABULATED_MAX + 3,
        ] {
            let keys = OphKeys::new(n, 1 + n as u64);
            assert_eq!(keys.draws.is_empty(), n > OPH_TABULATED_MAX);
            let fills: Vec<usize> = [1, 2, 3, n / 16, n / 4, n / 2, n - 1, n]
                .into_iter()
                .filter(|&f| (1..=n).contains(&f))
                // A sparse fill of the widest table costs the one-by-one oracle ~n^2 draws.
                .filter(|&f| n <= 1000 || f >= n / 2)
                .collect();
            for fill in fills {
                let rounds = if n > 1000 { 1 } else { 20 };
                for _ in 0..rounds {
                    let mut bins = vec![u64::MAX; n];
                    for _ in 0..fill {
                        let j = (splitmix64(&mut state) % n as u64) as usize;
                        bins[j] = splitmix64(&mut state) & 0xFFFF_FFFF;
                    }
                    let expected: Vec<u32> = (0..n)
                        .map(|i| match bins[i] {
                            u64::MAX => bins[oph_donor(&bins, i, keys.densify)] as u32,
                            v => v as u32,
                        })
                        .collect();
                    let mut out = vec![0u32; n];
                    oph_densify(&bins, &keys, &mut out);
                    assert_eq!(out, expected, "n {n}, fill {fill}");
                }
            }
        }
    }

    #[test]
    fn mt19937_matches_the_reference_sequence() {
        // First outputs of init_genrand(5489), from the MT19937 reference implementation.
        let mut mt = Mt19937::new(5489);
        let got: Vec<u32> = (0..3).map(|_| mt.next_u32()).collect();
        assert_eq!(got, [3_499_211_612, 581_869_302, 3_890_346_734]);
    }

    #[test]
    fn dropping_repeats_keeps_every_value_and_leaves_the_filter_empty() {
        let mut state = 5;
        let base: Vec<u64> = (0..1000).map(|_| splitmix64(&mut state)).collect();
        let mut hashes: Vec<u64> = base.iter().chain(&base[..500]).copied().collect();
        // Values that look like empty marks once mixed, and the extremes.
        hashes.extend([0, 0, 1, u64::MAX, base[7], filter_empty(5), filter_empty(4)]);
        hashes.extend([filter_empty(5), 0, 1, 4]);
        let (mut unique, mut filter) = (Vec::new(), Vec::new());
        for _ in 0..2 {
            drop_recent_repeats(&hashes, &mut unique, &mut filter);
            let fresh: Vec<u64> = (0..FILTER_SLOTS).map(filter_empty).collect();
            assert_eq!(filter, fresh, "the filter is reset after a call");
            // A subsequence that keeps every distinct value (its first occurrence included).
            let mut rest = unique.iter();
            assert!(
                hashes
                    .iter()
                    .all(|h| rest.clone().next() != Some(h) || rest.next() == Some(h))
            );
            let mut distinct_in = hashes.clone();
            distinct_in.sort_unstable();
            distinct_in.dedup();
            let mut distinct_out = unique.clone();
            distinct_out.sort_unstable();
            distinct_out.dedup();
            assert_eq!(distinct_in, distinct_out);
            // A repeat survives when one of the ~750 values in between took its slot (~17 %).
            assert!(
                unique.len() < 1000 + 150,
                "most repeats dropped: {}",
                unique.len()
            );
            // Signing the filtered values equals signing the multiset.
            let m = MinHasher::new(HashScheme::Fast, 64, 9).unwrap();
            let (mut a, mut b) = ([0u32; 64], [0u32; 64]);
            m.sign_hashes(&hashes, &mut a);
            m.sign_hashes(&unique, &mut b);
            assert_eq!(a, b);
        }
    }

    #[test]
    fn adjacent_repeats_are_always_dropped_and_32_bit_hashes_spread() {
        // datasketch hashes fit in 32 bits: slots must not come from the (zero) high bits.
        let mut state = 11;
        let small: Vec<u64> = (0..300).map(|_| splitmix64(&mut state) >> 32).collect();
        let doubled: Vec<u64> = small.iter().flat_map(|&h| [h, h]).collect();
        let (mut unique, mut filter) = (Vec::new(), Vec::new());
        drop_recent_repeats(&doubled, &mut unique, &mut filter);
        assert_eq!(unique, small);
        let twice: Vec<u64> = small.iter().chain(&small).copied().collect();
        drop_recent_repeats(&twice, &mut unique, &mut filter);
        assert!(unique.len() < 330, "{} of 600 kept", unique.len());
    }

    /// Texts long enough for many filter, pipeline and SHA-1 batches, with near and far
    /// repeats, multi-byte characters, runs of one character and shingles of over 55 bytes.
    fn long_texts() -> Vec<String> {
        let mut state = 17;
        // The long word makes some word 2-grams longer than one SHA-1 block.
        let words = [
            "fn",
            "let",
            "mut",
            "impl",
            "Vec<u64>",
            "ünï",
            "文字",
            "🙂",
            "    ",
            "\n",
            "an_identifier_long_enough_that_two_words_need_two_sha1_blocks",
        ];
        let mut texts: Vec<String> = [40, 300, 2_000, 8_000]
            .iter()
            .map(|&n| {
                (0..n)
                    .map(|_| words[(splitmix64(&mut state) % words.len() as u64) as usize])
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .collect();
        texts.push("a".repeat(5000));
        texts.push(String::new());
        texts.push("short".into());
        texts
    }

    #[test]
    fn sign_equals_the_reference_on_long_texts() {
        let shinglers = [
            Shingler::Chars { k: 5, step: 1 },
            Shingler::Chars { k: 3, step: 2 },
            Shingler::Bytes { k: 7, step: 1 },
            Shingler::Words { n: 2, step: 1 },
        ];
        for scheme in [HashScheme::Fast, HashScheme::Datasketch] {
            for num_perm in [1, 16, 40, 128, 200, 256] {
                let reference =
                    MinHasher::with_kernel(scheme, num_perm, 5, Kernel::Reference).unwrap();
                for kernel in Kernel::supported() {
                    let m = MinHasher::with_kernel(scheme, num_perm, 5, kernel).unwrap();
                    // One scratch for all texts: state left by one text must not leak.
                    let mut scratch = SignScratch::default();
                    for shingler in &shinglers {
                        for text in long_texts() {
                            let mut want = vec![0; num_perm];
                            let mut got = vec![0; num_perm];
                            let n = reference.sign(
                                shingler,
                                &text,
                                &mut SignScratch::default(),
                                &mut want,
                            );
                            assert_eq!(m.sign(shingler, &text, &mut scratch, &mut got), n);
                            assert_eq!(got, want, "{scheme:?} {kernel:?} {num_perm} {shingler:?}");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn one_block_sha1_equals_the_digest_for_every_length() {
        let bytes: Vec<u8> = (0..80u8)
            .map(|i| i.wrapping_mul(151).wrapping_add(7))
            .collect();
        for len in 0..=bytes.len() {
            let digest = Sha1::digest(&bytes[..len]);
            let want = u32::from_le_bytes([digest[0], digest[1], digest[2], digest[3]]);
            assert_eq!(
                datasketch_shingle_hash(&bytes[..len]),
                u64::from(want),
                "len {len}"
            );
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
        datasketch_reference(&[h], &a, &b, &mut want);
        for (i, &x) in targets.iter().enumerate() {
            assert_eq!(u64::from(want[i]), (x % m) & 0xffff_ffff);
        }
        let mut got = [0u32; 32];
        datasketch_blocked(&[h], &a, &b, &mut got);
        assert_eq!(got, want);
        #[cfg(target_arch = "x86_64")]
        if Kernel::Avx512.is_supported() {
            let mut got = [0u32; 32];
            // SAFETY: the CPU supports the kernel's features (checked just above).
            unsafe { datasketch_avx512(&[h], &a, &b, &mut got) };
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

    #[test]
    fn empty_input_gives_empty_slots_and_short_output_panics() {
        let m = MinHasher::new(HashScheme::Fast, 5, 1).unwrap();
        let mut out = [0u32; 5];
        m.sign_hashes(&[], &mut out);
        assert_eq!(out, [EMPTY_SLOT; 5]);
        let r = std::panic::catch_unwind(|| m.sign_hashes(&[1], &mut [0u32; 4]));
        assert!(r.is_err());
    }

    #[test]
    fn invalid_settings_are_refused() {
        assert!(MinHasher::new(HashScheme::Fast, 0, 1).is_err());
        assert!(MinHasher::new(HashScheme::Datasketch, 4, 1 << 32).is_err());
        assert!(MinHasher::new(HashScheme::Fast, 4, 1 << 32).is_ok());
    }

    #[test]
    fn every_kernel_equals_the_reference_for_ragged_widths() {
        let mut state = 99;
        let hashes: Vec<u64> = (0..1000).map(|_| splitmix64(&mut state)).collect();
        for scheme in [HashScheme::Fast, HashScheme::Datasketch] {
            for num_perm in [1, 7, 128, 129, 300] {
                let reference =
                    MinHasher::with_kernel(scheme, num_perm, 3, Kernel::Reference).unwrap();
                let mut want = vec![0; num_perm];
                reference.sign_hashes(&hashes, &mut want);
                for kernel in Kernel::supported() {
                    let m = MinHasher::with_kernel(scheme, num_perm, 3, kernel).unwrap();
                    let mut got = vec![0; num_perm];
                    m.sign_hashes(&hashes, &mut got);
                    assert_eq!(got, want, "{scheme:?} {kernel:?} {num_perm}");
                }
            }
        }
    }
}
