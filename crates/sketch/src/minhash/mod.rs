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
//!    mode hash their windows in a tight loop (eight per AVX-512 vector, four per AVX2 vector,
//!    for 4..=8-byte windows), and long stretches of multi-byte chars four windows per AVX2
//!    vector, whatever their byte lengths up to 16. For `datasketch`, SHA-1 runs sixteen
//!    shingles at a time on AVX-512.
//! 2. A branch-free direct-mapped filter drops most repeats (`min` is idempotent, and real text
//!    repeats about half of its char 5-grams); a repeat it misses is signed twice, harmlessly.
//! 3. A min kernel over blocks of permutations held in SIMD registers (AVX-512, AVX2 or
//!    portable, chosen once per [`MinHasher`]). With AVX-512 and the fast scheme, the filter
//!    runs interleaved with the kernel's first block, on otherwise idle scalar units. `oph`
//!    has no blocks (one position per shingle): it skips the filter when no shingle set is
//!    wanted, and with the AVX2 and AVX-512 kernels mixes four shingles per AVX2 vector before
//!    the scalar minima. With AVX-512, once a text has given 128 shingles per position (most
//!    of them can no longer lower a minimum), sixteen at a time are compared with the minima
//!    held in registers and only the lower ones are taken.
//! 4. `oph` with character or byte shingles takes a text longer than 16 KiB a piece at a time:
//!    steps 1 and 2 and the minima run on one piece's hashes (at most 128 KiB, still in the L2
//!    cache) before the next piece is hashed, and densification runs once at the end. Each piece
//!    ends `k - 1` characters past where the next begins, so every shingle is hashed in exactly
//!    one piece; the distinct hashes a shingle set is built from are still collected whole
//!    ([`SignScratch::collecting_distinct`]), the others are not kept.
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

//!
//! # Where the code lives
//!
//! This file holds the public types, the parameters and the dispatch from a [`MinHasher`] to
//! its scheme; `fast`, `oph` and `datasketch` hold each scheme with its kernels (and, for
//! `datasketch`, numpy's MT19937), and `filter` the repeat filter of step 2 above.

mod datasketch;
mod fast;
mod filter;
mod oph;

use std::sync::Arc;

use neardup_cpu::{Feature, Features};
use serde::{Deserialize, Serialize};

use crate::SketchError;
use crate::shingle::Shingler;
use crate::shingle_hash::{self, WindowHasher};

pub use datasketch::datasketch_permutations;
use filter::{DEDUP_MIN, RepeatFilter, append_unless_recent, drop_recent_repeats};
use oph::OphKeys;
/// The fastest window hasher for a kernel, chosen once per [`MinHasher`].
fn window_hasher(kernel: Kernel) -> WindowHasher {
    #[cfg(target_arch = "x86_64")]
    if kernel == Kernel::Avx512 && shingle_hash::avx512_windows_supported() {
        return shingle_hash::AVX512_WINDOWS;
    }
    #[cfg(target_arch = "x86_64")]
    if matches!(kernel, Kernel::Avx2 | Kernel::Avx512) && shingle_hash::avx2_windows_supported() {
        return shingle_hash::AVX2_WINDOWS;
    }
    let _ = kernel;
    shingle_hash::PORTABLE_WINDOWS
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
        self.runs_on(Features::detected())
    }

    /// Whether a CPU with `features` can run the kernel.
    pub fn runs_on(self, features: Features) -> bool {
        match self {
            Kernel::Reference | Kernel::Portable => true,
            Kernel::Avx2 => features.has(Feature::Avx2),
            Kernel::Avx512 => {
                features.has_all(&[Feature::Avx512F, Feature::Avx512Dq, Feature::Avx512Bw])
            }
        }
    }

    /// The fastest kernel this CPU supports.
    pub fn best() -> Kernel {
        Kernel::best_for(Features::detected())
    }

    /// The fastest kernel a CPU with `features` can run.
    pub fn best_for(features: Features) -> Kernel {
        [Kernel::Avx512, Kernel::Avx2]
            .into_iter()
            .find(|k| k.runs_on(features))
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

#[derive(Debug)]
struct Inner {
    scheme: HashScheme,
    num_perm: usize,
    seed: u64,
    kernel: Kernel,
    /// Hashes the windows of char and byte mode; chosen with the kernel.
    window_hasher: WindowHasher,
    params: Params,
}

impl Inner {
    /// How `oph` takes its minima with this kernel (the reference and portable kernels stay
    /// scalar, so tests compare the others with them).
    fn oph_path(&self) -> oph::OphPath {
        match self.kernel {
            Kernel::Reference | Kernel::Portable => oph::OphPath::Scalar,
            Kernel::Avx2 => oph::OphPath::Avx2,
            Kernel::Avx512 => oph::OphPath::Avx512,
        }
    }

    /// Whether `text` is hashed a piece at a time (module docs, step 4): a long text, shingles
    /// that split at a place known without shingling (characters, bytes), the fast hash, and not
    /// the reference kernel (the oracle hashes every text whole).
    fn in_pieces(&self, shingler: &Shingler, text: &str) -> bool {
        matches!(self.scheme, HashScheme::Fast | HashScheme::Oph)
            && self.kernel != Kernel::Reference
            && matches!(shingler, Shingler::Chars { .. } | Shingler::Bytes { .. })
            && text.len() > shingle_hash::PIECE_BYTES
    }

    /// Hands `text`'s shingle hashes to `each` a piece at a time, in `hashes` (which then holds
    /// only the last piece's); returns how many there are. Only for texts
    /// [`Inner::in_pieces`] takes.
    fn hash_in_pieces(
        &self,
        shingler: &Shingler,
        text: &str,
        hashes: &mut Vec<u64>,
        mut each: impl FnMut(&[u64]),
    ) -> usize {
        let mut shingles = 0;
        let split = shingle_hash::fast_hash_in_pieces(
            shingler,
            text,
            hashes,
            self.window_hasher,
            shingle_hash::PIECE_BYTES,
            |piece| {
                shingles += piece.len();
                each(piece);
            },
        );
        debug_assert!(split, "in_pieces admits only shinglers that split");
        shingles
    }
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
    /// The recent-shingle filter of [`drop_recent_repeats`].
    filter: RepeatFilter,
    /// Whether `unique` holds the last signed text's filtered hashes.
    filtered: bool,
    /// Whether `hashes` holds only the last piece's hashes of a text signed in pieces.
    last_piece_only: bool,
    /// Per-position minima of the `oph` scheme before densification.
    bins: Vec<u64>,
    /// Whether the caller will want [`SignScratch::mostly_distinct_hashes`] after signing.
    collect_distinct: bool,
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

    /// Whether this scratch was made by [`SignScratch::collecting_distinct`].
    pub fn collects_distinct(&self) -> bool {
        self.collect_distinct
    }

    /// Turns collecting on or off (as [`SignScratch::collecting_distinct`] makes it): a caller
    /// that builds the set of a very long text otherwise ([`MinHasher::for_each_shingle_hash`])
    /// signs it without keeping its distinct hashes, which take 8 bytes per shingle.
    pub fn set_collecting_distinct(&mut self, on: bool) {
        self.collect_distinct = on;
    }

    /// Marks the `hashes` as replaced by another text's (not signed): the next
    /// [`SignScratch::mostly_distinct_hashes`] filters them anew.
    pub(crate) fn hashes_replaced(&mut self) {
        self.filtered = false;
        self.last_piece_only = false;
    }

    /// The shingle hashes of the last signed text as a set, with most repeats dropped (by the
    /// signing path's filter, run now if signing did not): the cheapest input for building the
    /// text's shingle set, as real text repeats about half of its shingles.
    ///
    /// # Panics
    /// When the last text was signed a piece at a time by a scratch not made by
    /// [`SignScratch::collecting_distinct`]: its hashes were not kept.
    pub fn mostly_distinct_hashes(&mut self) -> &[u64] {
        assert!(
            self.filtered || !self.last_piece_only,
            "a long text's distinct hashes are kept only by a collecting_distinct scratch"
        );
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

/// Hashes `text` a piece at a time ([`Inner::hash_in_pieces`]) into `unique`, the hashes the
/// repeat filter keeps, handing each piece's kept hashes to `each` as they come; returns how
/// many shingles the text has. The buffers are a [`SignScratch`]'s `hashes`, `unique` and
/// `filter`.
fn distinct_in_pieces(
    inner: &Inner,
    shingler: &Shingler,
    text: &str,
    (hashes, unique, filter): (&mut Vec<u64>, &mut Vec<u64>, &mut RepeatFilter),
    mut each: impl FnMut(&[u64]),
) -> usize {
    unique.clear();
    let mut filter = filter.begin_text();
    inner.hash_in_pieces(shingler, text, hashes, |piece| {
        let start = unique.len();
        append_unless_recent(piece, unique, &mut filter);
        each(&unique[start..]);
    })
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
            HashScheme::Datasketch => datasketch::shingle_hash(shingle),
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
            oph::sign(hashes, keys, out, &mut Vec::new(), inner.oph_path());
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
                fast::sign_block::<W>(inner.kernel, hashes, a, s, &mut block_out);
            }
            Params::Datasketch { a, b } => {
                let a = a[range.clone()].try_into().expect("padded block");
                let b = b[range].try_into().expect("padded block");
                datasketch::sign_block::<W>(inner.kernel, hashes, a, b, &mut block_out);
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
            last_piece_only,
            bins,
            collect_distinct,
        } = scratch;
        let inner = &*self.inner;
        assert_eq!(
            out.len(),
            inner.num_perm,
            "signature buffer length != num_perm"
        );
        if let Params::Oph(keys) = &inner.params
            && inner.in_pieces(shingler, text)
        {
            let path = inner.oph_path();
            oph::begin(bins, out.len());
            let mut taken = 0;
            let take = |new: &[u64]| {
                oph::update(new, keys, bins, path, taken);
                taken += new.len();
            };
            let shingles = if *collect_distinct {
                let buffers = (&mut *hashes, &mut *unique, &mut *filter);
                distinct_in_pieces(inner, shingler, text, buffers, take)
            } else {
                inner.hash_in_pieces(shingler, text, hashes, take)
            };
            // `hashes` holds only the last piece's; `unique` all of the text's when collected.
            (*filtered, *last_piece_only) = (*collect_distinct, true);
            if shingles == 0 {
                out.fill(EMPTY_SLOT);
            } else {
                oph::finish(bins, keys, out);
            }
            return shingles;
        }
        self.hash_shingles(shingler, text, hashes);
        *last_piece_only = false;
        if let Params::Oph(keys) = &inner.params {
            // One cheap update per shingle: filtering repeats first would cost as much.
            *filtered = false;
            if hashes.is_empty() {
                out.fill(EMPTY_SLOT);
            } else if *collect_distinct && hashes.len() >= DEDUP_MIN {
                drop_recent_repeats(hashes, unique, filter);
                *filtered = true;
                oph::sign(unique, keys, out, bins, inner.oph_path());
            } else {
                oph::sign(hashes, keys, out, bins, inner.oph_path());
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
            let filter = &mut filter.begin_text();
            let head = out.len().min(BLOCK);
            let mut block_out = [0u32; BLOCK];
            // SAFETY: `with_kernel` only accepts `Kernel::Avx512` where AVX-512F is supported.
            unsafe {
                match head {
                    0..=16 => {
                        fast::avx512_filtered::<1>(hashes, filter, unique, a, s, &mut block_out)
                    }
                    17..=32 => {
                        fast::avx512_filtered::<2>(hashes, filter, unique, a, s, &mut block_out)
                    }
                    33..=64 => {
                        fast::avx512_filtered::<4>(hashes, filter, unique, a, s, &mut block_out)
                    }
                    _ => fast::avx512_filtered::<8>(hashes, filter, unique, a, s, &mut block_out),
                }
            }
            out[..head].copy_from_slice(&block_out[..head]);
            self.sign_blocks_from(unique, BLOCK, out);
            return hashes.len();
        }
        drop_recent_repeats(hashes, unique, filter);
        self.sign_hashes(unique, out);
        hashes.len()
    }

    /// The shingle hashes of `text` with most repeats dropped, as
    /// [`SignScratch::mostly_distinct_hashes`] holds them after signing `text`, without signing
    /// it: a long text is hashed and filtered a piece at a time (as signing does).
    pub fn mostly_distinct_hashes<'s>(
        &self,
        shingler: &Shingler,
        text: &str,
        scratch: &'s mut SignScratch,
    ) -> &'s [u64] {
        let inner = &*self.inner;
        if inner.in_pieces(shingler, text) {
            let SignScratch {
                hashes,
                unique,
                filter,
                filtered,
                last_piece_only,
                ..
            } = scratch;
            distinct_in_pieces(inner, shingler, text, (hashes, unique, filter), |_| {});
            (*filtered, *last_piece_only) = (true, true);
            return &scratch.unique;
        }
        self.hash_shingles(shingler, text, &mut scratch.hashes);
        scratch.hashes_replaced();
        scratch.mostly_distinct_hashes()
    }

    /// Hands every shingle hash of `text` (already normalised; repeats kept, text order) to
    /// `each`, a slice of at most `most` hashes at a time: the hashes of a text too long to hold
    /// its hashes at once. A text [`MinHasher::sign`] takes a piece at a time is hashed so, so
    /// that the hashes held at once stay within a piece; other texts (other shinglers and
    /// schemes) are hashed whole into `scratch` first. Returns the number of shingles.
    pub fn for_each_shingle_hash(
        &self,
        shingler: &Shingler,
        text: &str,
        scratch: &mut SignScratch,
        most: usize,
        mut each: impl FnMut(&[u64]),
    ) -> usize {
        let inner = &*self.inner;
        let most = most.max(1);
        if inner.in_pieces(shingler, text) {
            let n = inner.hash_in_pieces(shingler, text, &mut scratch.hashes, |piece| {
                piece.chunks(most).for_each(&mut each)
            });
            scratch.hashes_replaced();
            scratch.last_piece_only = true;
            n
        } else {
            self.hash_shingles(shingler, text, &mut scratch.hashes);
            scratch.hashes_replaced();
            scratch.hashes.chunks(most).for_each(&mut each);
            scratch.hashes.len()
        }
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
                datasketch::hash_shingles_x16(shingler, text, hashes)
            }
            (HashScheme::Datasketch, _) => {
                hashes.clear();
                shingler.for_each(text, |s| hashes.push(datasketch::shingle_hash(s)));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let mut texts: Vec<String> = [40, 300, 2_000, 8_000, 20_000]
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
        let texts = long_texts();
        assert!(
            texts
                .iter()
                .any(|t| t.len() > 3 * shingle_hash::PIECE_BYTES),
            "some text is signed in several pieces"
        );
        for scheme in [HashScheme::Fast, HashScheme::Datasketch, HashScheme::Oph] {
            for num_perm in [1, 16, 40, 128, 200, 256] {
                let reference =
                    MinHasher::with_kernel(scheme, num_perm, 5, Kernel::Reference).unwrap();
                for kernel in Kernel::supported() {
                    let m = MinHasher::with_kernel(scheme, num_perm, 5, kernel).unwrap();
                    // One scratch of each kind for all texts: state left by one text must not
                    // leak into the next.
                    let mut scratches =
                        [SignScratch::default(), SignScratch::collecting_distinct()];
                    for shingler in &shinglers {
                        for text in &texts {
                            let mut want = vec![0; num_perm];
                            let n = reference.sign(
                                shingler,
                                text,
                                &mut SignScratch::default(),
                                &mut want,
                            );
                            for scratch in &mut scratches {
                                let mut got = vec![0; num_perm];
                                assert_eq!(m.sign(shingler, text, scratch, &mut got), n);
                                assert_eq!(
                                    got, want,
                                    "{scheme:?} {kernel:?} {num_perm} {shingler:?}"
                                );
                            }
                        }
                    }
                }
            }
        }
    }

    /// The distinct hashes a collecting scratch keeps after signing, and those of
    /// [`MinHasher::mostly_distinct_hashes`], are every shingle hash of the text (as a set), for
    /// texts signed whole and in pieces.
    #[test]
    fn distinct_hashes_are_the_texts_shingle_hashes_whole_or_in_pieces() {
        let shinglers = [
            Shingler::Chars { k: 5, step: 1 },
            Shingler::Chars { k: 4, step: 3 },
            Shingler::Bytes { k: 6, step: 2 },
            Shingler::Words { n: 3, step: 1 },
        ];
        let as_set = |v: &[u64]| {
            v.iter()
                .copied()
                .collect::<std::collections::BTreeSet<u64>>()
        };
        for kernel in Kernel::supported() {
            let m = MinHasher::with_kernel(HashScheme::Oph, 128, 9, kernel).unwrap();
            let mut signing = SignScratch::collecting_distinct();
            let mut plain = SignScratch::default();
            for shingler in &shinglers {
                for text in long_texts() {
                    let mut want = Vec::new();
                    shingler.for_each(&text, |s| want.push(xxhash_rust::xxh3::xxh3_64(s)));
                    let want = as_set(&want);
                    m.sign(shingler, &text, &mut signing, &mut [0; 128]);
                    assert_eq!(as_set(signing.mostly_distinct_hashes()), want, "{kernel:?}");
                    let got = as_set(m.mostly_distinct_hashes(shingler, &text, &mut plain));
                    assert_eq!(got, want, "{kernel:?} {shingler:?}");
                }
            }
        }
    }

    /// A scratch that does not collect distinct hashes refuses to make them up after a text it
    /// signed in pieces (it kept only the last piece's hashes), and gives them after a short one.
    #[test]
    fn a_plain_scratch_has_no_distinct_hashes_of_a_text_signed_in_pieces() {
        let m = MinHasher::new(HashScheme::Oph, 64, 1).unwrap();
        let shingler = Shingler::Chars { k: 5, step: 1 };
        let long = "lorem ipsum dolor sit amet ".repeat(2 * shingle_hash::PIECE_BYTES / 27 + 1);
        let mut scratch = SignScratch::default();
        m.sign(
            &shingler,
            "a short text of a few words",
            &mut scratch,
            &mut [0; 64],
        );
        assert_eq!(scratch.mostly_distinct_hashes().len(), 23);
        if m.inner.kernel != Kernel::Reference {
            m.sign(&shingler, &long, &mut scratch, &mut [0; 64]);
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                scratch.mostly_distinct_hashes().len()
            }));
            assert!(r.is_err());
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

    #[test]
    fn the_best_kernel_at_every_feature_level_runs_there() {
        for features in Features::detected().levels() {
            let best = Kernel::best_for(features);
            assert!(best.runs_on(features), "{best:?} on {features:?}");
            assert!(best.is_supported());
        }
        assert_eq!(Kernel::best_for(Features::none()), Kernel::Portable);
        assert_eq!(Kernel::best(), Kernel::best_for(Features::detected()));
    }

    /// Widths around every block size the kernels special-case (16, 32, 64, 128 lanes, and
    /// more than one block).
    const EDGE_WIDTHS: [usize; 14] = [1, 2, 15, 16, 17, 31, 32, 33, 63, 64, 65, 127, 129, 257];

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]

        /// Every kernel this CPU runs signs random hashes (repeats included, any count around
        /// the filter's threshold) exactly as the reference does, for every scheme and width.
        #[test]
        fn every_kernel_signs_random_hashes_like_the_reference(
            distinct in proptest::collection::vec(proptest::prelude::any::<u64>(), 0..80),
            repeats in proptest::collection::vec(proptest::prelude::any::<proptest::sample::Index>(), 0..80),
            width in proptest::sample::select(EDGE_WIDTHS.to_vec()),
            seed in 0u64..1 << 32,
        ) {
            let mut hashes = distinct.clone();
            if !distinct.is_empty() {
                hashes.extend(repeats.iter().map(|i| distinct[i.index(distinct.len())]));
            }
            for scheme in [HashScheme::Fast, HashScheme::Datasketch, HashScheme::Oph] {
                let reference = MinHasher::with_kernel(scheme, width, seed, Kernel::Reference).unwrap();
                let mut want = vec![0; width];
                reference.sign_hashes(&hashes, &mut want);
                for kernel in Kernel::supported() {
                    let m = MinHasher::with_kernel(scheme, width, seed, kernel).unwrap();
                    let mut got = vec![0; width];
                    m.sign_hashes(&hashes, &mut got);
                    proptest::prop_assert_eq!(&got, &want, "{:?} {:?} {}", scheme, kernel, width);
                }
            }
        }

        /// Every kernel shingles, hashes and signs random text (ASCII runs broken by multi-byte
        /// characters, long enough for the filter and the SHA-1 batches) like the reference.
        #[test]
        fn every_kernel_signs_random_text_like_the_reference(
            text in "([a-z ]{0,40}|[é文🙂·]{0,3}){0,12}",
            width in proptest::sample::select(EDGE_WIDTHS.to_vec()),
            k in 1usize..10,
            step in 1usize..3,
        ) {
            let shinglers = [
                Shingler::Chars { k, step },
                Shingler::Bytes { k, step },
                Shingler::Words { n: k.min(3), step },
            ];
            for scheme in [HashScheme::Fast, HashScheme::Datasketch, HashScheme::Oph] {
                let reference = MinHasher::with_kernel(scheme, width, 7, Kernel::Reference).unwrap();
                for kernel in Kernel::supported() {
                    let m = MinHasher::with_kernel(scheme, width, 7, kernel).unwrap();
                    for shingler in &shinglers {
                        let (mut want, mut got) = (vec![0; width], vec![0; width]);
                        let n = reference.sign(shingler, &text, &mut SignScratch::default(), &mut want);
                        let mut scratch = SignScratch::collecting_distinct();
                        proptest::prop_assert_eq!(m.sign(shingler, &text, &mut scratch, &mut got), n);
                        proptest::prop_assert_eq!(&got, &want, "{:?} {:?} {} {:?}", scheme, kernel, width, shingler);
                    }
                }
            }
        }
    }
}
