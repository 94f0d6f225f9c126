//! Frozen values of the fast MinHash scheme (v1) and fast band keys: these are an on-disk
//! format (docs/formats.md), so any change here is a breaking format change.
//!
//! The literal arrays below and fast_golden.json were computed by an independent Python
//! implementation (tests/data/sketch/gen_fixtures.py, using the `xxhash` package), not by this
//! crate.

use neardup_sketch::{
    BandKeyScheme, HashScheme, Kernel, LshParams, MinHasher, Normalizer, Scratch, Shingler,
    SignScratch, SketchConfig, Sketcher, band_keys,
};
use serde_json::Value;

/// (text, signature with num_perm 16 / seed 1 / char 5-grams, band keys 4 x 4)
const GOLDEN: &[(&str, [u32; 16], [u64; 4])] = &[
    (
        "hello world, this is a test",
        [
            50763059, 31957607, 130305838, 173426270, 237306544, 87584185, 387611153, 4195233,
            70983839, 68562895, 93812306, 344341242, 124345444, 158656605, 147764237, 96736694,
        ],
        [
            9688996535316469428,
            5139603699676280889,
            10688849450484218803,
            1657080841733471635,
        ],
    ),
    (
        "hello world, this is a test!",
        [
            50763059, 31957607, 130305838, 173426270, 237306544, 87584185, 387611153, 4195233,
            70983839, 68562895, 93812306, 344341242, 124345444, 158656605, 147764237, 96736694,
        ],
        [
            9688996535316469428,
            5139603699676280889,
            10688849450484218803,
            1657080841733471635,
        ],
    ),
    (
        "Ünïcödé 文字 テキスト 🙂 mixed text",
        [
            23207227, 298523598, 207401607, 205479440, 362368345, 101166250, 358729847, 177910548,
            575933128, 88216706, 147975655, 10544072, 15782376, 61753464, 254389150, 70008845,
        ],
        [
            12336483640943241931,
            14050812939263318176,
            1978126459409328818,
            1282278914793440461,
        ],
    ),
    (
        "abcd",
        [
            4294967295, 4294967295, 4294967295, 4294967295, 4294967295, 4294967295, 4294967295,
            4294967295, 4294967295, 4294967295, 4294967295, 4294967295, 4294967295, 4294967295,
            4294967295, 4294967295,
        ],
        [
            8226423055709418259,
            13647608267039878721,
            131911747055737263,
            13700703589372370583,
        ],
    ),
    (
        "",
        [
            4294967295, 4294967295, 4294967295, 4294967295, 4294967295, 4294967295, 4294967295,
            4294967295, 4294967295, 4294967295, 4294967295, 4294967295, 4294967295, 4294967295,
            4294967295, 4294967295,
        ],
        [
            8226423055709418259,
            13647608267039878721,
            131911747055737263,
            13700703589372370583,
        ],
    ),
    (
        "The quick brown fox jumps over the lazy dog. The quick brown fox jumps over the lazy dog. The quick brown fox jumps over the lazy dog. The quick brown fox jumps over the lazy dog. The quick brown fox jumps over the lazy dog. ",
        [
            161777560, 435605572, 114547981, 170330268, 43662407, 51367567, 53518119, 179911262,
            357367880, 17808828, 16818261, 95143001, 40288272, 101503049, 79128765, 34683442,
        ],
        [
            281110315981207887,
            1366327327219190303,
            859909348183423390,
            18265797892513178572,
        ],
    ),
];

fn check(hasher: &MinHasher, text: &str, sig_want: &[u32], keys_want: &[u64], params: LshParams) {
    let mut sig = vec![0u32; hasher.num_perm()];
    hasher.sign(
        &Shingler::Chars { k: 5, step: 1 },
        text,
        &mut SignScratch::default(),
        &mut sig,
    );
    assert_eq!(sig, sig_want, "{text:?} {:?}", hasher.kernel());
    let mut keys = vec![0u64; params.bands];
    band_keys(BandKeyScheme::Fast, params, &sig, &mut keys);
    assert_eq!(keys, keys_want, "{text:?}");
}

#[test]
fn fast_scheme_literal_golden_values() {
    let params = LshParams::new(4, 4).unwrap();
    for kernel in Kernel::supported() {
        let hasher = MinHasher::with_kernel(HashScheme::Fast, 16, 1, kernel).unwrap();
        for (text, sig, keys) in GOLDEN {
            check(&hasher, text, sig, keys, params);
        }
    }
}

#[test]
fn fast_scheme_matches_independent_python_at_a_ragged_width() {
    let path = format!(
        "{}/../../tests/data/sketch/fast_golden.json",
        env!("CARGO_MANIFEST_DIR")
    );
    let data: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let cases = data["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 12);
    for case in cases {
        let n = case["num_perm"].as_u64().unwrap() as usize;
        let seed = case["seed"].as_u64().unwrap();
        let params = LshParams::new(
            case["bands"].as_u64().unwrap() as usize,
            case["rows"].as_u64().unwrap() as usize,
        )
        .unwrap();
        let sig: Vec<u32> = case["signature"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap() as u32)
            .collect();
        let keys: Vec<u64> = case["band_keys"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap())
            .collect();
        for kernel in Kernel::supported() {
            let hasher = MinHasher::with_kernel(HashScheme::Fast, n, seed, kernel).unwrap();
            check(&hasher, case["text"].as_str().unwrap(), &sig, &keys, params);
        }
    }
}

#[test]
fn sketcher_with_identity_normalizer_gives_the_golden_values() {
    let sk = Sketcher::new(SketchConfig {
        normalizer: Normalizer::default(),
        shingler: Shingler::Chars { k: 5, step: 1 },
        scheme: HashScheme::Fast,
        num_perm: 16,
        seed: 1,
        lsh: LshParams::new(4, 4).unwrap(),
        band_keys: BandKeyScheme::Fast,
    })
    .unwrap();
    let mut scratch = Scratch::default();
    for (text, sig_want, keys_want) in GOLDEN {
        let mut sig = [0u32; 16];
        let mut keys = [0u64; 4];
        let info = sk.sketch(text, &mut scratch, &mut sig, &mut keys);
        assert_eq!(&sig, sig_want);
        assert_eq!(&keys, keys_want);
        assert_eq!(info.shingles, text.chars().count().saturating_sub(4));
    }
}
