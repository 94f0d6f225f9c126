//! Property and statistical tests of signing.

use neardup_sketch::{
    BandKeyScheme, HashScheme, Kernel, LshParams, MinHasher, Normalizer, Scratch, Shingler,
    SketchConfig, Sketcher,
};
use proptest::prelude::*;

fn sketcher(scheme: HashScheme, shingler: Shingler) -> Sketcher {
    Sketcher::new(SketchConfig {
        normalizer: Normalizer::default(),
        shingler,
        scheme,
        num_perm: 64,
        seed: 7,
        lsh: LshParams::new(8, 8).unwrap(),
        band_keys: BandKeyScheme::Fast,
    })
    .unwrap()
}

fn scheme_strategy() -> impl Strategy<Value = HashScheme> {
    prop_oneof![
        Just(HashScheme::Fast),
        Just(HashScheme::Datasketch),
        Just(HashScheme::Oph)
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn identical_texts_give_identical_signatures(
        text in "\\PC{0,200}",
        other in "\\PC{0,50}",
        scheme in scheme_strategy(),
    ) {
        // Two sketchers from equal configs, one scratch dirtied by another text first.
        let (a, b) = (sketcher(scheme, Shingler::Chars { k: 3, step: 1 }), sketcher(scheme, Shingler::Chars { k: 3, step: 1 }));
        let mut dirty = Scratch::default();
        let (mut s1, mut s2) = (vec![0u32; 64], vec![0u32; 64]);
        let (mut k1, mut k2) = (vec![0u64; 8], vec![0u64; 8]);
        a.sketch(&other, &mut dirty, &mut s1, &mut k1);
        let i1 = a.sketch(&text, &mut dirty, &mut s1, &mut k1);
        let i2 = b.sketch(&text.clone(), &mut Scratch::default(), &mut s2, &mut k2);
        prop_assert_eq!(s1, s2);
        prop_assert_eq!(k1, k2);
        prop_assert_eq!(i1, i2);
    }

    #[test]
    fn char_shingles_never_split_characters(
        text in "[a-zé文🙂 ]{0,40}|\\PC{0,40}",
        k in 1usize..8,
        step in 1usize..4,
    ) {
        let mut shingles = Vec::new();
        Shingler::Chars { k, step }.for_each(&text, |s| shingles.push(s.to_vec()));
        let n = text.chars().count();
        let expected = if n >= k { (n - k) / step + 1 } else { 0 };
        prop_assert_eq!(shingles.len(), expected);
        let chars: Vec<char> = text.chars().collect();
        for (i, s) in shingles.iter().enumerate() {
            let s = std::str::from_utf8(s).expect("shingle is valid UTF-8");
            prop_assert_eq!(s.chars().count(), k);
            let want: String = chars[i * step..i * step + k].iter().collect();
            prop_assert_eq!(s, want.as_str());
        }
    }

    #[test]
    fn every_kernel_equals_the_scalar_reference(
        hashes in prop::collection::vec(any::<u64>(), 0..400),
        num_perm in 1usize..300,
        seed in 0u64..1000,
        scheme in scheme_strategy(),
    ) {
        let reference = MinHasher::with_kernel(scheme, num_perm, seed, Kernel::Reference).unwrap();
        let mut want = vec![0u32; num_perm];
        reference.sign_hashes(&hashes, &mut want);
        for kernel in Kernel::supported() {
            let m = MinHasher::with_kernel(scheme, num_perm, seed, kernel).unwrap();
            let mut got = vec![0u32; num_perm];
            m.sign_hashes(&hashes, &mut got);
            prop_assert_eq!(&got, &want, "{:?}", kernel);
        }
    }
}

/// splitmix64, to draw random "shingle hashes" deterministically.
fn next(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The fast scheme's per-position estimates are unbiased and not correlated: over many random
/// set pairs of known Jaccard J, the estimate's mean error is ~0 and its variance is close to
/// the binomial J(1-J)/n that independent positions give.
#[test]
fn fast_scheme_estimates_jaccard_without_bias_or_excess_variance() {
    const NUM_PERM: usize = 128;
    const PAIRS: usize = 600;
    let mut state = 2024;
    // (J, common, only-in-each): J = common / (common + 2 * only).
    for (j, common, only) in [(0.2, 100, 200), (0.5, 200, 100), (0.8, 400, 50)] {
        let sigma = (j * (1.0 - j) / NUM_PERM as f64).sqrt();
        let mut errors = Vec::with_capacity(PAIRS);
        for pair in 0..PAIRS {
            // A few hasher seeds, as users pick different seeds.
            let hasher = MinHasher::new(HashScheme::Fast, NUM_PERM, (pair % 5) as u64).unwrap();
            let shared: Vec<u64> = (0..common).map(|_| next(&mut state)).collect();
            let mut a = shared.clone();
            let mut b = shared;
            a.extend((0..only).map(|_| next(&mut state)));
            b.extend((0..only).map(|_| next(&mut state)));
            let (mut sa, mut sb) = ([0u32; NUM_PERM], [0u32; NUM_PERM]);
            hasher.sign_hashes(&a, &mut sa);
            hasher.sign_hashes(&b, &mut sb);
            errors.push(neardup_sketch::similarity(&sa, &sb) - j);
        }
        let mean = errors.iter().sum::<f64>() / PAIRS as f64;
        let var = errors.iter().map(|e| (e - mean).powi(2)).sum::<f64>() / (PAIRS - 1) as f64;
        let outliers = errors.iter().filter(|e| e.abs() > 4.0 * sigma).count();
        let ratio = var / (sigma * sigma);
        assert!(
            mean.abs() < 4.0 * sigma / (PAIRS as f64).sqrt(),
            "J={j}: mean error {mean}"
        );
        assert!(
            outliers <= PAIRS / 200,
            "J={j}: {outliers} estimates beyond 4 sigma"
        );
        // The sample variance of 600 draws is within ~±25% of the truth at 4 standard errors.
        assert!(
            (0.75..1.25).contains(&ratio),
            "J={j}: variance {ratio:.3} x binomial"
        );
    }
}

/// Mean and variance of the `oph` estimate's error over random set pairs of Jaccard `j`.
fn oph_errors(j: f64, common: usize, only: usize, pairs: usize, state: &mut u64) -> (f64, f64) {
    const NUM_PERM: usize = 128;
    let mut errors = Vec::with_capacity(pairs);
    for pair in 0..pairs {
        let hasher = MinHasher::new(HashScheme::Oph, NUM_PERM, (pair % 5) as u64).unwrap();
        let shared: Vec<u64> = (0..common).map(|_| next(state)).collect();
        let mut a = shared.clone();
        let mut b = shared;
        a.extend((0..only).map(|_| next(state)));
        b.extend((0..only).map(|_| next(state)));
        let (mut sa, mut sb) = ([0u32; NUM_PERM], [0u32; NUM_PERM]);
        hasher.sign_hashes(&a, &mut sa);
        hasher.sign_hashes(&b, &mut sb);
        errors.push(neardup_sketch::similarity(&sa, &sb) - j);
    }
    let mean = errors.iter().sum::<f64>() / pairs as f64;
    let var = errors.iter().map(|e| (e - mean).powi(2)).sum::<f64>() / (pairs - 1) as f64;
    (mean, var)
}

/// One-permutation hashing with optimal densification estimates Jaccard without bias, for sets
/// much larger than the signature (few empty positions) and for sets smaller than it (most
/// positions densified). For large sets its positions are sampled without replacement, so the
/// variance is at most binomial; for small sets densification copies values, and the variance
/// may exceed binomial, but boundedly.
#[test]
fn oph_scheme_estimates_jaccard_without_bias() {
    const PAIRS: usize = 600;
    let mut state = 77;
    // (J, common, only-in-each, allowed variance range as a multiple of binomial)
    for (j, common, only, var_range) in [
        (0.2, 200, 400, 0.5..1.15),
        (0.5, 400, 200, 0.5..1.15),
        (0.8, 800, 100, 0.5..1.15),
        (0.5, 20, 10, 0.5..2.5),
        (0.8, 40, 5, 0.5..2.5),
    ] {
        let sigma = (j * (1.0 - j) / 128.0f64).sqrt();
        let (mean, var) = oph_errors(j, common, only, PAIRS, &mut state);
        let ratio = var / (sigma * sigma);
        // The standard error of the mean is at most sqrt(2.5) * sigma / sqrt(PAIRS).
        assert!(
            mean.abs() < 4.0 * 1.6 * sigma / (PAIRS as f64).sqrt(),
            "J={j} n={}: mean error {mean}",
            common + 2 * only
        );
        assert!(
            var_range.contains(&ratio),
            "J={j} n={}: variance {ratio:.3} x binomial",
            common + 2 * only
        );
    }
}

/// Densification always terminates and fills every position, even for a one-shingle text in a
/// wide signature, and a text's signature does not depend on the order of its shingles.
#[test]
fn oph_fills_every_position_and_ignores_order() {
    for n in [1usize, 7, 128, 1000] {
        let hasher = MinHasher::new(HashScheme::Oph, n, 3).unwrap();
        let mut state = 5;
        for len in [1usize, 2, 10, 500] {
            let hs: Vec<u64> = (0..len).map(|_| next(&mut state)).collect();
            let mut sig = vec![0u32; n];
            hasher.sign_hashes(&hs, &mut sig);
            let mut rev = hs.clone();
            rev.reverse();
            rev.extend_from_slice(&hs[..len / 2]);
            let mut sig2 = vec![0u32; n];
            hasher.sign_hashes(&rev, &mut sig2);
            assert_eq!(sig, sig2, "n {n} len {len}");
            // Every value is one a shingle produced (never the empty marker, barring a 2^-32
            // coincidence that these fixed inputs do not hit).
            assert!(sig.iter().all(|&v| v != neardup_sketch::EMPTY_SLOT));
            if len == 1 {
                assert!(sig.iter().all(|&v| v == sig[0]), "one shingle fills all");
            }
        }
    }
}
