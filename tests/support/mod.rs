//! Helpers shared by the integration test modules: the binary under test, corpora, compressed
//! and Parquet inputs, and (in `s3`) a real S3 API server.
#![allow(dead_code)]

pub mod s3;

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Arc;

/// The binary under test. `NEARDUP_TEST_BIN` runs the tests against another build (e.g. an
/// older one, to see them fail there).
pub fn neardup() -> Command {
    Command::new(
        std::env::var_os("NEARDUP_TEST_BIN")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_neardup"))),
    )
}

/// [`neardup`] starting with SIGINT, SIGTERM and SIGHUP at their default actions, for the tests
/// that send them: neardup leaves a signal ignored when it was ignored at start (`nohup`, a
/// background job), and a test run in the background by a shell without job control starts
/// with SIGINT ignored, which would make those tests see a run that never stops.
pub fn neardup_with_default_signals() -> Command {
    let mut cmd = neardup();
    with_default_signals(&mut cmd);
    cmd
}

/// Makes `cmd` start with SIGINT, SIGTERM and SIGHUP at their default actions (see
/// [`neardup_with_default_signals`]).
pub fn with_default_signals(cmd: &mut Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: between fork and exec the closure only calls signal(2), which is
    // async-signal-safe, and allocates nothing.
    unsafe {
        cmd.pre_exec(|| {
            for signal in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
                libc::signal(signal, libc::SIG_DFL);
            }
            Ok(())
        });
    }
}

/// A small random generator (splitmix64), so a test's corpus is the same on every machine.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number below `n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// A number in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

pub fn data(p: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(p)
}

pub fn run(cmd: &mut Command) -> Output {
    let out = cmd.output().expect("run neardup");
    eprintln!("stderr: {}", String::from_utf8_lossy(&out.stderr));
    out
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// `n` JSON lines whose texts are random words, near no other tag's or line's text.
pub fn unique_lines(tag: &str, n: usize) -> String {
    let mut state = tag.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
    });
    let mut next = move || {
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let z = (state ^ (state >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        let z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    };
    (0..n)
        .map(|i| {
            let words: Vec<String> = (0..40)
                .map(|_| {
                    let len = 3 + next() % 8;
                    (0..len)
                        .map(|_| (b'a' + (next() % 26) as u8) as char)
                        .collect()
                })
                .collect();
            format!(
                "{{\"id\":\"{tag}-{i}\",\"text\":\"{}\"}}\n",
                words.join(" ")
            )
        })
        .collect()
}

/// Writes `body` to `path`, compressed as its extension says (`.gz`, `.zst`).
pub fn write_compressed(path: &Path, body: &[u8]) {
    let name = path.to_string_lossy();
    let bytes = if name.ends_with(".gz") {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        e.write_all(body).unwrap();
        e.finish().unwrap()
    } else if name.ends_with(".zst") {
        zstd::encode_all(body, 3).unwrap()
    } else {
        body.to_vec()
    };
    std::fs::write(path, bytes).unwrap();
}

/// A Parquet file with columns `id` and `text`.
pub fn write_parquet(path: &Path, ids: &[String], texts: &[String]) {
    write_parquet_in_groups(path, ids, texts, None);
}

/// [`write_parquet`] with row groups of at most `group_rows` rows (the writer's default when
/// `None`).
pub fn write_parquet_in_groups(
    path: &Path,
    ids: &[String],
    texts: &[String],
    group_rows: Option<usize>,
) {
    use arrow_array::{ArrayRef, RecordBatch, StringArray};
    let schema = Arc::new(arrow_schema::Schema::new(vec![
        arrow_schema::Field::new("id", arrow_schema::DataType::Utf8, false),
        arrow_schema::Field::new("text", arrow_schema::DataType::Utf8, false),
    ]));
    let batch = RecordBatch::try_new(
        schema.clone(),
        vec![
            Arc::new(StringArray::from(ids.to_vec())) as ArrayRef,
            Arc::new(StringArray::from(texts.to_vec())) as ArrayRef,
        ],
    )
    .unwrap();
    let mut props = parquet::file::properties::WriterProperties::builder();
    if group_rows.is_some() {
        props = props.set_max_row_group_row_count(group_rows);
    }
    let props = props.build();
    let file = std::fs::File::create(path).unwrap();
    let mut w = parquet::arrow::ArrowWriter::try_new(file, schema, Some(props)).unwrap();
    w.write(&batch).unwrap();
    w.close().unwrap();
}

/// Records (JSONL lines, Parquet rows) a dataset file holds.
pub fn count_records(path: &Path) -> u64 {
    let name = path.to_string_lossy();
    if name.ends_with(".parquet") {
        let f = std::fs::File::open(path).unwrap();
        let r = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(f)
            .unwrap()
            .build()
            .unwrap();
        return r.map(|b| b.unwrap().num_rows() as u64).sum();
    }
    let raw = std::fs::read(path).unwrap();
    let mut text = Vec::new();
    if name.ends_with(".gz") {
        flate2::read::MultiGzDecoder::new(&raw[..])
            .read_to_end(&mut text)
            .unwrap();
    } else if name.ends_with(".zst") {
        text = zstd::decode_all(&raw[..]).unwrap();
    } else {
        text = raw;
    }
    text.split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .count() as u64
}

/// Whether `name` is one of neardup's run artefacts (staging, temporary, journal, aside, scratch
/// and spill names).
pub fn is_artefact(name: &str) -> bool {
    name.starts_with(".neardup-")
        || name.starts_with("neardup-spill-")
        || (name.starts_with('.')
            && name.contains(".neardup-")
            && (name.ends_with(".tmp") || name.ends_with(".old")))
}

/// Every artefact in `dir` and below (not following symlinks).
pub fn artefacts(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return found;
    };
    for e in entries {
        let e = e.unwrap();
        let name = e.file_name().to_string_lossy().into_owned();
        if is_artefact(&name) {
            found.push(e.path());
        } else if e.file_type().unwrap().is_dir() {
            found.extend(artefacts(&e.path()));
        }
    }
    found.sort();
    found
}

/// The non-hidden files of `dir` and below with their bytes, by relative path.
pub fn published(dir: &Path) -> std::collections::BTreeMap<String, Vec<u8>> {
    let mut out = std::collections::BTreeMap::new();
    fn walk(base: &Path, dir: &Path, out: &mut std::collections::BTreeMap<String, Vec<u8>>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for e in entries {
            let e = e.unwrap();
            if e.file_name().to_string_lossy().starts_with('.') {
                continue;
            }
            if e.file_type().unwrap().is_dir() {
                walk(base, &e.path(), out);
            } else {
                let rel = e.path().strip_prefix(base).unwrap().display().to_string();
                out.insert(rel, std::fs::read(e.path()).unwrap());
            }
        }
    }
    walk(dir, dir, &mut out);
    out
}
