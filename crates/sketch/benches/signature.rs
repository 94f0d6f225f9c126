//! Signature throughput (MB/s of text) at num_perm 128 with character 5-grams, step 1.
//!
//! Input: the first `NEARDUP_BENCH_MB` (default 4) MB of `text` values of the JSONL file named by
//! `NEARDUP_BENCH_CORPUS` (default: the rustdocs corpus shard 0), or a generated English-like
//! text when that file is absent, so `cargo bench` always runs.
//!
//! Time is the benchmark thread's CPU time (`CLOCK_THREAD_CPUTIME_ID` on Linux, wall time
//! elsewhere): the target is "MB/s per core", and on a machine shared with other jobs wall time
//! mostly measures the scheduler. Criterion still prints it as "time".
//!
//! Benchmarks, all in one run so their ratios are comparable:
//! - `signature/fast/Reference`: the plain scalar baseline (library xxh3 per shingle, no
//!   deduplication, permutations outer, shingles inner);
//! - `signature/fast/<kernel>`: each supported kernel, the best one being what users get;
//! - `signature/fast/hash_only`: shingling + xxh3 alone (best kernel's hashing path);
//! - `signature/fast/kernel_only`: the best min kernel alone on precomputed distinct hashes;
//! - `signature/sketcher/fast`: `Sketcher::sketch` end to end (identity normaliser, content
//!   hash, 16 x 8 fast band keys);
//! - `signature/bytes5/fast`, `signature/words3/fast`: the other shingle modes;
//! - `signature/oph/<kernel>`, `signature/sketcher/oph`: the default one-permutation scheme;
//! - `sets/sort_dedup` (baseline) and `sets/fingerprint_set`: building each text's sorted shingle set
//!   (exact verification) from its hashes, with the standard library's sort and with neardup's
//!   bucket scatter; `sets/fingerprint_set/filtered` from the hashes the repeat filter keeps (what
//!   stage-2 workers build sets from);
//! - `short/oph`, `short/fast`, `short/sketcher/oph`: the same input cut into 60-160-byte
//!   documents, fewer shingles than positions (where `oph` spends its time densifying);
//! - `datasketch/<kernel>`: the lshcurator-compatible scheme on the first eighth of the input.

use std::hint::black_box;
use std::io::{BufRead, BufReader};
use std::time::Duration;

use criterion::measurement::{Measurement, ValueFormatter, WallTime};
use criterion::{BenchmarkGroup, Criterion, Throughput, criterion_group, criterion_main};
use neardup_sketch::{
    BandKeyScheme, HashScheme, Kernel, LshParams, MinHasher, Normalizer, Scratch, Shingler,
    SignScratch, SketchConfig, Sketcher,
};

const DEFAULT_CORPUS: &str = "/work/corpora/rustdocs/jsonl/part-00000.jsonl";
const NUM_PERM: usize = 128;

/// CPU time consumed by the calling thread.
struct ThreadCpuTime;

fn thread_cpu_now() -> Duration {
    #[cfg(target_os = "linux")]
    {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `ts` is a valid, writable timespec and the clock id is a Linux constant.
        let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
        assert_eq!(rc, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID) failed");
        Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
    }
    #[cfg(not(target_os = "linux"))]
    {
        static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
        START.get_or_init(std::time::Instant::now).elapsed()
    }
}

impl Measurement for ThreadCpuTime {
    type Intermediate = Duration;
    type Value = Duration;

    fn start(&self) -> Duration {
        thread_cpu_now()
    }
    fn end(&self, start: Duration) -> Duration {
        thread_cpu_now() - start
    }
    fn add(&self, a: &Duration, b: &Duration) -> Duration {
        *a + *b
    }
    fn zero(&self) -> Duration {
        Duration::ZERO
    }
    fn to_f64(&self, value: &Duration) -> f64 {
        value.as_nanos() as f64
    }
    fn formatter(&self) -> &dyn ValueFormatter {
        // Values are nanoseconds, exactly as for wall time, so its formatter applies.
        static WALL: WallTime = WallTime;
        WALL.formatter()
    }
}

fn load_texts() -> (Vec<String>, String) {
    let limit = std::env::var("NEARDUP_BENCH_MB")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .unwrap_or(4)
        << 20;
    let path = std::env::var("NEARDUP_BENCH_CORPUS").unwrap_or_else(|_| DEFAULT_CORPUS.into());
    let mut texts = Vec::new();
    let mut total = 0;
    if let Ok(file) = std::fs::File::open(&path) {
        for line in BufReader::new(file).lines() {
            let Ok(line) = line else { break };
            let Ok(value) = serde_json::from_str::<serde_json::Value>(&line) else {
                continue;
            };
            if let Some(text) = value.get("text").and_then(|t| t.as_str()) {
                total += text.len();
                texts.push(text.to_string());
                if total >= limit {
                    break;
                }
            }
        }
    }
    if !texts.is_empty() {
        return (texts, path);
    }
    // Fallback: deterministic pseudo-English documents of a few KB each.
    let words = [
        "the",
        "of",
        "and",
        "a",
        "to",
        "in",
        "is",
        "function",
        "returns",
        "value",
        "iterator",
        "struct",
        "trait",
        "implementation",
        "memory",
        "safe",
        "reference",
        "borrow",
        "lifetime",
        "generic",
        "type",
        "module",
        "crate",
        "error",
        "result",
        "option",
        "string",
        "vector",
    ];
    let mut state = 0x1234_5678_9abc_def0u64;
    while total < limit {
        let mut doc = String::new();
        while doc.len() < 3000 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            doc.push_str(words[(state % words.len() as u64) as usize]);
            doc.push(if state.is_multiple_of(11) { '.' } else { ' ' });
        }
        total += doc.len();
        texts.push(doc);
    }
    (texts, "generated text".into())
}

fn configure(group: &mut BenchmarkGroup<'_, ThreadCpuTime>, texts: &[String]) {
    let bytes: usize = texts.iter().map(|t| t.len()).sum();
    group.throughput(Throughput::Bytes(bytes as u64));
    group.sample_size(10);
    group.warm_up_time(Duration::from_millis(500));
    group.measurement_time(Duration::from_secs(3));
}

fn bench_sign(
    group: &mut BenchmarkGroup<'_, ThreadCpuTime>,
    name: String,
    texts: &[String],
    shingler: &Shingler,
    hasher: &MinHasher,
) {
    let mut scratch = SignScratch::default();
    let mut sig = vec![0u32; NUM_PERM];
    group.bench_function(name, |b| {
        b.iter(|| {
            let mut shingles = 0;
            for text in texts {
                shingles += hasher.sign(shingler, text, &mut scratch, &mut sig);
                black_box(&sig);
            }
            shingles
        })
    });
}

fn bench(c: &mut Criterion<ThreadCpuTime>) {
    let (texts, source) = load_texts();
    let bytes: usize = texts.iter().map(|t| t.len()).sum();
    eprintln!(
        "signature bench input: {} texts, {bytes} bytes from {source}",
        texts.len()
    );
    let chars5 = Shingler::Chars { k: 5, step: 1 };

    let mut group = c.benchmark_group("signature");
    configure(&mut group, &texts);
    for kernel in Kernel::supported() {
        let hasher = MinHasher::with_kernel(HashScheme::Fast, NUM_PERM, 1, kernel).unwrap();
        bench_sign(
            &mut group,
            format!("fast/{kernel:?}"),
            &texts,
            &chars5,
            &hasher,
        );
    }

    for kernel in [Kernel::Reference, Kernel::best()] {
        let hasher = MinHasher::with_kernel(HashScheme::Oph, NUM_PERM, 1, kernel).unwrap();
        bench_sign(
            &mut group,
            format!("oph/{kernel:?}"),
            &texts,
            &chars5,
            &hasher,
        );
    }

    let hasher = MinHasher::new(HashScheme::Fast, NUM_PERM, 1).unwrap();
    let mut hashes = Vec::new();
    group.bench_function("fast/hash_only", |b| {
        b.iter(|| {
            let mut n = 0;
            for text in &texts {
                hasher.hash_shingles(&chars5, text, &mut hashes);
                n += black_box(&hashes).len();
            }
            n
        })
    });

    // The kernel alone, on each text's precomputed distinct shingle hashes.
    let sets: Vec<Vec<u64>> = texts
        .iter()
        .map(|t| {
            let mut h = Vec::new();
            hasher.hash_shingles(&chars5, t, &mut h);
            h.sort_unstable();
            h.dedup();
            h
        })
        .collect();
    let mut sig = vec![0u32; NUM_PERM];
    group.bench_function("fast/kernel_only", |b| {
        b.iter(|| {
            for set in &sets {
                hasher.sign_hashes(set, &mut sig);
                black_box(&sig);
            }
        })
    });

    let sketcher = Sketcher::new(SketchConfig {
        normalizer: Normalizer::default(),
        shingler: chars5.clone(),
        scheme: HashScheme::Fast,
        num_perm: NUM_PERM,
        seed: 1,
        lsh: LshParams::new(16, 8).unwrap(),
        band_keys: BandKeyScheme::Fast,
    })
    .unwrap();
    let mut scratch = Scratch::default();
    let mut keys = vec![0u64; sketcher.bands()];
    group.bench_function("sketcher/fast", |b| {
        b.iter(|| {
            for text in &texts {
                let info = sketcher.sketch(text, &mut scratch, &mut sig, &mut keys);
                black_box((&keys, info));
            }
        })
    });

    let oph = Sketcher::new(SketchConfig {
        scheme: HashScheme::Oph,
        ..sketcher.config().clone()
    })
    .unwrap();
    group.bench_function("sketcher/oph", |b| {
        b.iter(|| {
            for text in &texts {
                let info = oph.sketch(text, &mut scratch, &mut sig, &mut keys);
                black_box((&keys, info));
            }
        })
    });

    // What a stage-2 worker does with a hot text under exact verification: its signature and
    // keys, and its shingle set from the same hashes.
    let mut collecting = Scratch::collecting_shingle_sets();
    let mut set = Vec::new();
    group.bench_function("sketcher/oph_with_set", |b| {
        b.iter(|| {
            for text in &texts {
                let info = oph.sketch(text, &mut collecting, &mut sig, &mut keys);
                set.clear();
                oph.last_shingle_set(&mut collecting, &mut set);
                black_box((&keys, &set, info));
            }
        })
    });

    bench_sign(
        &mut group,
        "bytes5/fast".into(),
        &texts,
        &Shingler::Bytes { k: 5, step: 1 },
        &hasher,
    );
    bench_sign(
        &mut group,
        "words3/fast".into(),
        &texts,
        &Shingler::Words { n: 3, step: 1 },
        &hasher,
    );
    group.finish();

    // Shingle sets from each text's hashes: all of them (repeats included), and what stage-2
    // workers build sets from, the hashes after the repeat filter.
    let all_hashes: Vec<Vec<u64>> = texts
        .iter()
        .map(|t| {
            let mut h = Vec::new();
            hasher.hash_shingles(&chars5, t, &mut h);
            h
        })
        .collect();
    let filtered_hashes: Vec<Vec<u64>> = texts
        .iter()
        .map(|t| {
            let mut scratch = SignScratch::collecting_distinct();
            let mut sig = vec![0u32; NUM_PERM];
            hasher.sign(&chars5, t, &mut scratch, &mut sig);
            scratch.mostly_distinct_hashes().to_vec()
        })
        .collect();
    let mut group = c.benchmark_group("sets");
    configure(&mut group, &texts);
    let mut set = Vec::new();
    group.bench_function("sort_dedup", |b| {
        b.iter(|| {
            for h in &all_hashes {
                set.clear();
                set.extend(h.iter().map(|&h| neardup_sketch::fingerprint(h)));
                set.sort_unstable();
                set.dedup();
                black_box(&set);
            }
        })
    });
    let mut scratch = neardup_sketch::SetScratch::default();
    group.bench_function("fingerprint_set", |b| {
        b.iter(|| {
            for h in &all_hashes {
                neardup_sketch::fingerprint_set(h, &mut set, &mut scratch);
                black_box(&set);
            }
        })
    });
    group.bench_function("fingerprint_set/filtered", |b| {
        b.iter(|| {
            for h in &filtered_hashes {
                neardup_sketch::fingerprint_set(h, &mut set, &mut scratch);
                black_box(&set);
            }
        })
    });
    group.finish();

    // Short documents (titles, sentences, chat turns): the same text cut at line ends into
    // pieces of 60-160 bytes, so a piece has fewer shingles than the signature has positions and
    // densification fills most of them.
    let mut short = Vec::new();
    for text in &texts {
        let mut piece = String::new();
        for line in text.lines() {
            if !piece.is_empty() && piece.len() + line.len() > 160 {
                short.push(std::mem::take(&mut piece));
            }
            if !piece.is_empty() {
                piece.push('\n');
            }
            let cut = (0..=line.len().min(160))
                .rev()
                .find(|&i| line.is_char_boundary(i))
                .unwrap_or(0);
            piece.push_str(&line[..cut]);
            if piece.len() >= 60 {
                short.push(std::mem::take(&mut piece));
            }
        }
    }
    let mut group = c.benchmark_group("short");
    configure(&mut group, &short);
    let oph_hasher = MinHasher::new(HashScheme::Oph, NUM_PERM, 1).unwrap();
    bench_sign(&mut group, "oph".into(), &short, &chars5, &oph_hasher);
    bench_sign(&mut group, "fast".into(), &short, &chars5, &hasher);
    let mut sketch_scratch = Scratch::default();
    group.bench_function("sketcher/oph", |b| {
        b.iter(|| {
            for text in &short {
                let info = oph.sketch(text, &mut sketch_scratch, &mut sig, &mut keys);
                black_box((&keys, info));
            }
        })
    });
    group.finish();

    // The datasketch scheme is far slower; an eighth of the input keeps the run short.
    let mut small = Vec::new();
    let mut small_bytes = 0;
    for text in &texts {
        if small_bytes >= bytes / 8 {
            break;
        }
        small_bytes += text.len();
        small.push(text.clone());
    }
    let mut group = c.benchmark_group("datasketch");
    configure(&mut group, &small);
    for kernel in [Kernel::Reference, Kernel::best()] {
        let hasher = MinHasher::with_kernel(HashScheme::Datasketch, NUM_PERM, 1, kernel).unwrap();
        bench_sign(&mut group, format!("{kernel:?}"), &small, &chars5, &hasher);
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().with_measurement(ThreadCpuTime);
    targets = bench
}
criterion_main!(benches);
