//! Writing: round trips, masks, splitting, atomicity, overwrite rules, decisions files.

use std::io::Read;
use std::path::{Path, PathBuf};

use crate::common::*;
use arrow_array::RecordBatch;
use neardup_corpus::{
    AtomicFile, Block, DecisionRow, DecisionWriter, InputFile, OutputOptions, Projection,
    Publication, PublishOptions, Reason, WrittenFile, is_decisions_file, read_chunk,
    read_decisions,
};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

fn decompress(path: &Path) -> Vec<u8> {
    let raw = std::fs::read(path).unwrap();
    let name = path.to_string_lossy();
    let mut out = Vec::new();
    if name.ends_with(".gz") {
        flate2::read::MultiGzDecoder::new(&raw[..])
            .read_to_end(&mut out)
            .unwrap();
    } else if name.ends_with(".zst") {
        zstd::stream::read::Decoder::new(&raw[..])
            .unwrap()
            .read_to_end(&mut out)
            .unwrap();
    } else {
        out = raw;
    }
    out
}

fn blocks(f: &InputFile, block_bytes: usize) -> Vec<Block> {
    read_chunk(
        f,
        &whole(0),
        &opts(
            selector(&["text"], None),
            Projection::FullRecords,
            block_bytes,
        ),
    )
    .map(|b| b.unwrap())
    .collect()
}

/// A publication of a dataset directory only.
fn begin(out: &Path, overwrite: bool, max: Option<u64>) -> Publication {
    Publication::begin(&PublishOptions {
        output: Some(OutputOptions {
            dir: out.to_path_buf(),
            overwrite,
            max_output_bytes: max,
        }),
        ..PublishOptions::default()
    })
    .unwrap()
}

/// Writes `f` through a FileWriter with `keep(file_record)` as the mask, and publishes it.
fn copy(
    f: &InputFile,
    out: &Path,
    max: Option<u64>,
    block_bytes: usize,
    keep: impl Fn(u64) -> bool,
) -> WrittenFile {
    let p = begin(out, true, max);
    let mut w = p.dataset().unwrap().file_writer(f).unwrap();
    for b in blocks(f, block_bytes) {
        let mask: Vec<bool> = (0..b.num_records() as u64)
            .map(|i| keep(b.first_record + i))
            .collect();
        w.write_block(&b, 0, &mask).unwrap();
    }
    let written = w.finish().unwrap();
    p.commit().unwrap();
    written
}

/// The input's lines (record i = line i, newline included).
fn lines(bytes: &[u8]) -> Vec<&[u8]> {
    bytes.split_inclusive(|&b| b == b'\n').collect()
}

fn check_jsonl_roundtrip(name: &str) {
    let f = input(&data("corpus").join(name));
    let src = decompress(&f.path);
    let tmp = tempfile::tempdir().unwrap();
    for block_bytes in [100, 1 << 20] {
        let w = copy(&f, tmp.path(), None, block_bytes, |_| true);
        assert_eq!(w.paths, vec![tmp.path().join(name)]);
        assert_eq!(
            decompress(&w.paths[0]),
            src,
            "{name} all kept is byte-identical"
        );
        assert_eq!(w.records as usize, lines(&src).len());
        assert_eq!(w.bytes, std::fs::metadata(&w.paths[0]).unwrap().len());

        let keep = |r: u64| r % 3 != 1 && r != 64;
        let w = copy(&f, tmp.path(), None, block_bytes, keep);
        let want: Vec<u8> = lines(&src)
            .iter()
            .enumerate()
            .filter(|(i, _)| keep(*i as u64))
            .flat_map(|(_, l)| l.iter().copied())
            .collect();
        assert_eq!(decompress(&w.paths[0]), want, "{name} masked");
    }
}

#[test]
fn jsonl_roundtrip_plain() {
    check_jsonl_roundtrip("sample.jsonl");
}

#[test]
fn jsonl_roundtrip_gzip() {
    check_jsonl_roundtrip("sample.jsonl.gz");
}

#[test]
fn jsonl_roundtrip_zstd() {
    check_jsonl_roundtrip("sample.jsonl.zst");
}

fn read_parquet(
    path: &Path,
) -> (
    arrow_schema::SchemaRef,
    Vec<RecordBatch>,
    parquet::file::metadata::ParquetMetaData,
) {
    let b = ParquetRecordBatchReaderBuilder::try_new(std::fs::File::open(path).unwrap()).unwrap();
    let schema = b.schema().clone();
    let meta = b.metadata().as_ref().clone();
    let batches = b.build().unwrap().map(|b| b.unwrap()).collect();
    (schema, batches, meta)
}

#[test]
fn parquet_roundtrip_same_schema_values_codec() {
    let f = input(&data("corpus").join("sample.parquet"));
    let (schema, batches, meta) = read_parquet(&f.path);
    let all = arrow_select::concat::concat_batches(&schema, &batches).unwrap();
    let tmp = tempfile::tempdir().unwrap();

    let w = copy(&f, tmp.path(), None, 4 << 10, |_| true);
    assert_eq!(w.records, 200);
    let (schema2, batches2, meta2) = read_parquet(&w.paths[0]);
    assert_eq!(schema2, schema, "same schema, including metadata");
    let all2 = arrow_select::concat::concat_batches(&schema2, &batches2).unwrap();
    assert_eq!(all2, all, "value-identical");
    let codec =
        |m: &parquet::file::metadata::ParquetMetaData| m.row_group(0).column(1).compression();
    assert_eq!(codec(&meta2), codec(&meta));
    assert_eq!(meta2.row_group(0).num_rows(), meta.row_group(0).num_rows());
    let kv = |m: &parquet::file::metadata::ParquetMetaData| {
        m.file_metadata()
            .key_value_metadata()
            .unwrap()
            .iter()
            .find(|k| k.key == "origin")
            .and_then(|k| k.value.clone())
    };
    assert_eq!(kv(&meta2).as_deref(), Some("neardup fixture"));
    assert_eq!(kv(&meta), kv(&meta2));

    let keep = |r: u64| r.is_multiple_of(7) || r > 180;
    let w = copy(&f, tmp.path(), None, 4 << 10, keep);
    let (_, batches3, _) = read_parquet(&w.paths[0]);
    let got = arrow_select::concat::concat_batches(&schema, &batches3).unwrap();
    let mask: arrow_array::BooleanArray = (0..200u64).map(|r| Some(keep(r))).collect();
    let want = arrow_select::filter::filter_record_batch(&all, &mask).unwrap();
    assert_eq!(got, want);
    assert_eq!(w.records, want.num_rows() as u64);
}

#[test]
fn text_only_parquet_blocks_cannot_be_written() {
    let f = input(&data("corpus").join("sample.parquet"));
    let tmp = tempfile::tempdir().unwrap();
    let p = begin(&tmp.path().join("o"), false, None);
    let mut w = p.dataset().unwrap().file_writer(&f).unwrap();
    let b = read_chunk(
        &f,
        &whole(0),
        &opts(selector(&["text"], None), Projection::TextOnly, 1 << 20),
    )
    .next()
    .unwrap()
    .unwrap();
    let mask = vec![true; b.num_records()];
    assert_eq!(
        w.write_block(&b, 0, &mask).unwrap_err().kind(),
        "invalid_block"
    );
    assert_eq!(
        w.write_block(&b, 0, &mask[1..]).unwrap_err().kind(),
        "invalid_block"
    );
}

#[test]
fn max_output_bytes_splits_into_bounded_parts() {
    let tmp = tempfile::tempdir().unwrap();
    for name in ["sample.jsonl", "sample.jsonl.gz", "sample.jsonl.zst"] {
        let f = input(&data("corpus").join(name));
        let src = decompress(&f.path);
        let max = if name.ends_with("jsonl") { 2000 } else { 400 };
        let w = copy(&f, &tmp.path().join(name), Some(max), 1000, |_| true);
        assert!(w.paths.len() > 1, "{name}: {:?}", w.paths);
        let stem = name.split('.').next().unwrap();
        let ext = &name[stem.len()..];
        for (k, p) in w.paths.iter().enumerate() {
            // Every part is named by its number, the first too.
            let expect = format!("{stem}.part-{k:05}{ext}");
            assert_eq!(p.file_name().unwrap().to_str().unwrap(), expect);
            let len = std::fs::metadata(p).unwrap().len();
            assert!(len <= max, "{name} part {k} has {len} bytes > {max}");
        }
        let joined: Vec<u8> = w.paths.iter().flat_map(|p| decompress(p)).collect();
        assert_eq!(joined, src, "{name}: parts concatenate to the input");
        assert_eq!(
            w.bytes,
            w.paths
                .iter()
                .map(|p| std::fs::metadata(p).unwrap().len())
                .sum::<u64>()
        );

        // A rerun with overwrite and no limit removes the earlier run's parts (its manifest
        // lists them).
        let w2 = copy(&f, &tmp.path().join(name), None, 1000, |_| true);
        assert_eq!(w2.paths.len(), 1);
        assert_eq!(
            names(&tmp.path().join(name)),
            ["_SUCCESS".to_string(), name.to_string()],
            "{name}: earlier parts removed"
        );
    }

    // The whole output takes about 10 kB: a part of at most 7 kB ends within it.
    let f = input(&data("corpus").join("sample.parquet"));
    let max = 7_000;
    let w = copy(&f, &tmp.path().join("pq"), Some(max), 1 << 20, |_| true);
    assert!(w.paths.len() > 1, "{:?}", w.paths);
    for p in &w.paths {
        let len = std::fs::metadata(p).unwrap().len();
        assert!(len <= max, "{} has {len} bytes > {max}", p.display());
    }
    assert_eq!(w.paths[1].file_name().unwrap(), "sample.part-00001.parquet");
    let mut rows = 0;
    for p in &w.paths {
        let (_, batches, _) = read_parquet(p);
        rows += batches.iter().map(|b| b.num_rows()).sum::<usize>();
    }
    assert_eq!(rows, 200);
}

#[test]
fn output_dir_refuses_non_empty_without_overwrite() {
    let tmp = tempfile::tempdir().unwrap();
    let o = |overwrite| PublishOptions {
        output: Some(OutputOptions {
            dir: tmp.path().to_path_buf(),
            overwrite,
            max_output_bytes: None,
        }),
        ..PublishOptions::default()
    };
    drop(Publication::begin(&o(false)).expect("empty existing dir is fine"));
    std::fs::write(tmp.path().join("unrelated.txt"), b"keep me").unwrap();
    assert_eq!(Publication::begin(&o(false)).unwrap_err().kind(), "exists");
    let p = Publication::begin(&o(true)).unwrap();
    let dir = p.dataset().unwrap();
    let f = input(&data("corpus").join("sample.jsonl"));
    let w = dir.file_writer(&f).unwrap();
    assert_eq!(dir.file_writer(&f).unwrap_err().kind(), "duplicate_output");
    w.finish().unwrap();
    assert!(
        !tmp.path().join("sample.jsonl").exists(),
        "published at the commit"
    );

    let mut escape = f.clone();
    escape.relative = PathBuf::from("../x.jsonl");
    assert_eq!(
        dir.file_writer(&escape).unwrap_err().kind(),
        "invalid_output"
    );
    p.commit().unwrap();
    assert_eq!(
        std::fs::read(tmp.path().join("unrelated.txt")).unwrap(),
        b"keep me"
    );
    assert_eq!(
        std::fs::read(tmp.path().join("sample.jsonl")).unwrap(),
        b"",
        "no block: empty output"
    );
}

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[test]
fn dropped_writers_leave_no_final_named_file() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let p = begin(&out, false, Some(500));
    for name in ["sample.jsonl", "sample.jsonl.zst", "sample.parquet"] {
        let f = input(&data("corpus").join(name));
        let mut w = p.dataset().unwrap().file_writer(&f).unwrap();
        for b in blocks(&f, 1000) {
            w.write_block(&b, 0, &vec![true; b.num_records()]).unwrap();
        }
        // Mid-write, only the hidden staging directory exists.
        let seen = names(&out);
        assert!(
            seen.len() == 1 && seen[0].starts_with(".neardup-"),
            "{seen:?}"
        );
        drop(w);
    }
    drop(p);
    assert!(!out.exists(), "the unpublished run's directory is gone");

    let target = tmp.path().join("report.json");
    let mut a = AtomicFile::create(&target).unwrap();
    std::io::Write::write_all(&mut a, b"{}").unwrap();
    assert!(!target.exists());
    drop(a);
    assert!(!target.exists());
    assert!(names(tmp.path()).is_empty(), "{:?}", names(tmp.path()));
    let mut a = AtomicFile::create(&target).unwrap();
    std::io::Write::write_all(&mut a, b"{\"ok\":1}").unwrap();
    a.commit().unwrap();
    assert_eq!(std::fs::read(&target).unwrap(), b"{\"ok\":1}");
}

fn rows() -> Vec<neardup_corpus::OwnedDecisionRow> {
    let reasons = [
        Reason::Unique,
        Reason::Near,
        Reason::Exact,
        Reason::Empty,
        Reason::Error,
    ];
    (0..1000u64)
        .map(|i| neardup_corpus::OwnedDecisionRow {
            file: format!("dir/f{}.jsonl", i % 3),
            record: i,
            field: (i % 2) as u32,
            id: (i % 4 != 0).then(|| format!("id-\"{i}\"")),
            keep: i % 5 != 1,
            reason: reasons[i as usize % 5],
            dup_of_file: (i % 5 == 1).then(|| "dir/f0.jsonl".to_string()),
            dup_of_record: (i % 5 == 1).then_some(i / 2),
            dup_of_id: (i % 10 == 1).then(|| "orig".to_string()),
            similarity: (i % 5 == 1).then_some(i as f64 / 1000.0),
            cluster_file: Some(format!("dir/f{}.jsonl", (i + i / 7) % 3)),
            cluster_record: Some(i / 7),
        })
        .collect()
}

#[test]
fn decisions_roundtrip_both_formats() {
    let tmp = tempfile::tempdir().unwrap();
    let want = rows();
    for name in ["d.jsonl", "d.parquet"] {
        let path = tmp.path().join(name);
        let mut w = DecisionWriter::create(&path).unwrap();
        for r in &want {
            w.write(&r.as_row()).unwrap();
        }
        assert!(!path.exists(), "atomic until finish");
        assert_eq!(w.finish().unwrap(), want.len() as u64);
        assert_eq!(read_decisions(&path).unwrap(), want, "{name}");
    }
    let text = std::fs::read_to_string(tmp.path().join("d.jsonl")).unwrap();
    let first = text.lines().next().unwrap();
    assert_eq!(
        first,
        r#"{"file":"dir/f0.jsonl","record":0,"field":0,"id":null,"keep":true,"reason":"unique","dup_of_file":null,"dup_of_record":null,"dup_of_id":null,"similarity":null,"cluster_file":"dir/f0.jsonl","cluster_record":0}"#
    );
    let row = DecisionRow {
        file: "a",
        record: 1,
        field: 2,
        id: Some("x"),
        keep: false,
        reason: Reason::Near,
        dup_of_file: Some("b"),
        dup_of_record: Some(3),
        dup_of_id: None,
        similarity: Some(0.5),
        cluster_file: "c",
        cluster_record: 4,
    };
    assert_eq!(
        serde_json::to_string(&row).unwrap(),
        r#"{"file":"a","record":1,"field":2,"id":"x","keep":false,"reason":"near","dup_of_file":"b","dup_of_record":3,"dup_of_id":null,"similarity":0.5,"cluster_file":"c","cluster_record":4}"#
    );
}

/// Decisions written before clusters were recorded still read, with no cluster.
#[test]
fn decisions_without_clusters_read() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("old.jsonl");
    std::fs::write(
        &path,
        r#"{"file":"a","record":1,"field":0,"id":null,"keep":false,"reason":"near","dup_of_file":"a","dup_of_record":0,"dup_of_id":null,"similarity":0.9}"#
            .to_string()
            + "\n",
    )
    .unwrap();
    let rows = read_decisions(&path).unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(
        (&rows[0].cluster_file, rows[0].cluster_record),
        (&None, None)
    );
    assert_eq!(rows[0].dup_of_record, Some(0));
}

/// Decisions files of either format and any version are told from other files by their start
/// (and a Parquet file's footer), however large: an output replaces only one of them.
#[test]
fn decisions_files_are_recognised_by_their_start() {
    let tmp = tempfile::tempdir().unwrap();
    let at = |name: &str, body: &[u8]| {
        let path = tmp.path().join(name);
        std::fs::write(&path, body).unwrap();
        is_decisions_file(&path).unwrap()
    };
    for name in ["d.jsonl", "d.parquet"] {
        let path = tmp.path().join(name);
        let mut w = DecisionWriter::create(&path).unwrap();
        for r in &rows() {
            w.write(&r.as_row()).unwrap();
        }
        w.finish().unwrap();
        assert!(is_decisions_file(&path).unwrap(), "{name}");
    }
    // Rows written before clusters were recorded, an empty file (nothing to lose), a first row
    // followed by far more than is read.
    let old = r#"{"file":"a","record":1,"field":0,"id":null,"keep":true,"reason":"unique","dup_of_file":null,"dup_of_record":null,"dup_of_id":null,"similarity":null}"#;
    assert!(at("old.jsonl", format!("{old}\n").as_bytes()));
    assert!(at("empty", b""));
    let mut long = format!("{old}\n").into_bytes();
    long.extend(std::iter::repeat_n(b'x', 1 << 20));
    assert!(at("long.jsonl", &long));
    // Other files: text, JSONL of other rows, a row cut short, a row not ending its line, blank
    // lines, bytes that are not UTF-8, a Parquet file of other columns.
    assert!(!at("notes.txt", b"precious\n"));
    assert!(!at("rows.jsonl", b"{\"file\":\"a\",\"record\":0}\n"));
    assert!(!at("cut.jsonl", &old.as_bytes()[..40]));
    assert!(!at("open.jsonl", old.as_bytes()));
    assert!(!at("blank", b"\n\n  \n"));
    assert!(!at("binary", b"\xff\xfe\x00\x01"));
    let mut first = vec![b' '; 1 << 17];
    first.extend_from_slice(old.as_bytes());
    first.push(b'\n');
    assert!(
        !at("deep.jsonl", &first),
        "a first line longer than any row"
    );
    // A Parquet file of other columns, whatever its name.
    let other = data("corpus/sample.parquet");
    assert!(!is_decisions_file(&other).unwrap());
    std::fs::copy(&other, tmp.path().join("other.jsonl")).unwrap();
    assert!(!is_decisions_file(&tmp.path().join("other.jsonl")).unwrap());
}

#[test]
fn parquet_rank_columns_of_every_numeric_type_are_read_as_numbers() {
    use arrow_array::{
        ArrayRef, BooleanArray, Decimal128Array, Float32Array, Int64Array, RecordBatch,
        StringArray, UInt8Array,
    };
    use neardup_corpus::RankValue;
    use std::fs::File;
    use std::sync::Arc;
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("ranks.parquet");
    let decimals = Decimal128Array::from(vec![Some(1234), None, Some(-5)])
        .with_precision_and_scale(10, 2)
        .unwrap();
    let batch = RecordBatch::try_from_iter([
        (
            "text",
            Arc::new(StringArray::from(vec!["a", "b", "c"])) as ArrayRef,
        ),
        (
            "i",
            Arc::new(Int64Array::from(vec![Some(-7), None, Some(9)])) as ArrayRef,
        ),
        (
            "f",
            Arc::new(Float32Array::from(vec![Some(0.5), Some(f32::NAN), None])) as ArrayRef,
        ),
        (
            "u",
            Arc::new(UInt8Array::from(vec![1u8, 2, 255])) as ArrayRef,
        ),
        ("d", Arc::new(decimals) as ArrayRef),
        (
            "s",
            Arc::new(StringArray::from(vec![Some("1"), None, Some("x")])) as ArrayRef,
        ),
        (
            "b",
            Arc::new(BooleanArray::from(vec![true, false, true])) as ArrayRef,
        ),
    ])
    .unwrap();
    let mut w =
        parquet::arrow::ArrowWriter::try_new(File::create(&path).unwrap(), batch.schema(), None)
            .unwrap();
    w.write(&batch).unwrap();
    w.close().unwrap();
    let ranks = |column: &str| -> Vec<RankValue> {
        let mut sel = crate::common::selector(&["text"], None);
        sel.rank_field = Some(column.parse().unwrap());
        let f = crate::common::input(&path);
        let mut out = Vec::new();
        for block in read_chunk(
            &f,
            &crate::common::whole(0),
            &crate::common::opts(sel.clone(), Projection::FullRecords, 1 << 20),
        ) {
            block.unwrap().for_each_sample(&sel, |s| out.push(s.rank));
        }
        out
    };
    use RankValue::{Absent, NotANumber, Number};
    assert_eq!(ranks("i"), vec![Number(-7.0), Absent, Number(9.0)]);
    let f = ranks("f");
    assert_eq!(f[0], Number(0.5));
    assert!(matches!(f[1], Number(v) if v.is_nan()));
    assert_eq!(f[2], Absent);
    assert_eq!(ranks("u"), vec![Number(1.0), Number(2.0), Number(255.0)]);
    assert_eq!(ranks("d"), vec![Number(12.34), Absent, Number(-0.05)]);
    assert_eq!(
        ranks("s"),
        vec![NotANumber("a string"), Absent, NotANumber("a string")]
    );
    assert_eq!(ranks("b"), vec![NotANumber("a boolean"); 3]);
    assert_eq!(ranks("missing"), vec![Absent; 3]);
}
