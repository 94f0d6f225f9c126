//! Bit-exact compatibility with datasketch 1.9 and lshcurator 0.2.3, against fixtures the Python
//! peers generated (tests/data/sketch/, see gen_fixtures.py there).

use neardup_sketch::{
    BandKeyScheme, HashScheme, Kernel, LshParams, MinHasher, Scratch, Shingler, SignScratch,
    SketchConfig, Sketcher, band_keys, datasketch_permutations,
};
use serde_json::Value;

fn fixture(name: &str) -> Value {
    let path = format!(
        "{}/../../tests/data/sketch/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    serde_json::from_str(&text).unwrap()
}

fn u64s(v: &Value) -> Vec<u64> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap())
        .collect()
}

fn usize_of(v: &Value) -> usize {
    v.as_u64().unwrap() as usize
}

#[test]
fn lshcurator_signatures_and_band_keys_are_bit_exact() {
    let data = fixture("signatures.json");
    let mut checked = 0;
    for case in data["cases"].as_array().unwrap() {
        let seed = case["seed"].as_u64().unwrap();
        let num_perm = usize_of(&case["num_perm"]);
        let (bands, rows) = (usize_of(&case["bands"]), usize_of(&case["rows"]));
        let (a, b) = datasketch_permutations(num_perm, seed);
        assert_eq!(a, u64s(&case["perm_a"]), "a, seed {seed} width {num_perm}");
        assert_eq!(b, u64s(&case["perm_b"]), "b, seed {seed} width {num_perm}");
        let params = LshParams::new(bands, rows).unwrap();
        for kernel in Kernel::supported() {
            let hasher =
                MinHasher::with_kernel(HashScheme::Datasketch, num_perm, seed, kernel).unwrap();
            for doc in case["docs"].as_array().unwrap() {
                let text = doc["text"].as_str().unwrap();
                let (k, step) = (usize_of(&doc["shingle_k"]), usize_of(&doc["step"]));
                let byte_mode = doc["mode"] == "byte";
                let shingler = if byte_mode {
                    Shingler::Bytes { k, step }
                } else {
                    Shingler::Chars { k, step }
                };
                let what = format!(
                    "{text:?} {} k{k} s{step} seed {seed} n{num_perm} {kernel:?}",
                    doc["mode"]
                );
                let mut first = Vec::new();
                shingler.for_each(text, |s| first.push(hasher.shingle_hash(s)));
                first.truncate(3);
                assert_eq!(first, u64s(&doc["shingle_sha1_hash32"]), "{what}");

                let mut sig = vec![0u32; num_perm];
                hasher.sign(&shingler, text, &mut SignScratch::default(), &mut sig);
                let want: Vec<u64> = u64s(&doc["signature"]);
                assert_eq!(
                    sig.iter().map(|&x| u64::from(x)).collect::<Vec<_>>(),
                    want,
                    "{what}"
                );

                let mut keys = vec![0u64; bands];
                band_keys(BandKeyScheme::Lshcurator, params, &sig, &mut keys);
                assert_eq!(keys, u64s(&doc["band_keys"]), "{what}");

                // The lshcurator preset reaches the same values through the Sketcher.
                if seed == 36 && bands * rows == num_perm {
                    let sk =
                        Sketcher::new(SketchConfig::lshcurator(k, step, byte_mode, bands, rows))
                            .unwrap();
                    let mut sig2 = vec![0u32; num_perm];
                    let mut keys2 = vec![0u64; bands];
                    sk.sketch(text, &mut Scratch::default(), &mut sig2, &mut keys2);
                    assert_eq!(sig2, sig, "{what}");
                    assert_eq!(keys2, keys, "{what}");
                }
                checked += 1;
            }
        }
    }
    assert!(checked >= 96, "fixture too small: {checked}");
}

#[test]
fn datasketch_permutations_match_numpy_for_more_seeds_and_widths() {
    let data = fixture("permutations.json");
    let cases = data["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 18);
    for case in cases {
        let seed = case["seed"].as_u64().unwrap();
        let num_perm = usize_of(&case["num_perm"]);
        let (a, b) = datasketch_permutations(num_perm, seed);
        assert_eq!(a, u64s(&case["a"]), "a, seed {seed} width {num_perm}");
        assert_eq!(b, u64s(&case["b"]), "b, seed {seed} width {num_perm}");
    }
}

#[test]
fn optimal_params_match_datasketch() {
    let data = fixture("optimal_params.json");
    let cases = data["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 60);
    let mut wrong = Vec::new();
    for case in cases {
        let t = case["threshold"].as_f64().unwrap();
        let n = usize_of(&case["num_perm"]);
        let want = (usize_of(&case["bands"]), usize_of(&case["rows"]));
        let got = LshParams::optimal(t, n, 0.5, 0.5).unwrap();
        if (got.bands, got.rows) != want {
            wrong.push(format!(
                "t={t} n={n}: got {}x{}, want {}x{}",
                got.bands, got.rows, want.0, want.1
            ));
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}
