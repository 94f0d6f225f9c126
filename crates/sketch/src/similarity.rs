//! Comparing signatures and exact shingle sets.
//!
//! Each public function picks its kernel from [`Features::detected`]; the `*_on` functions below
//! take the features explicitly, so that tests run every kernel this CPU has (and the portable
//! code) on the same inputs.

use neardup_cpu::{Feature, Features};

/// Number of equal positions (runtime-dispatched SIMD).
///
/// # Panics
/// When the lengths differ.
pub fn count_equal(a: &[u32], b: &[u32]) -> usize {
    count_equal_on(Features::detected(), a, b)
}

/// [`count_equal`] with the kernel for `features`.
#[inline]
fn count_equal_on(features: Features, a: &[u32], b: &[u32]) -> usize {
    assert_eq!(a.len(), b.len(), "signatures of different lengths");
    #[cfg(target_arch = "x86_64")]
    {
        if features.has(Feature::Avx512F) {
            // SAFETY: `Features` only ever holds features this CPU has.
            return unsafe { count_equal_avx512(a, b) };
        }
        if features.has(Feature::Avx2) {
            // SAFETY: as above.
            return unsafe { count_equal_avx2(a, b) };
        }
    }
    let _ = features;
    count_equal_portable(a, b)
}

/// The plain loop; LLVM vectorises it for whatever features the caller enables.
#[inline(always)]
fn count_equal_portable(a: &[u32], b: &[u32]) -> usize {
    // Summing u32 flags per fixed chunk keeps the vector body free of 64-bit widening.
    let mut total = 0usize;
    let mut ca = a.chunks_exact(64);
    let mut cb = b.chunks_exact(64);
    for (x, y) in (&mut ca).zip(&mut cb) {
        total += x.iter().zip(y).map(|(p, q)| u32::from(p == q)).sum::<u32>() as usize;
    }
    total
        + ca.remainder()
            .iter()
            .zip(cb.remainder())
            .filter(|(p, q)| p == q)
            .count()
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn count_equal_avx2(a: &[u32], b: &[u32]) -> usize {
    count_equal_portable(a, b)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn count_equal_avx512(a: &[u32], b: &[u32]) -> usize {
    count_equal_portable(a, b)
}

/// Share of equal positions: `count_equal / len`, as f64 (exactly `numpy.mean(a == b)`).
/// Two empty signatures give 0.0 (numpy would give NaN), so that "no evidence" never passes a
/// similarity threshold.
pub fn similarity(a: &[u32], b: &[u32]) -> f64 {
    if a.is_empty() {
        assert!(b.is_empty(), "signatures of different lengths");
        return 0.0;
    }
    count_equal(a, b) as f64 / a.len() as f64
}

/// Exact Jaccard of two sorted deduplicated sets. Two empty sets give 1.0 (they are equal).
pub fn jaccard_sorted<T: Ord + Copy>(a: &[T], b: &[T]) -> f64 {
    if a.is_empty() && b.is_empty() {
        return 1.0;
    }
    let inter = merge_intersection_len(a, b, 0);
    inter as f64 / (a.len() + b.len() - inter) as f64
}

/// The Jaccard of two shingle sets (sorted deduplicated fingerprints, as built by
/// [`fingerprint_set`]) when it reaches `threshold`, `None` when it does not — which is usually
/// known long before the merge ends: the size ratio bounds the Jaccard from above
/// (`J <= min/max`), and the merge stops as soon as too few elements are left to reach the
/// intersection the threshold needs. Equal to `Some(jaccard_sorted(a, b)).filter(|j| *j >=
/// threshold)`; runtime-dispatched SIMD.
pub fn jaccard_at_least(a: &[u32], b: &[u32], threshold: f64) -> Option<f64> {
    if a.is_empty() && b.is_empty() {
        return (1.0 >= threshold).then_some(1.0);
    }
    let (small, large) = (a.len().min(b.len()), a.len().max(b.len()));
    // J <= |small| / |large|, and float division is monotone, so this never rejects a pair
    // the exact computation below would accept (a subset gives exactly this quotient).
    if (small as f64 / large as f64) < threshold {
        return None;
    }
    // J >= t  <=>  inter >= t * (|a| + |b|) / (1 + t); one less than the rounded-up bound is
    // still a safe stopping point, as the final comparison is on the exact value.
    let needed = ((threshold * (a.len() + b.len()) as f64) / (1.0 + threshold)).floor() as usize;
    let inter = intersection_len(Features::detected(), a, b, needed.saturating_sub(1));
    let j = inter as f64 / (a.len() + b.len() - inter) as f64;
    (j >= threshold).then_some(j)
}

/// Whether the AVX-512 set kernels of [`simd`] can run with `features`.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn has_avx512_sets(features: Features) -> bool {
    features.has_all(&[Feature::Avx512F, Feature::Popcnt])
}

/// `|a ∩ b|` of sorted deduplicated sets, with the kernel for `features`; when `needed > 0` it
/// may stop early, returning a smaller count, once `needed` can no longer be reached.
fn intersection_len(features: Features, a: &[u32], b: &[u32], needed: usize) -> usize {
    #[cfg(target_arch = "x86_64")]
    if has_avx512_sets(features) {
        // SAFETY: `Features` only ever holds features this CPU has.
        return unsafe { simd::intersection_len_avx512(a, b, needed) };
    }
    #[cfg(target_arch = "x86_64")]
    if features.has(Feature::Avx2) {
        // SAFETY: as above.
        return unsafe { simd::intersection_len_avx2(a, b, needed) };
    }
    let _ = features;
    merge_intersection_len(a, b, needed)
}

/// `|a ∩ b|` by a branch-free merge (the comparisons are as unpredictable as coin flips, so
/// branches would mispredict half the time), with the early exit of [`intersection_len`].
fn merge_intersection_len<T: Ord + Copy>(a: &[T], b: &[T], needed: usize) -> usize {
    let (mut i, mut j, mut inter) = (0usize, 0usize, 0usize);
    // Check the early exit once per stride: cheap, and it still ends most hopeless merges early.
    const STRIDE: usize = 64;
    while i < a.len() && j < b.len() {
        let steps = STRIDE.min(a.len() - i).min(b.len() - j);
        for _ in 0..steps {
            let (x, y) = (a[i], b[j]);
            inter += usize::from(x == y);
            i += usize::from(x <= y);
            j += usize::from(y <= x);
        }
        if needed > 0 && inter + (a.len() - i).min(b.len() - j) < needed {
            return inter;
        }
    }
    inter
}

/// A shingle's 32-bit fingerprint in shingle sets: both halves of its 64-bit hash folded
/// together (the `datasketch` scheme's hashes are 32-bit, and fold to themselves).
///
/// Half the bytes of the full hash halve the memory of representatives' sets and the work of
/// building and comparing them. The price is a tiny inexactness: two different shingles share
/// a fingerprint with probability 2^-32, so two sets of `n` shingles with `d` unshared ones on
/// each side gain about `d² / 2^32` false common elements — about 0.002 for two 3,000-shingle
/// documents at Jaccard 0.8, and the Jaccard moves by about 10^-6 when one occurs.
#[inline(always)]
pub fn fingerprint(hash: u64) -> u32 {
    (hash ^ (hash >> 32)) as u32
}

/// Reusable buffers of [`fingerprint_set`].
#[derive(Default, Debug)]
pub struct SetScratch {
    counts: Vec<u32>,
    scattered: Vec<u32>,
}

/// Replaces `out` with the sorted distinct [`fingerprint`]s of `hashes` (repeats allowed, any
/// order): a text's shingle set for exact verification. Fast when the fingerprints are uniform
/// (shingle hashes of every scheme are); correct for any input.
///
/// Distribution sorting rather than a comparison sort: one counting pass and one scatter on the
/// top bits leave the values ordered by bucket, and each bucket is then finished on its own —
/// by a sorting network in one register, with repeats dropped in the same register (16 lanes
/// where AVX-512 is available, buckets of about 8 values; 8 lanes with AVX2, buckets of about
/// 3), by one insertion-sort pass over buckets of about one value elsewhere. About linear time, several times faster than `sort_unstable` + `dedup` on
/// the few thousand values of a typical document.
pub fn fingerprint_set(hashes: &[u64], out: &mut Vec<u32>, scratch: &mut SetScratch) {
    out.clear();
    append_fingerprint_set(hashes, out, scratch);
}

/// [`fingerprint_set`] appending to `out` instead of replacing it (many sets in one buffer).
pub fn append_fingerprint_set(hashes: &[u64], out: &mut Vec<u32>, scratch: &mut SetScratch) {
    append_fingerprint_set_on(Features::detected(), hashes, out, scratch)
}

/// [`append_fingerprint_set`] with the kernel for `features`.
fn append_fingerprint_set_on(
    features: Features,
    hashes: &[u64],
    out: &mut Vec<u32>,
    scratch: &mut SetScratch,
) {
    let n = hashes.len();
    if n < 64 {
        let base = out.len();
        out.extend(hashes.iter().map(|&h| fingerprint(h)));
        out[base..].sort_unstable();
        let len = dedup_sorted(&mut out[base..]);
        out.truncate(base + len);
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if has_avx512_sets(features) {
        // SAFETY: `Features` only ever holds features this CPU has.
        unsafe { simd::append_set_avx512(hashes, out, scratch) };
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if features.has_all(&[Feature::Avx2, Feature::Popcnt]) {
        // SAFETY: as above.
        unsafe { simd::append_set_avx2(hashes, out, scratch) };
        return;
    }
    let _ = features;
    append_set_portable(hashes, out, scratch);
}

/// The top `bits` of fingerprints as bucket numbers, and each bucket's end in
/// `counts[..1 << bits]` after `hashes` were scattered to `dst` in bucket order.
fn scatter_by_top_bits(
    hashes: &[u64],
    bits: u32,
    counts: &mut Vec<u32>,
    dst: &mut [std::mem::MaybeUninit<u32>],
) {
    assert!(
        (1..=32).contains(&bits) && dst.len() >= hashes.len(),
        "a scatter needs 1 to 32 bits and a slot per hash"
    );
    let shift = 32 - bits;
    let buckets = 1usize << bits;
    counts.clear();
    counts.resize(buckets, 0);
    // Unchecked indexing: a bounds check per value in both loops below measured slower
    // (docs/benchmarks.md, "Stage 2's cost per hot document").
    let cursors = counts.as_mut_ptr();
    for &h in hashes {
        // SAFETY: a fingerprint is 32 bits, so its top `bits` are below `buckets`, the length
        // of `counts`.
        unsafe { *cursors.add((fingerprint(h) >> shift) as usize) += 1 };
    }
    // Exclusive prefix sums, carried in a register (`counts[b] += counts[b - 1]` would wait on
    // the store of the previous iteration).
    let mut sum = 0u32;
    for c in counts.iter_mut() {
        let here = *c;
        *c = sum;
        sum += here;
    }
    // counts[b] is now where bucket b starts, and serves as its write cursor: it ends where
    // the bucket ends.
    let (cursors, slots) = (counts.as_mut_ptr(), dst.as_mut_ptr());
    for &h in hashes {
        let x = fingerprint(h);
        let b = (x >> shift) as usize;
        // SAFETY: `b < buckets` as above; bucket `b`'s cursor runs from where the bucket starts
        // to where it ends, so it stays below `hashes.len()`, which `dst` has (asserted above).
        unsafe {
            let cursor = cursors.add(b);
            (*slots.add(*cursor as usize)).write(x);
            *cursor += 1;
        }
    }
}

/// About one value per bucket, then one insertion pass over the whole run.
fn append_set_portable(hashes: &[u64], out: &mut Vec<u32>, scratch: &mut SetScratch) {
    let n = hashes.len();
    let base = out.len();
    out.reserve(n);
    // n .. 2n buckets; past 2^17 the histogram leaves the L2 cache.
    let bits = (usize::BITS - n.leading_zeros()).clamp(6, 17);
    scatter_by_top_bits(
        hashes,
        bits,
        &mut scratch.counts,
        &mut out.spare_capacity_mut()[..n],
    );
    // SAFETY: the scatter wrote each of the n slots once (the cursors partition 0..n).
    unsafe { out.set_len(base + n) };
    let v = &mut out[base..];
    let budget = 8 * n;
    let mut moved = 0usize;
    for i in 1..n {
        let x = v[i];
        let mut j = i;
        while j > 0 && v[j - 1] > x {
            v[j] = v[j - 1];
            j -= 1;
        }
        v[j] = x;
        moved += i - j;
        if moved > budget {
            // Skewed input: the insertion pass would go quadratic.
            v.sort_unstable();
            break;
        }
    }
    let len = dedup_sorted(v);
    out.truncate(base + len);
}

/// Moves the distinct values of sorted `v` to its front; returns how many there are.
fn dedup_sorted<T: PartialEq + Copy>(v: &mut [T]) -> usize {
    let mut write = 0;
    for i in 0..v.len() {
        if write == 0 || v[write - 1] != v[i] {
            v[write] = v[i];
            write += 1;
        }
    }
    write
}

#[cfg(target_arch = "x86_64")]
mod simd {
    use std::arch::x86_64::*;

    use super::{SetScratch, dedup_sorted, merge_intersection_len, scatter_by_top_bits};

    /// Lane `i` of a compare-exchange stage's partner permutation is `i ^ distance`.
    const fn partner_lanes(distance: usize) -> [i32; 16] {
        let mut lanes = [0i32; 16];
        let mut i = 0;
        while i < 16 {
            lanes[i] = (i ^ distance) as i32;
            i += 1;
        }
        lanes
    }

    /// The 10 stages of the bitonic network on 16 lanes: (block, distance).
    pub(super) const STAGES: [(usize, usize); 10] = [
        (2, 1),
        (4, 2),
        (4, 1),
        (8, 4),
        (8, 2),
        (8, 1),
        (16, 8),
        (16, 4),
        (16, 2),
        (16, 1),
    ];

    /// Which lanes keep the larger value of their pair in each stage of a bitonic network on
    /// `lanes` lanes (`stages` as (block, distance)): the upper lane of an ascending block, the
    /// lower lane of a descending one (the last stages sort ascending).
    const fn take_max_masks<const S: usize>(stages: [(usize, usize); S], lanes: usize) -> [u32; S] {
        let mut masks = [0u32; S];
        let mut s = 0;
        while s < S {
            let (block, distance) = stages[s];
            let mut i = 0;
            while i < lanes {
                let upper = i & distance != 0;
                let descending = i & block != 0 && block < lanes;
                if upper != descending {
                    masks[s] |= 1 << i;
                }
                i += 1;
            }
            s += 1;
        }
        masks
    }

    /// [`take_max_masks`] of the 16-lane network.
    pub(super) const TAKE_MAX: [u32; 10] = take_max_masks(STAGES, 16);
    const PARTNER_1: [i32; 16] = partner_lanes(1);
    const PARTNER_2: [i32; 16] = partner_lanes(2);
    const PARTNER_4: [i32; 16] = partner_lanes(4);
    const PARTNER_8: [i32; 16] = partner_lanes(8);
    /// Lane `i` takes lane `i - 1` (lane 0 itself).
    const PREVIOUS: [i32; 16] = [0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14];

    /// Sorts 16 unsigned lanes ascending (bitonic network), given the partner permutations
    /// `[PARTNER_1, PARTNER_2, PARTNER_4, PARTNER_8]` in registers.
    #[inline]
    #[target_feature(enable = "avx512f")]
    fn sort16(mut v: __m512i, [p1, p2, p4, p8]: [__m512i; 4]) -> __m512i {
        #[inline(always)]
        fn stage(v: __m512i, partners: __m512i, take_max: u32) -> __m512i {
            // SAFETY: only called from `sort16`, which requires AVX-512F.
            unsafe {
                let p = _mm512_permutexvar_epi32(partners, v);
                let lo = _mm512_min_epu32(v, p);
                let hi = _mm512_max_epu32(v, p);
                _mm512_mask_blend_epi32(take_max as u16, lo, hi)
            }
        }
        // Written out so that every stage's permutation and mask are constants.
        v = stage(v, p1, TAKE_MAX[0]);
        v = stage(v, p2, TAKE_MAX[1]);
        v = stage(v, p1, TAKE_MAX[2]);
        v = stage(v, p4, TAKE_MAX[3]);
        v = stage(v, p2, TAKE_MAX[4]);
        v = stage(v, p1, TAKE_MAX[5]);
        v = stage(v, p8, TAKE_MAX[6]);
        v = stage(v, p4, TAKE_MAX[7]);
        v = stage(v, p2, TAKE_MAX[8]);
        stage(v, p1, TAKE_MAX[9])
    }

    /// [`super::append_fingerprint_set`] with buckets of about 8 values, each sorted and
    /// deduplicated in one register.
    #[target_feature(enable = "avx512f,popcnt")]
    pub(super) fn append_set_avx512(hashes: &[u64], out: &mut Vec<u32>, scratch: &mut SetScratch) {
        let n = hashes.len();
        // n/8 .. n/4 buckets: 4 to 8 values each on average, rarely more than the 16 lanes
        // (2 or 16 values per bucket measured slower).
        let bits = (usize::BITS - n.leading_zeros())
            .saturating_sub(3)
            .clamp(1, 17);
        let SetScratch { counts, scattered } = scratch;
        scattered.clear();
        scattered.reserve(n);
        scatter_by_top_bits(
            hashes,
            bits,
            counts,
            &mut scattered.spare_capacity_mut()[..n],
        );
        // SAFETY: the scatter wrote each of the n slots once.
        unsafe { scattered.set_len(n) };
        // Every bucket stores 16 lanes, so keep 16 slots of slack past the last value.
        let base = out.len();
        out.reserve(n + 16);
        let dst = out.spare_capacity_mut().as_mut_ptr().cast::<u32>();
        // SAFETY: the constant is 16 i32s.
        let previous = unsafe { _mm512_loadu_si512(PREVIOUS.as_ptr().cast()) };
        // SAFETY: the constants are 16 i32s each.
        let partners = [PARTNER_1, PARTNER_2, PARTNER_4, PARTNER_8]
            .map(|lanes| unsafe { _mm512_loadu_si512(lanes.as_ptr().cast()) });
        let padding = _mm512_set1_epi32(-1);
        let src = scattered.as_mut_ptr();
        let mut written = 0usize;
        let mut start = 0usize;
        for &end in counts.iter() {
            let end = end as usize;
            let len = end - start;
            if len <= 16 {
                let valid = ((1u32 << len) - 1) as u16;
                // SAFETY: `valid` covers `scattered[start..end]`; the store writes 16 lanes at
                // `written <= start`, within the `n + 16` reserved slots.
                unsafe {
                    let v = _mm512_mask_loadu_epi32(padding, valid, src.add(start).cast());
                    // Padding is u32::MAX, which sorts last: the first `len` lanes are the bucket.
                    let v = sort16(v, partners);
                    let before = _mm512_permutexvar_epi32(previous, v);
                    let keep = (_mm512_cmpneq_epi32_mask(v, before) | 1) & valid;
                    // Compress in a register, then a plain store (a compressing store to memory
                    // is microcoded and slow on some CPUs).
                    let packed = _mm512_maskz_compress_epi32(keep, v);
                    _mm512_storeu_si512(dst.add(written).cast(), packed);
                    written += keep.count_ones() as usize;
                }
            } else {
                // SAFETY: `start..end` is within the n scattered values, and `written <= start`
                // with `end - start` reserved slots from `written` on.
                written +=
                    unsafe { finish_crowded_bucket(src.add(start), end - start, dst.add(written)) };
            }
            start = end;
        }
        // SAFETY: slots `base..base + written` were written above.
        unsafe { out.set_len(base + written) };
    }

    /// Compare-exchange stages of the bitonic network on 8 lanes, as (block, distance).
    pub(super) const STAGES_8: [(usize, usize); 6] =
        [(2, 1), (4, 2), (4, 1), (8, 4), (8, 2), (8, 1)];

    /// [`take_max_masks`] of the 8-lane network, as `_mm256_blend_epi32` immediates.
    pub(super) const TAKE_MAX_8: [u32; 6] = take_max_masks(STAGES_8, 8);

    /// For each 8-bit mask of lanes to keep, the permutation moving those lanes to the front
    /// (AVX2 has no compress instruction).
    static COMPRESS_8: [[i32; 8]; 256] = neardup_cpu::kept_lanes_first_i32();

    /// One compare-exchange stage on 8 lanes: each lane takes the lesser of itself and its
    /// `partner` lane, or the greater where `TAKE_MAX` has its bit.
    #[inline(always)]
    fn exchange<const TAKE_MAX: i32>(v: __m256i, partner: __m256i) -> __m256i {
        // SAFETY: only called from functions that require AVX2 (`sort8`, `merge_bitonic8`).
        unsafe {
            let lo = _mm256_min_epu32(v, partner);
            let hi = _mm256_max_epu32(v, partner);
            _mm256_blend_epi32::<TAKE_MAX>(lo, hi)
        }
    }

    /// The partner lanes at distance 1 (an in-lane shuffle).
    #[inline(always)]
    fn partner_1(v: __m256i) -> __m256i {
        // SAFETY: only called from functions that require AVX2.
        unsafe { _mm256_shuffle_epi32::<0b10_11_00_01>(v) }
    }

    /// The partner lanes at distance 2 (an in-lane shuffle).
    #[inline(always)]
    fn partner_2(v: __m256i) -> __m256i {
        // SAFETY: as above.
        unsafe { _mm256_shuffle_epi32::<0b01_00_11_10>(v) }
    }

    /// The partner lanes at distance 4 (the 128-bit halves swapped).
    #[inline(always)]
    fn partner_4(v: __m256i) -> __m256i {
        // SAFETY: as above.
        unsafe { _mm256_permute2x128_si256::<0x01>(v, v) }
    }

    /// Sorts 8 unsigned lanes ascending (the bitonic network).
    #[inline]
    #[target_feature(enable = "avx2")]
    fn sort8(mut v: __m256i) -> __m256i {
        v = exchange::<{ TAKE_MAX_8[0] as i32 }>(v, partner_1(v));
        v = exchange::<{ TAKE_MAX_8[1] as i32 }>(v, partner_2(v));
        v = exchange::<{ TAKE_MAX_8[2] as i32 }>(v, partner_1(v));
        merge_bitonic8(v)
    }

    /// Sorts 8 unsigned lanes that form a bitonic sequence ascending (the network's last three
    /// stages).
    #[inline]
    #[target_feature(enable = "avx2")]
    fn merge_bitonic8(mut v: __m256i) -> __m256i {
        v = exchange::<{ TAKE_MAX_8[3] as i32 }>(v, partner_4(v));
        v = exchange::<{ TAKE_MAX_8[4] as i32 }>(v, partner_2(v));
        exchange::<{ TAKE_MAX_8[5] as i32 }>(v, partner_1(v))
    }

    /// The lanes of `v` equal to the same lane of `before`, a bit each.
    #[inline]
    #[target_feature(enable = "avx2")]
    fn equal_lanes(v: __m256i, before: __m256i) -> u32 {
        _mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpeq_epi32(v, before))) as u32
    }

    /// Stores the lanes of `v` set in `keep` (below 256) packed at `dst`; returns how many.
    ///
    /// # Safety
    /// `dst` is valid for writing 8 values.
    #[inline]
    #[target_feature(enable = "avx2,popcnt")]
    unsafe fn store_kept(v: __m256i, keep: u32, dst: *mut u32) -> usize {
        // SAFETY: the table has 256 rows of 8 lanes; the caller's contract covers the store.
        unsafe {
            let order = _mm256_loadu_si256(COMPRESS_8[keep as usize].as_ptr().cast());
            _mm256_storeu_si256(dst.cast(), _mm256_permutevar8x32_epi32(v, order));
        }
        keep.count_ones() as usize
    }

    /// Sorts the 16 unsigned lanes of `low` and `high` ascending, the 8 least into the first
    /// register: each sorted, then merged by the network's last three stages (with `high`
    /// reversed, the lane-wise minima and maxima of the two are each bitonic, and no minimum
    /// exceeds a maximum).
    #[inline]
    #[target_feature(enable = "avx2")]
    fn sort16_avx2(low: __m256i, high: __m256i) -> (__m256i, __m256i) {
        let reversed = _mm256_setr_epi32(7, 6, 5, 4, 3, 2, 1, 0);
        let low = sort8(low);
        let high = _mm256_permutevar8x32_epi32(sort8(high), reversed);
        (
            merge_bitonic8(_mm256_min_epu32(low, high)),
            merge_bitonic8(_mm256_max_epu32(low, high)),
        )
    }

    /// [`super::append_fingerprint_set`] with buckets of about 3 values, each sorted and
    /// deduplicated in one 8-lane register (the few of 9 to 16 in two, by [`sort16_avx2`]).
    #[target_feature(enable = "avx2,popcnt")]
    pub(super) fn append_set_avx2(hashes: &[u64], out: &mut Vec<u32>, scratch: &mut SetScratch) {
        let n = hashes.len();
        // n/4 .. n/2 buckets: 2 to 4 values each on average, so that few pass 8 lanes (1 or 4
        // to 8 values per bucket measured slower; so did filling fixed slots of 8 per bucket in
        // one pass instead of counting first, its slots four times the values).
        let bits = (usize::BITS - n.leading_zeros())
            .saturating_sub(2)
            .clamp(1, 17);
        let SetScratch { counts, scattered } = scratch;
        scattered.clear();
        scattered.reserve(n + 8);
        scatter_by_top_bits(
            hashes,
            bits,
            counts,
            &mut scattered.spare_capacity_mut()[..n],
        );
        // SAFETY: the scatter wrote each of the n slots once.
        unsafe { scattered.set_len(n) };
        // Every bucket is loaded as 8 lanes: the last one reads these (blended away).
        scattered.extend_from_slice(&[0; 8]);
        let base = out.len();
        out.reserve(n + 8);
        let dst = out.spare_capacity_mut().as_mut_ptr().cast::<u32>();
        let padding = _mm256_set1_epi32(-1);
        let lane_index = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
        let previous = _mm256_setr_epi32(0, 0, 1, 2, 3, 4, 5, 6);
        let src = scattered.as_mut_ptr();
        let mut written = 0usize;
        let mut start = 0usize;
        for &end in counts.iter() {
            let end = end as usize;
            let len = end - start;
            if len <= 8 {
                // SAFETY: `scattered` holds `start + 8 <= n + 8` values; the store writes 8 lanes
                // at `written <= start`, within the `n + 8` reserved slots; the table index is
                // below 256.
                unsafe {
                    let valid_lanes = _mm256_cmpgt_epi32(_mm256_set1_epi32(len as i32), lane_index);
                    let loaded = _mm256_loadu_si256(src.add(start).cast());
                    // Padding is u32::MAX, which sorts last: the first `len` lanes are the bucket.
                    let v = sort8(_mm256_blendv_epi8(padding, loaded, valid_lanes));
                    let before = _mm256_permutevar8x32_epi32(v, previous);
                    let keep = (!equal_lanes(v, before) | 1) & ((1u32 << len) - 1);
                    written += store_kept(v, keep, dst.add(written));
                }
            } else if len <= 16 {
                // SAFETY: `start + 16 <= n + 7` (the bucket holds at least 9 values, so it starts
                // at most at n - 9) is within the values and their 8 padding slots; the two
                // stores write 8 lanes each, at `written <= n - 9` and then at most 8 further
                // on, within the `n + 8` reserved slots.
                unsafe {
                    let high_lanes =
                        _mm256_cmpgt_epi32(_mm256_set1_epi32(len as i32 - 8), lane_index);
                    let low = _mm256_loadu_si256(src.add(start).cast());
                    let high = _mm256_loadu_si256(src.add(start + 8).cast());
                    let (low, high) =
                        sort16_avx2(low, _mm256_blendv_epi8(padding, high, high_lanes));
                    let before_low = _mm256_permutevar8x32_epi32(low, previous);
                    // The high register's first lane follows the low register's last one.
                    let before_high = _mm256_blend_epi32::<1>(
                        _mm256_permutevar8x32_epi32(high, previous),
                        _mm256_permutevar8x32_epi32(low, _mm256_set1_epi32(7)),
                    );
                    let keep_low = (!equal_lanes(low, before_low) | 1) & 0xFF;
                    let keep_high = !equal_lanes(high, before_high) & ((1u32 << (len - 8)) - 1);
                    written += store_kept(low, keep_low, dst.add(written));
                    written += store_kept(high, keep_high, dst.add(written));
                }
            } else {
                // SAFETY: `start..end` is within the n scattered values, and `written <= start`
                // with `end - start` reserved slots from `written` on.
                written +=
                    unsafe { finish_crowded_bucket(src.add(start), end - start, dst.add(written)) };
            }
            start = end;
        }
        // SAFETY: slots `base..base + written` were written above.
        unsafe { out.set_len(base + written) };
    }

    /// Sorts and deduplicates a bucket too large for one register and copies its distinct values
    /// to `dst`; returns how many. Rare (about one bucket per document), and kept out of line:
    /// inlined, it measurably slowed the register loop around it.
    ///
    /// # Safety
    /// `src` is valid for `len` reads and writes, `dst` for `len` writes, and they do not overlap.
    #[cold]
    #[inline(never)]
    unsafe fn finish_crowded_bucket(src: *mut u32, len: usize, dst: *mut u32) -> usize {
        // SAFETY: the caller's contract.
        let bucket = unsafe { std::slice::from_raw_parts_mut(src, len) };
        bucket.sort_unstable();
        let distinct = dedup_sorted(bucket);
        // SAFETY: the caller's contract; `distinct <= len`.
        unsafe { std::ptr::copy_nonoverlapping(bucket.as_ptr(), dst, distinct) };
        distinct
    }

    /// [`super::intersection_len`] comparing 16 values of each set at a time: all 256 pairs by
    /// comparing one block with the 16 rotations of the other, then the block with the smaller
    /// last value moves on (both on a tie). Every common value meets its partner in exactly one
    /// step.
    #[target_feature(enable = "avx512f,popcnt")]
    pub(super) fn intersection_len_avx512(a: &[u32], b: &[u32], needed: usize) -> usize {
        /// Lanes of `va` equal to some lane of `vb`. The rotations are independent of each
        /// other (a chain of rotate-by-one would serialise on the permute latency), and so are
        /// the four partial masks.
        #[inline(always)]
        fn hits(va: __m512i, vb: __m512i) -> u16 {
            macro_rules! eq_rotated {
                ($k:literal) => {
                    // SAFETY: only called from the enclosing AVX-512F function.
                    unsafe { _mm512_cmpeq_epi32_mask(va, _mm512_alignr_epi32::<$k>(vb, vb)) }
                };
            }
            // SAFETY: as above.
            let m0 = unsafe { _mm512_cmpeq_epi32_mask(va, vb) }
                | eq_rotated!(1)
                | eq_rotated!(2)
                | eq_rotated!(3);
            let m1 = eq_rotated!(4) | eq_rotated!(5) | eq_rotated!(6) | eq_rotated!(7);
            let m2 = eq_rotated!(8) | eq_rotated!(9) | eq_rotated!(10) | eq_rotated!(11);
            let m3 = eq_rotated!(12) | eq_rotated!(13) | eq_rotated!(14) | eq_rotated!(15);
            (m0 | m1) | (m2 | m3)
        }
        let (mut i, mut j, mut inter) = (0usize, 0usize, 0usize);
        while i + 16 <= a.len() && j + 16 <= b.len() {
            // SAFETY: both blocks are in bounds (loop condition).
            let (va, vb) = unsafe {
                (
                    _mm512_loadu_si512(a.as_ptr().add(i).cast()),
                    _mm512_loadu_si512(b.as_ptr().add(j).cast()),
                )
            };
            inter += hits(va, vb).count_ones() as usize;
            let (last_a, last_b) = (a[i + 15], b[j + 15]);
            i += usize::from(last_a <= last_b) * 16;
            j += usize::from(last_b <= last_a) * 16;
            if needed > 0 && inter + (a.len() - i).min(b.len() - j) < needed {
                return inter;
            }
        }
        let rest = needed.saturating_sub(inter);
        inter + merge_intersection_len(&a[i..], &b[j..], rest)
    }

    /// [`intersection_len_avx512`] eight lanes at a time: each block of `a` is compared with
    /// the eight lanes of `b`'s block as four rotations within 128-bit lanes of the block and
    /// four of the block with its lanes swapped, which together pair every lane with every
    /// other (in-lane shuffles cost less than the cross-lane permutation a plain rotation needs).
    #[target_feature(enable = "avx2,popcnt")]
    pub(super) fn intersection_len_avx2(a: &[u32], b: &[u32], needed: usize) -> usize {
        #[inline(always)]
        fn hits(va: __m256i, vb: __m256i) -> u32 {
            // SAFETY: only called from the enclosing AVX2 function.
            unsafe {
                let vs = _mm256_permute2x128_si256::<0x01>(vb, vb);
                let m0 = _mm256_or_si256(
                    _mm256_or_si256(
                        _mm256_cmpeq_epi32(va, vb),
                        _mm256_cmpeq_epi32(va, _mm256_shuffle_epi32::<0x39>(vb)),
                    ),
                    _mm256_or_si256(
                        _mm256_cmpeq_epi32(va, _mm256_shuffle_epi32::<0x4e>(vb)),
                        _mm256_cmpeq_epi32(va, _mm256_shuffle_epi32::<0x93>(vb)),
                    ),
                );
                let m1 = _mm256_or_si256(
                    _mm256_or_si256(
                        _mm256_cmpeq_epi32(va, vs),
                        _mm256_cmpeq_epi32(va, _mm256_shuffle_epi32::<0x39>(vs)),
                    ),
                    _mm256_or_si256(
                        _mm256_cmpeq_epi32(va, _mm256_shuffle_epi32::<0x4e>(vs)),
                        _mm256_cmpeq_epi32(va, _mm256_shuffle_epi32::<0x93>(vs)),
                    ),
                );
                _mm256_movemask_ps(_mm256_castsi256_ps(_mm256_or_si256(m0, m1))) as u32
            }
        }
        let (mut i, mut j, mut inter) = (0usize, 0usize, 0usize);
        while i + 8 <= a.len() && j + 8 <= b.len() {
            // SAFETY: both blocks are in bounds (loop condition).
            let (va, vb) = unsafe {
                (
                    _mm256_loadu_si256(a.as_ptr().add(i).cast()),
                    _mm256_loadu_si256(b.as_ptr().add(j).cast()),
                )
            };
            inter += hits(va, vb).count_ones() as usize;
            let (last_a, last_b) = (a[i + 7], b[j + 7]);
            i += usize::from(last_a <= last_b) * 8;
            j += usize::from(last_b <= last_a) * 8;
            if needed > 0 && inter + (a.len() - i).min(b.len() - j) < needed {
                return inter;
            }
        }
        let rest = needed.saturating_sub(inter);
        inter + merge_intersection_len(&a[i..], &b[j..], rest)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_match_a_naive_loop_at_every_length() {
        for len in 0..300usize {
            let a: Vec<u32> = (0..len as u32)
                .map(|i| i.wrapping_mul(2_654_435_761) % 7)
                .collect();
            let b: Vec<u32> = (0..len as u32)
                .map(|i| i.wrapping_mul(40_503) % 5)
                .collect();
            let naive = a.iter().zip(&b).filter(|(x, y)| x == y).count();
            assert_eq!(count_equal(&a, &b), naive, "len {len}");
            assert_eq!(count_equal_portable(&a, &b), naive);
        }
    }

    #[test]
    fn similarity_is_the_mean_of_equal_flags() {
        assert_eq!(similarity(&[1, 2, 3, 4], &[1, 2, 0, 0]), 0.5);
        assert_eq!(similarity(&[1, 2, 3], &[1, 2, 3]), 1.0);
        assert_eq!(similarity(&[], &[]), 0.0);
        assert_eq!(similarity(&[1, 2, 3], &[1, 0, 0]), 1.0 / 3.0);
    }

    #[test]
    fn jaccard_of_sorted_sets() {
        assert_eq!(jaccard_sorted(&[1, 2, 3], &[2, 3, 4]), 0.5);
        assert_eq!(jaccard_sorted(&[], &[1]), 0.0);
        assert_eq!(jaccard_sorted::<u32>(&[], &[]), 1.0);
        assert_eq!(jaccard_sorted(&[5], &[5]), 1.0);
    }

    fn lcg(seed: &mut u64) -> u64 {
        *seed = seed
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        let z = *seed;
        (z ^ (z >> 29)).wrapping_mul(0xBF58_476D_1CE4_E5B9) ^ (z >> 32)
    }

    /// Fold, sort, dedup: what [`fingerprint_set`] must equal.
    fn naive_set(hashes: &[u64]) -> Vec<u32> {
        let mut want: Vec<u32> = hashes.iter().map(|&h| fingerprint(h)).collect();
        want.sort_unstable();
        want.dedup();
        want
    }

    #[test]
    fn fingerprint_sets_equal_sort_and_dedup_at_every_size() {
        let mut scratch = SetScratch::default();
        let mut out = Vec::new();
        let mut portable = Vec::new();
        let mut seed = 7u64;
        for n in (0..600).chain([1000, 4097, 70_000, 300_000]) {
            // A third of the values repeat, like real text's shingles.
            let mut v: Vec<u64> = (0..n).map(|_| lcg(&mut seed)).collect();
            for k in 0..n / 3 {
                v[k * 3] = v[(k * 7) % n.max(1)];
            }
            let want = naive_set(&v);
            fingerprint_set(&v, &mut out, &mut scratch);
            assert_eq!(out, want, "n {n}");
            portable.clear();
            append_set_portable(&v, &mut portable, &mut scratch);
            assert_eq!(portable, want, "portable, n {n}");
        }
        // Appending keeps what was there and adds the same set.
        let v: Vec<u64> = (0..5000u64).map(|_| lcg(&mut seed)).collect();
        let mut want = vec![7, 3];
        fingerprint_set(&v, &mut out, &mut scratch);
        want.extend_from_slice(&out);
        let mut appended = vec![7, 3];
        append_fingerprint_set(&v, &mut appended, &mut scratch);
        assert_eq!(appended, want);
        // Skewed values (all in one bucket, or in a few crowded ones, u32::MAX among them, as
        // the SIMD path pads with it) still come out right.
        let skewed: [Vec<u64>; 3] = [
            (0..5000u64).rev().chain(0..100).collect(),
            (0..3000u64).map(|i| (i % 40) << 27 | i).collect(),
            (0..2000u64)
                .map(|i| u64::from(u32::MAX - (i % 37) as u32))
                .collect(),
        ];
        for v in &skewed {
            fingerprint_set(v, &mut out, &mut scratch);
            assert_eq!(out, naive_set(v));
            portable.clear();
            append_set_portable(v, &mut portable, &mut scratch);
            assert_eq!(portable, naive_set(v));
        }
        assert_eq!(fingerprint(0x0000_0001_0000_0003), 2);
        assert_eq!(fingerprint(0xdead_beef), 0xdead_beef);
    }

    /// The register sorting networks' stages and masks sort every input of 0s and 1s (so, by the
    /// 0-1 principle, every input), checked by a scalar model of a stage: lane `i` takes the
    /// larger or the smaller of itself and lane `i ^ distance` as its mask bit says. Runs on any
    /// CPU, so the AVX-512 network's masks are checked where its kernel cannot run.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn the_sorting_networks_sort_every_input_of_zeros_and_ones() {
        fn sorts(stages: &[(usize, usize)], masks: &[u32], lanes: usize) {
            for input in 0u32..1 << lanes {
                let mut v: Vec<u32> = (0..lanes).map(|i| input >> i & 1).collect();
                for (&(_, distance), &mask) in stages.iter().zip(masks) {
                    v = (0..lanes)
                        .map(|i| {
                            let (a, b) = (v[i], v[i ^ distance]);
                            if mask >> i & 1 == 1 {
                                a.max(b)
                            } else {
                                a.min(b)
                            }
                        })
                        .collect();
                }
                assert!(v.is_sorted(), "{lanes} lanes, input {input:#b}: {v:?}");
            }
        }
        sorts(&simd::STAGES, &simd::TAKE_MAX, 16);
        sorts(&simd::STAGES_8, &simd::TAKE_MAX_8, 8);
    }

    #[test]
    fn thresholded_jaccard_agrees_with_the_full_merge() {
        let mut seed = 3u64;
        let mut scratch = SetScratch::default();
        for case in 0..600 {
            let n = 1 + case * 7 % 900;
            let shared = (n as u64 * (case as u64 % 11)) / 10;
            let a: Vec<u64> = (0..n).map(|_| lcg(&mut seed)).collect();
            let mut b: Vec<u64> = a[..shared as usize].to_vec();
            b.extend((0..(n + case % 50)).map(|_| lcg(&mut seed)));
            let (mut sa, mut sb) = (Vec::new(), Vec::new());
            fingerprint_set(&a, &mut sa, &mut scratch);
            fingerprint_set(&b, &mut sb, &mut scratch);
            let exact = jaccard_sorted(&sa, &sb);
            for t in [0.0, 0.1, 0.3, 0.5, 0.8, exact, 0.95, 1.0] {
                let want = Some(exact).filter(|j| *j >= t);
                assert_eq!(jaccard_at_least(&sa, &sb, t), want, "case {case} t {t}");
                assert_eq!(jaccard_at_least(&sb, &sa, t), want, "case {case} t {t}");
            }
            // The SIMD intersection counts what the merge counts, early exit or not.
            let full = merge_intersection_len(&sa, &sb, 0);
            for features in Features::detected().levels() {
                assert_eq!(intersection_len(features, &sa, &sb, 0), full, "case {case}");
                assert_eq!(intersection_len(features, &sb, &sa, 0), full, "case {case}");
            }
        }
        assert_eq!(jaccard_at_least(&[], &[], 0.8), Some(1.0));
        assert_eq!(jaccard_at_least(&[], &[1], 0.8), None);
        assert_eq!(jaccard_at_least(&[], &[1], 0.0), Some(0.0));
    }

    #[test]
    fn every_kernel_counts_equal_positions_like_a_naive_loop() {
        let mut seed = 5u64;
        for len in (0..300usize).chain([1000, 4099]) {
            let a: Vec<u32> = (0..len).map(|_| (lcg(&mut seed) % 4) as u32).collect();
            let b: Vec<u32> = (0..len).map(|_| (lcg(&mut seed) % 4) as u32).collect();
            let naive = a.iter().zip(&b).filter(|(x, y)| x == y).count();
            for features in Features::detected().levels() {
                assert_eq!(
                    count_equal_on(features, &a, &b),
                    naive,
                    "{features:?} len {len}"
                );
            }
        }
    }

    /// Buckets of 9 to 16 values, which the AVX2 kernel sorts in two registers: every length,
    /// with repeats inside either register and across the two (the 8th and 9th smallest
    /// equal), and `u32::MAX` (the padding's value) among them, at every CPU level.
    #[test]
    fn buckets_of_nine_to_sixteen_values_come_out_sorted_and_distinct() {
        // 100 values make 32 buckets (the top 5 bits); hashes below 2^32 are their own
        // fingerprints. The others are spread one or two per bucket.
        let bucket = |b: u64, low: u64| (b << 27) | low;
        let mut seed = 3u64;
        for len in 9..=16usize {
            for pattern in 0..5 {
                let mut crowded: Vec<u64> = (0..len as u64)
                    .map(|i| bucket(31, lcg(&mut seed) % 1000 * 1000 + i))
                    .collect();
                match pattern {
                    1 => crowded[len - 1] = crowded[0],
                    2 => {
                        // After sorting, lanes 7 and 8 hold the same value.
                        crowded.sort_unstable();
                        crowded[8] = crowded[7];
                    }
                    3 => crowded
                        .iter_mut()
                        .step_by(2)
                        .for_each(|h| *h = bucket(31, 5)),
                    4 => crowded[..3].fill(u64::from(u32::MAX)),
                    _ => {}
                }
                let mut v: Vec<u64> = (0..100 - len as u64)
                    .map(|i| bucket(i % 31, lcg(&mut seed) % (1 << 27)))
                    .collect();
                v.splice(40..40, crowded);
                let want = naive_set(&v);
                let mut scratch = SetScratch::default();
                for features in Features::detected().levels() {
                    let mut got = vec![1];
                    append_fingerprint_set_on(features, &v, &mut got, &mut scratch);
                    assert_eq!(
                        &got[1..],
                        &want[..],
                        "{features:?}, {len} values, {pattern}"
                    );
                }
            }
        }
    }

    proptest::proptest! {
        /// Every set kernel this CPU runs builds the same set as sorting and deduplicating, and
        /// counts the same intersection as the merge, early exit or not: random hashes with
        /// repeats, around the 64-value switch to bucketing, some crowded into few buckets.
        #[test]
        fn every_set_kernel_equals_sort_dedup_and_merge(
            a in proptest::collection::vec(proptest::prelude::any::<u64>(), 0..400),
            shared in 0usize..400,
            b_own in proptest::collection::vec(proptest::prelude::any::<u64>(), 0..400),
            crowd in 0u32..3,
        ) {
            // Crowding keeps few top bits, so buckets overflow the 16-lane register path.
            let crowded = |h: &u64| if crowd == 0 { *h } else { *h >> (24 + 4 * crowd) };
            let a: Vec<u64> = a.iter().map(crowded).collect();
            let mut b: Vec<u64> = a[..shared.min(a.len())].to_vec();
            b.extend(b_own.iter().map(crowded));
            let (want_a, want_b) = (naive_set(&a), naive_set(&b));
            let full = merge_intersection_len(&want_a, &want_b, 0);
            let mut scratch = SetScratch::default();
            for features in Features::detected().levels() {
                let (mut got_a, mut got_b) = (vec![9], vec![9]);
                append_fingerprint_set_on(features, &a, &mut got_a, &mut scratch);
                append_fingerprint_set_on(features, &b, &mut got_b, &mut scratch);
                proptest::prop_assert_eq!(&got_a[1..], &want_a[..], "{:?}", features);
                proptest::prop_assert_eq!(&got_b[1..], &want_b[..], "{:?}", features);
                proptest::prop_assert_eq!(intersection_len(features, &want_a, &want_b, 0), full);
                for needed in [1, full / 2 + 1, full, full + 1] {
                    let early = intersection_len(features, &want_a, &want_b, needed);
                    // Early exits happen only when `needed` is out of reach.
                    proptest::prop_assert!(early == full || (early < needed && full < needed));
                }
            }
        }
    }
}
