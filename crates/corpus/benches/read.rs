//! Corpus read throughput on one core: JSONL read + field extraction and Parquet text-column
//! read, against a naive `BufRead::lines` + `serde_json::Value` baseline in the same run.
//!
//! Data: `$NEARDUP_BENCH_CORPUS/{jsonl,parquet}/part-00000.*` if set, else
//! `/work/corpora/rustdocs`, else a generated corpus of similar shape (so it runs anywhere).
//!
//! Time is the benchmark thread's own CPU time (Linux `/proc/thread-self/schedstat`, user +
//! kernel), not wall-clock: the targets are per core, and the shared 2-core machine is usually
//! oversubscribed, which would otherwise measure the scheduler. Elsewhere it falls back to
//! wall-clock time.

use std::hint::black_box;
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use criterion::measurement::{Measurement, ValueFormatter};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use neardup_corpus::{
    Chunk, ChunkRange, FieldPath, InputFile, Projection, ReadOptions, SampleText, TextSelector,
    read_chunk,
};

/// CPU time of the calling thread in nanoseconds.
fn thread_cpu_ns() -> u64 {
    static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| {
            START
                .get_or_init(std::time::Instant::now)
                .elapsed()
                .as_nanos() as u64
        })
}

/// Criterion measurement of thread CPU time.
struct ThreadCpu;

impl Measurement for ThreadCpu {
    type Intermediate = u64;
    type Value = u64;
    fn start(&self) -> u64 {
        thread_cpu_ns()
    }
    fn end(&self, start: u64) -> u64 {
        thread_cpu_ns().saturating_sub(start)
    }
    fn add(&self, a: &u64, b: &u64) -> u64 {
        a + b
    }
    fn zero(&self) -> u64 {
        0
    }
    fn to_f64(&self, v: &u64) -> f64 {
        *v as f64
    }
    fn formatter(&self) -> &dyn ValueFormatter {
        &CpuFormatter
    }
}

struct CpuFormatter;

impl ValueFormatter for CpuFormatter {
    fn scale_values(&self, _typical: f64, values: &mut [f64]) -> &'static str {
        values.iter_mut().for_each(|v| *v /= 1e6);
        "ms(cpu)"
    }
    fn scale_throughputs(&self, _typical: f64, t: &Throughput, values: &mut [f64]) -> &'static str {
        let (n, unit) = match t {
            Throughput::Bytes(b) | Throughput::BytesDecimal(b) => (*b as f64 / 1e6, "MB/s(cpu)"),
            Throughput::Elements(e) => (*e as f64 / 1e6, "Melem/s(cpu)"),
        };
        values.iter_mut().for_each(|v| *v = n / (*v / 1e9));
        unit
    }
    fn scale_for_machines(&self, _values: &mut [f64]) -> &'static str {
        "ns"
    }
}

struct Data {
    jsonl: PathBuf,
    parquet: PathBuf,
    origin: String,
    _tmp: Option<tempfile::TempDir>,
}

fn find_data() -> Data {
    let dirs = std::env::var_os("NEARDUP_BENCH_CORPUS")
        .map(PathBuf::from)
        .into_iter()
        .chain([PathBuf::from("/work/corpora/rustdocs")]);
    for d in dirs {
        let j = d.join("jsonl/part-00000.jsonl");
        let p = d.join("parquet/part-00000.parquet");
        if j.is_file() && p.is_file() {
            return Data {
                jsonl: j,
                parquet: p,
                origin: d.display().to_string(),
                _tmp: None,
            };
        }
    }
    generate()
}

/// ~32 MB of documentation-like records: many short lines, so escapes are frequent.
fn generate() -> Data {
    use arrow_array::{ArrayRef, RecordBatch, StringArray};
    let tmp = tempfile::tempdir().expect("tempdir");
    let words = [
        "fn",
        "pub",
        "struct",
        "impl",
        "Iterator",
        "::",
        "returns",
        "the",
        "value",
        "of",
        "a",
        "Copy item path",
        "Source",
        "Expand description",
        "1.89.0",
    ];
    let mut x: u64 = 0x2545_F491_4F6C_DD1D;
    let mut texts = Vec::new();
    let mut total = 0;
    while total < 32 << 20 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let n = 100 + (x % 900) as usize;
        let text: Vec<&str> = (0..n)
            .map(|i| words[(x as usize >> (i % 40)) % words.len()])
            .collect();
        let t = text.join("\n");
        total += t.len();
        texts.push(t);
    }
    let jsonl = tmp.path().join("gen.jsonl");
    let mut out = String::new();
    for (i, t) in texts.iter().enumerate() {
        out.push_str(&serde_json::json!({"id": format!("doc/{i}"), "text": t, "source": "gen", "url": "https://example.invalid/", "toolchain": "stable"}).to_string());
        out.push('\n');
    }
    std::fs::write(&jsonl, out).expect("write jsonl");
    let parquet = tmp.path().join("gen.parquet");
    let schema = Arc::new(arrow_schema::Schema::new(vec![arrow_schema::Field::new(
        "text",
        arrow_schema::DataType::Utf8,
        false,
    )]));
    let props = parquet::file::properties::WriterProperties::builder()
        .set_compression(parquet::basic::Compression::ZSTD(Default::default()))
        .set_max_row_group_row_count(Some(4096))
        .build();
    let mut w = parquet::arrow::ArrowWriter::try_new(
        std::fs::File::create(&parquet).expect("create"),
        schema.clone(),
        Some(props),
    )
    .expect("writer");
    let col: ArrayRef = Arc::new(StringArray::from(texts));
    w.write(&RecordBatch::try_new(schema, vec![col]).expect("batch"))
        .expect("write");
    w.close().expect("close");
    Data {
        jsonl,
        parquet,
        origin: "generated".into(),
        _tmp: Some(tmp),
    }
}

fn input(path: &Path) -> InputFile {
    InputFile::detect(path, Path::new(path.file_name().expect("name")), None).expect("format")
}

/// Reads a whole file through the crate and sums the text lengths (so nothing is optimised out).
fn read_text(file: &InputFile, opts: &ReadOptions) -> (u64, u64) {
    let chunk = Chunk {
        file: 0,
        seq: 0,
        range: ChunkRange::Whole,
    };
    let (mut text, mut input) = (0u64, 0u64);
    for b in read_chunk(file, &chunk, opts) {
        let b = b.expect("readable");
        input += b.input_bytes();
        b.for_each_sample(&opts.selector, |s| {
            if let SampleText::Text(t) = s.text {
                text += t.len() as u64;
            }
        });
    }
    (text, input)
}

/// The naive baseline: one String and one serde_json::Value per line.
fn naive_jsonl(path: &Path) -> u64 {
    let f = std::io::BufReader::new(std::fs::File::open(path).expect("open"));
    let mut text = 0u64;
    for line in f.lines() {
        let line = line.expect("utf-8 line");
        if line.trim().is_empty() {
            continue;
        }
        if let Ok(v) = serde_json::from_str::<serde_json::Value>(&line)
            && let Some(t) = v.get("text").and_then(|t| t.as_str())
        {
            text += t.len() as u64;
        }
    }
    text
}

fn bench(c: &mut Criterion<ThreadCpu>) {
    let data = find_data();
    eprintln!("corpus I/O bench data: {}", data.origin);
    let sel = TextSelector {
        fields: vec![FieldPath::top("text")],
        mode: Default::default(),
        id_field: Some(FieldPath::top("id")),
        rank_field: None,
    };
    let opts = ReadOptions::new(sel, Projection::TextOnly);

    let jf = input(&data.jsonl);
    let (t1, _) = read_text(&jf, &opts);
    assert_eq!(
        t1,
        naive_jsonl(&data.jsonl),
        "both readers see the same text"
    );
    let mut g = c.benchmark_group("corpus_jsonl");
    g.sample_size(10);
    g.throughput(Throughput::BytesDecimal(jf.size));
    g.bench_function("neardup_read_chunk", |b| {
        b.iter(|| black_box(read_text(&jf, &opts)))
    });
    g.bench_function("naive_lines_serde_value", |b| {
        b.iter(|| black_box(naive_jsonl(&data.jsonl)))
    });
    g.finish();

    let pf = input(&data.parquet);
    let (_, text_bytes) = read_text(&pf, &opts);
    let full = ReadOptions::new(opts.selector.clone(), Projection::FullRecords);
    let mut g = c.benchmark_group("corpus_parquet");
    g.sample_size(10);
    // Throughput in bytes of the text column's values, the unit of the 300 MB/s target.
    g.throughput(Throughput::BytesDecimal(text_bytes));
    g.bench_function("neardup_text_only", |b| {
        b.iter(|| black_box(read_text(&pf, &opts)))
    });
    g.bench_function("neardup_full_records", |b| {
        b.iter(|| black_box(read_text(&pf, &full)))
    });
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().with_measurement(ThreadCpu);
    targets = bench
}
criterion_main!(benches);
