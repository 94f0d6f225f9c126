//! Listing objects and reading them: sequential streams with read-ahead (JSONL) and ranged
//! reads with prefetched column chunks (Parquet).

use std::collections::VecDeque;
use std::io::Read;
use std::ops::Range;
use std::sync::{Arc, Mutex};

use bytes::{Buf, Bytes, BytesMut};
use futures::{StreamExt, TryStreamExt};
use object_store::ObjectStoreExt;

use crate::client::{Object, StorageError, StorageErrorKind, block_on, runtime};
use crate::location::ObjectUrl;

/// One object found by a listing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjectEntry {
    /// Its URL.
    pub url: ObjectUrl,
    /// Its size in bytes.
    pub size: u64,
}

/// Every object below the prefix `url` (its key taken as a directory: `s3://b/data` lists
/// `data/…`, not `data2`), sorted by key, like a local directory walk. A missing bucket, refused
/// credentials or a failed request are errors; an empty listing is not.
pub fn list(url: &ObjectUrl) -> Result<Vec<ObjectEntry>, StorageError> {
    let object = Object::new(url)?;
    let prefix = url.trimmed_key();
    let key_prefix = (!prefix.is_empty()).then(|| object.key.clone());
    let mut entries: Vec<ObjectEntry> = block_on(
        object
            .store
            .list(key_prefix.as_ref())
            .map_ok(|meta| ObjectEntry {
                url: url.with_key(meta.location.as_ref()),
                size: meta.size,
            })
            .try_collect::<Vec<_>>(),
    )
    .map_err(|e| StorageError::from_store(url, "listing the objects", e))?;
    entries.sort_by(|a, b| a.url.key().cmp(b.url.key()));
    Ok(entries)
}

/// The size of the object `url`, or `None` when there is no such object (the bucket exists).
pub fn head(url: &ObjectUrl) -> Result<Option<u64>, StorageError> {
    if url.trimmed_key().is_empty() {
        return Ok(None);
    }
    let object = Object::new(url)?;
    match block_on(object.store.head(&object.key)) {
        Ok(meta) => Ok(Some(meta.size)),
        Err(e) => {
            let e = StorageError::from_store(url, "looking the object up", e);
            match e.kind() {
                StorageErrorKind::NotFound => Ok(None),
                _ => Err(e),
            }
        }
    }
}

/// Bytes per ranged GET: large enough that a request's latency is small next to its transfer,
/// small enough that several run at once on one object.
const PIECE: u64 = 8 << 20;
/// Pieces a sequential reader keeps in flight ahead of the one it consumes.
const READ_AHEAD: usize = 3;
/// Piece size past the reader's end hint, where only the end of a line is still wanted.
const TAIL_PIECE: u64 = 256 << 10;

/// Fetches `range` of `object` in one ranged GET (the client retries a dropped connection from
/// where it stopped).
async fn fetch(object: Object, range: Range<u64>) -> Result<Bytes, StorageError> {
    let want = range.end - range.start;
    let bytes = object
        .store
        .get_range(&object.key, range.clone())
        .await
        .map_err(|e| {
            StorageError::from_store(
                &object.url,
                &format!("reading bytes {}..{}", range.start, range.end),
                e,
            )
        })?;
    if bytes.len() as u64 != want {
        return Err(StorageError::new(
            &object.url,
            StorageErrorKind::Network,
            format!(
                "reading bytes {}..{} returned {} bytes: the object changed while it was read",
                range.start,
                range.end,
                bytes.len()
            ),
        ));
    }
    Ok(bytes)
}

/// Fetches the byte `ranges` of the object `url` (ascending, apart), in 8 MiB pieces, 16
/// requests at a time: the records of a JSONL file read by their places. Returns each range's
/// bytes, in order.
pub fn read_ranges(url: &ObjectUrl, ranges: &[Range<u64>]) -> Result<Vec<Bytes>, StorageError> {
    let object = Object::new(url)?;
    let mut pieces = Vec::new();
    for (i, r) in ranges.iter().enumerate() {
        let mut at = r.start;
        while at < r.end {
            let end = (at + PIECE).min(r.end);
            pieces.push((i, at..end));
            at = end;
        }
    }
    let fetched: Vec<Bytes> = block_on(
        futures::stream::iter(pieces.iter().map(|(_, r)| fetch(object.clone(), r.clone())))
            .buffered(16)
            .try_collect(),
    )?;
    let mut out: Vec<BytesMut> = ranges
        .iter()
        .map(|r| BytesMut::with_capacity((r.end - r.start) as usize))
        .collect();
    for ((i, _), bytes) in pieces.iter().zip(fetched) {
        out[*i].extend_from_slice(&bytes);
    }
    Ok(out.into_iter().map(BytesMut::freeze).collect())
}

/// A sequential [`Read`] of an object from an offset, as ranged GETs of 8 MiB with three more in
/// flight, so reading never waits on one request's latency and one large object is fetched over
/// several connections. Past an end hint (where the caller expects to stop) it fetches small
/// pieces one at a time. Dropping it cancels the requests in flight.
pub struct ObjectReader {
    object: Object,
    size: u64,
    next_fetch: u64,
    hint_end: u64,
    pending: VecDeque<tokio::task::JoinHandle<Result<Bytes, StorageError>>>,
    current: Bytes,
}

impl ObjectReader {
    /// Reads `url` (of `size` bytes, as listed) from byte `start`; the caller expects to read up
    /// to about `hint_end` (`u64::MAX`: to the end).
    pub fn open(
        url: &ObjectUrl,
        size: u64,
        start: u64,
        hint_end: u64,
    ) -> Result<ObjectReader, StorageError> {
        Ok(ObjectReader {
            object: Object::new(url)?,
            size,
            next_fetch: start.min(size),
            hint_end: hint_end.min(size),
            pending: VecDeque::new(),
            current: Bytes::new(),
        })
    }

    fn top_up(&mut self) {
        let rt = runtime();
        while self.next_fetch < self.size {
            let in_tail = self.next_fetch >= self.hint_end;
            if (in_tail && !self.pending.is_empty()) || self.pending.len() > READ_AHEAD {
                break;
            }
            let piece = if in_tail {
                TAIL_PIECE
            } else {
                PIECE.min(self.hint_end - self.next_fetch)
            };
            let range = self.next_fetch..(self.next_fetch + piece).min(self.size);
            self.next_fetch = range.end;
            self.pending
                .push_back(rt.spawn(fetch(self.object.clone(), range)));
        }
    }
}

impl Read for ObjectReader {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.current.is_empty() {
            self.top_up();
            let Some(next) = self.pending.pop_front() else {
                return Ok(0);
            };
            // The reader of a file names it: the error says what failed, without the URL.
            self.current = block_on(next)
                .map_err(|e| std::io::Error::other(e.to_string()))?
                .map_err(StorageError::into_unnamed_io)?;
            self.top_up();
        }
        let n = buf.len().min(self.current.len());
        self.current.copy_to_slice(&mut buf[..n]);
        Ok(n)
    }
}

impl Drop for ObjectReader {
    fn drop(&mut self) {
        for p in &self.pending {
            p.abort();
        }
    }
}

/// Ranged reads of one object for Parquet's readers ([`parquet::file::reader::ChunkReader`]):
/// the footer is fetched with the last 64 KiB at open, and before a row group is decoded the
/// caller prefetches the byte ranges of the columns it decodes ([`ObjectRanges::prefetch`]), in
/// 8 MiB pieces fetched concurrently. Nothing else of the object is read; a range asked for
/// outside the prefetched ones is fetched on its own.
///
/// Clones share the object and what was fetched (a clone per decoder, as for a file handle).
#[derive(Clone)]
pub struct ObjectRanges {
    inner: Arc<RangesInner>,
}

struct RangesInner {
    object: Object,
    size: u64,
    /// Fetched pieces, `(offset, bytes)`, ascending and contiguous where they were one range.
    cache: Mutex<Vec<(u64, Bytes)>>,
    /// The last request that failed under Parquet's readers, which keep only its text.
    failed: Mutex<Option<StorageError>>,
}

/// How much of an object's end is fetched to read a Parquet footer in one request.
const FOOTER_PREFETCH: u64 = 64 << 10;

impl ObjectRanges {
    /// Opens `url` (of `size` bytes, as listed), fetching its last 64 KiB.
    pub fn open(url: &ObjectUrl, size: u64) -> Result<ObjectRanges, StorageError> {
        let r = ObjectRanges {
            inner: Arc::new(RangesInner {
                object: Object::new(url)?,
                size,
                cache: Mutex::new(Vec::new()),
                failed: Mutex::new(None),
            }),
        };
        let footer = size.saturating_sub(FOOTER_PREFETCH)..size;
        r.prefetch(std::slice::from_ref(&footer))?;
        Ok(r)
    }

    /// The object's URL.
    pub fn url(&self) -> &ObjectUrl {
        &self.inner.object.url
    }

    /// The request that failed while Parquet's readers read through these ranges, if one did
    /// (taken): their errors keep only its text, and a failed request must not pass for
    /// corrupt data.
    pub fn take_failure(&self) -> Option<StorageError> {
        self.inner.failed.lock().unwrap().take()
    }

    fn failed(&self, e: StorageError) -> parquet::errors::ParquetError {
        *self.inner.failed.lock().unwrap() = Some(e.clone());
        parquet::errors::ParquetError::External(Box::new(e))
    }

    /// Fetches `ranges` (offsets in the object) concurrently, replacing what was fetched before
    /// except the footer: the next reads are served from them.
    pub fn prefetch(&self, ranges: &[Range<u64>]) -> Result<(), StorageError> {
        let mut merged: Vec<Range<u64>> = ranges
            .iter()
            .filter(|r| r.start < r.end)
            .map(|r| r.start..r.end.min(self.inner.size))
            .collect();
        merged.sort_by_key(|r| r.start);
        // Ranges closer than 64 KiB are fetched as one: a request costs more than the gap.
        let mut joined: Vec<Range<u64>> = Vec::with_capacity(merged.len());
        for r in merged {
            match joined.last_mut() {
                Some(last) if r.start <= last.end + (64 << 10) => last.end = last.end.max(r.end),
                _ => joined.push(r),
            }
        }
        let mut pieces = Vec::new();
        for r in &joined {
            let mut at = r.start;
            while at < r.end {
                let end = (at + PIECE).min(r.end);
                pieces.push(at..end);
                at = end;
            }
        }
        let object = self.inner.object.clone();
        let fetched: Vec<Bytes> = block_on(
            futures::stream::iter(pieces.iter().cloned().map(|r| fetch(object.clone(), r)))
                .buffered(16)
                .try_collect(),
        )?;
        let footer_start = self.inner.size.saturating_sub(FOOTER_PREFETCH);
        let mut cache = self.inner.cache.lock().unwrap();
        cache.retain(|(at, _)| *at >= footer_start);
        cache.extend(pieces.iter().map(|r| r.start).zip(fetched));
        cache.sort_by_key(|(at, _)| *at);
        Ok(())
    }

    /// The bytes `start..start + len` if the cache holds all of them.
    fn cached(&self, start: u64, len: usize) -> Option<Bytes> {
        let end = start + len as u64;
        let cache = self.inner.cache.lock().unwrap();
        let i = cache.partition_point(|(at, b)| at + b.len() as u64 <= start);
        let (at, first) = cache.get(i)?;
        if *at > start {
            return None;
        }
        if at + first.len() as u64 >= end {
            let from = (start - at) as usize;
            return Some(first.slice(from..from + len));
        }
        // Spans pieces: copy them together (only ranges larger than a piece do).
        let mut out = BytesMut::with_capacity(len);
        let mut pos = start;
        for (at, b) in &cache[i..] {
            if *at != pos && !(*at < pos && at + b.len() as u64 > pos) {
                return None;
            }
            let from = (pos - at) as usize;
            let take = (b.len() - from).min((end - pos) as usize);
            out.extend_from_slice(&b[from..from + take]);
            pos += take as u64;
            if pos == end {
                return Some(out.freeze());
            }
        }
        None
    }

    /// The bytes `start..start + len`, from the cache or fetched now.
    pub fn bytes(&self, start: u64, len: usize) -> Result<Bytes, StorageError> {
        if let Some(b) = self.cached(start, len) {
            return Ok(b);
        }
        let end = (start + len as u64).min(self.inner.size);
        let object = self.inner.object.clone();
        let mut pieces = Vec::new();
        let mut at = start;
        while at < end {
            let e = (at + PIECE).min(end);
            pieces.push(at..e);
            at = e;
        }
        let fetched: Vec<Bytes> = block_on(
            futures::stream::iter(pieces.into_iter().map(|r| fetch(object.clone(), r)))
                .buffered(16)
                .try_collect(),
        )?;
        if fetched.len() == 1 {
            return Ok(fetched.into_iter().next().unwrap());
        }
        let mut out = BytesMut::with_capacity(len);
        for b in fetched {
            out.extend_from_slice(&b);
        }
        Ok(out.freeze())
    }
}

impl parquet::file::reader::Length for ObjectRanges {
    fn len(&self) -> u64 {
        self.inner.size
    }
}

/// What [`ObjectRanges`] gives Parquet's page reader for a sequential read: the prefetched bytes
/// from the offset asked for, or a stream of the object from there.
pub enum RangeRead {
    /// Served from prefetched bytes (consecutive pieces).
    Cached(VecDeque<Bytes>),
    /// Fetched as it is read; a failure is recorded in the ranges it came from.
    Stream(Box<ObjectReader>, ObjectRanges),
}

impl Read for RangeRead {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            RangeRead::Cached(parts) => {
                while parts.front().is_some_and(|p| p.is_empty()) {
                    parts.pop_front();
                }
                let Some(part) = parts.front_mut() else {
                    return Ok(0);
                };
                let n = buf.len().min(part.len());
                part.copy_to_slice(&mut buf[..n]);
                Ok(n)
            }
            RangeRead::Stream(r, ranges) => r.read(buf).inspect_err(|e| {
                if let Some(failure) = e
                    .get_ref()
                    .and_then(|inner| inner.downcast_ref::<crate::client::Unnamed>())
                {
                    *ranges.inner.failed.lock().unwrap() = Some(failure.0.clone());
                }
            }),
        }
    }
}

impl parquet::file::reader::ChunkReader for ObjectRanges {
    type T = RangeRead;

    fn get_read(&self, start: u64) -> parquet::errors::Result<RangeRead> {
        {
            let cache = self.inner.cache.lock().unwrap();
            let i = cache.partition_point(|(at, b)| at + b.len() as u64 <= start);
            if let Some((at, b)) = cache.get(i)
                && *at <= start
            {
                // A page header is read from here, within a prefetched column chunk: the rest
                // of its piece, and the next piece in case the header crosses into it.
                let mut parts = VecDeque::with_capacity(2);
                parts.push_back(b.slice((start - at) as usize..));
                if let Some((next_at, next)) = cache.get(i + 1)
                    && *next_at == at + b.len() as u64
                {
                    parts.push_back(next.clone());
                }
                return Ok(RangeRead::Cached(parts));
            }
        }
        let reader = ObjectReader::open(
            &self.inner.object.url,
            self.inner.size,
            start,
            start + TAIL_PIECE,
        )
        .map_err(|e| self.failed(e))?;
        Ok(RangeRead::Stream(Box::new(reader), self.clone()))
    }

    fn get_bytes(&self, start: u64, length: usize) -> parquet::errors::Result<Bytes> {
        self.bytes(start, length).map_err(|e| self.failed(e))
    }
}
