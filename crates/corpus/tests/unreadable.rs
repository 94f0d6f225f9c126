//! Reading past damage: a Parquet row group that cannot be read costs only its own unread rows,
//! every error says which records it cost, and a second read of a chunk (stage 2) delivers the
//! same records as the first (stage 1) whatever its batch size or projection.

use std::path::Path;
use std::sync::Arc;

use crate::common::*;
use arrow_array::{ArrayRef, Int64Array, RecordBatch, StringArray};
use neardup_corpus::{
    FieldsSeen, Projection, ReadOptions, SkipReason, TextSelector, Unreadable, read_chunk,
    record_fields, reread_chunk,
};
use parquet::arrow::ArrowWriter;
use parquet::file::metadata::ParquetMetaDataReader;
use parquet::file::properties::WriterProperties;

const GROUP_ROWS: usize = 400;
const PAGE_ROWS: usize = 100;

/// A Parquet file of `groups` row groups of 400 rows (`id`, `text`, `url`), pages of 100 rows,
/// uncompressed and without dictionaries so page headers sit where the offset index says.
fn write_parquet(path: &Path, groups: usize) {
    let n = groups * GROUP_ROWS;
    let ids: ArrayRef = Arc::new(Int64Array::from_iter_values(0..n as i64));
    let texts: ArrayRef = Arc::new(StringArray::from_iter_values(
        (0..n).map(|i| format!("text of row {i} with some words")),
    ));
    let urls: ArrayRef = Arc::new(StringArray::from_iter_values(
        (0..n).map(|i| format!("https://example.invalid/{i}")),
    ));
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

/// Overwrites the header of data page `page` of column `column` in row group `group`.
fn corrupt_page(path: &Path, group: usize, column: usize, page: usize) {
    let f = std::fs::File::open(path).unwrap();
    let meta = ParquetMetaDataReader::new()
        .with_page_index_policy(parquet::file::metadata::PageIndexPolicy::Required)
        .parse_and_finish(&f)
        .unwrap();
    let locations = meta
        .page_index_for_row_group(group)
        .page_locations(column)
        .expect("offset index written")
        .clone();
    assert!(locations.len() > page, "{} pages", locations.len());
    let at = locations[page].offset as usize;
    let mut bytes = std::fs::read(path).unwrap();
    bytes[at..at + 24].fill(0xff);
    std::fs::write(path, bytes).unwrap();
}

fn text_opts(projection: Projection, block_bytes: usize) -> ReadOptions {
    opts(selector(&["text"], Some("id")), projection, block_bytes)
}

/// Block record ranges, texts-only flags and losses of one read, in order.
#[derive(Debug, PartialEq)]
enum Item {
    Block {
        first: u64,
        records: usize,
        texts_only: bool,
    },
    Lost(Unreadable),
}

fn items(reader: neardup_corpus::ChunkReader) -> Vec<Item> {
    reader
        .map(|b| match b {
            Ok(b) => Item::Block {
                first: b.first_record,
                records: b.num_records(),
                texts_only: b.texts_only(),
            },
            Err(e) => Item::Lost(e.unreadable()),
        })
        .collect()
}

/// Chunk-local records delivered whole, and the losses.
fn delivered(items: &[Item]) -> (Vec<u64>, Vec<Unreadable>) {
    let mut records = Vec::new();
    let mut lost = Vec::new();
    for i in items {
        match i {
            Item::Block {
                first,
                records: n,
                texts_only: false,
            } => records.extend(*first..*first + *n as u64),
            Item::Block { .. } => {}
            Item::Lost(u) => lost.push(u.clone()),
        }
    }
    (records, lost)
}

#[test]
fn a_corrupt_row_group_costs_its_rows_and_reading_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("groups.parquet");
    write_parquet(&path, 5);
    // The text column's first page of row group 2: nothing of that group is readable.
    corrupt_page(&path, 2, 1, 0);
    let f = input(&path);
    let (got, records, errors) =
        read_all_errors(&f, &whole(0), &text_opts(Projection::TextOnly, 1 << 20), 0);
    assert_eq!(records, 4 * GROUP_ROWS as u64);
    assert_eq!(got.len(), 4 * GROUP_ROWS);
    assert_eq!(errors.len(), 1, "{errors:?}");
    let lost = errors[0].unreadable();
    assert_eq!(lost.first_record, 2 * GROUP_ROWS as u64);
    assert_eq!(lost.records, Some(GROUP_ROWS as u64));
    assert_eq!(lost.row_group, Some(2));
    assert_eq!(lost.kind.as_str(), "corrupt_parquet");
    assert!(lost.reason.starts_with("corrupt column data"), "{lost:?}");
    // Records keep their numbers in the file: the row after the loss is row 1200.
    let after = &got[2 * GROUP_ROWS];
    assert_eq!(after.record, 3 * GROUP_ROWS as u64);
    assert_eq!(after.id.as_deref(), Some("1200"));
}

#[test]
fn a_second_read_stops_where_the_first_lost_rows_whatever_its_batch_size() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mid.parquet");
    write_parquet(&path, 3);
    // The second page of row group 1's text column (rows 500..600): how much of the group a
    // read delivers depends on its batch size.
    corrupt_page(&path, 1, 1, 1);
    let f = input(&path);
    // 64-row batches deliver rows 400..464 before the failing batch; 512-row batches none.
    let small = items(read_chunk(
        &f,
        &whole(0),
        &text_opts(Projection::TextOnly, 64),
    ));
    let large = items(read_chunk(
        &f,
        &whole(0),
        &text_opts(Projection::TextOnly, 1 << 20),
    ));
    let (small_records, small_lost) = delivered(&small);
    let (large_records, _) = delivered(&large);
    assert_ne!(
        small_records, large_records,
        "the batch size must matter here"
    );
    assert_eq!(small_lost.len(), 1);
    let lost = &small_lost[0];
    assert_eq!(lost.row_group, Some(1));
    assert_eq!(
        lost.first_record + lost.records.unwrap(),
        2 * GROUP_ROWS as u64
    );
    assert!(lost.first_record > GROUP_ROWS as u64, "{lost:?}");

    // Stage 2 reads whole records in other batches, told where stage 1 lost rows: it delivers
    // exactly stage 1's records and reports the same loss.
    for block_bytes in [64, 1000, 1 << 20] {
        let again = items(reread_chunk(
            &f,
            &whole(0),
            &text_opts(Projection::FullRecords, block_bytes),
            &small_lost,
        ));
        let (records, lost) = delivered(&again);
        assert_eq!(records, small_records, "block bytes {block_bytes}");
        assert_eq!(lost, small_lost, "block bytes {block_bytes}");
    }
}

#[test]
fn whole_records_that_fail_in_another_column_come_as_texts_only() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("url.parquet");
    write_parquet(&path, 3);
    // The url column (not read for the text) of row group 1.
    corrupt_page(&path, 1, 2, 0);
    let f = input(&path);
    let text_read = items(read_chunk(
        &f,
        &whole(0),
        &text_opts(Projection::TextOnly, 1 << 20),
    ));
    let (text_records, text_lost) = delivered(&text_read);
    assert!(text_lost.is_empty(), "the text columns are intact");
    assert_eq!(text_records.len(), 3 * GROUP_ROWS);

    let full = items(reread_chunk(
        &f,
        &whole(0),
        &text_opts(Projection::FullRecords, 1 << 20),
        &text_lost,
    ));
    let (full_records, full_lost) = delivered(&full);
    assert_eq!(full_lost.len(), 1);
    assert_eq!(full_lost[0].row_group, Some(1));
    assert_eq!(full_lost[0].first_record, GROUP_ROWS as u64);
    assert_eq!(full_lost[0].records, Some(GROUP_ROWS as u64));
    assert_eq!(full_records.len(), 2 * GROUP_ROWS);
    // The lost group's records follow the loss as texts-only blocks, so the records (and texts)
    // of both reads line up.
    let replayed: Vec<u64> = full
        .iter()
        .filter_map(|i| match i {
            Item::Block {
                first,
                records,
                texts_only: true,
            } => Some(*first..*first + *records as u64),
            _ => None,
        })
        .flatten()
        .collect();
    assert_eq!(
        replayed,
        (GROUP_ROWS as u64..2 * GROUP_ROWS as u64).collect::<Vec<_>>()
    );
    let mut all: Vec<u64> = full_records.iter().copied().chain(replayed).collect();
    all.sort_unstable();
    assert_eq!(all, text_records);
    // A texts-only block cannot be written.
    let block = read_chunk(&f, &whole(0), &text_opts(Projection::FullRecords, 1 << 20))
        .filter_map(Result::ok)
        .find(|b| b.texts_only())
        .unwrap();
    let out = tempfile::tempdir().unwrap();
    let publication = neardup_corpus::Publication::begin(&neardup_corpus::PublishOptions {
        output: Some(neardup_corpus::OutputOptions {
            dir: out.path().join("o"),
            overwrite: false,
            max_output_bytes: None,
        }),
        outputs: vec![f.relative.clone()],
        ..Default::default()
    })
    .unwrap();
    let mut w = publication.dataset().unwrap().file_writer(&f).unwrap();
    let keep = vec![true; block.num_records()];
    assert_eq!(
        w.write_block(&block, 0, &keep).unwrap_err().kind(),
        "invalid_block"
    );
}

#[test]
fn an_unreadable_footer_loses_an_unknown_number_of_records() {
    let f = input(&data("bad").join("corrupt_footer.parquet"));
    let (_, records, errors) =
        read_all_errors(&f, &whole(0), &text_opts(Projection::TextOnly, 1 << 20), 0);
    assert_eq!(records, 0);
    let lost = errors[0].unreadable();
    assert_eq!((lost.first_record, lost.records), (0, None));
    assert!(lost.reason.starts_with("unreadable footer"), "{lost:?}");
}

#[test]
fn a_broken_stream_loses_the_records_from_the_first_one_not_delivered() {
    for name in [
        "truncated.jsonl.gz",
        "truncated.jsonl.zst",
        "not_gzip.jsonl.gz",
    ] {
        let f = input(&data("bad").join(name));
        let o = text_opts(Projection::TextOnly, 4096);
        let mut bytes = 0u64;
        let mut records = 0u64;
        let mut lost = Vec::new();
        for b in read_chunk(&f, &whole(0), &o) {
            match b {
                Ok(b) => {
                    records += b.num_records() as u64;
                    bytes += (0..b.num_records())
                        .map(|i| b.jsonl_line(i).unwrap().len() as u64)
                        .sum::<u64>();
                }
                Err(e) => lost.push(e.unreadable()),
            }
        }
        assert_eq!(lost.len(), 1, "{name}");
        let lost = &lost[0];
        assert_eq!(lost.first_record, records, "{name}");
        assert_eq!(
            lost.records, None,
            "{name}: the lines after the break cannot be counted"
        );
        assert_eq!(lost.byte_offset, Some(bytes), "{name}");
        assert!(!lost.reason.is_empty());
    }
}

#[test]
fn a_file_that_cannot_be_opened_loses_everything_uncounted() {
    let dir = tempfile::tempdir().unwrap();
    for name in ["gone.jsonl", "gone.jsonl.gz", "gone.parquet"] {
        let path = dir.path().join(name);
        std::fs::write(&path, b"{\"text\":\"x\"}\n").unwrap();
        let f = input(&path);
        std::fs::remove_file(&path).unwrap();
        let (_, records, errors) =
            read_all_errors(&f, &whole(0), &text_opts(Projection::TextOnly, 4096), 0);
        assert_eq!(records, 0);
        assert_eq!(errors.len(), 1, "{name}");
        assert_eq!(errors[0].kind().as_str(), "io", "{name}");
        let lost = errors[0].unreadable();
        assert_eq!((lost.first_record, lost.records), (0, None), "{name}");
    }
}

#[test]
fn fields_seen_tell_a_typo_from_a_missing_value() {
    let sel = |fields: &[&str], expand: bool| {
        let mut s = selector(fields, None);
        if expand {
            s.mode = neardup_corpus::FieldsMode::Expand;
        }
        s
    };
    let seen_in = |name: &str, s: &TextSelector| {
        let f = input(&data(name));
        let mut seen = FieldsSeen::new(s);
        for b in read_chunk(&f, &whole(0), &opts(s.clone(), Projection::TextOnly, 64)) {
            let Ok(b) = b else { continue };
            b.for_each_sample_noting(s, &mut seen, |_| {});
        }
        seen
    };
    // fields.jsonl: `text` is missing, null or a number in some records, present in others.
    let s = sel(&["text", "txt", "id"], false);
    let seen = seen_in("bad/fields.jsonl", &s);
    assert!(seen.examined());
    assert_eq!(seen.never_seen(), vec![1]);
    let s = sel(&["txt", "text"], true);
    assert_eq!(seen_in("bad/fields.jsonl", &s).never_seen(), vec![0]);
    // Parquet: a column absent from the schema.
    let s = sel(&["text", "body", "meta.body", "meta.nope"], false);
    assert_eq!(
        seen_in("corpus/sample.parquet", &s).never_seen(),
        vec![1, 3]
    );
    // Records that cannot be parsed say nothing about fields.
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("broken.jsonl");
    std::fs::write(&p, "{\"text\": \n[1]\n").unwrap();
    let f = input(&p);
    let s = sel(&["text"], false);
    let mut seen = FieldsSeen::new(&s);
    for b in read_chunk(&f, &whole(0), &opts(s.clone(), Projection::TextOnly, 64)) {
        b.unwrap().for_each_sample_noting(&s, &mut seen, |_| {});
    }
    assert!(!seen.examined());
    assert!(seen.never_seen().is_empty());
    // The fields the records do have, for the message.
    assert_eq!(
        record_fields(&[input(&data("bad/fields.jsonl"))], 100),
        vec!["id", "text", "text.a"]
    );
    assert_eq!(
        record_fields(&[input(&data("corpus/sample.parquet"))], 100),
        vec![
            "id",
            "meta",
            "meta.body",
            "meta.lang",
            "score",
            "text",
            "title",
            "view"
        ]
    );
}

#[test]
fn skip_reasons_read_as_sentences_naming_the_fields() {
    let one = selector(&["text"], None);
    let two = selector(&["title", "body"], None);
    let mut expand = two.clone();
    expand.mode = neardup_corpus::FieldsMode::Expand;
    let json = SkipReason::MalformedJson("expected `,` or `}` at column 40".into());
    assert_eq!(
        json.describe(&one, 0),
        "not valid JSON: expected `,` or `}` at column 40"
    );
    assert_eq!(
        SkipReason::MalformedJson("not a JSON object (starts with \"[\")".into()).describe(&one, 0),
        "not a JSON object (starts with \"[\")"
    );
    assert_eq!(SkipReason::InvalidUtf8.describe(&one, 0), "not valid UTF-8");
    assert_eq!(
        SkipReason::MissingField.describe(&one, 0),
        "no field `text`"
    );
    assert_eq!(
        SkipReason::MissingField.describe(&two, 0),
        "none of the fields `title`, `body`"
    );
    assert_eq!(
        SkipReason::MissingField.describe(&expand, 1),
        "no field `body`"
    );
    assert_eq!(SkipReason::NullField.describe(&one, 0), "`text` is null");
    assert_eq!(
        SkipReason::NotAString.describe(&expand, 0),
        "`title` is not a string"
    );
}
