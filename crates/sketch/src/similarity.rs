//! Comparing signatures and exact shingle sets.

/// Number of equal positions (runtime-dispatched SIMD).
///
/// # Panics
/// When the lengths differ.
pub fn count_equal(a: &[u32], b: &[u32]) -> usize {
    assert_eq!(a.len(), b.len(), "signatures of different lengths");
    #[cfg(target_arch = "x86_64")]
    {
        // std caches feature detection in an atomic, so these checks cost a load each.
        if std::arch::is_x86_feature_detected!("avx512f") {
            // SAFETY: the feature was just detected.
            return unsafe { count_equal_avx512(a, b) };
        }
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the feature was just detected.
            return unsafe { count_equal_avx2(a, b) };
        }
    }
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

/// Exact Jaccard of two sorted deduplicated u64 sets. Two empty sets give 1.0 (they are equal).
pub fn jaccard_sorted(a: &[u64], b: &[u64]) -> f64 {
    if a.is_empty() && b.is_empty() {
        return 1.0;
    }
    let inter = intersection_len(a, b, 0);
    inter as f64 / (a.len() + b.len() - inter) as f64
}

/// The exact Jaccard of two sorted deduplicated u64 sets when it reaches `threshold`, `None`
/// when it does not — which is usually known long before the merge ends: the size ratio bounds
/// the Jaccard from above (`J <= min/max`), and the merge stops as soon as too few elements are
/// left to reach the intersection the threshold needs. Equal to
/// `Some(jaccard_sorted(a, b)).filter(|j| *j >= threshold)`.
pub fn jaccard_at_least(a: &[u64], b: &[u64], threshold: f64) -> Option<f64> {
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
    let inter = intersection_len(a, b, needed.saturating_sub(1));
    let j = inter as f64 / (a.len() + b.len() - inter) as f64;
    (j >= threshold).then_some(j)
}

/// `|a ∩ b|` of sorted deduplicated sets by a branch-free merge (the comparisons are as
/// unpredictable as coin flips, so branches would mispredict half the time). When `needed > 0`
/// the merge may stop early once `needed` can no longer be reached, returning a smaller count.
fn intersection_len(a: &[u64], b: &[u64], needed: usize) -> usize {
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

/// Replaces `out` with the sorted, deduplicated values of `hashes`. Fast when the values are
/// uniform below their highest set bit (shingle hashes of either scheme are); correct for any.
///
/// One counting pass and one scatter on the top bits leave the values ordered by bucket, with
/// about one value per bucket, and a single insertion-sort pass fixes the few inversions left
/// inside buckets: about linear time, several times faster than a comparison sort on the few
/// thousand values of a typical document. A skewed input that would make the insertion pass
/// quadratic is detected and sorted conventionally. `counts` is scratch space.
pub fn sorted_set(hashes: &[u64], out: &mut Vec<u64>, counts: &mut Vec<u32>) {
    out.clear();
    append_sorted_set(hashes, out, counts);
}

/// [`sorted_set`] appended after what `out` already holds (stage 2 packs the sets of a block's
/// samples one after another without an intermediate copy).
pub fn append_sorted_set(hashes: &[u64], out: &mut Vec<u64>, counts: &mut Vec<u32>) {
    let base = out.len();
    let n = hashes.len();
    out.extend_from_slice(hashes);
    let v = &mut out[base..];
    if n < 64 {
        v.sort_unstable();
    } else {
        bucket_sort(hashes, v, counts);
    }
    let len = dedup_sorted(v);
    out.truncate(base + len);
}

/// Sorts `hashes` into `v` (same length): scatter by bucket, then one insertion pass.
fn bucket_sort(hashes: &[u64], v: &mut [u64], counts: &mut Vec<u32>) {
    let n = hashes.len();
    // n .. 2n buckets; past 2^17 the histogram leaves the L2 cache.
    let bits = (usize::BITS - n.leading_zeros()).clamp(6, 17);
    // Bucket on the top `bits` of the values' actual range (the datasketch scheme's hashes are
    // 32-bit).
    let width = 64 - hashes.iter().fold(0u64, |acc, &h| acc | h).leading_zeros();
    let shift = width.saturating_sub(bits);
    let buckets = 1usize << bits;
    counts.clear();
    counts.resize(buckets + 1, 0);
    for &h in hashes {
        counts[(h >> shift) as usize + 1] += 1;
    }
    for b in 1..=buckets {
        counts[b] += counts[b - 1];
    }
    // counts[b] is now where bucket b starts, and serves as its write cursor.
    for &h in hashes {
        let b = (h >> shift) as usize;
        v[counts[b] as usize] = h;
        counts[b] += 1;
    }
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
            v.sort_unstable();
            break;
        }
    }
}

/// Moves the distinct values of sorted `v` to its front; returns how many there are.
fn dedup_sorted(v: &mut [u64]) -> usize {
    let mut write = 0;
    for i in 0..v.len() {
        if write == 0 || v[write - 1] != v[i] {
            v[write] = v[i];
            write += 1;
        }
    }
    write
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
        assert_eq!(jaccard_sorted(&[], &[]), 1.0);
        assert_eq!(jaccard_sorted(&[5], &[5]), 1.0);
    }

    fn lcg(seed: &mut u64) -> u64 {
        *seed = seed
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        let z = *seed;
        (z ^ (z >> 29)).wrapping_mul(0xBF58_476D_1CE4_E5B9) ^ (z >> 32)
    }

    #[test]
    fn sorted_sets_equal_sort_and_dedup_at_every_size() {
        let mut counts = Vec::new();
        let mut out = Vec::new();
        let mut seed = 7u64;
        for n in (0..300).chain([1000, 4097, 70_000, 300_000]) {
            // A third of the values repeat, like real text's shingles.
            let mut v: Vec<u64> = (0..n).map(|_| lcg(&mut seed)).collect();
            for k in 0..n / 3 {
                v[k * 3] = v[(k * 7) % n.max(1)];
            }
            sorted_set(&v, &mut out, &mut counts);
            let mut want = v.clone();
            want.sort_unstable();
            want.dedup();
            assert_eq!(out, want, "n {n}");
        }
        // Appending keeps what was there and adds the same set.
        let v: Vec<u64> = (0..5000u64).map(|_| lcg(&mut seed)).collect();
        let mut want = vec![7, 3];
        sorted_set(&v, &mut out, &mut counts);
        want.extend_from_slice(&out);
        let mut appended = vec![7, 3];
        append_sorted_set(&v, &mut appended, &mut counts);
        assert_eq!(appended, want);
        // Skewed values (all in one bucket) still come out right.
        let v: Vec<u64> = (0..5000u64).rev().chain(0..100).collect();
        sorted_set(&v, &mut out, &mut counts);
        assert_eq!(out, (0..5000u64).collect::<Vec<_>>());
    }

    #[test]
    fn thresholded_jaccard_agrees_with_the_full_merge() {
        let mut seed = 3u64;
        let mut counts = Vec::new();
        for case in 0..400 {
            let n = 1 + case * 7 % 900;
            let shared = (n as u64 * (case as u64 % 11)) / 10;
            let mut a: Vec<u64> = (0..n).map(|_| lcg(&mut seed)).collect();
            let mut b: Vec<u64> = a[..shared as usize].to_vec();
            b.extend((0..(n + case % 50)).map(|_| lcg(&mut seed)));
            let (mut sa, mut sb) = (Vec::new(), Vec::new());
            sorted_set(&a, &mut sa, &mut counts);
            sorted_set(&b, &mut sb, &mut counts);
            a.clear();
            let exact = jaccard_sorted(&sa, &sb);
            for t in [0.0, 0.1, 0.3, 0.5, 0.8, exact, 0.95, 1.0] {
                let want = Some(exact).filter(|j| *j >= t);
                assert_eq!(jaccard_at_least(&sa, &sb, t), want, "case {case} t {t}");
                assert_eq!(jaccard_at_least(&sb, &sa, t), want, "case {case} t {t}");
            }
        }
        assert_eq!(jaccard_at_least(&[], &[], 0.8), Some(1.0));
        assert_eq!(jaccard_at_least(&[], &[1], 0.8), None);
        assert_eq!(jaccard_at_least(&[], &[1], 0.0), Some(0.0));
    }
}
