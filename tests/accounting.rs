//! Every input record is accounted for, on every kind of bad input, through the library and the
//! binary, with and without outputs, on 1, 2 and 3 threads:
//!
//! - `records_in` = the records the files hold (Parquet: rows in the footer; JSONL: lines, or
//!   the complete lines before the break of a broken stream) = kept + dropped + unreadable;
//! - every damaged file has its unreadable ranges listed, no decision falls in one, and every
//!   readable record with a sample has exactly one decision (decision rows = samples); a run
//!   writing only decisions reads a Parquet file's text column alone, so a damaged page of
//!   another column costs records only to a run writing the dataset;
//! - outputs hold exactly the kept readable records, and an input of which nothing could be
//!   read has no output file;
//! - decisions and outputs do not depend on the thread count.
//!
//! Expectations come from reading the inputs independently (the `parquet` crate for footers and
//! outputs, flate2 / zstd for compressed streams). The binary can be swapped for another build
//! with `NEARDUP_BIN=/path/to/neardup` (to show what an older build gets wrong).

use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Arc;

use arrow_array::{Array, ArrayRef, Int64Array, RecordBatch, StringArray};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::arrow::{ArrowWriter, ProjectionMask};
use parquet::file::metadata::{PageIndexPolicy, ParquetMetaDataReader};
use parquet::file::properties::WriterProperties;
use serde_json::Value;

fn neardup() -> Command {
    match std::env::var_os("NEARDUP_BIN") {
        Some(bin) => Command::new(bin),
        None => Command::new(env!("CARGO_BIN_EXE_neardup")),
    }
}

fn run(cmd: &mut Command) -> Output {
    let out = cmd.output().expect("run neardup");
    eprintln!("{cmd:?}\nstderr: {}", String::from_utf8_lossy(&out.stderr));
    out
}

fn data(p: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(p)
}

// ------------------------------------------------------------------------------ generated inputs

/// A JSONL document with near and exact copies among its neighbours.
fn doc(i: usize) -> String {
    let topic = i % 37;
    let words: String = (0..30)
        .map(|w| {
            format!(
                " w{}",
                (topic * 31 + w * 7 + if i.is_multiple_of(5) { i % 3 } else { 0 }) % 97
            )
        })
        .collect();
    format!("{{\"id\":{i},\"text\":\"topic {topic}{words}\"}}\n")
}

fn jsonl_body(n: usize) -> Vec<u8> {
    (0..n).map(doc).collect::<String>().into_bytes()
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(bytes).unwrap();
    e.finish().unwrap()
}

const GROUP_ROWS: usize = 2000;
const PAGE_ROWS: usize = 250;

/// A Parquet file of `groups` row groups (`id` = row number, `text`, `url`), uncompressed, pages
/// of 250 rows without dictionaries: over 1 MiB for 6 groups, so a run splits it into chunks of
/// several row groups.
fn write_parquet(path: &Path, groups: usize) {
    let n = groups * GROUP_ROWS;
    let ids: ArrayRef = Arc::new(Int64Array::from_iter_values(0..n as i64));
    let texts: ArrayRef = Arc::new(StringArray::from_iter_values((0..n).map(|i| {
        let d = doc(i);
        let start = d.find("topic").unwrap();
        d[start..d.len() - 3].to_string()
    })));
    let urls: ArrayRef =
        Arc::new(StringArray::from_iter_values((0..n).map(|i| {
            format!("https://example.invalid/some/longer/path/{i}")
        })));
    let batch = RecordBatch::try_from_iter([("id", ids), ("text", texts), ("url", urls)]).unwrap();
    let props = WriterProperties::builder()
        .set_max_row_group_row_count(Some(GROUP_ROWS))
        .set_data_page_row_count_limit(PAGE_ROWS)
        .set_write_batch_size(PAGE_ROWS)
        .set_dictionary_enabled(false)
        .set_compression(parquet::basic::Compression::UNCOMPRESSED)
        .build();
    let mut w = ArrowWriter::try_new(
        std::fs::File::create(path).unwrap(),
        batch.schema(),
        Some(props),
    )
    .unwrap();
    w.write(&batch).unwrap();
    w.close().unwrap();
}

/// Overwrites the header of data page `page` of column `column` (0 id, 1 text, 2 url) in row
/// group `group`.
fn corrupt_page(path: &Path, group: usize, column: usize, page: usize) {
    let f = std::fs::File::open(path).unwrap();
    let meta = ParquetMetaDataReader::new()
        .with_page_index_policy(PageIndexPolicy::Required)
        .parse_and_finish(&f)
        .unwrap();
    let at = meta
        .page_index_for_row_group(group)
        .page_locations(column)
        .expect("offset index written")[page]
        .offset as usize;
    let mut bytes = std::fs::read(path).unwrap();
    bytes[at..at + 24].fill(0xff);
    std::fs::write(path, bytes).unwrap();
}

// ---------------------------------------------------------------------- independent expectations

/// What an input holds, read without neardup.
enum Held {
    /// JSONL: the lines that can be read (the complete lines before a break), and whether the
    /// file reads to its end.
    Jsonl { lines: Vec<Vec<u8>>, whole: bool },
    /// Parquet: rows per row group (`None`: no readable footer), and the groups that read whole
    /// with every column a run reads (see [`Held::of`]).
    Parquet {
        groups: Option<Vec<u64>>,
        whole_groups: BTreeSet<usize>,
    },
}

impl Held {
    /// What `path` holds for a run that reads every column of a Parquet file (`all_columns`:
    /// one writing the dataset) or the text column alone (one writing only decisions: its
    /// first column when it has none, as counting rows needs a column).
    fn of(path: &Path, all_columns: bool) -> Held {
        let name = path.to_string_lossy().to_string();
        if name.ends_with(".parquet") {
            let Ok(f) = std::fs::File::open(path) else {
                return Held::Parquet {
                    groups: None,
                    whole_groups: BTreeSet::new(),
                };
            };
            let Ok(meta) = ParquetMetaDataReader::new().parse_and_finish(&f) else {
                return Held::Parquet {
                    groups: None,
                    whole_groups: BTreeSet::new(),
                };
            };
            let groups: Vec<u64> = meta
                .row_groups()
                .iter()
                .map(|g| g.num_rows() as u64)
                .collect();
            let whole_groups = (0..groups.len())
                .filter(|&g| {
                    let Ok(b) = ParquetRecordBatchReaderBuilder::try_new(
                        std::fs::File::open(path).unwrap(),
                    ) else {
                        return false;
                    };
                    let schema = b.parquet_schema();
                    let mut texts: Vec<usize> = (0..schema.num_columns())
                        .filter(|&c| schema.column(c).path().parts()[0] == "text")
                        .collect();
                    if texts.is_empty() {
                        texts.push(0);
                    }
                    let columns = if all_columns {
                        ProjectionMask::all()
                    } else {
                        ProjectionMask::leaves(schema, texts)
                    };
                    let Ok(r) = b.with_row_groups(vec![g]).with_projection(columns).build() else {
                        return false;
                    };
                    r.into_iter().all(|b| b.is_ok())
                })
                .collect();
            return Held::Parquet {
                groups: Some(groups),
                whole_groups,
            };
        }
        let Ok(raw) = std::fs::read(path) else {
            return Held::Jsonl {
                lines: Vec::new(),
                whole: false,
            };
        };
        let mut bytes = Vec::new();
        let whole = if name.ends_with(".gz") {
            read_until_error(flate2::read::MultiGzDecoder::new(&raw[..]), &mut bytes)
        } else if name.ends_with(".zst") {
            match zstd::stream::read::Decoder::new(&raw[..]) {
                Ok(d) => read_until_error(d, &mut bytes),
                Err(_) => false,
            }
        } else {
            bytes = raw;
            true
        };
        let mut lines: Vec<Vec<u8>> = bytes
            .split_inclusive(|b| *b == b'\n')
            .map(<[u8]>::to_vec)
            .collect();
        if !whole && lines.last().is_some_and(|l| !l.ends_with(b"\n")) {
            lines.pop(); // the fragment the break cut
        }
        Held::Jsonl { lines, whole }
    }

    /// Records known to be in the file, if their number can be known.
    fn records(&self) -> Option<u64> {
        match self {
            Held::Jsonl { lines, whole: true } => Some(lines.len() as u64),
            Held::Jsonl { .. } => None,
            Held::Parquet { groups, .. } => groups.as_ref().map(|g| g.iter().sum()),
        }
    }

    /// Records that can be read (the count `records_in` includes for this file).
    fn countable(&self) -> u64 {
        match self {
            Held::Jsonl { lines, .. } => lines.len() as u64,
            Held::Parquet { groups, .. } => groups.as_ref().map_or(0, |g| g.iter().sum()),
        }
    }

    fn damaged(&self) -> bool {
        match self {
            Held::Jsonl { whole, .. } => !whole,
            Held::Parquet { groups: None, .. } => true,
            Held::Parquet {
                groups: Some(g),
                whole_groups,
            } => whole_groups.len() < g.len(),
        }
    }
}

fn read_until_error(mut r: impl Read, out: &mut Vec<u8>) -> bool {
    let mut buf = vec![0u8; 1 << 16];
    loop {
        match r.read(&mut buf) {
            Ok(0) => return true,
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return false,
        }
    }
}

fn decompress(path: &Path) -> Vec<u8> {
    let raw = std::fs::read(path).unwrap();
    let name = path.to_string_lossy();
    let mut out = Vec::new();
    if name.ends_with(".gz") {
        assert!(read_until_error(
            flate2::read::MultiGzDecoder::new(&raw[..]),
            &mut out
        ));
    } else if name.ends_with(".zst") {
        assert!(read_until_error(
            zstd::stream::read::Decoder::new(&raw[..]).unwrap(),
            &mut out
        ));
    } else {
        out = raw;
    }
    out
}

/// The `id` column of a Parquet file (integers or strings), one per line.
fn parquet_ids(path: &Path) -> Vec<String> {
    let r = ParquetRecordBatchReaderBuilder::try_new(std::fs::File::open(path).unwrap())
        .unwrap()
        .build()
        .unwrap();
    let mut ids = Vec::new();
    for b in r {
        let b = b.unwrap();
        let col = b.column_by_name("id").unwrap();
        if let Some(ints) = col.as_any().downcast_ref::<Int64Array>() {
            ids.extend((0..ints.len()).map(|i| ints.value(i).to_string()));
        } else {
            let strings = col.as_any().downcast_ref::<StringArray>().unwrap();
            ids.extend((0..strings.len()).map(|i| strings.value(i).to_string()));
        }
    }
    ids
}

// --------------------------------------------------------------------------------- the property

/// Output bytes by input path (decompressed JSONL; Parquet as its ids, one per line).
type Outputs = BTreeMap<PathBuf, Vec<u8>>;

/// One run's products.
struct Run {
    report: Value,
    decisions: Vec<u8>,
    outputs: Option<Outputs>,
}

/// Checks the accounting of one run over `inputs` (given as `relative` names under `out`).
fn check(case: &str, inputs: &[PathBuf], run: &Run, out_dir: Option<&Path>) {
    let t = &run.report["totals"];
    // A field an older build does not write counts as 0 / empty, so such a build fails on what
    // it gets wrong rather than on the field.
    let n = |k: &str| t[k].as_u64().unwrap_or(0);
    let list = |k: &str| t[k].as_array().cloned().unwrap_or_default();
    let held: Vec<Held> = inputs
        .iter()
        .map(|p| Held::of(p, out_dir.is_some()))
        .collect();
    assert_eq!(
        n("records_in"),
        n("records_kept") + n("records_dropped") + n("records_unreadable"),
        "{case}: records_in = kept + dropped + unreadable"
    );
    let mut expected_in = 0;
    let decisions: Vec<Value> = std::str::from_utf8(&run.decisions)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(
        decisions.len() as u64,
        n("samples"),
        "{case}: decision rows = samples"
    );
    let ranges = list("unreadable");
    let unreadable_files: BTreeSet<String> = list("files_unreadable")
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect();
    let mut known_lost = 0;
    for (path, h) in inputs.iter().zip(&held) {
        let file = path.display().to_string();
        let mine: Vec<&Value> = ranges
            .iter()
            .filter(|r| r["file"] == file.as_str())
            .collect();
        let decided: Vec<(u64, bool)> = decisions
            .iter()
            .filter(|d| d["file"] == file.as_str())
            .map(|d| (d["record"].as_u64().unwrap(), d["keep"].as_bool().unwrap()))
            .collect();
        assert_eq!(
            h.damaged(),
            !mine.is_empty(),
            "{case}: {file}: ranges {mine:?}"
        );
        let mut lost = BTreeSet::new();
        // The records this file adds to records_in: all it holds when that can be known, else
        // those read before the break.
        let mut counted = h.countable();
        for r in &mine {
            assert!(!r["reason"].as_str().unwrap().is_empty(), "{case}: {r}");
            assert!(!r["kind"].as_str().unwrap().is_empty(), "{case}: {r}");
            let first = r["first_record"].as_u64().unwrap();
            match r["records"].as_u64() {
                Some(k) => {
                    known_lost += k;
                    lost.extend(first..first + k);
                }
                None => {
                    assert_eq!(
                        h.records(),
                        None,
                        "{case}: {file}: a countable file lost {r}"
                    );
                    // A decoder may withhold what it decoded in the read that found the damage,
                    // so a read can stop before the last line an independent decoder yields.
                    assert!(
                        first <= h.countable(),
                        "{case}: {file}: the loss starts after the readable lines"
                    );
                    counted = first;
                }
            }
        }
        expected_in += counted;
        let nothing = counted == lost.len() as u64 && h.damaged();
        assert_eq!(
            unreadable_files.contains(&file),
            nothing,
            "{case}: {file}: listed as unreadable"
        );
        let dropped: BTreeSet<u64> = decided.iter().filter(|d| !d.1).map(|d| d.0).collect();
        let records: BTreeSet<u64> = decided.iter().map(|d| d.0).collect();
        assert_eq!(
            records.len(),
            decided.len(),
            "{case}: {file}: one decision per record"
        );
        assert!(
            records.is_disjoint(&lost),
            "{case}: {file}: a lost record was decided"
        );
        let expected_output: Vec<u8> = match h {
            Held::Parquet {
                groups,
                whole_groups,
            } => {
                if let Some(groups) = groups {
                    // Every readable row has one decision; each loss lies in a row group that
                    // does not read whole, and ends at that group's end.
                    let total: u64 = groups.iter().sum();
                    let readable: BTreeSet<u64> =
                        (0..total).filter(|r| !lost.contains(r)).collect();
                    assert_eq!(records, readable, "{case}: {file}: decided rows");
                    let starts: Vec<u64> = groups
                        .iter()
                        .scan(0, |s, g| {
                            let start = *s;
                            *s += g;
                            Some(start)
                        })
                        .collect();
                    for r in &mine {
                        let g = r["row_group"].as_u64().unwrap() as usize;
                        assert!(
                            !whole_groups.contains(&g),
                            "{case}: {file}: group {g} reads whole"
                        );
                        let end =
                            r["first_record"].as_u64().unwrap() + r["records"].as_u64().unwrap();
                        assert_eq!(end, starts[g] + groups[g], "{case}: {file}: {r}");
                    }
                }
                if out_dir.is_some() {
                    kept_ids(path, h, &lost, &dropped)
                } else {
                    // Nothing is written: a row of a damaged column has no id to expect.
                    Vec::new()
                }
            }
            Held::Jsonl { lines, .. } => {
                let lines = &lines[..counted as usize];
                assert!(
                    records.iter().all(|r| *r < lines.len() as u64),
                    "{case}: {file}: a record past the readable lines was decided"
                );
                let mut out = Vec::new();
                for (i, line) in lines.iter().enumerate() {
                    let blank = line.iter().all(u8::is_ascii_whitespace);
                    assert_eq!(
                        records.contains(&(i as u64)),
                        !blank,
                        "{case}: {file}: line {i} decided iff not blank"
                    );
                    if !dropped.contains(&(i as u64)) {
                        out.extend_from_slice(line);
                    }
                }
                out
            }
        };
        if let (Some(outputs), Some(dir)) = (&run.outputs, out_dir) {
            let name = dir.join(path.file_name().unwrap());
            if nothing {
                assert!(
                    !name.exists(),
                    "{case}: {} written for a file with nothing readable",
                    name.display()
                );
            } else {
                let got = outputs
                    .get(path)
                    .unwrap_or_else(|| panic!("{case}: no output for {file}"));
                assert!(
                    got == &expected_output,
                    "{case}: {file}: output differs from the kept readable records"
                );
            }
        }
    }
    assert_eq!(
        known_lost,
        n("records_unreadable"),
        "{case}: records_unreadable"
    );
    assert_eq!(n("records_in"), expected_in, "{case}: records_in");
}

/// The ids of the kept readable rows of a Parquet input, one per line. A damaged input cannot be
/// read whole to take its ids from: the damaged inputs of these tests number their ids by row.
fn kept_ids(path: &Path, h: &Held, lost: &BTreeSet<u64>, dropped: &BTreeSet<u64>) -> Vec<u8> {
    let ids: Vec<String> = if h.damaged() {
        (0..h.countable()).map(|r| r.to_string()).collect()
    } else {
        parquet_ids(path)
    };
    ids.iter()
        .enumerate()
        .filter(|(r, _)| !lost.contains(&(*r as u64)) && !dropped.contains(&(*r as u64)))
        .map(|(_, id)| format!("{id}\n"))
        .collect::<String>()
        .into_bytes()
}

fn read_outputs(inputs: &[PathBuf], dir: &Path) -> Outputs {
    let mut out = BTreeMap::new();
    for p in inputs {
        let o = dir.join(p.file_name().unwrap());
        if !o.exists() {
            continue;
        }
        let bytes = if o.to_string_lossy().ends_with(".parquet") {
            parquet_ids(&o)
                .into_iter()
                .map(|i| format!("{i}\n"))
                .collect::<String>()
                .into_bytes()
        } else {
            decompress(&o)
        };
        out.insert(p.clone(), bytes);
    }
    out
}

/// Runs `inputs` through the library and the binary, with and without an output directory, on
/// 1, 2 and 3 threads, checking each run and that all give the same decisions and outputs.
fn check_everywhere(case: &str, inputs: &[PathBuf]) {
    let tmp = tempfile::tempdir().unwrap();
    for with_output in [true, false] {
        // A run writing only decisions reads no column but the text one, so a damaged page of
        // another costs records only to a run writing the dataset: runs are compared with the
        // runs that write what they write.
        let mut reference: Option<(Vec<u8>, Option<Outputs>)> = None;
        for threads in [1, 2, 3] {
            for binary in [false, true] {
                let tag = format!(
                    "{case} ({}, {threads} threads, {})",
                    if binary { "binary" } else { "library" },
                    if with_output {
                        "with -o"
                    } else {
                        "decisions only"
                    }
                );
                let dir = tmp.path().join(format!("{with_output}-{threads}-{binary}"));
                std::fs::create_dir(&dir).unwrap();
                let out = dir.join("out");
                let dec = dir.join("decisions.jsonl");
                let rep = dir.join("report.json");
                if binary {
                    let mut cmd = neardup();
                    cmd.arg("dedup")
                        .args(inputs)
                        .args(["-q", "-j", &threads.to_string(), "--decisions"])
                        .arg(&dec)
                        .arg("--report")
                        .arg(&rep);
                    if with_output {
                        cmd.arg("-o").arg(&out);
                    }
                    let o = run(&mut cmd);
                    assert!(o.status.success(), "{tag}: {:?}", o.status);
                } else {
                    let mut c = neardup::Config::default();
                    c.input.inputs = inputs.iter().map(|p| p.display().to_string()).collect();
                    c.run.threads = threads;
                    c.output.decisions = Some(dec.clone());
                    c.output.report = Some(rep.clone());
                    if with_output {
                        c.output.dir = Some(out.clone());
                    }
                    neardup::Pipeline::new(c)
                        .unwrap()
                        .run()
                        .unwrap_or_else(|e| panic!("{tag}: {e}"));
                }
                let run = Run {
                    report: serde_json::from_slice(&std::fs::read(&rep).unwrap()).unwrap(),
                    decisions: std::fs::read(&dec).unwrap(),
                    outputs: with_output.then(|| read_outputs(inputs, &out)),
                };
                check(&tag, inputs, &run, with_output.then_some(out.as_path()));
                match &mut reference {
                    None => reference = Some((run.decisions.clone(), run.outputs.clone())),
                    Some((decisions, outputs)) => {
                        assert!(&run.decisions == decisions, "{tag}: decisions differ");
                        if let Some(o) = &run.outputs {
                            if outputs.is_none() {
                                *outputs = Some(o.clone());
                            }
                            assert!(Some(o) == outputs.as_ref(), "{tag}: outputs differ");
                        }
                    }
                }
            }
        }
    }
}

/// Copies of the good sample corpus's files, named apart from the bad ones.
fn good(dir: &Path) -> Vec<PathBuf> {
    ["part-0.jsonl", "part-2.parquet"]
        .iter()
        .map(|name| {
            let to = dir.join(format!("good-{name}"));
            std::fs::copy(data("sample").join(name), &to).unwrap();
            to
        })
        .collect()
}

#[test]
fn every_bad_fixture_is_accounted_for() {
    let tmp = tempfile::tempdir().unwrap();
    let good = good(tmp.path());
    let mut all = good.clone();
    for entry in std::fs::read_dir(data("bad")).unwrap() {
        let path = entry.unwrap().path();
        let mut inputs = good.clone();
        inputs.insert(1, path.clone());
        check_everywhere(&path.file_name().unwrap().to_string_lossy(), &inputs);
        all.push(path);
    }
    all.sort();
    check_everywhere("all fixtures together", &all);
}

#[test]
fn corrupt_parquet_row_groups_and_pages_cost_only_their_rows() {
    let tmp = tempfile::tempdir().unwrap();
    let good = good(tmp.path());
    // Row group 3 of 6 unreadable from its first text page: with several row groups per chunk,
    // the groups after it in its chunk must still be read.
    let group = tmp.path().join("group.parquet");
    write_parquet(&group, 6);
    corrupt_page(&group, 3, 1, 0);
    // A text page in the middle of row group 1: how many of its rows a read delivers depends on
    // the batch size, and stage 2 must deliver what stage 1 did.
    let mid = tmp.path().join("mid.parquet");
    write_parquet(&mid, 3);
    corrupt_page(&mid, 1, 1, 3);
    // A page of the url column, which stage 1 never reads: stage 2 cannot write group 2.
    let url = tmp.path().join("url.parquet");
    write_parquet(&url, 3);
    corrupt_page(&url, 2, 2, 1);
    for (name, bad) in [("group", &group), ("mid", &mid), ("url", &url)] {
        let mut inputs = good.clone();
        inputs.insert(1, bad.clone());
        check_everywhere(name, &inputs);
    }
    let mut all = good.clone();
    all.extend([group, mid.clone(), url]);
    check_everywhere("all generated Parquet", &all);

    // The stages in batches of other sizes than each other (64 and about 100 rows, both ways):
    // stage 1 delivers part of the damaged group, and stage 2 the same part.
    let inputs = vec![good[0].clone(), mid];
    for (stage1_bytes, stage2_bytes) in [(5_000, 20_000), (20_000, 5_000)] {
        for threads in [1, 2, 3] {
            let case = format!("mid, blocks {stage1_bytes}/{stage2_bytes}, {threads} threads");
            let dir = tmp.path().join(format!("blocks-{stage1_bytes}-{threads}"));
            let mut c = neardup::Config::default();
            c.input.inputs = inputs.iter().map(|p| p.display().to_string()).collect();
            c.run.threads = threads;
            c.output.dir = Some(dir.join("out"));
            c.output.decisions = Some(dir.join("d.jsonl"));
            let (files, _) = neardup::discover_inputs(&c).unwrap();
            let mut keys = neardup::keys_config(&c).unwrap();
            keys.block_bytes = stage1_bytes;
            let stage1 =
                neardup::keys::run_keys(&files, 0, &keys, &neardup::exec::StepControl::default())
                    .unwrap();
            let mut apply = neardup::stage2_config(&c).unwrap();
            apply.block_bytes = stage2_bytes;
            let stats = neardup::dedup::run_dedup(
                &stage1.files,
                &stage1.mask,
                &apply,
                &neardup::exec::StepControl::default(),
                &mut |_| {},
            )
            .unwrap_or_else(|e| panic!("{case}: {e}"));
            let report = serde_json::json!({ "totals": {
                "records_in": stats.records + stats.records_unreadable,
                "records_kept": stats.records_kept,
                "records_dropped": stats.records_dropped,
                "records_unreadable": stats.records_unreadable,
                "samples": stats.samples,
                "unreadable": stats.unreadable,
                "files_unreadable": stats.files_unreadable,
            }});
            let run = Run {
                report,
                decisions: std::fs::read(dir.join("d.jsonl")).unwrap(),
                outputs: Some(read_outputs(&inputs, &dir.join("out"))),
            };
            check(&case, &inputs, &run, Some(&dir.join("out")));
            let lost = &stats.unreadable[0];
            let group = lost.lost.first_record - GROUP_ROWS as u64;
            assert!(
                group > 0 && group < GROUP_ROWS as u64,
                "{case}: part of the group is read: {lost:?}"
            );
            // Stage 2 reads the group up to where stage 1's batches stopped, whatever its own.
            assert_eq!(lost, &stage1.stats.unreadable[0], "{case}");
        }
    }
}

#[test]
fn broken_compressed_streams_at_several_offsets() {
    let tmp = tempfile::tempdir().unwrap();
    let body = jsonl_body(3000);
    let gz = gzip(&body);
    let zst = zstd::bulk::compress(&body, 3).unwrap();
    let mut inputs = good(tmp.path());
    for (ext, stream) in [("gz", &gz), ("zst", &zst)] {
        for percent in [1, 35, 70, 99] {
            let p = tmp.path().join(format!("cut-{percent}.jsonl.{ext}"));
            std::fs::write(&p, &stream[..stream.len() * percent / 100]).unwrap();
            inputs.push(p);
        }
        // Valid compression, then garbage.
        let mut damaged = stream.clone();
        let at = damaged.len() / 2;
        damaged[at..at + 64].fill(0x55);
        let p = tmp.path().join(format!("garbled.jsonl.{ext}"));
        std::fs::write(&p, damaged).unwrap();
        inputs.push(p);
    }
    check_everywhere("broken streams", &inputs);
}

#[test]
fn an_unreadable_jsonl_file_is_listed_not_dropped() {
    let tmp = tempfile::tempdir().unwrap();
    let mut inputs = good(tmp.path());
    let locked = tmp.path().join("locked.jsonl");
    std::fs::write(&locked, jsonl_body(50)).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o000)).unwrap();
    if std::fs::File::open(&locked).is_ok() {
        eprintln!("running with privileges that read a mode-000 file: nothing to check");
        return;
    }
    inputs.insert(1, locked);
    check_everywhere("locked", &inputs);
}

#[test]
fn a_file_gone_between_discovery_and_reading_is_listed() {
    // As when a file cannot be opened (permissions), without needing an unprivileged user.
    let tmp = tempfile::tempdir().unwrap();
    let inputs = good(tmp.path());
    let gone = tmp.path().join("gone.jsonl");
    std::fs::write(&gone, jsonl_body(50)).unwrap();
    for threads in [1, 2, 3] {
        let mut c = neardup::Config::default();
        c.input.inputs = vec![
            inputs[0].display().to_string(),
            gone.display().to_string(),
            inputs[1].display().to_string(),
        ];
        c.run.threads = threads;
        let (files, _) = neardup::discover_inputs(&c).unwrap();
        std::fs::rename(&gone, tmp.path().join("moved")).unwrap();
        let keys = neardup::keys_config(&c).unwrap();
        let stage1 =
            neardup::keys::run_keys(&files, 0, &keys, &neardup::exec::StepControl::default())
                .unwrap();
        assert_eq!(stage1.stats.unreadable.len(), 1);
        let mut apply = neardup::stage2_config(&c).unwrap();
        let out = tmp.path().join(format!("out-{threads}"));
        apply.output = Some(neardup::corpus::OutputOptions {
            dir: out.clone(),
            overwrite: false,
            max_output_bytes: None,
        });
        let stats = neardup::dedup::run_dedup(
            &stage1.files,
            &stage1.mask,
            &apply,
            &neardup::exec::StepControl::default(),
            &mut |_| {},
        )
        .unwrap();
        assert_eq!(stats.unreadable.len(), 1, "{:?}", stats.unreadable);
        let lost = &stats.unreadable[0];
        assert_eq!(lost.file, gone);
        assert_eq!((lost.lost.first_record, lost.lost.records), (0, None));
        assert_eq!(lost.lost.kind.as_str(), "io");
        assert_eq!(stats.files_unreadable, vec![gone.clone()]);
        assert!(!out.join("gone.jsonl").exists());
        assert!(out.join("good-part-0.jsonl").exists());
        std::fs::rename(tmp.path().join("moved"), &gone).unwrap();
    }
}

// ------------------------------------------------------------------------- apply, field, messages

#[test]
fn apply_reports_a_truncated_stream_without_stage_one_stats() {
    let tmp = tempfile::tempdir().unwrap();
    let good = good(tmp.path());
    let cut = data("bad/truncated.jsonl.gz");
    let delivered = match Held::of(&cut, true) {
        Held::Jsonl { lines, whole } => {
            assert!(!whole);
            lines.len() as u64
        }
        Held::Parquet { .. } => unreachable!(),
    };
    let table = tmp.path().join("keys.ndk");
    let o = run(neardup()
        .arg("keys")
        .arg(&good[0])
        .arg(&cut)
        .args(["-q", "--out"])
        .arg(&table));
    assert!(o.status.success());
    let hot = tmp.path().join("hot.ndh");
    assert!(
        run(neardup()
            .arg("hot")
            .arg(&table)
            .args(["-q", "--out"])
            .arg(&hot))
        .status
        .success()
    );
    let rep = tmp.path().join("report.json");
    let out = tmp.path().join("out");
    let o = run(neardup()
        .arg("apply")
        .arg("--hot")
        .arg(&hot)
        .arg("--keys")
        .arg(&table)
        .arg("-o")
        .arg(&out)
        .arg("--report")
        .arg(&rep));
    assert!(o.status.success());
    let report: Value = serde_json::from_slice(&std::fs::read(&rep).unwrap()).unwrap();
    assert!(report["stage1"].is_null());
    let t = &report["totals"];
    let lost: Vec<&Value> = t["unreadable"]
        .as_array()
        .unwrap_or_else(|| panic!("no unreadable list in {t}"))
        .iter()
        .filter(|r| r["file"] == cut.display().to_string().as_str())
        .collect();
    assert_eq!(lost.len(), 1, "{t}");
    assert_eq!(lost[0]["first_record"], delivered);
    assert!(lost[0]["records"].is_null());
    assert_eq!(lost[0]["kind"], "truncated");
    let summary = String::from_utf8_lossy(&o.stderr);
    assert!(
        summary.contains("truncated.jsonl.gz")
            && summary.contains(&format!("from record {delivered}")),
        "{summary}"
    );
    assert!(summary.contains("an unknown number"), "{summary}");
    // The library's apply, too.
    let mut c = neardup::Config::default();
    c.output.decisions = Some(tmp.path().join("d.jsonl"));
    let hot = neardup::keys::HotKeys::load(&hot).unwrap();
    let tables = [table];
    let control = neardup::RunControl::default();
    let r = neardup::ApplyStep::new(&c, &hot, tables.as_slice())
        .and_then(|s| s.run(&control, &mut |_| {}))
        .unwrap();
    assert_eq!(r.totals.unreadable.len(), 1);
    assert_eq!(r.totals.unreadable[0].lost.first_record, delivered);
}

#[test]
fn a_field_no_record_has_is_an_error_naming_it() {
    let tmp = tempfile::tempdir().unwrap();
    let parquet = tmp.path().join("p.parquet");
    write_parquet(&parquet, 1);
    let jsonl = data("bad/fields.jsonl");
    let cases: Vec<(Vec<&Path>, Vec<&str>, &str, &str)> = vec![
        (
            vec![&jsonl],
            vec!["--field", "txt"],
            "`txt`",
            "`id`, `text`",
        ),
        (
            vec![&parquet],
            vec!["--field", "txt"],
            "`txt`",
            "`id`, `text`, `url`",
        ),
        (
            vec![&jsonl, &parquet],
            vec!["--field", "text", "--field", "body"],
            "`body`",
            "`text`",
        ),
        (
            vec![&jsonl],
            vec![
                "--field",
                "text",
                "--field",
                "body",
                "--fields-mode",
                "expand",
            ],
            "`body`",
            "`text`",
        ),
    ];
    for (inputs, flags, missing, seen) in cases {
        let out = tmp.path().join("out");
        let o = run(neardup()
            .arg("dedup")
            .args(&inputs)
            .args(&flags)
            .arg("-o")
            .arg(&out)
            .arg("--decisions")
            .arg(tmp.path().join("d.jsonl")));
        let msg = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{flags:?}: {msg}");
        assert!(
            msg.contains(&format!("no record of the inputs has the field {missing}")),
            "{msg}"
        );
        assert!(msg.contains(seen), "{flags:?}: {msg}");
        assert!(!msg.contains("MissingField"), "{msg}");
        assert!(!out.exists(), "nothing is written before the check");
        assert!(!tmp.path().join("d.jsonl").exists());
    }
    // A field present in some records only is no error.
    let o = run(neardup()
        .arg("dedup")
        .arg(&jsonl)
        .args(["--field", "text", "-q", "--decisions"])
        .arg(tmp.path().join("d.jsonl")));
    assert!(o.status.success());
}

#[test]
fn a_run_that_can_read_nothing_fails_saying_why() {
    let tmp = tempfile::tempdir().unwrap();
    let broken = tmp.path().join("broken.jsonl");
    std::fs::write(&broken, "{\"text\": \"a\n[1, 2]\n{\"text\": 3}\n").unwrap();
    let cases: Vec<(Vec<PathBuf>, &[&str])> = vec![
        (
            vec![data("bad/corrupt_footer.parquet")],
            &[
                "no record could be read",
                "corrupt_footer.parquet",
                "unreadable footer",
            ],
        ),
        (
            vec![
                data("bad/not_gzip.jsonl.gz"),
                data("bad/corrupt_footer.parquet"),
            ],
            &[
                "no record could be read",
                "not_gzip.jsonl.gz",
                "corrupt_footer.parquet",
            ],
        ),
        (
            vec![broken],
            &[
                "none of the 3 records read has a text",
                "2 not valid JSON",
                "1 with a text field that is not a string",
            ],
        ),
    ];
    for (inputs, says) in cases {
        let out = tmp.path().join("out");
        let o = run(neardup()
            .arg("dedup")
            .args(&inputs)
            .arg("-o")
            .arg(&out)
            .arg("--decisions")
            .arg(tmp.path().join("d.jsonl")));
        let msg = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{inputs:?}: {msg}");
        for s in says {
            assert!(msg.contains(s), "{s:?} not in {msg}");
        }
        assert!(!out.exists());
    }
    // Empty inputs are no error: nothing to read is not nothing readable.
    let empty = tmp.path().join("empty.jsonl");
    std::fs::write(&empty, "\n\n").unwrap();
    let o = run(neardup()
        .arg("dedup")
        .arg(&empty)
        .arg("--decisions")
        .arg(tmp.path().join("d.jsonl")));
    assert!(o.status.success());
}

#[test]
fn problems_are_numbered_from_zero_and_read_as_sentences() {
    let tmp = tempfile::tempdir().unwrap();
    let dec = tmp.path().join("d.jsonl");
    let rep = tmp.path().join("r.json");
    let input = data("bad/malformed.jsonl");
    let o = run(neardup()
        .arg("dedup")
        .arg(&input)
        .arg("--decisions")
        .arg(&dec)
        .arg("--report")
        .arg(&rep));
    assert!(o.status.success());
    let stderr = String::from_utf8_lossy(&o.stderr);
    // Line 1 (0-based) is `{"id": 1, "text": "unterminated}`.
    let line = format!(
        "{}: record 1: not valid JSON: EOF while parsing a string at column 33",
        input.display()
    );
    assert!(stderr.contains(&line), "{stderr}");
    assert!(!stderr.contains("MalformedJson"), "{stderr}");
    let report: Value = serde_json::from_slice(&std::fs::read(&rep).unwrap()).unwrap();
    let p = &report["stage1"]["problems"][0];
    assert_eq!(p["record"], 1);
    assert_eq!(p["kind"], "malformed_json");
    assert_eq!(
        p["message"],
        "not valid JSON: EOF while parsing a string at column 33"
    );
    let d: Vec<Value> = std::fs::read_to_string(&dec)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(d[1]["record"], 1);
    assert_eq!(d[1]["reason"], "error");
    // Passed-through texts are counted by reason in stage 2's own stats.
    assert_eq!(report["stage2"]["skipped"]["malformed_json"], 3);
    assert!(
        stderr.contains("3 texts unreadable, their records passed through"),
        "{stderr}"
    );
}

/// A file below a path too long to open (made level by level with `mkdirat`, as a program that
/// never spells the whole path can) holds records the run cannot read: the run fails naming
/// where, instead of leaving them out of every total and exiting 0.
#[test]
fn a_file_under_a_path_too_long_to_open_is_an_error_not_left_out() {
    use std::ffi::CString;
    use std::os::unix::ffi::OsStrExt;
    let tmp = tempfile::tempdir().unwrap();
    let input = tmp.path().join("in");
    std::fs::create_dir(&input).unwrap();
    std::fs::write(input.join("a.jsonl"), jsonl_body(10)).unwrap();
    let name = CString::new("d".repeat(200)).unwrap();
    let path = CString::new(input.as_os_str().as_bytes()).unwrap();
    // SAFETY: plain system calls on NUL-terminated strings and descriptors this test owns.
    let mut fd = unsafe { libc::open(path.as_ptr(), libc::O_DIRECTORY | libc::O_RDONLY) };
    assert!(fd >= 0);
    for _ in 0..25 {
        unsafe {
            assert_eq!(libc::mkdirat(fd, name.as_ptr(), 0o755), 0);
            let next = libc::openat(fd, name.as_ptr(), libc::O_DIRECTORY | libc::O_RDONLY);
            assert!(next >= 0);
            libc::close(fd);
            fd = next;
        }
    }
    let file = CString::new("deep.jsonl").unwrap();
    let body = jsonl_body(5);
    unsafe {
        let f = libc::openat(fd, file.as_ptr(), libc::O_CREAT | libc::O_WRONLY, 0o644);
        assert!(f >= 0);
        assert_eq!(
            libc::write(f, body.as_ptr().cast(), body.len()),
            body.len() as isize
        );
        libc::close(f);
        libc::close(fd);
    }
    let report = tmp.path().join("d.jsonl");
    let o = run(neardup()
        .arg("dedup")
        .arg(&input)
        .arg("--decisions")
        .arg(&report)
        .arg("-q"));
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("name too long") && err.contains("in no total"),
        "{err}"
    );
    assert!(
        err.contains(&input.join(name.to_str().unwrap()).display().to_string()),
        "{err}"
    );
    assert!(!report.exists());
}
