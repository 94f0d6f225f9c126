//! Stage 1 end to end against signing alone, alternated: on a shared, throttled machine the speed
//! drifts by tens of percent within a minute, so criterion's two separate measurements can put a
//! slow minute of one against a fast minute of the other. This bench runs the two back to back,
//! round after round, and reports the ratio of each pair and their median. Same corpus and settings
//! as the `stage1` bench (`NEARDUP_BENCH_CORPUS`, `NEARDUP_BENCH_ROUNDS`, default 15;
//! `NEARDUP_BENCH_SCHEME=fast|oph` for one scheme; `NEARDUP_BENCH_ONLY=signing|end_to_end` runs
//! one side only, for a profiler).
//!
//! `cargo bench -p neardup-keys --bench stage1_ratio`

use std::path::{Path, PathBuf};
use std::time::Instant;

use neardup_corpus::{DiscoverOptions, FieldPath, InputFile, TextSelector, discover};
use neardup_exec::StepControl;
use neardup_keys::{KeysConfig, run_keys};
use neardup_sketch::{
    BandKeyScheme, HashScheme, LshParams, Normalizer, Scratch, Shingler, SketchConfig, Sketcher,
};
use rayon::prelude::*;

fn sketcher(scheme: HashScheme) -> Sketcher {
    Sketcher::new(SketchConfig {
        normalizer: Normalizer {
            trim: true,
            ..Normalizer::default()
        },
        shingler: Shingler::Chars { k: 5, step: 1 },
        scheme,
        num_perm: 128,
        seed: 1,
        lsh: LshParams::new(16, 8).unwrap(),
        band_keys: BandKeyScheme::Fast,
    })
    .unwrap()
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let path = std::env::var("NEARDUP_BENCH_CORPUS")
        .map(PathBuf::from)
        .unwrap_or_else(|_| {
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../../../corpora/rustdocs/jsonl/part-00000.jsonl")
        });
    if !path.exists() {
        eprintln!(
            "stage1_ratio: {} not found (build it with shared/bench/build_rustdocs.py)",
            path.display()
        );
        return;
    }
    let rounds: usize = std::env::var("NEARDUP_BENCH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(15);
    let files: Vec<InputFile> =
        discover(&[path.display().to_string()], &DiscoverOptions::default()).files;
    let texts: Vec<String> = std::fs::read_to_string(&path)
        .unwrap()
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter_map(|v| v["text"].as_str().map(str::to_string))
        .collect();
    let bytes: u64 = texts.iter().map(|t| t.len() as u64).sum();
    let mib = bytes as f64 / (1 << 20) as f64;
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(2)
        .build()
        .unwrap();
    let schemes: Vec<(&str, HashScheme)> = match std::env::var("NEARDUP_BENCH_SCHEME").as_deref() {
        Ok("fast") => vec![("fast", HashScheme::Fast)],
        Ok("oph") => vec![("oph", HashScheme::Oph)],
        _ => vec![("fast", HashScheme::Fast), ("oph", HashScheme::Oph)],
    };
    for (name, scheme) in schemes {
        let sk = sketcher(scheme);
        let sign_only = || {
            let t = Instant::now();
            let n = pool.install(|| {
                texts
                    .par_chunks(64)
                    .map_init(
                        || (Scratch::default(), vec![0u32; 128], vec![0u64; 16]),
                        |(scratch, sig, keys), chunk| {
                            chunk
                                .iter()
                                .map(|t| sk.sketch(t, scratch, sig, keys).shingles)
                                .sum::<usize>()
                        },
                    )
                    .sum::<usize>()
            });
            std::hint::black_box(n);
            t.elapsed().as_secs_f64()
        };
        let mut cfg = KeysConfig::new(
            sketcher(scheme),
            TextSelector::single(FieldPath::top("text")),
        );
        cfg.threads = 2;
        let end_to_end = || {
            let t = Instant::now();
            let out = run_keys(&files, 0, &cfg, &StepControl::default()).unwrap();
            let total = t.elapsed().as_secs_f64();
            (total, out.stats.sketch_seconds)
        };
        if let Ok(only) = std::env::var("NEARDUP_BENCH_ONLY") {
            // For a profiler: one side only, `rounds` times.
            for _ in 0..rounds {
                if only == "signing" {
                    sign_only();
                } else {
                    end_to_end();
                }
            }
            continue;
        }
        // Warm the page cache and the allocator.
        sign_only();
        end_to_end();
        let (mut sign, mut e2e, mut pass1, mut ratio, mut ratio1) =
            (vec![], vec![], vec![], vec![], vec![]);
        for _ in 0..rounds {
            let s = sign_only();
            let (e, p) = end_to_end();
            sign.push(s);
            e2e.push(e);
            pass1.push(p);
            ratio.push(e / s);
            ratio1.push(p / s);
        }
        let (s, e, p) = (median(&mut sign), median(&mut e2e), median(&mut pass1));
        println!(
            "{name}: signing alone {:.1} ms ({:.0} MiB/s), end to end {:.1} ms ({:.0} MiB/s), \
             of which read+sketch {:.1} ms ({:.0} MiB/s)",
            s * 1e3,
            mib / s,
            e * 1e3,
            mib / e,
            p * 1e3,
            mib / p
        );
        let min_ratio = ratio.iter().copied().fold(f64::INFINITY, f64::min);
        println!(
            "{name}: end to end / signing alone, {rounds} alternated pairs: median {:.3}x, \
             min {:.3}x, max {:.3}x; read+sketch phase / signing alone: median {:.3}x",
            median(&mut ratio),
            min_ratio,
            ratio[ratio.len() - 1],
            median(&mut ratio1)
        );
    }
}
