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
    let (mut i, mut j, mut inter) = (0, 0, 0usize);
    while i < a.len() && j < b.len() {
        match a[i].cmp(&b[j]) {
            std::cmp::Ordering::Less => i += 1,
            std::cmp::Ordering::Greater => j += 1,
            std::cmp::Ordering::Equal => {
                inter += 1;
                i += 1;
                j += 1;
            }
        }
    }
    inter as f64 / (a.len() + b.len() - inter) as f64
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
}
