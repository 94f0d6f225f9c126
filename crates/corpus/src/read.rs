//! Streaming a chunk of an input file as [`Block`]s: picks the format's reader for a file
//! ([`read_chunk`], [`reread_chunk`], [`ChunkReader`]) and its sample walker for a block
//! ([`Block::for_each_sample`]). The types they share live in `block`.

use crate::arrow_table::ArrowSource;
use crate::block::{Block, BlockData, FieldsSeen, Projection, ReadOptions, Sample};
use crate::chunk::Chunk;
use crate::error::{ReadError, Unreadable};
use crate::format::{Format, InputFile};
use crate::jsonl::{self, JsonlSource};
use crate::members::ResumePoint;
use crate::parquet_picked::PickedRowsSource;
use crate::parquet_read::{self, ParquetSource};
use crate::picked::{PickedLines, PickedSource, RecordPlace, RecordSpan};
use crate::select::TextSelector;

impl Block {
    /// Calls `f` for every sample slot of every record, in record order then field order.
    /// Blank JSONL lines (empty / whitespace only) yield no sample. For each other record:
    /// Join -> exactly one Sample (field 0); Expand -> one Sample per selector field. A block
    /// read by the places of some records yields only theirs ([`Block::records_read`]).
    /// Text is borrowed from the block when possible (no per-sample allocation on the hot path).
    pub fn for_each_sample<F: FnMut(Sample<'_>)>(&self, selector: &TextSelector, mut f: F) {
        self.samples(selector, None, &mut f)
    }

    /// The samples of [`Block::for_each_sample`], noting the fields seen when `seen` is given.
    fn samples<F: FnMut(Sample<'_>)>(
        &self,
        selector: &TextSelector,
        seen: Option<&mut FieldsSeen>,
        f: &mut F,
    ) {
        match &self.data {
            BlockData::Jsonl {
                bytes,
                starts,
                picked: Some(p),
                ..
            } => jsonl::line_samples(bytes, starts, p.records.iter().copied(), selector, seen, f),
            BlockData::Jsonl { bytes, starts, .. } => {
                jsonl::line_samples(bytes, starts, 0..starts.len(), selector, seen, f)
            }
            BlockData::Parquet {
                batch,
                picked: Some(p),
                ..
            } => parquet_read::batch_samples(batch, selector, seen, &mut |mut s: Sample<'_>| {
                // The batch holds the rows read only: its row `i` is record `records[i]`.
                s.record = p.records[s.record];
                f(s)
            }),
            BlockData::Parquet { batch, .. } | BlockData::Arrow { batch, .. } => {
                parquet_read::batch_samples(batch, selector, seen, f)
            }
        }
    }

    /// [`Block::for_each_sample`] for some of the block's records only (`records`: indices within
    /// the block, ascending): a JSONL block parses only their lines, so reading back a few
    /// records of a large chunk costs little more than its bytes.
    pub fn for_each_sample_of<F: FnMut(Sample<'_>)>(
        &self,
        selector: &TextSelector,
        records: &[usize],
        mut f: F,
    ) {
        match &self.data {
            BlockData::Jsonl { bytes, starts, .. } => jsonl::line_samples(
                bytes,
                starts,
                records.iter().copied(),
                selector,
                None,
                &mut f,
            ),
            BlockData::Parquet {
                batch,
                picked: Some(p),
                ..
            } => parquet_read::batch_samples(batch, selector, None, &mut |mut s: Sample<'_>| {
                s.record = p.records[s.record];
                if records.binary_search(&s.record).is_ok() {
                    f(s)
                }
            }),
            BlockData::Parquet { batch, .. } | BlockData::Arrow { batch, .. } => {
                parquet_read::batch_samples(batch, selector, None, &mut |s: Sample<'_>| {
                    if records.binary_search(&s.record).is_ok() {
                        f(s)
                    }
                })
            }
        }
    }

    /// [`Block::for_each_sample`], noting in `seen` which selected fields the block's records
    /// have (see [`FieldsSeen`]). Once every field has been seen this costs one comparison per
    /// record.
    pub fn for_each_sample_noting<F: FnMut(Sample<'_>)>(
        &self,
        selector: &TextSelector,
        seen: &mut FieldsSeen,
        mut f: F,
    ) {
        self.samples(selector, Some(seen), &mut f)
    }
}

/// Reads the rows `picks` (chunk-local indices, ascending, below the chunk's row count) of
/// `chunk`, a chunk of the Parquet `file` that an earlier read went through without losing a
/// row, as blocks that together hold every record of the chunk in order, as
/// [`crate::read_chunk`] would: the picked rows are read (their selected text columns only, as
/// a [`Projection::TextOnly`] read) and yield their samples; the others are passed over, unread
/// ([`crate::Block::records_read`]). Each block reports the bytes the Parquet reader took from
/// the file for it ([`crate::Block::bytes_read`]: the footer and offset index with the first
/// block, then the dictionary and data pages decoded, compressed as stored). Such blocks cannot
/// be written.
///
/// A read that fails (the file changed, a request failed) ends with an error losing the chunk's
/// rows from the first one not yet in a block.
pub fn read_rows(
    file: &InputFile,
    chunk: &Chunk,
    opts: &ReadOptions,
    picks: Vec<u64>,
) -> ChunkReader {
    match PickedRowsSource::open(file, chunk, opts, picks) {
        Ok(s) => ChunkReader::picked_rows(s, chunk),
        Err(e) => ChunkReader::failed(e, chunk),
    }
}

/// Streams one chunk as Blocks. Every Err says which records it cost
/// ([`ReadError::unreadable`]); the records already yielded stand, and reading goes on where it
/// can:
/// - JSONL (unreadable file, truncated or corrupt gz/zst stream): the iterator ends; the lines
///   after the break cannot be counted;
/// - Parquet: a row group that cannot be read to its end loses its unread rows (their count is
///   known from the footer) and reading goes on with the next row group; with an unreadable
///   footer or schema the whole chunk is lost.
///
/// Block record numbers follow the file: after a loss the next block starts past the lost
/// records. Memory stays bounded (no whole-file reads): about two blocks for JSONL, one row
/// group's column chunks for Parquet.
pub fn read_chunk(file: &InputFile, chunk: &Chunk, opts: &ReadOptions) -> ChunkReader {
    reread_chunk(file, chunk, opts, &[])
}

/// [`read_chunk`] for a chunk an earlier read already went through (stage 2 after stage 1),
/// given the losses that read met: a Parquet row group stops where the earlier read lost its
/// rows (reporting the same loss), so both reads deliver the same records even where a corrupt
/// page would fail at another row for another batch size. A [`Projection::FullRecords`] read
/// whose row group fails where the earlier (text-only) read did not replays the text-only read
/// for those rows as [`Block::texts_only`] blocks. JSONL streams end at the same byte in every
/// read, so `earlier` does not apply to them.
pub fn reread_chunk(
    file: &InputFile,
    chunk: &Chunk,
    opts: &ReadOptions,
    earlier: &[Unreadable],
) -> ChunkReader {
    let inner = match file.format {
        Format::Jsonl => match JsonlSource::open(file, chunk, opts.block_bytes) {
            Ok(s) => Inner::Jsonl(Box::new(s)),
            Err(e) => Inner::Failed(Some(e)),
        },
        Format::Parquet => match ParquetSource::open(file, chunk, opts, earlier) {
            Ok(s) => Inner::Parquet(Box::new(s)),
            Err(e) => Inner::Failed(Some(e)),
        },
        Format::Arrow => match ArrowSource::open(file, opts) {
            Ok(s) => Inner::Arrow(Box::new(s)),
            Err(e) => Inner::Failed(Some(e)),
        },
    };
    ChunkReader {
        inner,
        file: chunk.file,
        chunk_seq: chunk.seq,
        lines: None,
    }
}

/// Reads the records `picks` (ascending, within `span`) of `chunk`, a part of the JSONL `file`
/// that an earlier read went through, as blocks that together hold every record of the chunk in
/// order, as [`crate::read_chunk`] would: the records of `picks` are read and yield their
/// samples; the others are passed over, unread (their lines are empty, and
/// [`crate::Block::records_read`] lists the records read). Of an uncompressed file only the
/// picked records' bytes are read, with the short gaps between them (so a few reads cover many
/// records); a compressed file (read whole by the earlier read, which noted where its members
/// start: `resumes`) is decompressed from the start of the member holding a picked record, as
/// far as the records picked. Each block reports the file's bytes read
/// ([`crate::Block::bytes_read`]).
///
/// A picked record that does not end a line where the earlier read found its end (the file
/// changed) ends the read with an error (kind `changed`) losing the chunk's remaining records.
pub fn read_records(
    file: &InputFile,
    chunk: &Chunk,
    span: RecordSpan,
    resumes: Vec<ResumePoint>,
    picks: Vec<RecordPlace>,
    block_bytes: usize,
) -> ChunkReader {
    ChunkReader::picked(
        PickedSource::open(file, span, resumes, picks, block_bytes),
        chunk,
    )
}

/// Reads `chunk`, a part of the JSONL `file` that an earlier read went through, whole,
/// as [`crate::reread_chunk`] does (every record's line is in its block, so a writer can copy
/// it), but its blocks yield the samples of the records `picks` (ascending) only: the others are
/// passed over unparsed ([`crate::Block::records_read`]). Each picked record must lie where the
/// earlier read found it (its offset and length), or the read ends with an error (kind
/// `changed`) losing the chunk's remaining records.
pub fn read_records_whole(
    file: &InputFile,
    chunk: &Chunk,
    opts: &ReadOptions,
    earlier: &[Unreadable],
    picks: Vec<RecordPlace>,
) -> ChunkReader {
    if file.format != Format::Jsonl {
        return read_records(
            file,
            chunk,
            RecordSpan {
                records: 0,
                start: 0,
                end: 0,
            },
            Vec::new(),
            picks,
            opts.block_bytes,
        );
    }
    reread_chunk(file, chunk, opts, earlier).picking(PickedLines::new(file.path.clone(), picks))
}

/// The fields the first records of `files` have, as paths a selector can name (top-level
/// fields, and the fields of objects or structs one level down), sorted: for a message about a
/// field no record has. Looks at up to `max_records` JSON records and at the schema of each
/// Parquet file met before; files that cannot be read are passed over.
pub fn record_fields(files: &[InputFile], max_records: usize) -> Vec<String> {
    let mut names = std::collections::BTreeSet::new();
    let mut looked = 0usize;
    let chunk = Chunk {
        file: 0,
        seq: 0,
        range: crate::chunk::ChunkRange::Whole,
    };
    for file in files {
        if looked >= max_records {
            break;
        }
        match file.format {
            Format::Arrow => {
                names.extend(crate::arrow_table::field_names(file));
                looked += 1;
            }
            Format::Parquet => {
                let Ok((_, meta)) = parquet_read::load(file) else {
                    continue;
                };
                for field in meta.schema().fields() {
                    names.insert(field.name().clone());
                    if let arrow_schema::DataType::Struct(children) = field.data_type() {
                        for c in children {
                            names.insert(format!("{}.{}", field.name(), c.name()));
                        }
                    }
                }
                looked += 1;
            }
            Format::Jsonl => {
                let opts = ReadOptions {
                    selector: TextSelector::single(crate::select::FieldPath::top("text")),
                    projection: Projection::TextOnly,
                    block_bytes: 1 << 20,
                };
                // The first block is plenty.
                let Some(Ok(block)) = read_chunk(file, &chunk, &opts).next() else {
                    continue;
                };
                for i in 0..block.num_records() {
                    if looked >= max_records {
                        break;
                    }
                    let line = block.jsonl_line(i).unwrap_or_default();
                    let Ok(serde_json::Value::Object(map)) =
                        serde_json::from_slice::<serde_json::Value>(line)
                    else {
                        continue;
                    };
                    looked += 1;
                    for (key, value) in &map {
                        names.insert(key.clone());
                        if let serde_json::Value::Object(inner) = value {
                            for sub in inner.keys() {
                                names.insert(format!("{key}.{sub}"));
                            }
                        }
                    }
                }
            }
        }
    }
    names.into_iter().collect()
}

/// Iterator over the [`Block`]s of one chunk; see [`read_chunk`]. Send.
pub struct ChunkReader {
    inner: Inner,
    file: usize,
    chunk_seq: usize,
    /// For a chunk read whole of which only some records are to be parsed
    /// ([`crate::read_records_whole`]): those records, marked block by block.
    lines: Option<Box<PickedLines>>,
}

impl ChunkReader {
    /// The reader of `chunk` by the places of some of its records ([`crate::read_records`]).
    pub(crate) fn picked(source: PickedSource, chunk: &Chunk) -> ChunkReader {
        ChunkReader {
            inner: Inner::Picked(Box::new(source)),
            file: chunk.file,
            chunk_seq: chunk.seq,
            lines: None,
        }
    }

    /// The reader of `chunk` by choosing some of its rows ([`crate::read_rows`]).
    pub(crate) fn picked_rows(source: PickedRowsSource, chunk: &Chunk) -> ChunkReader {
        ChunkReader {
            inner: Inner::PickedRows(Box::new(source)),
            file: chunk.file,
            chunk_seq: chunk.seq,
            lines: None,
        }
    }

    /// A reader of `chunk` that yields `error` alone.
    pub(crate) fn failed(error: ReadError, chunk: &Chunk) -> ChunkReader {
        ChunkReader {
            inner: Inner::Failed(Some(error)),
            file: chunk.file,
            chunk_seq: chunk.seq,
            lines: None,
        }
    }

    /// This reader (a whole read of an uncompressed JSONL chunk), its blocks yielding the
    /// samples of the records `lines` picks only ([`crate::read_records_whole`]).
    pub(crate) fn picking(mut self, lines: PickedLines) -> ChunkReader {
        self.lines = Some(Box::new(lines));
        self
    }
}

impl std::fmt::Debug for ChunkReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChunkReader")
            .field("file", &self.file)
            .field("chunk_seq", &self.chunk_seq)
            .finish_non_exhaustive()
    }
}

enum Inner {
    Jsonl(Box<JsonlSource>),
    Picked(Box<PickedSource>),
    PickedRows(Box<PickedRowsSource>),
    Parquet(Box<ParquetSource>),
    Arrow(Box<ArrowSource>),
    Failed(Option<ReadError>),
}

impl Iterator for ChunkReader {
    type Item = Result<Block, ReadError>;

    fn next(&mut self) -> Option<Self::Item> {
        let next = match &mut self.inner {
            Inner::Jsonl(s) => s.next_block(),
            Inner::Picked(s) => s.next_block(),
            Inner::PickedRows(s) => s.next_block(),
            Inner::Parquet(s) => s.next_block(),
            Inner::Arrow(s) => s.next_block(),
            Inner::Failed(e) => return e.take().map(Err),
        };
        match next {
            Some(Ok((first_record, data, disk_bytes))) => {
                let mut block = Block {
                    file: self.file,
                    chunk_seq: self.chunk_seq,
                    first_record,
                    data,
                    disk_bytes,
                };
                if let Some(lines) = &mut self.lines
                    && let Err(e) = lines.mark(&mut block)
                {
                    // The file changed since its records' places were noted: nothing after
                    // this can be trusted to be the records stage 1 read.
                    self.inner = Inner::Failed(None);
                    return Some(Err(e));
                }
                Some(Ok(block))
            }
            // A source that cannot go on after an error ends by itself.
            Some(Err(e)) => Some(Err(e)),
            None => {
                self.inner = Inner::Failed(None);
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::block::SampleText;
    use crate::select::{FieldPath, FieldsMode};

    /// A block of the JSONL lines in `bytes`.
    fn jsonl_block(bytes: &[u8]) -> Block {
        let mut starts = vec![0];
        for (i, b) in bytes.iter().enumerate() {
            if *b == b'\n' && i + 1 < bytes.len() {
                starts.push(i + 1);
            }
        }
        Block {
            file: 0,
            chunk_seq: 0,
            first_record: 0,
            data: BlockData::Jsonl {
                bytes: bytes.to_vec().into(),
                starts,
                offset: None,
                resumes: Vec::new(),
                picked: None,
            },
            disk_bytes: bytes.len() as u64,
        }
    }

    fn collect(bytes: &[u8], sel: &TextSelector) -> Vec<(usize, u32, String, Option<String>)> {
        let block = jsonl_block(bytes);
        let mut out = Vec::new();
        block.for_each_sample(sel, |s| {
            let t = match s.text {
                SampleText::Text(t) => format!("T:{t}"),
                SampleText::Skipped(r) => format!("S:{}", r.kind()),
            };
            out.push((s.record, s.field, t, s.id.map(|c| c.into_owned())));
        });
        out
    }

    fn sel(fields: &[&str], mode: FieldsMode, id: Option<&str>) -> TextSelector {
        TextSelector {
            fields: fields
                .iter()
                .map(|f| f.parse::<FieldPath>().unwrap())
                .collect(),
            mode,
            id_field: id.map(|i| i.parse().unwrap()),
            rank_field: None,
        }
    }

    #[test]
    fn join_rules() {
        let data = concat!(
            "{\"a\":\"x\",\"b\":\"y\",\"id\":7.50}\n",
            "{\"a\":null,\"b\":\"y\",\"id\":\"s\"}\n",
            "{\"c\":1}\n",
            "{\"a\":null,\"b\":3}\n",
            "{\"b\":3,\"a\":null}\n",
            "{\"b\":null}\n",
            "   \n",
            "\n",
            "{bad\n",
            "{\"a\":\"\\u00e9\"}"
        );
        let s = sel(&["a", "b"], FieldsMode::default(), Some("id"));
        let got = collect(data.as_bytes(), &s);
        let want: Vec<(usize, u32, String, Option<String>)> = vec![
            (0, 0, "T:x\ny".into(), Some("7.50".into())),
            (1, 0, "T:y".into(), Some("s".into())),
            (2, 0, "S:missing_field".into(), None),
            (3, 0, "S:null_field".into(), None),
            (4, 0, "S:null_field".into(), None),
            (5, 0, "S:null_field".into(), None),
            (8, 0, "S:malformed_json".into(), None),
            (9, 0, "T:é".into(), None),
        ];
        assert_eq!(got, want);
    }

    /// Some records of a block read alone are those records read with all the others, for every
    /// choice of records: blank, malformed, CRLF-ended, non-UTF-8 and unterminated lines included.
    #[test]
    fn some_records_read_alone_are_as_read_with_the_rest() {
        let mut data = concat!(
            "{\"a\":\"x\",\"b\":\"y\",\"id\":7}\n",
            "   \n",
            "{bad\n",
            "{\"a\":\"z\",\"b\":1,\"id\":\"k\"}\r\n",
            "{\"a\":null}\n",
        )
        .as_bytes()
        .to_vec();
        data.extend_from_slice(b"{\"a\":\"\xff\"}\n{\"b\":\"last\"}");
        let records = 7;
        for mode in [FieldsMode::Expand, FieldsMode::default()] {
            let s = sel(&["a", "b"], mode, Some("id"));
            let block = jsonl_block(&data);
            let all = collect(&data, &s);
            for pick in 0u32..1 << records {
                let chosen: Vec<usize> = (0..records).filter(|r| pick >> r & 1 == 1).collect();
                let mut got = Vec::new();
                block.for_each_sample_of(&s, &chosen, |x| {
                    let t = match x.text {
                        SampleText::Text(t) => format!("T:{t}"),
                        SampleText::Skipped(r) => format!("S:{}", r.kind()),
                    };
                    got.push((x.record, x.field, t, x.id.map(|c| c.into_owned())));
                });
                let want: Vec<_> = all
                    .iter()
                    .filter(|r| chosen.contains(&r.0))
                    .cloned()
                    .collect();
                assert_eq!(got, want, "records {chosen:?}");
            }
        }
    }

    #[test]
    fn expand_and_invalid_utf8() {
        let data = b"{\"a\":\"x\",\"b\":{}}\n{\"a\":\"\xff\"}\n";
        let s = sel(&["a", "b"], FieldsMode::Expand, None);
        let got = collect(data, &s);
        assert_eq!(
            got,
            vec![
                (0, 0, "T:x".into(), None),
                (0, 1, "S:not_a_string".into(), None),
                (1, 0, "S:invalid_utf8".into(), None),
                (1, 1, "S:invalid_utf8".into(), None),
            ]
        );
    }

    #[test]
    fn rank_field_values_are_numbers_or_say_what_they_are() {
        use crate::RankValue;
        let data = concat!(
            "{\"t\":\"a\",\"m\":{\"q\":0.25}}\n",
            "{\"t\":\"b\",\"m\":{\"q\":-3e2}}\n",
            "{\"t\":\"c\",\"m\":{\"q\":null}}\n",
            "{\"t\":\"d\",\"m\":{}}\n",
            "{\"t\":\"e\",\"m\":null}\n",
            "{\"t\":\"f\",\"m\":{\"q\":\"0.5\"}}\n",
            "{\"t\":\"g\",\"m\":{\"q\":true}}\n",
            "{\"t\":\"h\",\"m\":{\"q\":[1]}}\n",
            "{\"t\":\"i\",\"m\":{\"q\":{\"v\":1}}}\n",
            "{\"m\":{\"q\":7},\"t\":\"j\",\"id\":\"x\"}\n",
        );
        let mut s = sel(&["t"], FieldsMode::default(), Some("id"));
        s.rank_field = Some("m.q".parse().unwrap());
        let block = jsonl_block(data.as_bytes());
        let mut got = Vec::new();
        block.for_each_sample(&s, |sample| {
            got.push((sample.rank, sample.id.map(|i| i.into_owned())))
        });
        assert_eq!(
            got,
            vec![
                (RankValue::Number(0.25), None),
                (RankValue::Number(-300.0), None),
                (RankValue::Absent, None),
                (RankValue::Absent, None),
                (RankValue::Absent, None),
                (RankValue::NotANumber("a string"), None),
                (RankValue::NotANumber("a boolean"), None),
                (RankValue::NotANumber("an array"), None),
                (RankValue::NotANumber("an object"), None),
                (RankValue::Number(7.0), Some("x".into())),
            ]
        );
        // Without a rank field, nothing is read.
        s.rank_field = None;
        block.for_each_sample(&s, |sample| assert_eq!(sample.rank, RankValue::Absent));
    }
}
