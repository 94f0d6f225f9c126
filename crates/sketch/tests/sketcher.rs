//! The Sketcher and its config: validation, fingerprints, shingle sets.

use std::sync::Arc;

use neardup_sketch::{
    BandKeyScheme, CustomShingler, HashScheme, LshParams, Normalizer, Scratch, Shingler,
    SketchConfig, SketchError, Sketcher, content_hash, jaccard_sorted, similarity,
};

fn fast_config() -> SketchConfig {
    SketchConfig {
        normalizer: Normalizer::default(),
        shingler: Shingler::Chars { k: 5, step: 1 },
        scheme: HashScheme::Fast,
        num_perm: 128,
        seed: 1,
        lsh: LshParams::new(16, 8).unwrap(),
        band_keys: BandKeyScheme::Fast,
    }
}

#[test]
fn sketcher_is_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<Sketcher>();
    check::<neardup_sketch::MinHasher>();
}

#[test]
fn validate_refuses_settings_that_do_not_fit() {
    let mut c = fast_config();
    c.lsh = LshParams { bands: 17, rows: 8 };
    assert!(matches!(c.validate(), Err(SketchError::InvalidConfig(_))));
    assert!(Sketcher::new(c).is_err());
    let mut c = fast_config();
    c.shingler = Shingler::Chars { k: 5, step: 0 };
    assert!(matches!(c.validate(), Err(SketchError::InvalidShingler(_))));
    let mut c = fast_config();
    c.lsh = LshParams { bands: 0, rows: 8 };
    assert!(c.validate().is_err());
    let mut c = SketchConfig::lshcurator(5, 1, false, 16, 8);
    c.seed = 1 << 40;
    let err = c.validate().unwrap_err();
    assert!(err.to_string().contains("2^32-1"), "{err}");
    // Using fewer positions than the signature has is fine.
    let mut c = fast_config();
    c.lsh = LshParams { bands: 9, rows: 13 };
    assert!(c.validate().is_ok());
}

/// Frozen: these fingerprints are written into on-disk key tables.
#[test]
fn fingerprints_are_frozen_and_cover_every_setting() {
    assert_eq!(fast_config().fingerprint(), FAST_FINGERPRINT);
    assert_eq!(
        SketchConfig::lshcurator(5, 1, false, 16, 8).fingerprint(),
        LSHCURATOR_FINGERPRINT
    );

    let base = fast_config().fingerprint();
    let variants: &[fn(&mut SketchConfig)] = &[
        |c| c.normalizer.trim = true,
        |c| c.normalizer.nfkc = true,
        |c| c.normalizer.lowercase = true,
        |c| c.normalizer.strip_punctuation = true,
        |c| c.normalizer.collapse_whitespace = true,
        |c| c.normalizer.keep_chars = Some("a-z".parse().unwrap()),
        |c| c.shingler = Shingler::Chars { k: 5, step: 2 },
        |c| c.shingler = Shingler::Bytes { k: 5, step: 1 },
        |c| c.shingler = Shingler::Words { n: 5, step: 1 },
        |c| c.scheme = HashScheme::Datasketch,
        |c| c.num_perm = 129,
        |c| c.seed = 2,
        |c| c.lsh = LshParams { bands: 8, rows: 16 },
        |c| c.band_keys = BandKeyScheme::Lshcurator,
    ];
    let mut seen = vec![base];
    for change in variants {
        let mut c = fast_config();
        change(&mut c);
        let f = c.fingerprint();
        assert!(!seen.contains(&f), "fingerprint collision for {c:?}");
        seen.push(f);
    }
    let mut a = fast_config();
    a.normalizer.keep_chars = Some("a-z".parse().unwrap());
    let mut b = fast_config();
    b.normalizer.keep_chars = Some("a-y".parse().unwrap());
    assert_ne!(a.fingerprint(), b.fingerprint());
}

/// Cross-checked with an independent Python encoding of the documented byte layout
/// (xxh3_64 over: tag, normaliser flags, keep_chars spec, shingler description, scheme, num_perm,
/// seed, bands, rows, band-key scheme).
const FAST_FINGERPRINT: u64 = 4_004_381_914_911_799_774;
const LSHCURATOR_FINGERPRINT: u64 = 523_969_537_866_301_123;

#[test]
fn content_hash_and_shingle_count_are_of_the_normalised_text() {
    let mut c = fast_config();
    c.normalizer = Normalizer {
        trim: true,
        lowercase: true,
        ..Normalizer::default()
    };
    let sk = Sketcher::new(c).unwrap();
    let mut scratch = Scratch::default();
    let (mut sig, mut keys) = (vec![0u32; 128], vec![0u64; 16]);
    let info = sk.sketch("  Hello World  ", &mut scratch, &mut sig, &mut keys);
    assert_eq!(info.content_hash, content_hash("hello world"));
    assert_eq!(info.shingles, "hello world".len() - 4);
    let mut sig2 = vec![0u32; 128];
    assert_eq!(sk.signature("hello world", &mut scratch, &mut sig2), info);
    assert_eq!(sig, sig2);
    assert_eq!((sk.num_perm(), sk.bands()), (128, 16));
}

#[test]
fn shingle_sets_give_exact_jaccard_close_to_the_estimate() {
    let sk = Sketcher::new(fast_config()).unwrap();
    let mut scratch = Scratch::default();
    let base = "MinHash estimates the Jaccard similarity of shingle sets; LSH bands the signature \
                so that similar documents share at least one band key with high probability.";
    let edited = base.replace("high probability", "great likelihood");
    let (mut a, mut b) = (Vec::new(), Vec::new());
    sk.shingle_set(base, &mut scratch, &mut a);
    sk.shingle_set(&edited, &mut scratch, &mut b);
    assert!(a.windows(2).all(|w| w[0] < w[1]) && b.windows(2).all(|w| w[0] < w[1]));
    assert!(
        a.len() < base.len() - 4,
        "repeated shingles are deduplicated"
    );
    let exact = jaccard_sorted(&a, &b);
    assert!(exact > 0.6 && exact < 0.95, "{exact}");
    let (mut sa, mut sb) = (vec![0u32; 128], vec![0u32; 128]);
    sk.signature(base, &mut scratch, &mut sa);
    sk.signature(&edited, &mut scratch, &mut sb);
    let estimate = similarity(&sa, &sb);
    // 128 positions: standard error <= 0.045, so 4 sigma is 0.18.
    assert!(
        (estimate - exact).abs() < 0.18,
        "estimate {estimate} exact {exact}"
    );
}

#[derive(Debug)]
struct Whitespace;

impl CustomShingler for Whitespace {
    fn shingles(&self, text: &str, emit: &mut dyn FnMut(&[u8])) {
        text.split_whitespace().for_each(|w| emit(w.as_bytes()));
    }
}

#[test]
fn custom_tokenizers_plug_in() {
    let mut c = fast_config();
    c.shingler = Shingler::Custom(Arc::new(Whitespace));
    assert_eq!(c.shingler.describe(), "custom:Whitespace");
    let sk = Sketcher::new(c).unwrap();
    let mut scratch = Scratch::default();
    let (mut s1, mut s2) = (vec![0u32; 128], vec![0u32; 128]);
    let info = sk.signature("b a c", &mut scratch, &mut s1);
    sk.signature("c b a a", &mut scratch, &mut s2);
    assert_eq!(info.shingles, 3);
    assert_eq!(s1, s2, "same word set, same signature");
}

/// The hashes a long text hands over a few at a time make its shingle set, for texts signed a
/// piece at a time (oph, fast with characters) and whole (datasketch, words), and signing with a
/// scratch that stopped collecting gives the same signature.
#[test]
fn shingle_hashes_in_pieces_make_the_shingle_set() {
    let text: String = (0..40_000)
        .map(|i| format!("Word{} ", (i * 7919) % 3001))
        .collect();
    for (scheme, shingler) in [
        (HashScheme::Oph, Shingler::Chars { k: 5, step: 1 }),
        (HashScheme::Fast, Shingler::Bytes { k: 7, step: 1 }),
        (HashScheme::Datasketch, Shingler::Chars { k: 5, step: 1 }),
        (HashScheme::Oph, Shingler::Words { n: 3, step: 1 }),
    ] {
        let sk = Sketcher::new(SketchConfig {
            scheme,
            shingler: shingler.clone(),
            ..fast_config()
        })
        .unwrap();
        let mut scratch = Scratch::collecting_shingle_sets();
        let mut want = Vec::new();
        sk.shingle_set(&text, &mut scratch, &mut want);
        let mut got = Vec::new();
        let mut most = 0;
        let shingles = sk.for_each_shingle_hash(&text, &mut scratch, 1000, |hashes| {
            most = most.max(hashes.len());
            got.extend(hashes.iter().map(|&h| neardup_sketch::fingerprint(h)));
        });
        assert!(most <= 1000, "{scheme:?} {shingler:?}");
        got.sort_unstable();
        got.dedup();
        assert_eq!(got, want, "{scheme:?} {shingler:?}");
        let mut collected = vec![0u32; 128];
        sk.signature(&text, &mut scratch, &mut collected);
        assert!(scratch.collects_shingle_sets());
        scratch.set_collecting_shingle_sets(false);
        let mut plain = vec![0u32; 128];
        let info = sk.signature(&text, &mut scratch, &mut plain);
        assert_eq!(plain, collected, "{scheme:?} {shingler:?}");
        assert_eq!(info.shingles, shingles, "{scheme:?} {shingler:?}");
    }
}
