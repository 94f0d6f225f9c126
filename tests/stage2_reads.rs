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
        let (name, bytes) = match name.strip_suffix(".gz") {
            Some(plain) => {
                let mut out = Vec::new();
                std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(&bytes[..]), &mut out)
                    .unwrap();
                (plain, out)
            }
            None => (name.as_str(), bytes.clone()),
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
