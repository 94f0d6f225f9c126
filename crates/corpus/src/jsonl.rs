//! Reading JSONL chunks (plain byte ranges, or whole gzip / zstd streams) in blocks of whole lines.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use neardup_storage::ObjectReader;

use crate::block::{
    BlockData, DiskShare, FieldValue, FieldsSeen, RankValue, Sample, SkipReason, buffers, emit_bad,
    emit_record, reuse_vec,
};
use crate::chunk::{Chunk, ChunkRange};
use crate::error::{ReadError, ReadErrorKind};
use crate::format::{Compression, InputFile};
use crate::json::{self, DecodedStrings, Slot};
use crate::members::{MemberDecoder, ResumePoint};
use crate::select::TextSelector;

/// How far past a chunk's end a read goes to find the end of the chunk's last line (and how much
/// a chunk starting mid-line reads to find its first line start). Reading a whole block there
/// instead read most chunks twice over: the block past the end was read, copied and thrown away.
const LOOKAHEAD: usize = 64 << 10;

/// The reader of the decompressed stream of `raw` (a file, or an object's stream, from its
/// start when compressed), the file's bytes counted into `read`; a compressed stream's members
/// noted into `points` as they start.
fn decoder(
    raw: Box<dyn Read + Send>,
    compression: Compression,
    read: Option<&Arc<AtomicU64>>,
    points: Option<&Arc<Mutex<Vec<ResumePoint>>>>,
) -> Box<dyn Read + Send> {
    match (compression, read) {
        (Compression::None, _) | (_, None) => raw,
        (compression, Some(read)) => Box::new(MemberDecoder::new(
            raw,
            compression,
            ResumePoint {
                compressed: 0,
                decompressed: 0,
            },
            read.clone(),
            1 << 20,
            points.cloned(),
        )),
    }
}

pub(crate) struct JsonlSource {
    path: PathBuf,
    reader: Box<dyn Read + Send>,
    /// The file's bytes the decoder has read, for a compressed file; `None` when the blocks'
    /// bytes are the file's.
    compressed_read: Option<Arc<AtomicU64>>,
    /// Where the members of a compressed file start, as the decoder meets them, until a block
    /// takes them.
    points: Option<Arc<Mutex<Vec<ResumePoint>>>>,
    /// The file's bytes the blocks delivered so far stand for, from the chunk's start.
    disk_read: u64,
    disk: DiskShare,
    /// `buf[..filled]` are bytes read but not yet handed out (always starting at a line start once
    /// `skip_partial` is false); `buf[filled..]` are initialised but stale (see [`buffers::take`]).
    buf: Vec<u8>,
    filled: usize,
    /// Decompressed offset of `buf[0]`.
    pos: u64,
    /// Chunk-local index of the next line.
    record: u64,
    /// Lines starting at or after this decompressed offset belong to the next chunk.
    end: u64,
    /// The chunk starts mid-line: drop bytes through the first newline first.
    skip_partial: bool,
    eof: bool,
    /// An error (and the decompressed offset it happened at) to report once the complete lines
    /// read before it have been handed out.
    pending: Option<(std::io::Error, u64)>,
    done: bool,
    block_bytes: usize,
}

impl Drop for JsonlSource {
    fn drop(&mut self) {
        buffers::give(std::mem::take(&mut self.buf));
    }
}

impl JsonlSource {
    pub(crate) fn open(
        file: &InputFile,
        chunk: &Chunk,
        block_bytes: usize,
    ) -> Result<JsonlSource, ReadError> {
        let (start, end) = match chunk.range {
            ChunkRange::Whole => (0, u64::MAX),
            ChunkRange::Bytes { start, end } if file.compression == Compression::None => {
                (start, end)
            }
            ref other => {
                return Err(ReadError::new(
                    &file.path,
                    ReadErrorKind::InvalidChunk,
                    None,
                    format!("a chunk of {other} (end exclusive) does not apply to this JSONL file"),
                )
                .losing(0, None, None, None));
            }
        };
        // Nothing of the chunk is read: how many lines it holds cannot be known.
        let io_err = |e: std::io::Error| {
            ReadError::from_io(&file.path, None, e).losing(0, None, None, Some(start))
        };
        // Whether `start` is a line start depends on the byte before it.
        let skip_partial = start > 0;
        let pos = start.saturating_sub(1);
        let compressed_read =
            (file.compression != Compression::None).then(|| Arc::new(AtomicU64::new(0)));
        let points = (file.compression != Compression::None).then(Arc::default);
        let raw: Box<dyn Read + Send> = match file.object_url() {
            Some(url) => {
                let hint_end = end.saturating_add(LOOKAHEAD as u64);
                Box::new(
                    ObjectReader::open(&url, file.size, pos, hint_end)
                        .map_err(|e| io_err(crate::parquet_read::object_io_error(e)))?,
                )
            }
            None => {
                let mut f = File::open(&file.path).map_err(&io_err)?;
                if pos > 0 {
                    f.seek(SeekFrom::Start(pos)).map_err(&io_err)?;
                }
                Box::new(f)
            }
        };
        let reader = decoder(
            raw,
            file.compression,
            compressed_read.as_ref(),
            points.as_ref(),
        );
        // Chunks of a file cut at line starts cover it whole; a whole-file chunk is all of it.
        let share = end.min(file.size).saturating_sub(start);
        Ok(JsonlSource {
            path: file.path.clone(),
            reader,
            compressed_read,
            points,
            disk_read: 0,
            disk: DiskShare::new(share),
            buf: buffers::take(),
            filled: 0,
            pos,
            record: 0,
            end,
            skip_partial,
            eof: false,
            pending: None,
            done: false,
            block_bytes: block_bytes.max(1),
        })
    }

    /// Reads until `buf` holds at least `want` bytes, EOF, or an error (stored in `pending`).
    fn fill(&mut self, want: usize) {
        while !self.eof && self.pending.is_none() && self.filled < want {
            let len = self.filled;
            let upto = len + (want - len).max(LOOKAHEAD);
            if self.buf.len() < upto {
                // Only bytes never initialised are zeroed; a recycled buffer's are read over.
                self.buf.resize(upto, 0);
            }
            match self.reader.read(&mut self.buf[len..upto]) {
                Ok(0) => self.eof = true,
                Ok(n) => self.filled += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => self.pending = Some((e, self.pos + len as u64)),
            }
        }
    }

    /// How many bytes a read should hold to cover the rest of the chunk and a little more.
    fn chunk_rest(&self) -> usize {
        usize::try_from(self.end.saturating_sub(self.pos))
            .unwrap_or(usize::MAX)
            .saturating_add(LOOKAHEAD)
    }

    /// The pending error, located at the first record that was not delivered (which starts at
    /// `pos`: every line before it was delivered whole). The lines after a broken stream cannot
    /// be counted, so the loss has no record count.
    fn take_error(&mut self) -> Option<Result<(u64, BlockData, u64), ReadError>> {
        let (e, at) = self.pending.take()?;
        let location = format!(
            "chunk-local record {} (decompressed byte {})",
            self.record, self.pos
        );
        let kind = ReadErrorKind::of_io(&e);
        let message = match kind {
            ReadErrorKind::Truncated => {
                format!("the compressed stream ends early, at decompressed byte {at} ({e})")
            }
            ReadErrorKind::Corrupt => {
                format!("invalid compressed data at decompressed byte {at} ({e})")
            }
            _ => format!("reading failed at byte {at} ({e})"),
        };
        Some(Err(ReadError::new(
            &self.path,
            kind,
            Some(location),
            message,
        )
        .caused_by(e)
        .losing(self.record, None, None, Some(self.pos))))
    }

    pub(crate) fn next_block(&mut self) -> Option<Result<(u64, BlockData, u64), ReadError>> {
        if self.done {
            return self.take_error();
        }
        while self.skip_partial {
            self.fill(LOOKAHEAD);
            match memchr::memchr(b'\n', &self.buf[..self.filled]) {
                Some(i) => {
                    self.buf.copy_within(i + 1..self.filled, 0);
                    self.filled -= i + 1;
                    self.pos += i as u64 + 1;
                    self.skip_partial = false;
                }
                None => {
                    self.pos += self.filled as u64;
                    self.filled = 0;
                    if self.eof || self.pending.is_some() {
                        self.done = true;
                        return self.take_error();
                    }
                }
            }
        }
        if self.pos >= self.end {
            self.done = true;
            return None;
        }
        // Grow until the block holds at least one complete line (or everything up to EOF/error).
        let mut want = self.block_bytes.min(self.chunk_rest());
        let cut = loop {
            self.fill(want);
            let filled = self.filled;
            let limit = (self.end - self.pos).min(filled as u64) as usize;
            let stop = self.eof || self.pending.is_some();
            if limit < filled || (stop && limit == filled) {
                // The chunk's last line is the one containing byte `limit - 1`.
                let from = limit.saturating_sub(1);
                match memchr::memchr(b'\n', &self.buf[from..filled]) {
                    Some(i) => {
                        self.done = true;
                        if self.pos + limit as u64 >= self.end {
                            // The chunk's last line is complete: an error past it is another
                            // chunk's business.
                            self.pending = None;
                        }
                        break from + i + 1;
                    }
                    None if stop => {
                        self.done = true;
                        // After an error the line holding `from` is a fragment: deliver only the
                        // complete lines before it; the fragment is reported lost with the error.
                        break if self.pending.is_some() {
                            memchr::memrchr(b'\n', &self.buf[..from]).map_or(0, |i| i + 1)
                        } else {
                            filled
                        };
                    }
                    // Only the end of the last line is missing: read a little more, growing
                    // with the line so a huge one costs few reads.
                    None => want = filled + LOOKAHEAD.max(filled - limit),
                }
            } else if let Some(i) = memchr::memrchr(b'\n', &self.buf[..filled]) {
                break i + 1;
            } else if stop {
                self.done = true;
                // Without an error the unterminated tail is the file's last line; after an error
                // it is a fragment and is reported as lost with the error.
                break if self.pending.is_some() { 0 } else { filled };
            } else {
                // One line longer than the block so far.
                want = (filled + self.block_bytes).min(self.chunk_rest());
            }
        };
        if cut == 0 {
            return self.take_error();
        }
        // The tail (the start of the next block) moves to a recycled buffer, which already has
        // the capacity the next fill needs. A finished chunk's tail belongs to the next chunk.
        let tail = if self.done { 0 } else { self.filled - cut };
        let mut rest = if self.done {
            Vec::new()
        } else {
            buffers::take()
        };
        if tail > 0 {
            if rest.len() < tail {
                rest.resize(tail, 0);
            }
            rest[..tail].copy_from_slice(&self.buf[cut..self.filled]);
        }
        let bytes = buffers::Recycled::new(std::mem::replace(&mut self.buf, rest), cut);
        self.filled = tail;
        let mut starts = Vec::with_capacity(bytes.len() / 256 + 1);
        starts.push(0);
        starts.extend(memchr::memchr_iter(b'\n', &bytes[..cut - 1]).map(|i| i + 1));
        let first = self.record;
        self.record += starts.len() as u64;
        let offset = Some(self.pos);
        // The members that started while the block was read (or before).
        let resumes = self.points.as_ref().map_or_else(Vec::new, |p| {
            std::mem::take(&mut *p.lock().unwrap_or_else(|e| e.into_inner()))
        });
        self.pos += cut as u64;
        self.disk_read = match &self.compressed_read {
            Some(read) => read.load(Ordering::Relaxed),
            None => self.disk_read + cut as u64,
        };
        let disk_bytes = self.disk.next(self.disk_read, self.done);
        Some(Ok((
            first,
            BlockData::Jsonl {
                bytes,
                starts,
                offset,
                resumes,
                picked: None,
            },
            disk_bytes,
        )))
    }
}
/// A JSON value that is not a string or null, as a rank: a number, or what else it is.
fn json_number(raw: &str) -> RankValue {
    match raw.as_bytes().first() {
        Some(b'-' | b'0'..=b'9') => raw.parse::<f64>().map_or(
            RankValue::NotANumber("a malformed number"),
            RankValue::Number,
        ),
        Some(b't' | b'f') => RankValue::NotANumber("a boolean"),
        Some(b'{') => RankValue::NotANumber("an object"),
        Some(b'[') => RankValue::NotANumber("an array"),
        _ => RankValue::NotANumber("not a number"),
    }
}

/// The samples of the lines `records` (ascending indices into `starts`, the line starts in
/// `bytes`) of a JSONL block, as [`crate::Block::for_each_sample`] hands them out; with `seen`,
/// noting which selected fields the records have.
pub(crate) fn line_samples<F: FnMut(Sample<'_>)>(
    bytes: &[u8],
    starts: &[usize],
    records: impl Iterator<Item = usize>,
    selector: &TextSelector,
    mut seen: Option<&mut FieldsSeen>,
    f: &mut F,
) {
    let nfields = selector.fields.len();
    let plan = json::build_plan(
        selector
            .fields
            .iter()
            .chain(selector.id_field.as_ref())
            .chain(selector.rank_field.as_ref()),
    );
    let id_slot = selector.id_field.as_ref().map(|_| nfields);
    let rank_slot = selector
        .rank_field
        .as_ref()
        .map(|_| nfields + usize::from(id_slot.is_some()));
    let mut slots = vec![
        Slot::Missing;
        nfields + usize::from(id_slot.is_some()) + usize::from(rank_slot.is_some())
    ];
    let mut scratch = DecodedStrings::default();
    let string_paths = json::StringPaths::detected();
    let mut join_buf = String::new();
    let mut values_buf: Vec<FieldValue<'static>> = Vec::with_capacity(nfields);
    let slots_per_record = selector.samples_per_record();
    for record in records {
        let Some(&start) = starts.get(record) else {
            break;
        };
        let end = starts.get(record + 1).copied().unwrap_or(bytes.len());
        let mut raw = &bytes[start..end];
        // The terminator is not part of the record (an unterminated string would otherwise be
        // reported as containing a control character).
        if let Some(r) = raw.strip_suffix(b"\n") {
            raw = r.strip_suffix(b"\r").unwrap_or(r);
        }
        if raw.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        // simdutf8's validator is several times faster than std's on non-ASCII text; its error
        // carries no position, which the InvalidUtf8 outcome does not need.
        let Ok(line) = simdutf8::basic::from_utf8(raw) else {
            emit_bad(record, slots_per_record, SkipReason::InvalidUtf8, f);
            continue;
        };
        if let Err(msg) = json::parse_line(line, &plan, &mut slots, &mut scratch, string_paths) {
            emit_bad(record, slots_per_record, SkipReason::MalformedJson(msg), f);
            continue;
        }
        if let Some(seen) = seen.as_deref_mut()
            && !seen.all_seen()
        {
            seen.set_examined();
            for (i, slot) in slots[..nfields].iter().enumerate() {
                if !matches!(slot, Slot::Missing) {
                    seen.mark(i);
                }
            }
        }
        let mut values = reuse_vec(std::mem::take(&mut values_buf));
        values.extend(slots[..nfields].iter().map(|s| match *s {
            Slot::Missing => FieldValue::Missing,
            Slot::Null => FieldValue::Null,
            Slot::Other(..) => FieldValue::NotString,
            Slot::Str(..) | Slot::Decoded(..) => {
                FieldValue::Str(s.text(line, &scratch).expect("string slot"))
            }
        }));
        let id = id_slot.and_then(|i| match slots[i] {
            Slot::Missing | Slot::Null => None,
            Slot::Other(a, b) => Some(&line[a..b]),
            ref s @ (Slot::Str(..) | Slot::Decoded(..)) => s.text(line, &scratch),
        });
        let rank = rank_slot.map_or(RankValue::Absent, |i| match slots[i] {
            Slot::Missing | Slot::Null => RankValue::Absent,
            Slot::Other(a, b) => json_number(&line[a..b]),
            Slot::Str(..) | Slot::Decoded(..) => RankValue::NotANumber("a string"),
        });
        emit_record(record, &values, id, rank, &selector.mode, &mut join_buf, f);
        values_buf = reuse_vec(values);
    }
}
