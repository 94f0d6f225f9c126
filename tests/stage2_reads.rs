//! Stage 2 reads only the records it has to decide (where stage 1 noted each record of an
//! uncompressed JSONL file), and decides the others unread; writing the dataset, it reads every
//! record but parses only those, copying the others as they are; with an id field it reads and
//! parses everything. The decisions, the dataset and the report's totals are those of a run that
//! reads and parses everything, for any thread count, chunk size, fields mode, id field, output
//! part size and memory limit; the report says how many bytes stage 2 read.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use neardup::{Config, Pipeline, Report};

use crate::support::Rng;

/// The lines of one input: mostly unique texts, some near and exact copies of earlier ones
/// (also across files), and every kind of record that is not plain: blank lines, blank texts,
/// malformed JSON, invalid UTF-8, missing, null and non-string fields, a CRLF line end; a
/// second field `title` that some records lack (for expand mode).
fn lines(rng: &mut Rng, earlier: &mut Vec<String>, n: usize) -> Vec<Vec<u8>> {
    // Words of random letters, so unrelated texts share few character shingles.
    let word = |rng: &mut Rng| {
        (0..3 + rng.below(6))
            .map(|_| (b'a' + rng.below(26) as u8) as char)
            .collect::<String>()
    };
    let mut out = Vec::new();
    for i in 0..n {
        let text = match rng.below(40) {
            0 | 1 if !earlier.is_empty() => {
                // A near copy: a few words changed.
                let base = earlier[rng.below(earlier.len() as u64) as usize].clone();
                let mut words: Vec<String> = base.split(' ').map(str::to_string).collect();
                let k = rng.below(words.len() as u64) as usize;
                words[k] = word(rng);
                words.join(" ")
            }
            2 if !earlier.is_empty() => earlier[rng.below(earlier.len() as u64) as usize].clone(),
            _ => (0..150 + rng.below(300))
                .map(|_| word(rng))
                .collect::<Vec<_>>()
                .join(" "),
        };
        earlier.push(text.clone());
        let title = if i % 9 == 0 {
            String::new()
        } else {
            let words: Vec<String> = (0..4).map(|_| word(rng)).collect();
            format!(",\"title\":\"{}\"", words.join(" "))
        };
        // Ids of every kind: strings (some with escapes), numbers, null, none.
        let id = match i % 11 {
            0 => String::new(),
            1 => "\"id\":null,".to_string(),
            2 => format!("\"id\":{i},"),
            3 => format!("\"id\":\"q\\\"{i}\","),
            _ => format!("\"id\":\"r{i}\","),
        };
        let line = match rng.below(160) {
            0 => Vec::new(),
            1 => b"   ".to_vec(),
            2 => br#"{"text":"   "}"#.to_vec(),
            3 => b"{bad".to_vec(),
            4 => b"{\"text\":\"\xff\"}".to_vec(),
            5 => br#"{"other":1}"#.to_vec(),
            6 => br#"{"text":null,"title":"x"}"#.to_vec(),
            7 => br#"{"text":5}"#.to_vec(),
            8 => format!("{{{id}\"text\":\"{text}\"{title}}}\r").into_bytes(),
            _ => format!("{{{id}\"text\":\"{text}\"{title}}}").into_bytes(),
        };
        out.push(line);
    }
    out
}

/// Three uncompressed JSONL inputs (the last without a final line end) and a gzip one, in
/// `in`; and the same records in `ref`, every file gzip-compressed: stage 2 reads a compressed
/// stream whole and parses every record, so a run over `ref` is the reference.
fn corpus(dir: &Path) -> (PathBuf, PathBuf) {
    let input = dir.join("in");
    let reference = dir.join("ref");
    std::fs::create_dir_all(&input).unwrap();
    std::fs::create_dir_all(&reference).unwrap();
    let gzip = |body: &[u8]| {
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        gz.write_all(body).unwrap();
        gz.finish().unwrap()
    };
    let mut rng = Rng(44);
    let mut earlier = Vec::new();
    for (name, n) in [("a", 700), ("b", 500), ("c", 300), ("d", 200)] {
        let mut body = Vec::new();
        for line in lines(&mut rng, &mut earlier, n) {
            body.extend_from_slice(&line);
            body.push(b'\n');
        }
        if name == "c" {
            body.pop();
        }
        let gz = format!("{name}.jsonl.gz");
        std::fs::write(reference.join(&gz), gzip(&body)).unwrap();
        if name == "d" {
            std::fs::copy(reference.join(&gz), input.join(&gz)).unwrap();
        } else {
            std::fs::write(input.join(format!("{name}.jsonl")), body).unwrap();
        }
    }
    (input, reference)
}

/// What a run over `ref` names its files in (decisions, the report's clusters) as the run over
/// `in` names them.
fn as_over_input(text: &[u8], input: &Path, reference: &Path) -> Vec<u8> {
    let mut text = String::from_utf8(text.to_vec()).unwrap();
    for (from, to) in [
        ("a.jsonl.gz", "a.jsonl"),
        ("b.jsonl.gz", "b.jsonl"),
        ("c.jsonl.gz", "c.jsonl"),
        ("d.jsonl.gz", "d.jsonl.gz"),
    ] {
        let from = reference.join(from).display().to_string();
        let to = input.join(to).display().to_string();
        text = text.replace(&from, &to);
    }
    text.into_bytes()
}

/// A dataset's records per input, decompressed, its parts joined in order.
fn records_per_input(dataset: &BTreeMap<String, Vec<u8>>) -> BTreeMap<String, Vec<u8>> {
    let mut out: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    for (name, bytes) in dataset {
        let (name, bytes) = if let Some(plain) = name.strip_suffix(".gz") {
            let mut out = Vec::new();
            std::io::Read::read_to_end(
                &mut flate2::read::MultiGzDecoder::new(&bytes[..]),
                &mut out,
            )
            .unwrap();
            (plain, out)
        } else if let Some(plain) = name.strip_suffix(".zst") {
            (plain, zstd::decode_all(&bytes[..]).unwrap())
        } else {
            (name.as_str(), bytes.clone())
        };
        let input = name
            .split(".part-")
            .next()
            .unwrap()
            .trim_end_matches(".jsonl");
        out.entry(input.to_string()).or_default().extend(bytes);
    }
    out
}

fn input_bytes(input: &Path) -> u64 {
    std::fs::read_dir(input)
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().len())
        .sum()
}

/// The report's totals and stage 2's counts (what must not depend on what stage 2 read).
fn counts(r: &Report) -> String {
    let s = &r.stage2;
    format!(
        "{:?} records={} kept={} dropped={} samples={} unique={} cold={} near={} exact={} \
         empty={} errors={} skipped={:?} bytes={} clusters={:?}",
        serde_json::to_string(&r.totals).unwrap(),
        s.records,
        s.records_kept,
        s.records_dropped,
        s.samples,
        s.unique,
        s.cold,
        s.near,
        s.exact,
        s.empty,
        s.errors,
        s.skipped,
        s.bytes,
        s.clusters
            .as_ref()
            .map(|c| serde_json::to_string(c).unwrap()),
    )
}

/// What a run gives: its report, its decisions, and its dataset (file by file) when written.
type Ran = (Report, Vec<u8>, BTreeMap<String, Vec<u8>>);

/// Runs `config` with its decisions (and, with `output`, the dataset) under `dir`.
fn run(config: &Config, dir: &Path, output: bool) -> Ran {
    let mut c = config.clone();
    let decisions = dir.join("decisions.jsonl");
    c.output.decisions = Some(decisions.clone());
    if output {
        c.output.dir = Some(dir.join("out"));
    }
    let report = Pipeline::new(c).unwrap().run().unwrap();
    // The data files (the manifest names the run's own directory).
    let dataset = if output {
        let mut files = crate::support::published(&dir.join("out"));
        files.remove(neardup::corpus::MANIFEST);
        files
    } else {
        BTreeMap::new()
    };
    (report, std::fs::read(decisions).unwrap(), dataset)
}

#[test]
fn decisions_read_by_places_equal_a_whole_read_for_any_setting() {
    let tmp = tempfile::tempdir().unwrap();
    let (input, reference) = corpus(tmp.path());
    let total = input_bytes(&input);
    let gz = std::fs::metadata(input.join("d.jsonl.gz")).unwrap().len();
    let mut n = 0;
    for (expand, id) in [(false, false), (false, true), (true, true)] {
        let mut base = Config::default();
        base.run.on_error = neardup::keys::OnError::Skip;
        if expand {
            base.input.fields = vec!["text".into(), "title".into()];
            base.input.fields_mode = neardup::FieldsModeKind::Expand;
        }
        if id {
            base.input.id_field = Some("id".into());
        }
        base.dedup.threshold = 0.7;
        let mut whole_config = base.clone();
        whole_config.input.inputs = vec![reference.display().to_string()];
        base.input.inputs = vec![input.display().to_string()];
        n += 1;
        let (whole, whole_decisions, whole_dataset) =
            run(&whole_config, &tmp.path().join(format!("whole-{n}")), true);
        let whole_decisions = as_over_input(&whole_decisions, &input, &reference);
        let whole_records = records_per_input(&whole_dataset);
        let whole_counts = as_over_input(counts(&whole).as_bytes(), &input, &reference);
        let whole_counts = String::from_utf8(whole_counts).unwrap();
        assert!(
            whole.stage2.near + whole.stage2.exact > 30,
            "the corpus holds copies"
        );
        assert!(whole.stage2.errors > 20 && whole.stage2.empty > 5);
        assert!(whole.stage2.records_dropped > 20 && whole_records.len() == 4);
        if id {
            let text = String::from_utf8(whole_decisions.clone()).unwrap();
            assert!(text.contains(r#""id":"r5""#) && text.contains(r#""id":"q\"3""#));
            assert!(text.contains(r#""id":"2""#) && text.contains(r#""id":null"#));
        }
        for (threads, chunk_bytes, limit, parts) in [
            (1, 32 << 20, None, None),
            (2, 4096, None, Some(40_000)),
            (3, 1500, None, None),
            (2, 4096, Some(256 << 20), None),
        ] {
            let mut c = base.clone();
            c.run.threads = threads;
            c.keys.chunk_bytes = chunk_bytes;
            c.keys.memory_limit = limit;
            c.output.max_output_bytes = parts;
            let what =
                format!("expand {expand}, id {id}, {threads} threads, chunks of {chunk_bytes}");
            // Decisions only: without an id field the records to decide are read, the rest
            // passed over unread; with one, every record is read and parsed for its id.
            n += 1;
            let (places, decisions, _) = run(&c, &tmp.path().join(format!("places-{n}")), false);
            assert!(decisions == whole_decisions, "{what}: the same decisions");
            assert_eq!(counts(&places), whole_counts, "{what}");
            let read = places.stage2.bytes_read;
            if id {
                assert_eq!(read, total, "{what}");
            } else {
                // The gzip input is read whole, as stored; of the rest, the records to decide.
                assert!(
                    read >= gz && read - gz < (total - gz) / 2,
                    "{what}: {read} bytes read of {total}"
                );
            }
            // With the dataset: every record is read, the ones passed over copied unparsed.
            n += 1;
            let (copied, decisions, dataset) =
                run(&c, &tmp.path().join(format!("copied-{n}")), true);
            assert!(
                decisions == whole_decisions,
                "{what}, -o: the same decisions"
            );
            if parts.is_some() {
                assert!(dataset.keys().any(|k| k.contains(".part-00001.")), "{what}");
            }
            assert!(
                records_per_input(&dataset) == whole_records,
                "{what}, -o: the same dataset"
            );
            assert_eq!(counts(&copied), whole_counts, "{what}, -o");
            assert_eq!(copied.stage2.bytes_read, total, "{what}, -o");
        }
    }
}

/// A run whose places would take more than their share of the memory limit reads everything,
/// and decides the same.
#[test]
fn places_over_their_share_of_the_memory_limit_are_dropped() {
    let tmp = tempfile::tempdir().unwrap();
    let input = tmp.path().join("in");
    std::fs::create_dir_all(&input).unwrap();
    let mut rng = Rng(7);
    let mut earlier: Vec<String> = Vec::new();
    // Many records, so their places (two bytes each) pass a 16th of a small limit.
    let mut body = String::new();
    for _ in 0..60_000 {
        let text = match rng.below(200) {
            0 if !earlier.is_empty() => earlier[rng.below(earlier.len() as u64) as usize].clone(),
            _ => (0..12)
                .map(|_| format!("w{}", rng.below(1000)))
                .collect::<Vec<_>>()
                .join(" "),
        };
        earlier.push(text.clone());
        body.push_str(&format!("{{\"text\":\"{text}\"}}\n"));
    }
    std::fs::write(input.join("a.jsonl"), &body).unwrap();
    let mut c = Config::default();
    c.input.inputs = vec![input.display().to_string()];
    let (free, free_decisions, _) = run(&c, &tmp.path().join("free"), false);
    assert!(free.stage2.bytes_read < body.len() as u64);
    c.keys.memory_limit = Some(1 << 20);
    let (limited, limited_decisions, _) = run(&c, &tmp.path().join("limited"), false);
    assert_eq!(limited.stage2.bytes_read, body.len() as u64);
    assert!(limited_decisions == free_decisions);
    assert_eq!(counts(&limited), counts(&free));
}

/// One Parquet input of [`parquet_corpus`]: its name, row groups, rows per group, whether it
/// has a page index (an offset index), whether its text columns are dictionary-encoded, and
/// the row groups its copies are in.
struct ParquetInput {
    name: &'static str,
    groups: usize,
    rows: usize,
    page_index: bool,
    dictionary: bool,
    hot_groups: &'static [usize],
}

const PARQUET_INPUTS: [ParquetInput; 3] = [
    // Copies in the first, a middle and the last group; pages of 15 rows.
    ParquetInput {
        name: "p",
        groups: 8,
        rows: 150,
        page_index: true,
        dictionary: false,
        hot_groups: &[0, 3, 7],
    },
    ParquetInput {
        name: "q",
        groups: 5,
        rows: 100,
        page_index: false,
        dictionary: true,
        hot_groups: &[2],
    },
    ParquetInput {
        name: "r",
        groups: 1,
        rows: 120,
        page_index: true,
        dictionary: true,
        hot_groups: &[0],
    },
];

/// Parquet inputs ([`PARQUET_INPUTS`]) in `dir/in`: unique texts but for some rows of the hot
/// groups, near and exact copies of one another (across files too); null and blank texts
/// sprinkled everywhere (records stage 2 reads to decide), a `title` column some rows lack and
/// a number column. Returns the directory and its bytes.
pub(crate) fn parquet_corpus(dir: &Path) -> (PathBuf, u64) {
    use arrow_array::{ArrayRef, Int64Array, RecordBatch, StringArray};
    use parquet::arrow::ArrowWriter;
    use parquet::file::properties::WriterProperties;
    use std::sync::Arc;

    let input = dir.join("in");
    std::fs::create_dir_all(&input).unwrap();
    let mut rng = Rng(45);
    let word = |rng: &mut Rng| {
        (0..3 + rng.below(6))
            .map(|_| (b'a' + rng.below(26) as u8) as char)
            .collect::<String>()
    };
    let mut sources: Vec<String> = Vec::new();
    for f in &PARQUET_INPUTS {
        let rows = f.groups * f.rows;
        let mut texts: Vec<Option<String>> = Vec::with_capacity(rows);
        let mut titles: Vec<Option<String>> = Vec::with_capacity(rows);
        for i in 0..rows {
            let unique = (0..120 + rng.below(200))
                .map(|_| word(&mut rng))
                .collect::<Vec<_>>()
                .join(" ");
            let hot = f.hot_groups.contains(&(i / f.rows)) && i % 30 == 4;
            let text = if i % 197 == 7 {
                None
            } else if i % 211 == 9 {
                Some("   ".to_string())
            } else if hot && !sources.is_empty() && rng.below(3) > 0 {
                let base = sources[rng.below(sources.len() as u64) as usize].clone();
                if rng.below(2) == 0 {
                    Some(base)
                } else {
                    let mut words: Vec<String> = base.split(' ').map(str::to_string).collect();
                    let k = rng.below(words.len() as u64) as usize;
                    words[k] = word(&mut rng);
                    Some(words.join(" "))
                }
            } else {
                if hot {
                    sources.push(unique.clone());
                }
                Some(unique)
            };
            texts.push(text);
            titles.push((i % 101 != 0).then(|| (0..4).map(|_| word(&mut rng)).collect()));
        }
        let batch = RecordBatch::try_from_iter([
            ("text", Arc::new(StringArray::from(texts)) as ArrayRef),
            ("title", Arc::new(StringArray::from(titles)) as ArrayRef),
            (
                "n",
                Arc::new(Int64Array::from_iter_values(0..rows as i64)) as ArrayRef,
            ),
        ])
        .unwrap();
        let props = WriterProperties::builder()
            .set_max_row_group_row_count(Some(f.rows))
            .set_data_page_row_count_limit(15)
            .set_write_batch_size(15)
            .set_offset_index_disabled(!f.page_index)
            .set_dictionary_enabled(f.dictionary)
            .build();
        let file = std::fs::File::create(input.join(format!("{}.parquet", f.name))).unwrap();
        let mut w = ArrowWriter::try_new(file, batch.schema(), Some(props)).unwrap();
        w.write(&batch).unwrap();
        w.close().unwrap();
    }
    let total = input_bytes(&input);
    (input, total)
}

/// Over Parquet inputs with and without a page index, of one and of several row groups, with
/// copies in their first, middle and last groups: a run without a filtered dataset reads only
/// the row groups (and, with a page index, the pages) holding rows to decide, and decides as a
/// run reading every row (one writing the dataset, which reads every row) for any thread
/// count, chunks of row groups, fields mode and memory limit.
#[test]
fn parquet_decisions_read_by_rows_equal_a_whole_read_for_any_setting() {
    let tmp = tempfile::tempdir().unwrap();
    let (input, total) = parquet_corpus(tmp.path());
    let mut n = 0;
    for (expand, id) in [(false, false), (true, false), (false, true)] {
        let mut base = Config::default();
        base.run.on_error = neardup::keys::OnError::Skip;
        base.input.inputs = vec![input.display().to_string()];
        if expand {
            base.input.fields = vec!["text".into(), "title".into()];
            base.input.fields_mode = neardup::FieldsModeKind::Expand;
        }
        if id {
            base.input.id_field = Some("n".into());
        }
        base.dedup.threshold = 0.7;
        n += 1;
        let (whole, whole_decisions, whole_dataset) =
            run(&base, &tmp.path().join(format!("whole-{n}")), true);
        assert_eq!(
            whole.stage2.bytes_read, total,
            "a whole read reads every byte"
        );
        assert!(
            whole.stage2.near + whole.stage2.exact > 8,
            "the corpus holds copies"
        );
        assert!(whole.stage2.empty > 3 && whole.stage2.errors > 3);
        assert_eq!(whole_dataset.len(), 3);
        let whole_counts = counts(&whole);
        for (threads, chunk_bytes, limit) in [
            (1, 32 << 20, None),
            (2, 4096, None),
            (3, 30_000, None),
            (2, 4096, Some(256 << 20)),
        ] {
            let mut c = base.clone();
            c.run.threads = threads;
            c.keys.chunk_bytes = chunk_bytes;
            c.keys.memory_limit = limit;
            let what =
                format!("expand {expand}, id {id}, {threads} threads, chunks of {chunk_bytes}");
            n += 1;
            let (picked, decisions, _) = run(&c, &tmp.path().join(format!("rows-{n}")), false);
            assert!(decisions == whole_decisions, "{what}: the same decisions");
            assert_eq!(counts(&picked), whole_counts, "{what}");
            let read = picked.stage2.bytes_read;
            if id {
                // Every decision names its id: every row is read.
                assert_eq!(read, total, "{what}");
            } else {
                // Of the groups and pages holding rows to decide, the text columns only (two
                // of them in expand mode).
                let most = if expand { total * 2 / 3 } else { total / 2 };
                assert!(
                    read > 0 && read < most,
                    "{what}: {read} bytes read of {total}"
                );
            }
        }
    }
}

fn neardup() -> std::process::Command {
    std::process::Command::new(env!("CARGO_BIN_EXE_neardup"))
}

/// Runs a `neardup` command, `-q`, asserting it succeeds.
fn run_ok(cmd: &mut std::process::Command) {
    let out = cmd.arg("-q").output().expect("run neardup");
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `stage2.bytes_read` of a step's report.
fn bytes_read_of(report: &Path) -> u64 {
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(report).unwrap()).unwrap();
    report["stage2"]["bytes_read"].as_u64().unwrap()
}

/// The data files of a published output directory, each input's records.
fn dataset_records(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut files = crate::support::published(dir);
    files.retain(|name, _| name.contains(".jsonl"));
    records_per_input(&files)
}

/// What the staged steps and the distributed ones made of two shards: decisions, datasets and
/// the bytes stage 2 read.
struct Stepped {
    /// `apply`, decisions only: its decisions and bytes read.
    apply: (Vec<u8>, u64),
    /// `apply -o`: its decisions, dataset and bytes read.
    apply_out: (Vec<u8>, BTreeMap<String, Vec<u8>>, u64),
    /// The `sign` steps' bytes read, together.
    sign_read: u64,
    /// The `write` steps without `-o`: their decisions (in shard order) and bytes read.
    write: (Vec<u8>, u64),
    /// The `write` steps with `-o`: their decisions, the dataset and bytes read.
    write_out: (Vec<u8>, BTreeMap<String, Vec<u8>>, u64),
}

/// `keys` of each shard, `hot --groups 2`, then `apply` (with and without `-o`) and `sign`,
/// `decide` of each group and `write` of each shard (with and without `-o`), under `dir`.
fn steps(dir: &Path, shards: &[Vec<PathBuf>], flags: &[&str]) -> Stepped {
    std::fs::create_dir_all(dir).unwrap();
    let tables: Vec<PathBuf> = shards
        .iter()
        .enumerate()
        .map(|(i, files)| {
            let table = dir.join(format!("keys-{i}.ndk"));
            run_ok(
                neardup()
                    .arg("keys")
                    .args(files)
                    .args(["--shard", &i.to_string(), "-o"])
                    .arg(&table)
                    .args(flags),
            );
            table
        })
        .collect();
    let hot = dir.join("hot.ndh");
    run_ok(
        neardup()
            .arg("hot")
            .args(&tables)
            .args(["--groups", "2", "-o"])
            .arg(&hot),
    );
    let apply = |name: &str, output: bool| {
        let mut cmd = neardup();
        cmd.arg("apply")
            .args(&tables)
            .arg("--hot")
            .arg(&hot)
            .args(flags)
            .arg("--decisions")
            .arg(dir.join(format!("{name}.jsonl")))
            .arg("--report")
            .arg(dir.join(format!("{name}.json")));
        if output {
            cmd.arg("-o").arg(dir.join(name));
        }
        run_ok(&mut cmd);
        (
            std::fs::read(dir.join(format!("{name}.jsonl"))).unwrap(),
            dataset_records(&dir.join(name)),
            bytes_read_of(&dir.join(format!("{name}.json"))),
        )
    };
    let (decisions, _, read) = apply("apply", false);
    let apply_out = apply("apply-out", true);
    let mut sign_read = 0;
    let mut signed = Vec::new();
    for (i, t) in tables.iter().enumerate() {
        let out = dir.join(format!("sign-{i}"));
        let report = dir.join(format!("sign-{i}.json"));
        run_ok(
            neardup()
                .arg("sign")
                .arg(t)
                .arg("--hot")
                .arg(&hot)
                .arg("-o")
                .arg(&out)
                .arg("--report")
                .arg(&report)
                .args(flags),
        );
        sign_read += bytes_read_of(&report);
        signed.push(out);
    }
    let decided: Vec<PathBuf> = (0..2)
        .map(|g| {
            let out = dir.join(format!("decided-{g}"));
            run_ok(
                neardup()
                    .arg("decide")
                    .args(&signed)
                    .arg("--hot")
                    .arg(&hot)
                    .args(["--group", &g.to_string(), "-o"])
                    .arg(&out)
                    .args(flags),
            );
            out
        })
        .collect();
    let write = |name: &str, output: bool| {
        let (mut decisions, mut read) = (Vec::new(), 0);
        for (i, t) in tables.iter().enumerate() {
            let mut cmd = neardup();
            cmd.arg("write")
                .arg(t)
                .arg("--hot")
                .arg(&hot)
                .arg("--decided")
                .args(&decided)
                .args(flags)
                .arg("--decisions")
                .arg(dir.join(format!("{name}-{i}.jsonl")))
                .arg("--report")
                .arg(dir.join(format!("{name}-{i}.json")));
            if output {
                cmd.arg("-o").arg(dir.join(name));
            }
            run_ok(&mut cmd);
            decisions.extend(std::fs::read(dir.join(format!("{name}-{i}.jsonl"))).unwrap());
            read += bytes_read_of(&dir.join(format!("{name}-{i}.json")));
        }
        (decisions, dataset_records(&dir.join(name)), read)
    };
    let (write_decisions, _, write_read) = write("write", false);
    Stepped {
        apply: (decisions, read),
        apply_out,
        sign_read,
        write: (write_decisions, write_read),
        write_out: write("write-out", true),
    }
}

/// The staged steps (`keys` → `hot` → `apply`) and the distributed ones (`sign` → `decide` →
/// `write`, two shards, two groups) read by the places of the records their key tables carry:
/// only the records to decide without a dataset, every record (the others copied unparsed)
/// with one; their decisions and datasets are those of steps that read and parse everything.
#[test]
fn staged_and_distributed_steps_read_by_the_places_key_tables_carry() {
    let tmp = tempfile::tempdir().unwrap();
    let (input, reference) = corpus(tmp.path());
    let total = input_bytes(&input);
    let gz = std::fs::metadata(input.join("d.jsonl.gz")).unwrap().len();
    let flags = ["--on-error", "skip", "--threshold", "0.7"];
    let shards = |dir: &Path, names: [[&str; 2]; 2]| -> Vec<Vec<PathBuf>> {
        names
            .iter()
            .map(|s| s.iter().map(|n| dir.join(n)).collect())
            .collect()
    };
    let whole = steps(
        &tmp.path().join("whole"),
        &shards(
            &reference,
            [["a.jsonl.gz", "b.jsonl.gz"], ["c.jsonl.gz", "d.jsonl.gz"]],
        ),
        &flags,
    );
    let placed = steps(
        &tmp.path().join("placed"),
        &shards(&input, [["a.jsonl", "b.jsonl"], ["c.jsonl", "d.jsonl.gz"]]),
        &flags,
    );
    let as_input = |d: &[u8]| as_over_input(d, &input, &reference);
    let reference_decisions = as_input(&whole.apply.0);
    let text = String::from_utf8(reference_decisions.clone()).unwrap();
    assert!(text.contains(r#""reason":"near""#) && text.contains(r#""reason":"exact""#));
    // The same decisions from every step, and the same datasets.
    assert!(placed.apply.0 == reference_decisions, "apply");
    assert!(placed.apply_out.0 == reference_decisions, "apply -o");
    assert!(
        as_input(&whole.write.0) == reference_decisions,
        "write, whole"
    );
    assert!(placed.write.0 == reference_decisions, "write");
    assert!(placed.write_out.0 == reference_decisions, "write -o");
    assert_eq!(whole.apply_out.1.len(), 4);
    assert!(
        placed.apply_out.1 == whole.apply_out.1,
        "apply -o: the dataset"
    );
    assert!(
        placed.write_out.1 == whole.apply_out.1,
        "write -o: the dataset"
    );
    // What they read: the gzip input whole, of the rest only the records to decide; all of
    // it with a dataset.
    let few = |read: u64| read >= gz && read - gz < (total - gz) / 2;
    assert!(
        few(placed.apply.1),
        "apply read {} of {total}",
        placed.apply.1
    );
    assert!(
        few(placed.sign_read),
        "sign read {} of {total}",
        placed.sign_read
    );
    assert!(
        few(placed.write.1),
        "write read {} of {total}",
        placed.write.1
    );
    assert_eq!(placed.apply_out.2, total);
    assert_eq!(placed.write_out.2, total);
}

/// Key tables written before tables carried their records' places (format 1, by main 3ea5919:
/// tests/data/keys-v1) are still read by `hot`, `apply` and `sign`, which then read their inputs
/// whole, and decide what steps over today's tables decide.
#[test]
fn key_tables_of_format_1_are_read_and_their_inputs_read_whole() {
    let tmp = tempfile::tempdir().unwrap();
    let data = Path::new("tests/data");
    let inputs = [data.join("index-v1/a.jsonl"), data.join("index-v1/b.jsonl")];
    let total: u64 = inputs
        .iter()
        .map(|p| std::fs::metadata(p).unwrap().len())
        .sum();
    let old = [data.join("keys-v1/a.v1.ndk"), data.join("keys-v1/b.v1.ndk")];
    let new: Vec<PathBuf> = inputs
        .iter()
        .enumerate()
        .map(|(i, input)| {
            let table = tmp.path().join(format!("{i}.ndk"));
            run_ok(
                neardup()
                    .arg("keys")
                    .arg(input)
                    .args(["--shard", &i.to_string(), "-o"])
                    .arg(&table),
            );
            table
        })
        .collect();
    let decide = |name: &str, tables: &[PathBuf]| {
        let dir = tmp.path().join(name);
        std::fs::create_dir_all(&dir).unwrap();
        let hot = dir.join("hot.ndh");
        run_ok(neardup().arg("hot").args(tables).arg("-o").arg(&hot));
        run_ok(
            neardup()
                .arg("apply")
                .args(tables)
                .arg("--hot")
                .arg(&hot)
                .arg("--decisions")
                .arg(dir.join("d.jsonl"))
                .arg("--report")
                .arg(dir.join("r.json")),
        );
        run_ok(
            neardup()
                .arg("sign")
                .arg(&tables[1])
                .arg("--hot")
                .arg(&hot)
                .arg("-o")
                .arg(dir.join("sign"))
                .arg("--report")
                .arg(dir.join("sign.json")),
        );
        (
            std::fs::read(dir.join("d.jsonl")).unwrap(),
            bytes_read_of(&dir.join("r.json")),
            bytes_read_of(&dir.join("sign.json")),
        )
    };
    let (old_decisions, old_read, old_sign_read) = decide("old", &old);
    let (new_decisions, new_read, new_sign_read) = decide("new", &new);
    assert!(old_decisions == new_decisions);
    assert!(
        String::from_utf8(old_decisions)
            .unwrap()
            .contains(r#""reason":"near""#)
    );
    assert_eq!(old_read, total);
    assert_eq!(old_sign_read, std::fs::metadata(&inputs[1]).unwrap().len());
    // Today's tables carry the places (these inputs' records to decide lie close together, so
    // their reads cover most of the files).
    assert!(new_read <= total && new_sign_read <= old_sign_read);
    let table = std::fs::read(&new[0]).unwrap();
    let header_len = u64::from_le_bytes(table[8..16].try_into().unwrap()) as usize;
    let header: serde_json::Value = serde_json::from_slice(&table[16..16 + header_len]).unwrap();
    assert_eq!(header["format_version"], 2);
    assert_eq!(header["places"].as_array().map(Vec::len), Some(1));
}

/// `lines` (each with its line end) compressed a few lines to a member (gzip) or frame
/// (zstd), as `bgzip` or `pzstd` write a file that can be entered in the middle.
pub(crate) fn in_members(lines: &[Vec<u8>], per_member: usize, zstd: bool) -> Vec<u8> {
    let mut out = Vec::new();
    for member in lines.chunks(per_member) {
        let body = member.concat();
        if zstd {
            out.extend(zstd::encode_all(&body[..], 3).unwrap());
        } else {
            let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
            gz.write_all(&body).unwrap();
            out.extend(gz.finish().unwrap());
        }
    }
    out
}

/// Compressed inputs that can be entered in the middle — a gzip file of several members, a zstd
/// file of several frames — are read by the places of their records: only the members holding
/// records to decide are decompressed, in a one-process run and through the staged and
/// distributed steps, with the decisions and datasets of a whole read; a gzip file of one member
/// is read whole, as before.
#[test]
fn compressed_inputs_of_several_members_are_read_by_their_records_places() {
    let tmp = tempfile::tempdir().unwrap();
    let (input, reference) = corpus(tmp.path());
    let members = tmp.path().join("members");
    std::fs::create_dir_all(&members).unwrap();
    let split_lines = |body: &[u8]| -> Vec<Vec<u8>> {
        body.split_inclusive(|b| *b == b'\n')
            .map(<[u8]>::to_vec)
            .collect()
    };
    let a = split_lines(&std::fs::read(input.join("a.jsonl")).unwrap());
    let b = split_lines(&std::fs::read(input.join("b.jsonl")).unwrap());

    std::fs::write(members.join("a.jsonl.gz"), in_members(&a, 3, false)).unwrap();
    std::fs::write(members.join("b.jsonl.zst"), in_members(&b, 3, true)).unwrap();
    for name in ["c.jsonl.gz", "d.jsonl.gz"] {
        std::fs::copy(reference.join(name), members.join(name)).unwrap();
    }
    let size = |name: &str| std::fs::metadata(members.join(name)).unwrap().len();
    let (entered, whole_read) = (
        size("a.jsonl.gz") + size("b.jsonl.zst"),
        size("c.jsonl.gz") + size("d.jsonl.gz"),
    );
    let as_members = |text: &[u8]| {
        let mut text = String::from_utf8(text.to_vec()).unwrap();
        for (from, to) in [("a.jsonl.gz", "a.jsonl.gz"), ("b.jsonl.gz", "b.jsonl.zst")] {
            text = text.replace(
                &reference.join(from).display().to_string(),
                &members.join(to).display().to_string(),
            );
        }
        for name in ["c.jsonl.gz", "d.jsonl.gz"] {
            text = text.replace(
                &reference.join(name).display().to_string(),
                &members.join(name).display().to_string(),
            );
        }
        text.into_bytes()
    };
    let mut base = Config::default();
    base.run.on_error = neardup::keys::OnError::Skip;
    base.dedup.threshold = 0.7;
    let mut whole_config = base.clone();
    whole_config.input.inputs = vec![reference.display().to_string()];
    base.input.inputs = vec![members.display().to_string()];
    let (whole, whole_decisions, whole_dataset) =
        run(&whole_config, &tmp.path().join("whole"), true);
    let whole_decisions = as_members(&whole_decisions);
    let whole_counts = String::from_utf8(as_members(counts(&whole).as_bytes())).unwrap();
    let whole_records = records_per_input(&whole_dataset);
    assert!(whole.stage2.near + whole.stage2.exact > 30);
    for threads in [1, 3] {
        let mut c = base.clone();
        c.run.threads = threads;
        let (picked, decisions, _) = run(&c, &tmp.path().join(format!("picked-{threads}")), false);
        assert!(
            decisions == whole_decisions,
            "{threads} threads: the same decisions"
        );
        assert_eq!(counts(&picked), whole_counts, "{threads} threads");
        let read = picked.stage2.bytes_read;
        assert!(
            read >= whole_read && read - whole_read < entered * 3 / 4,
            "{threads} threads: {read} bytes read, {entered} of them in members"
        );
        let (copied, decisions, dataset) =
            run(&c, &tmp.path().join(format!("copied-{threads}")), true);
        assert!(
            decisions == whole_decisions,
            "{threads} threads, -o: the same decisions"
        );
        assert!(
            records_per_input(&dataset) == whole_records,
            "{threads} threads, -o: the same dataset"
        );
        assert_eq!(counts(&copied), whole_counts, "{threads} threads, -o");
        assert_eq!(
            copied.stage2.bytes_read,
            entered + whole_read,
            "{threads} threads, -o"
        );
    }
    // Through the steps, over two shards and two groups.
    let flags = ["--on-error", "skip", "--threshold", "0.7"];
    let stepped = steps(
        &tmp.path().join("steps"),
        &[
            vec![members.join("a.jsonl.gz"), members.join("b.jsonl.zst")],
            vec![members.join("c.jsonl.gz"), members.join("d.jsonl.gz")],
        ],
        &flags,
    );
    assert!(stepped.apply.0 == whole_decisions, "apply");
    assert!(stepped.write.0 == whole_decisions, "write");
    assert!(stepped.write_out.0 == whole_decisions, "write -o");
    assert!(
        stepped.apply_out.1 == whole_records,
        "apply -o: the dataset"
    );
    assert!(
        stepped.write_out.1 == whole_records,
        "write -o: the dataset"
    );
    for (what, read) in [
        ("apply", stepped.apply.1),
        ("sign", stepped.sign_read),
        ("write", stepped.write.1),
    ] {
        assert!(
            read >= whole_read && read - whole_read < entered * 3 / 4,
            "{what}: {read} bytes read, {entered} of them in members"
        );
    }
    assert_eq!(stepped.apply_out.2, entered + whole_read);
}

/// The Parquet data files of a published output directory.
fn parquet_files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut files = crate::support::published(dir);
    files.retain(|name, _| name.ends_with(".parquet"));
    files
}

/// The staged step (`apply`) and the distributed ones (`sign`, `write`; two shards, two groups)
/// over Parquet read by the rows their key tables carry, and their reports' `stage2.bytes_read`
/// say what they read: without a dataset, `apply` and the `write` steps read what a one-process
/// run reads (the row groups and pages holding rows to decide, text columns only) and the
/// `sign` steps no more; with one, every byte. Their decisions are the one-process run's, and
/// their Parquet datasets its dataset, byte for byte.
#[test]
fn parquet_steps_report_the_bytes_they_read() {
    let tmp = tempfile::tempdir().unwrap();
    let (input, total) = parquet_corpus(tmp.path());
    let mut base = Config::default();
    base.run.on_error = neardup::keys::OnError::Skip;
    base.input.inputs = vec![input.display().to_string()];
    base.dedup.threshold = 0.7;
    let (whole, whole_decisions, whole_dataset) = run(&base, &tmp.path().join("whole"), true);
    assert_eq!(whole.stage2.bytes_read, total);
    assert_eq!(whole_dataset.len(), 3);
    let (picked, _, _) = run(&base, &tmp.path().join("picked"), false);
    let one_read = picked.stage2.bytes_read;
    assert!(
        one_read > 0 && one_read < total / 2,
        "{one_read} of {total}"
    );
    let shards = vec![
        vec![input.join("p.parquet")],
        vec![input.join("q.parquet"), input.join("r.parquet")],
    ];
    let dir = tmp.path().join("steps");
    let s = steps(&dir, &shards, &["--on-error", "skip", "--threshold", "0.7"]);
    assert!(s.apply.0 == whole_decisions, "apply decided otherwise");
    assert!(
        s.write.0 == whole_decisions,
        "the write steps decided otherwise"
    );
    assert!(s.apply_out.0 == whole_decisions && s.write_out.0 == whole_decisions);
    assert_eq!(s.apply.1, one_read, "apply, decisions only");
    assert_eq!(s.write.1, one_read, "write steps, decisions only");
    assert!(
        s.sign_read > 0 && s.sign_read <= one_read,
        "sign steps: {} bytes read, {one_read} by one process",
        s.sign_read
    );
    assert_eq!(s.apply_out.2, total, "apply -o reads every byte");
    assert_eq!(s.write_out.2, total, "write -o steps read every byte");
    for name in ["apply-out", "write-out"] {
        assert!(
            parquet_files(&dir.join(name)) == whole_dataset,
            "{name}: not the one-process dataset"
        );
    }
}
