//! Discovery order and problems; chunked reads equal whole-file reads, address for address.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::common::*;
use arrow_array::{ArrayRef, Int64Array, RecordBatch, StringArray};
use neardup_corpus::{
    Chunk, ChunkRange, Compression, DiscoverOptions, FieldsMode, Format, InputFile, Projection,
    discover, plan_chunks,
};
use parquet::arrow::ArrowWriter;
use parquet::file::properties::WriterProperties;
use proptest::prelude::*;

fn touch(p: &Path, content: &[u8]) {
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, content).unwrap();
}

#[test]
fn discovery_is_deterministic_and_reports_problems() {
    let tmp = tempfile::tempdir().unwrap();
    let r = tmp.path();
    touch(&r.join("d/b.jsonl"), b"{}\n");
    touch(&r.join("d/a/z.jsonl.gz"), b"");
    touch(&r.join("d/a/y.parquet"), b"");
    touch(&r.join("d/readme.txt"), b"");
    touch(&r.join("g/x1.jsonl"), b"");
    touch(&r.join("g/x2.jsonl.zst"), b"");
    touch(&r.join("g/sub/x3.jsonl"), b"");
    touch(&r.join("plain.data"), b"");
    let s = |p: &Path| p.to_str().unwrap().to_string();
    let args = vec![
        s(&r.join("d")),
        format!("{}/g/x*.jsonl*", r.display()),
        format!("{}/g/**/*.jsonl", r.display()),
        s(&r.join("d/b.jsonl")), // duplicate: listed once
        s(&r.join("nope.jsonl")),
        format!("{}/g/*.parquet", r.display()),
        s(&r.join("plain.data")),
    ];
    let d = discover(&args, &DiscoverOptions::default());
    let got: Vec<(String, Format, Compression)> = d
        .files
        .iter()
        .map(|f| {
            (
                f.relative.to_string_lossy().into_owned(),
                f.format,
                f.compression,
            )
        })
        .collect();
    assert_eq!(
        got,
        vec![
            ("a/y.parquet".into(), Format::Parquet, Compression::None),
            ("a/z.jsonl.gz".into(), Format::Jsonl, Compression::Gzip),
            ("b.jsonl".into(), Format::Jsonl, Compression::None),
            ("x1.jsonl".into(), Format::Jsonl, Compression::None),
            ("x2.jsonl.zst".into(), Format::Jsonl, Compression::Zstd),
            ("sub/x3.jsonl".into(), Format::Jsonl, Compression::None),
        ]
    );
    assert_eq!(d.files[2].size, 3);
    let problems: Vec<(String, bool)> = d
        .problems
        .iter()
        .map(|p| (p.input.clone(), p.message.is_empty()))
        .collect();
    assert_eq!(problems.len(), 4, "{:?}", d.problems);
    assert!(d.problems[0].input.ends_with("readme.txt"));
    assert!(d.problems[0].message.contains("unknown extension"));
    assert!(d.problems[1].message.contains("no such file"));
    assert!(d.problems[2].message.contains("matched no file"));
    assert!(d.problems[3].input.ends_with("plain.data"));

    let forced = discover(
        &[s(&r.join("plain.data"))],
        &DiscoverOptions {
            format: Some(Format::Jsonl),
        },
    );
    assert_eq!(forced.files.len(), 1);
    assert_eq!(forced.files[0].format, Format::Jsonl);
    assert_eq!(forced.files[0].relative, PathBuf::from("plain.data"));
}

/// Generates a JSONL file with varied line lengths, blank lines, bad lines and a long line.
fn big_jsonl(path: &Path, n: usize) {
    let mut s = String::new();
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    for i in 0..n {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let len = (x % 300) as usize;
        match i % 97 {
            5 => s.push('\n'),
            9 => s.push_str("{broken\n"),
            13 => s.push_str(&format!(
                "{{\"id\":{i},\"text\":\"{}\"}}\n",
                "long ".repeat(5000)
            )),
            _ => s.push_str(&format!(
                "{{\"id\":{i},\"text\":\"rec {i} {}\\n{}\",\"title\":\"t{i}\"}}\n",
                "w".repeat(len),
                "é".repeat(len % 7)
            )),
        }
    }
    s.push_str("{\"id\":-1,\"text\":\"no newline at end\"}");
    std::fs::write(path, s).unwrap();
}

fn chunked_equals_whole(
    file: &InputFile,
    sel: &neardup_corpus::TextSelector,
    target: u64,
    block: usize,
) {
    let o = opts(sel.clone(), Projection::TextOnly, block);
    let (want, want_records, err) = read_all(file, &whole(0), &o, 0);
    assert!(err.is_none());
    let chunks = plan_chunks(std::slice::from_ref(file), target);
    assert!(
        chunks
            .iter()
            .enumerate()
            .all(|(i, c)| c.seq == i && c.file == 0)
    );
    // Read every chunk on its own thread, then convert chunk-local records to file-level ones by
    // adding the record counts of the earlier chunks.
    let results: Vec<(Vec<Got>, u64)> = std::thread::scope(|s| {
        let handles: Vec<_> = chunks
            .iter()
            .map(|c| {
                let o = o.clone();
                s.spawn(move || {
                    let (g, n, e) = read_all(file, c, &o, 0);
                    assert!(e.is_none());
                    (g, n)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut got = Vec::new();
    let mut base = 0;
    for (samples, n) in results {
        got.extend(samples.into_iter().map(|mut g| {
            g.record += base;
            g
        }));
        base += n;
    }
    assert_eq!(base, want_records, "target {target}");
    assert_eq!(got, want, "target {target}");
}

#[test]
fn chunked_jsonl_matches_whole_file() {
    let tmp = tempfile::tempdir().unwrap();
    let p = tmp.path().join("big.jsonl");
    big_jsonl(&p, 20_000);
    let f = input(&p);
    assert!(f.size > 3_000_000);
    let chunks = plan_chunks(std::slice::from_ref(&f), 500_000);
    assert!(chunks.len() >= 6, "{}", chunks.len());
    // Chunks start on line starts and tile the file.
    let bytes = std::fs::read(&p).unwrap();
    let mut prev = 0;
    for c in &chunks {
        let ChunkRange::Bytes { start, end } = c.range else {
            panic!("{c:?}")
        };
        assert_eq!(start, prev);
        assert!(start == 0 || bytes[start as usize - 1] == b'\n');
        prev = end;
    }
    assert_eq!(prev, f.size);
    let mut sel = selector(&["text", "title"], Some("id"));
    chunked_equals_whole(&f, &sel, 500_000, 64 << 10);
    sel.mode = FieldsMode::Expand;
    chunked_equals_whole(&f, &sel, 1_000_000, 4096);
    // Compressed files are never split.
    let mut gz = f.clone();
    gz.compression = Compression::Gzip;
    assert_eq!(plan_chunks(&[gz], 1).len(), 1);
}

#[test]
fn arbitrary_byte_ranges_partition_the_lines() {
    // Chunks are public and serialisable: ranges not cut at newlines must still give every line
    // to exactly one chunk (the one its first byte is in).
    let tmp = tempfile::tempdir().unwrap();
    let p = tmp.path().join("r.jsonl");
    big_jsonl(&p, 600);
    let f = input(&p);
    let o = opts(selector(&["text"], Some("id")), Projection::TextOnly, 777);
    let (want, _, _) = read_all(&f, &whole(0), &o, 0);
    let bytes = std::fs::read(&p).unwrap();
    proptest!(ProptestConfig::with_cases(24), |(mut cuts in proptest::collection::vec(1..f.size, 1..6))| {
        cuts.push(0);
        cuts.push(f.size);
        cuts.sort();
        cuts.dedup();
        let mut got = Vec::new();
        let mut base = 0;
        for (seq, w) in cuts.windows(2).enumerate() {
            let c = Chunk { file: 0, seq, range: ChunkRange::Bytes { start: w[0], end: w[1] } };
            let (g, n, e) = read_all(&f, &c, &o, base);
            prop_assert!(e.is_none());
            // Lines owned = line starts in [start, end).
            let owned = (w[0]..w[1]).filter(|&i| i == 0 || bytes[i as usize - 1] == b'\n').count() as u64;
            prop_assert_eq!(n, owned);
            got.extend(g);
            base += n;
        }
        prop_assert_eq!(&got, &want);
    });
}

#[test]
fn ranges_ending_inside_long_lines_read_each_line_once() {
    // Lines far longer than a block and than the reader's look-ahead past a chunk's end, cut by
    // ranges anywhere, read block after block through recycled buffers: every line goes to
    // exactly one chunk, whole, and no stale byte of an earlier, longer block leaks into a later
    // one.
    let tmp = tempfile::tempdir().unwrap();
    let p = tmp.path().join("long.jsonl");
    let mut body = String::new();
    for i in 0..40u32 {
        let len = [10usize, 300_000, 70_000, 5, 140_000][i as usize % 5] + i as usize;
        let letter = char::from(b'a' + (i % 26) as u8);
        body.push_str(&format!(
            "{{\"id\":{i},\"text\":\"{}\"}}\n",
            letter.to_string().repeat(len)
        ));
    }
    std::fs::write(&p, &body).unwrap();
    let f = input(&p);
    let bytes = body.as_bytes();
    proptest!(ProptestConfig::with_cases(24), |(
        mut cuts in proptest::collection::vec(1..f.size, 1..8),
        block in prop_oneof![Just(1usize), 1usize..5_000, 60_000usize..400_000],
    )| {
        let o = opts(selector(&["text"], Some("id")), Projection::TextOnly, block);
        let (want, want_records, _) = read_all(&f, &whole(0), &o, 0);
        prop_assert_eq!(want_records, 40);
        cuts.push(0);
        cuts.push(f.size);
        cuts.sort();
        cuts.dedup();
        let mut got = Vec::new();
        let mut base = 0;
        for (seq, w) in cuts.windows(2).enumerate() {
            let c = Chunk { file: 0, seq, range: ChunkRange::Bytes { start: w[0], end: w[1] } };
            let (g, n, e) = read_all(&f, &c, &o, base);
            prop_assert!(e.is_none());
            let owned = (w[0]..w[1]).filter(|&i| i == 0 || bytes[i as usize - 1] == b'\n').count() as u64;
            prop_assert_eq!(n, owned);
            got.extend(g);
            base += n;
        }
        prop_assert_eq!(&got, &want);
    });
}

#[test]
fn chunked_parquet_matches_whole_file() {
    let tmp = tempfile::tempdir().unwrap();
    let p = tmp.path().join("big.parquet");
    let props = WriterProperties::builder()
        .set_max_row_group_row_count(Some(1000))
        .set_compression(parquet::basic::Compression::ZSTD(Default::default()))
        .build();
    let schema = Arc::new(arrow_schema::Schema::new(vec![
        arrow_schema::Field::new("id", arrow_schema::DataType::Int64, false),
        arrow_schema::Field::new("text", arrow_schema::DataType::Utf8, true),
    ]));
    let mut w = ArrowWriter::try_new(
        std::fs::File::create(&p).unwrap(),
        schema.clone(),
        Some(props),
    )
    .unwrap();
    for b in 0..10i64 {
        let ids: Vec<i64> = (b * 1000..(b + 1) * 1000).collect();
        let texts: Vec<Option<String>> = ids
            .iter()
            .map(|i| (i % 13 != 0).then(|| format!("text {i} {}", "x".repeat((*i % 200) as usize))))
            .collect();
        let cols: Vec<ArrayRef> = vec![
            Arc::new(Int64Array::from(ids)),
            Arc::new(StringArray::from(texts)),
        ];
        w.write(&RecordBatch::try_new(schema.clone(), cols).unwrap())
            .unwrap();
    }
    w.close().unwrap();
    let f = input(&p);
    let chunks = plan_chunks(std::slice::from_ref(&f), f.size / 4);
    assert!(chunks.len() >= 3, "{chunks:?}");
    assert!(matches!(
        chunks[0].range,
        ChunkRange::RowGroups { start: 0, .. }
    ));
    let sel = selector(&["text"], Some("id"));
    chunked_equals_whole(&f, &sel, f.size / 4, 100_000);
    chunked_equals_whole(&f, &sel, 1, 1000);
    let (all, n, _) = read_all(&f, &whole(0), &opts(sel, Projection::TextOnly, 1 << 20), 0);
    assert_eq!(n, 10_000);
    assert_eq!(all[13].text, "S:null_field");
    assert_eq!(all[14].id.as_deref(), Some("14"));
}

#[test]
fn parquet_string_types_and_struct_children() {
    let f = input(&data("corpus").join("sample.parquet"));
    let sel = neardup_corpus::TextSelector {
        fields: ["text", "meta.body", "title", "view", "score", "absent"]
            .iter()
            .map(|s| s.parse().unwrap())
            .collect(),
        mode: FieldsMode::Expand,
        id_field: Some("id".parse().unwrap()),
        rank_field: None,
    };
    for projection in [Projection::TextOnly, Projection::FullRecords] {
        let (got, n, err) = read_all(&f, &whole(0), &opts(sel.clone(), projection, 1 << 12), 0);
        assert!(err.is_none());
        assert_eq!(n, 200);
        assert_eq!(got.len(), 1200);
        let row = |r: usize| {
            got[r * 6..r * 6 + 6]
                .iter()
                .map(|g| g.text.as_str())
                .collect::<Vec<_>>()
        };
        assert_eq!(
            row(0),
            [
                "T:parquet text 0 é",
                "T:nested 0",
                "T:title 0",
                "T:view 0",
                "S:not_a_string",
                "S:missing_field"
            ]
        );
        assert_eq!(row(7)[0], "S:null_field");
        assert_eq!(row(3)[1], "S:missing_field", "null parent struct");
        assert_eq!(got[6 * 9].id.as_deref(), Some("9"));
    }
    // Join mode over the same columns.
    let join = selector(&["text", "title"], None);
    let (got, _, _) = read_all(&f, &whole(0), &opts(join, Projection::TextOnly, 1 << 20), 0);
    assert_eq!(got[1].text, "T:parquet text 1 é\ntitle 1");
    assert_eq!(got[7].text, "T:title 7");
}
