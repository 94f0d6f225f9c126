//! Reading chosen rows of a Parquet chunk ([`read_rows`]): stage 2 reads only the rows it has to
//! decide, given their indices in the chunk. A row group holding none of them is not read at
//! all; in a group holding some, the rows are chosen with a row selection, so where the file
//! has a page index (its offset index) only the pages holding them are read and decoded, and
//! only the selected text columns' pages: the rows' other columns are nothing a run without a
//! filtered dataset needs. Without a page index every page of the group's text columns is read,
//! and only the chosen rows are kept.

use std::fs::File;
use std::io::Read;
use std::ops::Range;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use arrow_array::RecordBatch;
use bytes::Bytes;
use parquet::arrow::ProjectionMask;
use parquet::arrow::arrow_reader::{
    ArrowReaderMetadata, ParquetRecordBatchReader, ParquetRecordBatchReaderBuilder, RowSelection,
    RowSelectionPolicy, RowSelector,
};
use parquet::file::metadata::{PageIndexPolicy, ParquetMetaData, ParquetMetaDataReader};
use parquet::file::reader::{ChunkReader, Length};

use neardup_storage::ObjectRanges;

use crate::block::{BlockData, DiskShare, PickedRows, ReadOptions};
use crate::chunk::Chunk;
use crate::error::{ReadError, ReadErrorKind};
use crate::format::{Format, InputFile};
use crate::parquet_read::{
    arrow_metadata, chunk_file_share, chunk_row_groups, footer_error, object_io_error,
    selected_leaves, text_bytes,
};
use crate::select::TextSelector;

/// Batch size bounds, as a whole read's (`parquet_read`).
const MIN_BATCH_ROWS: usize = 64;
const MAX_BATCH_ROWS: usize = 65536;

/// A reader's bytes, counted as the Parquet decoder takes them.
struct Counted<R> {
    inner: R,
    taken: Arc<AtomicU64>,
}

impl<R: Length> Length for Counted<R> {
    fn len(&self) -> u64 {
        self.inner.len()
    }
}

/// A sequential read of [`Counted`] bytes.
struct CountedRead<T> {
    inner: T,
    taken: Arc<AtomicU64>,
}

impl<T: Read> Read for CountedRead<T> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.taken.fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }
}

impl<R: ChunkReader> ChunkReader for Counted<R> {
    type T = CountedRead<R::T>;

    fn get_read(&self, start: u64) -> parquet::errors::Result<Self::T> {
        Ok(CountedRead {
            inner: self.inner.get_read(start)?,
            taken: self.taken.clone(),
        })
    }

    fn get_bytes(&self, start: u64, length: usize) -> parquet::errors::Result<Bytes> {
        let b = self.inner.get_bytes(start, length)?;
        self.taken.fetch_add(b.len() as u64, Ordering::Relaxed);
        Ok(b)
    }
}

/// Where the bytes come from.
enum Source {
    File(Counted<File>),
    Object(Counted<ObjectRanges>),
}

/// One row group of the chunk.
struct Group {
    index: usize,
    /// Chunk-local index of its first row.
    first: u64,
    rows: u64,
    /// Compressed bytes of the chunk's groups before this one, and its own.
    disk_before: u64,
    disk: u64,
}

pub(crate) struct PickedRowsSource {
    path: PathBuf,
    source: Source,
    taken: Arc<AtomicU64>,
    /// What the bytes taken stood at when the last block was handed out.
    counted: u64,
    meta: ArrowReaderMetadata,
    mask: ProjectionMask,
    leaves: Vec<usize>,
    batch_rows: usize,
    groups: Vec<Group>,
    /// The chunk's rows.
    rows: u64,
    picks: Vec<u64>,
    /// The first pick not decoded yet.
    next_pick: usize,
    /// The picks the current group's reader yields that it has not yielded yet, in order.
    group_picks: Vec<u64>,
    /// How many of `group_picks` were yielded.
    group_done: usize,
    reader: Option<ParquetRecordBatchReader>,
    /// The current group (an index into `groups`).
    group: usize,
    /// The chunk-local index of the next block's first record.
    record: u64,
    disk: DiskShare,
    /// An error that ends the read, to hand out.
    failed: Option<ReadError>,
    /// An empty batch of the projected columns, for a block that reads no row.
    empty: RecordBatch,
    selector: TextSelector,
}

impl PickedRowsSource {
    pub(crate) fn open(
        file: &InputFile,
        chunk: &Chunk,
        opts: &ReadOptions,
        picks: Vec<u64>,
    ) -> Result<PickedRowsSource, ReadError> {
        let path = &file.path;
        let lost_all = |e: ReadError| e.losing(0, None, None, None);
        if file.format != Format::Parquet {
            return Err(lost_all(ReadError::new(
                path,
                ReadErrorKind::InvalidChunk,
                None,
                "only a Parquet file can be read by choosing its rows",
            )));
        }
        let taken = Arc::new(AtomicU64::new(0));
        let source = match file.object_url() {
            Some(url) => ObjectRanges::open(&url, file.size)
                .map(|inner| {
                    Source::Object(Counted {
                        inner,
                        taken: taken.clone(),
                    })
                })
                .map_err(|e| ReadError::from_io(path, None, object_io_error(e))),
            None => File::open(path)
                .map(|inner| {
                    Source::File(Counted {
                        inner,
                        taken: taken.clone(),
                    })
                })
                .map_err(|e| ReadError::from_io(path, None, e)),
        }
        .map_err(lost_all)?;
        // The offset index, where the file has one, says where each page lies and which rows
        // it holds: the reader skips the pages holding no chosen row without reading them.
        let footer =
            ParquetMetaDataReader::new().with_offset_index_policy(PageIndexPolicy::Optional);
        let parsed = match &source {
            Source::File(f) => footer.parse_and_finish(f),
            Source::Object(o) => footer.parse_and_finish(o),
        };
        let pmeta: ParquetMetaData = parsed
            .map_err(|e| footer_error(file, e))
            .map_err(lost_all)?;
        let n = pmeta.num_row_groups();
        let indices = chunk_row_groups(file, chunk, n).map_err(lost_all)?;
        let group_disk = |g: usize| pmeta.row_group(g).compressed_size().max(0) as u64;
        let mut groups = Vec::with_capacity(indices.len());
        let (mut first, mut disk_before) = (0u64, 0u64);
        for &g in &indices {
            let rows = pmeta.row_group(g).num_rows().max(0) as u64;
            groups.push(Group {
                index: g,
                first,
                rows,
                disk_before,
                disk: group_disk(g),
            });
            first += rows;
            disk_before += group_disk(g);
        }
        // As a whole read hands out its chunk's share of the file.
        let share = chunk_file_share(&pmeta, &indices, file.size);
        let rows = first;
        let meta = arrow_metadata(pmeta, file).map_err(|e| e.losing(0, Some(rows), None, None))?;
        let schema = meta.metadata().file_metadata().schema_descr();
        let leaves = selected_leaves(schema, &opts.selector);
        let mask = ProjectionMask::leaves(schema, leaves.iter().copied());
        let mut bytes = 0u64;
        for g in &groups {
            let rg = meta.metadata().row_group(g.index);
            bytes += leaves
                .iter()
                .map(|&c| rg.column(c).uncompressed_size().max(0) as u64)
                .sum::<u64>();
        }
        let avg_row = (bytes / rows.max(1)).max(1);
        let batch_rows =
            ((opts.block_bytes as u64 / avg_row) as usize).clamp(MIN_BATCH_ROWS, MAX_BATCH_ROWS);
        let projected = parquet::arrow::parquet_to_arrow_schema_by_columns(
            schema,
            mask.clone(),
            meta.metadata().file_metadata().key_value_metadata(),
        )
        .map_err(|e| {
            ReadError::new(path, ReadErrorKind::SchemaMismatch, None, e.to_string()).losing(
                0,
                Some(rows),
                None,
                None,
            )
        })?;
        let mut failed = None;
        if picks.windows(2).any(|w| w[0] >= w[1]) || picks.last().is_some_and(|&p| p >= rows) {
            failed = Some(
                ReadError::new(
                    path,
                    ReadErrorKind::InvalidChunk,
                    None,
                    format!("the rows to read are not ascending rows of a chunk of {rows} rows"),
                )
                .losing(0, Some(rows), None, None),
            );
        }
        Ok(PickedRowsSource {
            path: path.clone(),
            source,
            taken,
            counted: 0,
            meta,
            mask,
            leaves,
            batch_rows,
            groups,
            rows,
            picks,
            next_pick: 0,
            group_picks: Vec::new(),
            group_done: 0,
            reader: None,
            group: 0,
            record: 0,
            disk: DiskShare::new(share),
            failed,
            empty: RecordBatch::new_empty(Arc::new(projected)),
            selector: opts.selector.clone(),
        })
    }

    /// The byte ranges of the current group's selected columns that hold the rows of
    /// `group_picks`: with an offset index, the dictionary page and the data pages holding a
    /// chosen row; without, the whole column chunks.
    fn ranges(&self) -> Vec<Range<u64>> {
        let g = &self.groups[self.group];
        let meta = self.meta.metadata();
        let rg = meta.row_group(g.index);
        let picks = &self.group_picks;
        let mut ranges = Vec::new();
        for &c in &self.leaves {
            let cc = rg.column(c);
            let (start, len) = cc.byte_range();
            let pages = meta
                .page_index()
                .and_then(|i| i.page_locations(g.index, c))
                .filter(|p| !p.is_empty());
            let Some(pages) = pages else {
                ranges.push(start..start + len);
                continue;
            };
            let first_page = pages[0].offset.max(0) as u64;
            if first_page > start {
                // The dictionary page, before the first data page.
                ranges.push(start..first_page);
            }
            for (i, p) in pages.iter().enumerate() {
                let from = g.first + p.first_row_index.max(0) as u64;
                let to = pages.get(i + 1).map_or(g.first + g.rows, |n| {
                    g.first + n.first_row_index.max(0) as u64
                });
                let at = picks.partition_point(|&r| r < from);
                if picks.get(at).is_some_and(|&r| r < to) {
                    let o = p.offset.max(0) as u64;
                    ranges.push(o..o + p.compressed_page_size.max(0) as u64);
                }
            }
        }
        ranges
    }

    /// A reader of the current group's rows in `group_picks`.
    fn open_group(&mut self) -> Result<ParquetRecordBatchReader, ReadError> {
        let g = &self.groups[self.group];
        let mut selectors = Vec::new();
        let mut at = g.first;
        for &r in &self.group_picks {
            if r > at {
                selectors.push(RowSelector::skip((r - at) as usize));
            }
            selectors.push(RowSelector::select(1));
            at = r + 1;
        }
        if at < g.first + g.rows {
            selectors.push(RowSelector::skip((g.first + g.rows - at) as usize));
        }
        let selection = RowSelection::from(selectors);
        let location = format!("row group {}", g.index);
        let built = match &self.source {
            Source::File(f) => {
                let inner = f
                    .inner
                    .try_clone()
                    .map_err(|e| ReadError::from_io(&self.path, Some(location.clone()), e))?;
                self.build(
                    Counted {
                        inner,
                        taken: self.taken.clone(),
                    },
                    selection,
                )
            }
            Source::Object(o) => {
                let ranges = self.ranges();
                o.inner.prefetch(&ranges).map_err(|e| {
                    ReadError::from_io(&self.path, Some(location.clone()), object_io_error(e))
                })?;
                self.build(
                    Counted {
                        inner: o.inner.clone(),
                        taken: self.taken.clone(),
                    },
                    selection,
                )
            }
        };
        built.map_err(|e| {
            ReadError::new(
                &self.path,
                ReadErrorKind::CorruptParquet,
                Some(location),
                format!("corrupt column data ({e})"),
            )
        })
    }

    fn build<R: ChunkReader + 'static>(
        &self,
        reader: R,
        selection: RowSelection,
    ) -> parquet::errors::Result<ParquetRecordBatchReader> {
        ParquetRecordBatchReaderBuilder::new_with_metadata(reader, self.meta.clone())
            .with_row_groups(vec![self.groups[self.group].index])
            .with_projection(self.mask.clone())
            .with_batch_size(self.batch_rows)
            // Runs of rows skipped, not a mask over every row: skipped pages stay unread.
            .with_row_selection_policy(RowSelectionPolicy::Selectors)
            .with_row_selection(selection)
            .build()
    }

    /// The compressed bytes of the chunk's groups up to record `end` (exclusive), by rows.
    fn disk_upto(&self, end: u64) -> u64 {
        let i = self.groups.partition_point(|g| g.first + g.rows < end);
        self.groups.get(i).map_or(0, |g| {
            g.disk_before + g.disk * (end - g.first).min(g.rows) / g.rows.max(1)
        })
    }

    /// Ends the read: the chunk's rows from the next block's first are lost.
    fn fail(&mut self, e: ReadError) -> ReadError {
        let group = self
            .groups
            .iter()
            .find(|g| g.first + g.rows > self.record)
            .map(|g| g.index);
        let e = e.losing(self.record, Some(self.rows - self.record), group, None);
        self.record = self.rows;
        self.next_pick = self.picks.len();
        self.reader = None;
        e
    }

    pub(crate) fn next_block(&mut self) -> Option<Result<(u64, BlockData, u64), ReadError>> {
        if let Some(e) = self.failed.take() {
            return Some(Err(self.fail(e)));
        }
        if self.record >= self.rows {
            return None;
        }
        loop {
            if let Some(r) = &mut self.reader {
                match r.next() {
                    Some(Ok(batch)) if batch.num_rows() > 0 => {
                        let n = batch.num_rows();
                        if n > self.group_picks.len() - self.group_done {
                            let e = ReadError::new(
                                &self.path,
                                ReadErrorKind::Changed,
                                Some(format!("row group {}", self.groups[self.group].index)),
                                "more rows than chosen: the file changed since its rows were \
                                 counted",
                            );
                            return Some(Err(self.fail(e)));
                        }
                        let from = self.group_done;
                        self.group_done += n;
                        let rows = std::mem::take(&mut self.group_picks);
                        let block = self.block(batch, &rows[from..from + n]);
                        self.group_picks = rows;
                        return Some(Ok(block));
                    }
                    Some(Ok(_)) => continue,
                    Some(Err(e)) => {
                        let location = Some(format!("row group {}", self.groups[self.group].index));
                        let failure = match &self.source {
                            Source::Object(o) => o.inner.take_failure(),
                            Source::File(_) => None,
                        };
                        let e = match failure {
                            Some(f) => ReadError::from_io(&self.path, location, object_io_error(f)),
                            None => ReadError::new(
                                &self.path,
                                ReadErrorKind::CorruptParquet,
                                location,
                                format!("corrupt column data ({e})"),
                            ),
                        };
                        return Some(Err(self.fail(e)));
                    }
                    None => {
                        self.reader = None;
                        if self.group_done < self.group_picks.len() {
                            let e = ReadError::new(
                                &self.path,
                                ReadErrorKind::Changed,
                                Some(format!("row group {}", self.groups[self.group].index)),
                                "fewer rows than chosen: the file changed since its rows were \
                                 counted",
                            );
                            return Some(Err(self.fail(e)));
                        }
                        continue;
                    }
                }
            }
            let Some(&pick) = self.picks.get(self.next_pick) else {
                // No row left to read: one block passes over the rest of the chunk.
                let empty = self.empty.clone();
                return Some(Ok(self.block(empty, &[])));
            };
            while self.groups[self.group].first + self.groups[self.group].rows <= pick {
                self.group += 1;
            }
            let end = self.groups[self.group].first + self.groups[self.group].rows;
            let upto = self.picks[self.next_pick..].partition_point(|&r| r < end);
            self.group_picks.clear();
            self.group_picks
                .extend_from_slice(&self.picks[self.next_pick..self.next_pick + upto]);
            self.group_done = 0;
            self.next_pick += upto;
            match self.open_group() {
                Ok(r) => self.reader = Some(r),
                Err(e) => return Some(Err(self.fail(e))),
            }
        }
    }

    /// A block of `batch`, the rows `rows` (chunk-local), spanning the records from the next
    /// one to its last row, or to the chunk's end after the last pick.
    fn block(&mut self, batch: RecordBatch, rows: &[u64]) -> (u64, BlockData, u64) {
        let last = self.next_pick == self.picks.len() && self.group_done == self.group_picks.len();
        let end = match rows.last() {
            Some(&r) if !last => r + 1,
            _ => self.rows,
        };
        let first = self.record;
        let taken = self.taken.load(Ordering::Relaxed);
        let read = taken - self.counted;
        self.counted = taken;
        let records = rows.iter().map(|&r| (r - first) as usize).collect();
        let text_bytes = text_bytes(&batch, &self.selector);
        let disk_bytes = self.disk.next(self.disk_upto(end), end == self.rows);
        self.record = end;
        (
            first,
            BlockData::Parquet {
                batch,
                text_bytes,
                full: false,
                texts_only: false,
                picked: Some(Box::new(PickedRows {
                    records,
                    spanned: (end - first) as usize,
                    read,
                })),
            },
            disk_bytes,
        )
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_array::{ArrayRef, Int64Array, RecordBatch, StringArray};
    use parquet::arrow::ArrowWriter;
    use parquet::file::properties::WriterProperties;

    use super::*;
    use crate::block::Projection;
    use crate::block::test_support::samples;
    use crate::chunk::ChunkRange;
    use crate::read::{read_chunk, read_rows};
    use crate::select::{FieldPath, TextSelector};

    /// A file of `groups` row groups of 200 rows, pages of 20 rows, an offset index or not,
    /// dictionary pages or not: a text column (some nulls) and a number column.
    fn write(path: &std::path::Path, groups: usize, page_index: bool, dictionary: bool) {
        let rows = groups * 200;
        let texts: Vec<Option<String>> = (0..rows)
            .map(|i| (i % 17 != 5).then(|| format!("row {i} {}", "word ".repeat(i % 40))))
            .collect();
        let batch = RecordBatch::try_from_iter([
            ("text", Arc::new(StringArray::from(texts)) as ArrayRef),
            (
                "n",
                Arc::new(Int64Array::from_iter_values(0..rows as i64)) as ArrayRef,
            ),
        ])
        .unwrap();
        let props = WriterProperties::builder()
            .set_max_row_group_row_count(Some(200))
            .set_data_page_row_count_limit(20)
            .set_write_batch_size(20)
            .set_offset_index_disabled(!page_index)
            .set_dictionary_enabled(dictionary)
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

    #[test]
    fn chosen_rows_read_as_a_whole_read_reads_them_and_the_rest_are_passed_over() {
        let tmp = tempfile::tempdir().unwrap();
        let sel = TextSelector::single(FieldPath::top("text"));
        let opts = ReadOptions {
            selector: sel.clone(),
            projection: Projection::TextOnly,
            block_bytes: 4 << 10,
        };
        for (page_index, dictionary) in [(true, false), (true, true), (false, true)] {
            let path = tmp
                .path()
                .join(format!("a-{page_index}-{dictionary}.parquet"));
            write(&path, 5, page_index, dictionary);
            let name = PathBuf::from("a.parquet");
            let file = InputFile::detect(&path, &name, None).unwrap();
            for range in [
                ChunkRange::Whole,
                ChunkRange::RowGroups { start: 1, end: 4 },
            ] {
                let chunk = Chunk {
                    file: 0,
                    seq: 0,
                    range: range.clone(),
                };
                let whole: Vec<_> = read_chunk(&file, &chunk, &opts)
                    .map(Result::unwrap)
                    .collect();
                let rows: u64 = whole.iter().map(|b| b.num_records() as u64).sum();
                let all = samples(&whole, &sel);
                let picks_of = |f: &dyn Fn(u64) -> bool| (0..rows).filter(|&r| f(r)).collect();
                let cases: Vec<(&str, Vec<u64>)> = vec![
                    ("none", Vec::new()),
                    ("every row", picks_of(&|_| true)),
                    ("first row", vec![0]),
                    ("last row", vec![rows - 1]),
                    (
                        "middle group",
                        picks_of(&|r| (200..400).contains(&r) && r % 7 == 3),
                    ),
                    ("sparse", picks_of(&|r| r % 97 == 13)),
                    (
                        "first and last groups",
                        picks_of(&|r| r < 30 || r + 5 >= rows),
                    ),
                ];
                for (what, picks) in cases {
                    let what = format!(
                        "{what}, page index {page_index}, dictionary {dictionary}, {range}"
                    );
                    let blocks: Vec<_> = read_rows(&file, &chunk, &opts, picks.clone())
                        .map(Result::unwrap)
                        .collect();
                    let mut next = 0;
                    for b in &blocks {
                        assert_eq!(b.first_record, next, "{what}");
                        next += b.num_records() as u64;
                    }
                    assert_eq!(next, rows, "{what}: every record in a block");
                    let want: Vec<_> = all
                        .iter()
                        .filter(|(r, _)| picks.binary_search(r).is_ok())
                        .cloned()
                        .collect();
                    assert_eq!(samples(&blocks, &sel), want, "{what}");
                    let read: u64 = blocks.iter().map(|b| b.bytes_read().unwrap()).sum();
                    let disk: u64 = blocks.iter().map(|b| b.disk_bytes()).sum();
                    let whole_disk: u64 = whole.iter().map(|b| b.disk_bytes()).sum();
                    assert_eq!(disk, whole_disk, "{what}: the chunk's share of the file");
                    assert!(read > 0 && read < file.size, "{what}: {read}");
                    if picks.is_empty() {
                        // The footer alone.
                        assert!(read < 4096, "{what}: {read}");
                    }
                    // Without dictionary pages (which hold every distinct text of a group),
                    // only the pages holding the rows are read.
                    if what.starts_with("sparse") && page_index && !dictionary {
                        assert!(read < file.size / 3, "{what}: {read} of {}", file.size);
                    }
                }
            }
        }
        // Rows that are not ascending rows of the chunk are refused.
        let path = tmp.path().join("a-true-false.parquet");
        let file = InputFile::detect(&path, &PathBuf::from("a.parquet"), None).unwrap();
        let chunk = Chunk {
            file: 0,
            seq: 0,
            range: ChunkRange::Whole,
        };
        for bad in [vec![3, 3], vec![5, 2], vec![1000]] {
            let got: Vec<_> = read_rows(&file, &chunk, &opts, bad).collect();
            let err = got.into_iter().find_map(Result::err).expect("an error");
            assert_eq!(err.kind(), ReadErrorKind::InvalidChunk);
        }
    }
}
