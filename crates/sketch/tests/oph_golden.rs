//! Frozen values of the `oph` MinHash scheme (v1, the default): an on-disk format
//! (docs/formats.md), so any change here is a breaking format change. oph_golden.json was
//! computed by an independent Python implementation (tests/data/sketch/gen_fixtures.py, using the
//! `xxhash` package), not by this crate.

use neardup_sketch::{
    BandKeyScheme, HashScheme, Kernel, LshParams, MinHasher, Normalizer, Scratch, Shingler,
    SignScratch, SketchConfig, Sketcher, band_keys,
};
use serde_json::Value;

fn cases() -> Vec<Value> {
    let path = format!(
        "{}/../../tests/data/sketch/oph_golden.json",
        env!("CARGO_MANIFEST_DIR")
    );
    let data: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    data["cases"].as_array().unwrap().clone()
}

fn numbers<T: TryFrom<u64>>(v: &Value) -> Vec<T>
where
    T::Error: std::fmt::Debug,
{
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| T::try_from(x.as_u64().unwrap()).unwrap())
        .collect()
}

#[test]
fn oph_scheme_matches_independent_python_with_every_kernel_and_scratch() {
    let cases = cases();
    assert_eq!(cases.len(), 18);
    for case in &cases {
        let n = case["num_perm"].as_u64().unwrap() as usize;
        let seed = case["seed"].as_u64().unwrap();
        let text = case["text"].as_str().unwrap();
        let params = LshParams::new(
            case["bands"].as_u64().unwrap() as usize,
            case["rows"].as_u64().unwrap() as usize,
        )
        .unwrap();
        let sig_want: Vec<u32> = numbers(&case["signature"]);
        let keys_want: Vec<u64> = numbers(&case["band_keys"]);
        for kernel in Kernel::supported() {
            let hasher = MinHasher::with_kernel(HashScheme::Oph, n, seed, kernel).unwrap();
            // Both scratch modes (repeats dropped before signing or not) give the same values.
            for mut scratch in [SignScratch::default(), SignScratch::collecting_distinct()] {
                let mut sig = vec![0u32; n];
                hasher.sign(
                    &Shingler::Chars { k: 5, step: 1 },
                    text,
                    &mut scratch,
                    &mut sig,
                );
                assert_eq!(sig, sig_want, "{text:?} n {n} {kernel:?}");
            }
            let mut keys = vec![0u64; params.bands];
            band_keys(BandKeyScheme::Fast, params, &sig_want, &mut keys);
            assert_eq!(keys, keys_want, "{text:?}");
        }
    }
}

#[test]
fn sketcher_shingle_sets_follow_the_signed_text() {
    let sk = Sketcher::new(SketchConfig {
        normalizer: Normalizer::default(),
        shingler: Shingler::Chars { k: 5, step: 1 },
        scheme: HashScheme::Oph,
        num_perm: 128,
        seed: 1,
        lsh: LshParams::new(16, 8).unwrap(),
        band_keys: BandKeyScheme::Fast,
    })
    .unwrap();
    {
        let mut scratch = Scratch::collecting_shingle_sets();
        for case in cases() {
            let text = case["text"].as_str().unwrap();
            let mut sig = vec![0u32; 128];
            sk.signature(text, &mut scratch, &mut sig);
            let (mut from_last, mut fresh) = (Vec::new(), Vec::new());
            sk.last_shingle_set(&mut scratch, &mut from_last);
            sk.shingle_set(text, &mut scratch, &mut fresh);
            assert_eq!(from_last, fresh, "{text:?}");
            // The fold of the golden shingle hash, written out (not `neardup_sketch::fingerprint`).
            let mut want: Vec<u32> = Vec::new();
            Shingler::Chars { k: 5, step: 1 }.for_each(text, |s| {
                let h = xxhash_rust::xxh3::xxh3_64(s);
                want.push((h as u32) ^ ((h >> 32) as u32));
            });
            want.sort_unstable();
            want.dedup();
            assert_eq!(fresh, want, "{text:?}");
        }
    }
}
