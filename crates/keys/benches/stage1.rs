//! Stage 1 end to end (read + parse + shingle + sign + keys + count) against signing alone, on the
//! same real text in the same run, both on 2 threads. The ratio says what reading and bookkeeping
//! cost on top of the sketch maths. Corpus: the first shard of the rustdocs corpus
//! (`NEARDUP_BENCH_CORPUS` = a JSONL file; default `../corpora/rustdocs/jsonl/part-00000.jsonl`
//! beside the project), else a generated corpus.

use std::path::{Path, PathBuf};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use neardup_corpus::{DiscoverOptions, FieldPath, InputFile, TextSelector, discover};
use neardup_exec::StepControl;
use neardup_keys::{KeysConfig, run_keys};
use neardup_sketch::{
    BandKeyScheme, HashScheme, LshParams, Normalizer, Scratch, Shingler, SketchConfig, Sketcher,
};
use rayon::prelude::*;

fn corpus() -> (PathBuf, Option<tempfile::TempDir>) {
    let given = std::env::var("NEARDUP_BENCH_CORPUS")
        .map(PathBuf::from)
        .unwrap_or_else(|_| {
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../../../corpora/rustdocs/jsonl/part-00000.jsonl")
        });
    if given.exists() {
        return (given, None);
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("generated.jsonl");
    let words = [
        "lorem",
        "ipsum",
        "dolor",
        "sit",
        "amet",
        "consectetur",
        "adipiscing",
        "elit",
        "sed",
        "do",
    ];
    let mut body = String::new();
    let mut x = 7u64;
    for i in 0..20_000 {
        let mut text = format!("document {i}");
        for _ in 0..300 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            text.push(' ');
            text.push_str(words[(x % 10) as usize]);
        }
        body.push_str(&serde_json::to_string(&serde_json::json!({ "text": text })).unwrap());
        body.push('\n');
    }
    std::fs::write(&path, body).unwrap();
    (path, Some(dir))
}

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

fn bench(c: &mut Criterion) {
    let (path, _keep) = corpus();
    let files: Vec<InputFile> =
        discover(&[path.display().to_string()], &DiscoverOptions::default()).files;
    let texts: Vec<String> = std::fs::read_to_string(&path)
        .unwrap()
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter_map(|v| v["text"].as_str().map(str::to_string))
        .collect();
    let bytes: u64 = texts.iter().map(|t| t.len() as u64).sum();
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(2)
        .build()
        .unwrap();
    let mut g = c.benchmark_group("stage1");
    g.sample_size(10);
    g.throughput(Throughput::Bytes(bytes));
    for (name, scheme) in [("fast", HashScheme::Fast), ("oph", HashScheme::Oph)] {
        let sk = sketcher(scheme);
        g.bench_function(format!("{name}/signature_only_2_threads"), |b| {
            b.iter(|| {
                pool.install(|| {
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
                })
            })
        });
        g.bench_function(format!("{name}/stage1_end_to_end_2_threads"), |b| {
            let mut cfg = KeysConfig::new(
                sketcher(scheme),
                TextSelector::single(FieldPath::top("text")),
            );
            cfg.threads = 2;
            cfg.chunk_bytes = std::env::var("NEARDUP_BENCH_CHUNK_MB")
                .ok()
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(4)
                << 20;
            b.iter(|| {
                run_keys(&files, 0, &cfg, &StepControl::default())
                    .unwrap()
                    .stats
                    .samples
            })
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
