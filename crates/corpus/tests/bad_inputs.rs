//! Every case of tests/data/bad gives its documented outcome, and the good records around it
//! are all read (see docs/formats.md, "Reading inputs: outcomes of bad input").

use crate::common::*;
use neardup_corpus::{ChunkRange, DiscoverOptions, Projection, discover, plan_chunks, read_chunk};

fn read_bad(name: &str) -> (Vec<Got>, u64, Option<neardup_corpus::ReadError>) {
    let f = input(&data("bad").join(name));
    read_all(
        &f,
        &whole(0),
        &opts(
            selector(&["text"], Some("id")),
            Projection::TextOnly,
            1 << 20,
        ),
        0,
    )
}

fn t(record: u64, text: &str, id: Option<&str>) -> Got {
    Got {
        record,
        field: 0,
        text: text.to_string(),
        id: id.map(str::to_string),
    }
}

#[test]
fn malformed_json_lines_are_typed_and_neighbours_read() {
    let (got, records, err) = read_bad("malformed.jsonl");
    assert!(err.is_none());
    assert_eq!(records, 7);
    let want = vec![
        t(0, "T:good 0", Some("0")),
        t(1, "S:malformed_json", None),
        t(2, "T:good 2", Some("2")),
        t(3, "S:malformed_json", None),
        t(4, "T:good 4", Some("4")),
        t(5, "S:malformed_json", None),
        t(6, "T:good 6", Some("6")),
    ];
    assert_eq!(got, want);
}

#[test]
fn malformed_detail_is_the_parser_message() {
    let f = input(&data("bad").join("malformed.jsonl"));
    let sel = selector(&["text"], None);
    let mut details = Vec::new();
    for b in read_chunk(
        &f,
        &whole(0),
        &opts(sel.clone(), Projection::TextOnly, 1 << 20),
    ) {
        b.unwrap().for_each_sample(&sel, |s| {
            if let neardup_corpus::SampleText::Skipped(neardup_corpus::SkipReason::MalformedJson(
                m,
            )) = s.text
            {
                details.push(m);
            }
        });
    }
    assert_eq!(details.len(), 3);
    assert!(
        details[0].contains("EOF while parsing a string"),
        "{details:?}"
    );
    assert!(details[1].contains("not a JSON object"), "{details:?}");
    assert!(details[2].contains("column"), "{details:?}");
}

#[test]
fn missing_null_and_non_string_fields() {
    let (got, records, err) = read_bad("fields.jsonl");
    assert!(err.is_none());
    assert_eq!(records, 8);
    let want = vec![
        t(0, "T:good 0", Some("0")),
        t(1, "S:missing_field", Some("1")),
        t(2, "T:good 2", Some("2")),
        t(3, "S:null_field", Some("3")),
        t(4, "T:good 4", Some("4")),
        t(5, "S:not_a_string", Some("5")),
        t(6, "S:not_a_string", Some("6")),
        t(7, "T:good 7", Some("7")),
    ];
    assert_eq!(got, want);
}

#[test]
fn invalid_utf8_line() {
    let (got, records, err) = read_bad("invalid_utf8.jsonl");
    assert!(err.is_none());
    assert_eq!(records, 3);
    assert_eq!(
        got,
        vec![
            t(0, "T:good 0", Some("0")),
            t(1, "S:invalid_utf8", None),
            t(2, "T:good 2", Some("2")),
        ]
    );
}

#[test]
fn empty_and_whitespace_texts_pass_through_blank_lines_do_not() {
    let (got, records, err) = read_bad("empty_text.jsonl");
    assert!(err.is_none());
    assert_eq!(records, 6, "blank lines still count as records");
    assert_eq!(
        got,
        vec![
            t(0, "T:good 0", Some("0")),
            t(1, "T:", Some("1")),
            t(2, "T:  \n\t ", Some("2")),
            t(5, "T:good 5", Some("5")),
        ]
    );
}

fn check_truncated(name: &str) {
    let (got, records, err) = read_bad(name);
    let err = err.expect("a truncated stream is an error");
    assert_eq!(err.kind().as_str(), "truncated", "{err}");
    assert!(err.to_string().contains(name), "{err}");
    assert!(
        err.to_string().contains(&format!("record {records}")),
        "{err}"
    );
    assert!(records > 50 && records < 1500, "{records}");
    // Every record before the cut is complete and in order.
    assert_eq!(got.len() as u64, records);
    for (i, g) in got.iter().enumerate() {
        assert_eq!(g.record, i as u64);
        assert_eq!(g.id.as_deref(), Some(i.to_string().as_str()));
        assert!(g.text.starts_with("T:truncated stream record"));
        assert!(g.text.ends_with(&format!("{} {i}", "x".repeat(200))));
    }
}

#[test]
fn truncated_gzip() {
    check_truncated("truncated.jsonl.gz");
}

#[test]
fn truncated_zstd() {
    check_truncated("truncated.jsonl.zst");
}

#[test]
fn not_gzip_is_corrupt() {
    let (got, records, err) = read_bad("not_gzip.jsonl.gz");
    assert!(got.is_empty());
    assert_eq!(records, 0);
    assert_eq!(err.unwrap().kind().as_str(), "corrupt");
}

#[test]
fn corrupt_parquet_footer() {
    let f = input(&data("bad").join("corrupt_footer.parquet"));
    // Planning does not fail: the file becomes one chunk and the error surfaces on read.
    let chunks = plan_chunks(std::slice::from_ref(&f), 1);
    assert_eq!(chunks.len(), 1);
    assert_eq!(chunks[0].range, ChunkRange::Whole);
    let (got, records, err) = read_bad("corrupt_footer.parquet");
    assert!(got.is_empty());
    assert_eq!(records, 0);
    let err = err.unwrap();
    assert_eq!(err.kind().as_str(), "corrupt_parquet");
    assert!(err.to_string().contains("footer"), "{err}");
}

#[test]
fn corrupt_parquet_page_loses_only_its_row_group() {
    let f = input(&data("bad").join("corrupt_page.parquet"));
    let o = opts(
        selector(&["text"], Some("id")),
        Projection::TextOnly,
        1 << 20,
    );
    // Whole-file read: row group 1 is lost, row groups 0 and 2 are read (rows keep their
    // numbers in the file).
    let (got, records, errors) = read_all_errors(&f, &whole(0), &o, 0);
    assert_eq!(records, 200);
    assert_eq!(got.len(), 200);
    assert_eq!(got[100].record, 200);
    assert_eq!(got[100].id.as_deref(), Some("200"));
    assert_eq!(errors.len(), 1);
    let err = &errors[0];
    assert_eq!(err.kind().as_str(), "corrupt_parquet");
    assert!(err.to_string().contains("row group 1"), "{err}");
    let lost = err.unreadable();
    assert_eq!(
        (lost.first_record, lost.records, lost.row_group),
        (100, Some(100), Some(1))
    );
    // Chunked by row group, the same.
    let chunks = plan_chunks(std::slice::from_ref(&f), 1);
    assert_eq!(chunks.len(), 3);
    let mut outcomes = Vec::new();
    for c in &chunks {
        let (got, records, err) = read_all(&f, c, &o, 0);
        outcomes.push((got.len(), records, err.map(|e| e.kind().as_str())));
    }
    assert_eq!(
        outcomes,
        vec![
            (100, 100, None),
            (0, 0, Some("corrupt_parquet")),
            (100, 100, None)
        ]
    );
}

#[test]
fn parquet_text_column_of_another_type() {
    let (a, _, err_a) = read_bad("schema_a.parquet");
    assert!(err_a.is_none());
    assert_eq!(a.len(), 3);
    assert_eq!(a[2], t(2, "T:schema a 2", Some("2")));
    let (b, records, err_b) = read_bad("schema_b.parquet");
    assert!(err_b.is_none());
    assert_eq!(records, 2);
    assert_eq!(
        b,
        vec![
            t(0, "S:not_a_string", Some("0")),
            t(1, "S:not_a_string", Some("1")),
        ]
    );
}

#[test]
fn missing_and_unreadable_paths() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("gone.jsonl");
    let d = discover(&[missing.to_str().unwrap()], &DiscoverOptions::default());
    assert!(d.files.is_empty());
    assert_eq!(d.problems.len(), 1);
    assert!(d.problems[0].message.contains("no such file"));

    // A file that vanished after discovery.
    let mut f = input(&data("bad").join("fields.jsonl"));
    f.path = missing;
    let (_, _, err) = read_all(
        &f,
        &whole(0),
        &opts(selector(&["text"], None), Projection::TextOnly, 1024),
        0,
    );
    assert_eq!(err.unwrap().kind().as_str(), "io");

    // chmod 000: only meaningful when not running with privileges that ignore it (root).
    let locked = dir.path().join("locked.jsonl");
    std::fs::write(&locked, b"{\"text\":\"x\"}\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o000)).unwrap();
    let privileged = std::fs::File::open(&locked).is_ok();
    let f = input(&locked);
    let (got, _, err) = read_all(
        &f,
        &whole(0),
        &opts(selector(&["text"], None), Projection::TextOnly, 1024),
        0,
    );
    if privileged {
        assert_eq!(got.len(), 1, "root reads it anyway");
    } else {
        assert!(got.is_empty());
        let err = err.unwrap();
        assert_eq!(err.kind().as_str(), "io");
        assert!(err.to_string().contains("locked.jsonl"));
    }
    std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o644)).unwrap();
}

#[test]
fn bad_directory_discovery_reports_every_file() {
    let d = discover(
        &[data("bad").to_str().unwrap()],
        &DiscoverOptions::default(),
    );
    let names: Vec<_> = d
        .files
        .iter()
        .map(|f| f.relative.to_string_lossy().into_owned())
        .collect();
    let mut sorted = names.clone();
    sorted.sort();
    assert_eq!(names, sorted);
    assert!(names.contains(&"truncated.jsonl.zst".to_string()));
    // No file of the fixture directory is silently dropped.
    let on_disk = std::fs::read_dir(data("bad")).unwrap().count();
    assert_eq!(d.files.len() + d.problems.len(), on_disk);
}
