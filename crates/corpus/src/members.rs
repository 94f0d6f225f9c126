//! Compressed JSONL streams that can be entered in the middle: a gzip file of several members
//! (as `bgzip` writes, or concatenated `gzip` outputs), a zstd file of several frames (as
//! `pzstd` writes, or concatenated `zstd` outputs).
//! Each member or frame starts a decoder afresh, so decompressing from its first byte yields the
//! stream from the decompressed offset it starts at.
//!
//! [`MemberDecoder`] decodes such a stream member by member as one stream (what
//! `MultiGzDecoder` and zstd's decoder do), noting where each member begins ([`ResumePoint`]):
//! stage 1 keeps these with the places of the records. [`ResumedStream`] reads ranges of the
//! decompressed stream by them, decompressing only from the start of the member holding a
//! range's first byte: stage 2 reads the records it has to decide without the members before.
//! A file of one member or frame has one point, its start: it is read from the start as far as
//! the last record read.

use std::fs::File;
use std::io::{self, BufRead, BufReader, Read, Seek, SeekFrom};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use neardup_storage::{ObjectReader, ObjectUrl};
use serde::{Deserialize, Serialize};

use crate::format::Compression;

/// Where a member (gzip) or frame (zstd) of a compressed file starts: its file offset and the
/// offset in the decompressed stream of the first byte it yields.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResumePoint {
    /// The file offset of its first byte.
    pub compressed: u64,
    /// The decompressed offset it starts at.
    pub decompressed: u64,
}

/// A reader counting the bytes read through it (a compressed file's bytes, before the decoder).
pub(crate) struct Counted<R> {
    pub(crate) inner: R,
    pub(crate) read: Arc<AtomicU64>,
}

impl<R: Read> Read for Counted<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.read.fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }
}

/// What a [`MemberDecoder`] reads: a compressed file's bytes from `base`, counted.
type Source<R> = BufReader<Counted<R>>;

enum State<R: Read> {
    /// Between two members: the next byte starts one, or the stream ends.
    Between(Source<R>),
    Gzip(Box<flate2::bufread::GzDecoder<Source<R>>>),
    Zstd(zstd::stream::read::Decoder<'static, Source<R>>),
    /// A decoder could not be made; its error was handed out.
    Failed,
}

/// Decodes a gzip or zstd stream member by member (frame by frame) as one stream, noting where
/// each member starts in `points` (see the module docs).
pub(crate) struct MemberDecoder<R: Read> {
    state: State<R>,
    compression: Compression,
    /// The file offset the source starts at.
    base: u64,
    /// The decompressed offset of the next byte handed out.
    decompressed: u64,
    /// Whether a member was started: the first is, whatever follows (an empty or damaged file
    /// fails as a decoder over all of it would).
    started: bool,
    points: Option<Arc<Mutex<Vec<ResumePoint>>>>,
}

impl<R: Read> MemberDecoder<R> {
    /// Decodes `raw`, the bytes of a `compression` file from member start `at`, its bytes
    /// counted into `read`,
    /// through a buffer of `buffer` bytes; each member's start is pushed to `points`.
    pub(crate) fn new(
        raw: R,
        compression: Compression,
        at: ResumePoint,
        read: Arc<AtomicU64>,
        buffer: usize,
        points: Option<Arc<Mutex<Vec<ResumePoint>>>>,
    ) -> MemberDecoder<R> {
        debug_assert!(compression != Compression::None);
        let source = BufReader::with_capacity(buffer, Counted { inner: raw, read });
        MemberDecoder {
            state: State::Between(source),
            compression,
            base: at.compressed,
            decompressed: at.decompressed,
            started: false,
            points,
        }
    }

    /// The file offset of the next byte `source` hands out.
    fn position(&self, source: &Source<R>) -> u64 {
        self.base + source.get_ref().read.load(Ordering::Relaxed) - source.buffer().len() as u64
    }
}

impl<R: Read> Read for MemberDecoder<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        loop {
            match std::mem::replace(&mut self.state, State::Failed) {
                State::Between(mut source) => {
                    let at = self.position(&source);
                    if self.started {
                        match source.fill_buf() {
                            // The end (or, for a [`ResumedStream`], as far as it lets the
                            // decoder read for now).
                            Ok([]) => {
                                self.state = State::Between(source);
                                return Ok(0);
                            }
                            Ok(_) => {}
                            Err(e) => {
                                self.state = State::Between(source);
                                return Err(e);
                            }
                        }
                    }
                    self.started = true;
                    if let Some(points) = &self.points {
                        points
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .push(ResumePoint {
                                compressed: at,
                                decompressed: self.decompressed,
                            });
                    }
                    self.state = match self.compression {
                        Compression::Gzip => {
                            State::Gzip(Box::new(flate2::bufread::GzDecoder::new(source)))
                        }
                        _ => State::Zstd(
                            zstd::stream::read::Decoder::with_buffer(source)?.single_frame(),
                        ),
                    };
                }
                State::Gzip(mut d) => match d.read(buf) {
                    Ok(0) => self.state = State::Between((*d).into_inner()),
                    Ok(n) => {
                        self.decompressed += n as u64;
                        self.state = State::Gzip(d);
                        return Ok(n);
                    }
                    Err(e) => {
                        self.state = State::Gzip(d);
                        return Err(e);
                    }
                },
                State::Zstd(mut d) => match d.read(buf) {
                    Ok(0) => self.state = State::Between(d.finish()),
                    Ok(n) => {
                        self.decompressed += n as u64;
                        self.state = State::Zstd(d);
                        return Ok(n);
                    }
                    Err(e) => {
                        self.state = State::Zstd(d);
                        return Err(e);
                    }
                },
                State::Failed => {
                    return Err(io::Error::other("the decompressor could not be made"));
                }
            }
        }
    }
}

/// Where a compressed file's bytes come from.
pub(crate) enum Raw {
    File(PathBuf),
    Object(ObjectUrl),
}

/// The buffer a resumed decoder reads the file through: small, since what it reads ahead past
/// the records it needs is read for nothing.
const RESUMED_BUFFER: usize = 64 << 10;

/// A compressed file's bytes from a member's start, handed out only up to a limit that the
/// [`ResumedStream`] reading them raises range by range: its decoder reads no further than the
/// members holding the ranges asked for (its buffer would otherwise read ahead for nothing).
pub(crate) struct Limited {
    inner: Box<dyn Read + Send>,
    /// The file offset of the next byte.
    at: u64,
    limit: Arc<AtomicU64>,
}

impl Read for Limited {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let left = self.limit.load(Ordering::Relaxed).saturating_sub(self.at);
        let take = buf.len().min(usize::try_from(left).unwrap_or(usize::MAX));
        if take == 0 {
            return Ok(0);
        }
        let n = self.inner.read(&mut buf[..take])?;
        self.at += n as u64;
        Ok(n)
    }
}

/// Ranges of the decompressed stream of a compressed file read by its members' starts (see the
/// module docs). A range is read by the decoder at hand while the members before it are
/// already read (decompressing them costs no reading), else by a decoder started at the last
/// member starting at or before it; either reads the file up to the end of the last member
/// holding a byte of the range, no further. So no byte of the file is read twice, and the
/// members holding no range are not read.
pub(crate) struct ResumedStream {
    raw: Raw,
    size: u64,
    compression: Compression,
    points: Vec<ResumePoint>,
    /// The decoder at hand, the decompressed offset of its next byte, and how far it may read
    /// the file.
    current: Option<(MemberDecoder<Limited>, u64, Arc<AtomicU64>)>,
    /// The file's bytes read so far.
    read: Arc<AtomicU64>,
    skip: Vec<u8>,
}

impl ResumedStream {
    /// The stream of the `compression` file `raw` (`size` bytes), whose members start at
    /// `points` (ascending; the first at the file's start).
    pub(crate) fn new(
        raw: Raw,
        size: u64,
        compression: Compression,
        points: Vec<ResumePoint>,
    ) -> ResumedStream {
        ResumedStream {
            raw,
            size,
            compression,
            points,
            current: None,
            read: Arc::new(AtomicU64::new(0)),
            skip: Vec::new(),
        }
    }

    /// The file's bytes read so far.
    pub(crate) fn bytes_read(&self) -> u64 {
        self.read.load(Ordering::Relaxed)
    }

    /// Appends the bytes of the decompressed stream's `range` to `out`. Ranges are read in
    /// ascending order.
    pub(crate) fn read_range(&mut self, range: Range<u64>, out: &mut Vec<u8>) -> io::Result<()> {
        // The last member starting at or before the range.
        let at = self
            .points
            .partition_point(|p| p.decompressed <= range.start)
            .checked_sub(1)
            .map_or(
                ResumePoint {
                    compressed: 0,
                    decompressed: 0,
                },
                |i| self.points[i],
            );
        // The file offset after the last member holding a byte of the range.
        let end = self
            .points
            .iter()
            .find(|p| p.decompressed >= range.end && p.compressed > at.compressed)
            .map_or(self.size, |p| p.compressed);
        let reuse = matches!(&self.current, Some((_, pos, limit))
            if *pos <= range.start
                && (*pos >= at.decompressed || at.compressed < limit.load(Ordering::Relaxed)));
        if !reuse {
            let limit = Arc::new(AtomicU64::new(end));
            let decoder = self.open(at, limit.clone())?;
            self.current = Some((decoder, at.decompressed, limit));
        }
        let (decoder, pos, limit) = self.current.as_mut().expect("opened above");
        limit.fetch_max(end, Ordering::Relaxed);
        // Decompress up to the range, then the range itself.
        let mut left = range.start - *pos;
        self.skip.resize(RESUMED_BUFFER, 0);
        while left > 0 {
            let take = left.min(self.skip.len() as u64) as usize;
            decoder.read_exact(&mut self.skip[..take])?;
            left -= take as u64;
        }
        let len = (range.end - range.start) as usize;
        let from = out.len();
        out.resize(from + len, 0);
        decoder.read_exact(&mut out[from..])?;
        *pos = range.end;
        Ok(())
    }

    /// A decoder from member start `at`, reading the file up to `limit` (an object is
    /// fetched ahead as far as the limit is at first).
    fn open(&self, at: ResumePoint, limit: Arc<AtomicU64>) -> io::Result<MemberDecoder<Limited>> {
        let inner: Box<dyn Read + Send> = match &self.raw {
            Raw::File(path) => Box::new(open_at(path, at.compressed)?),
            Raw::Object(url) => Box::new(
                ObjectReader::open(url, self.size, at.compressed, limit.load(Ordering::Relaxed))
                    .map_err(neardup_storage::StorageError::into_unnamed_io)?,
            ),
        };
        let raw = Limited {
            inner,
            at: at.compressed,
            limit,
        };
        Ok(MemberDecoder::new(
            raw,
            self.compression,
            at,
            self.read.clone(),
            RESUMED_BUFFER,
            None,
        ))
    }
}

fn open_at(path: &Path, offset: u64) -> io::Result<File> {
    let mut f = File::open(path)?;
    f.seek(SeekFrom::Start(offset))?;
    Ok(f)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn gzip(parts: &[&[u8]]) -> Vec<u8> {
        let mut out = Vec::new();
        for p in parts {
            let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            gz.write_all(p).unwrap();
            out.extend(gz.finish().unwrap());
        }
        out
    }

    fn zstd(parts: &[&[u8]]) -> Vec<u8> {
        let mut out = Vec::new();
        for p in parts {
            out.extend(zstd::encode_all(*p, 1).unwrap());
        }
        out
    }

    fn decode(bytes: &[u8], compression: Compression) -> (io::Result<Vec<u8>>, Vec<ResumePoint>) {
        let points = Arc::new(Mutex::new(Vec::new()));
        let mut d = MemberDecoder::new(
            bytes,
            compression,
            ResumePoint {
                compressed: 0,
                decompressed: 0,
            },
            Arc::default(),
            1000,
            Some(points.clone()),
        );
        let mut out = Vec::new();
        let got = d.read_to_end(&mut out).map(|_| out);
        let points = points.lock().unwrap().clone();
        (got, points)
    }

    #[test]
    fn members_decode_as_one_stream_noting_their_starts_and_ranges_read_by_them() {
        let parts: Vec<Vec<u8>> = (0..7)
            .map(|i| {
                (0..(i * 3_001 % 20_000 + 1))
                    .map(|j| b"abcdefghij\n"[(i + j) % 11])
                    .collect()
            })
            .collect();
        let parts: Vec<&[u8]> = parts.iter().map(Vec::as_slice).collect();
        let whole = parts.concat();
        let tmp = tempfile::tempdir().unwrap();
        for (compression, bytes) in [
            (Compression::Gzip, gzip(&parts)),
            (Compression::Zstd, zstd(&parts)),
        ] {
            let (got, points) = decode(&bytes, compression);
            assert_eq!(got.unwrap(), whole, "{compression:?}");
            assert_eq!(points.len(), parts.len(), "{compression:?}");
            // Each point starts a member: decoding from it yields the rest of the stream.
            let mut decompressed = 0;
            for (p, part) in points.iter().zip(&parts) {
                assert_eq!(p.decompressed, decompressed);
                let (rest, _) = decode(&bytes[p.compressed as usize..], compression);
                assert_eq!(rest.unwrap(), whole[decompressed as usize..]);
                decompressed += part.len() as u64;
            }
            // Ranges read by the points: the stream's bytes, reading less of the file for a
            // range near the end.
            let path = tmp.path().join(format!("f-{compression:?}"));
            std::fs::write(&path, &bytes).unwrap();
            let n = whole.len() as u64;
            let ranges = [0..5, 7..7, 9..3_000, 20_000..20_011, n - 100..n - 1];
            let mut stream = ResumedStream::new(
                Raw::File(path.clone()),
                bytes.len() as u64,
                compression,
                points.clone(),
            );
            let mut out = Vec::new();
            for r in &ranges {
                stream.read_range(r.clone(), &mut out).unwrap();
            }
            let want: Vec<u8> = ranges
                .iter()
                .flat_map(|r| whole[r.start as usize..r.end as usize].to_vec())
                .collect();
            assert_eq!(out, want, "{compression:?}");
            let mut last = ResumedStream::new(
                Raw::File(path),
                bytes.len() as u64,
                compression,
                points.clone(),
            );
            let mut out = Vec::new();
            last.read_range(n - 10..n, &mut out).unwrap();
            assert_eq!(out, whole[(n - 10) as usize..]);
            assert!(
                last.bytes_read() <= bytes.len() as u64 - points[6].compressed,
                "{compression:?}: {} of {}",
                last.bytes_read(),
                bytes.len()
            );
        }
        // An empty file, one broken off or one followed by other bytes: read as the decoders
        // over the whole stream read it.
        let whole_gzip = |b: &[u8]| {
            let mut out = Vec::new();
            flate2::read::MultiGzDecoder::new(b)
                .read_to_end(&mut out)
                .map(|_| out)
        };
        let whole_zstd = |b: &[u8]| {
            let mut out = Vec::new();
            zstd::stream::read::Decoder::new(b)
                .and_then(|mut d| d.read_to_end(&mut out))
                .map(|_| out)
        };
        let (gz, zst) = (gzip(&parts), zstd(&parts));
        let mut gz_garbage = gzip(&parts[..2]);
        gz_garbage.extend_from_slice(b"not gzip");
        let mut zst_garbage = zstd(&parts[..2]);
        zst_garbage.extend_from_slice(b"not zstd");
        for (bytes, compression) in [
            (&[][..], Compression::Gzip),
            (&[][..], Compression::Zstd),
            (&gz[..gz.len() - 3], Compression::Gzip),
            (&zst[..zst.len() - 3], Compression::Zstd),
            (&gz_garbage[..], Compression::Gzip),
            (&zst_garbage[..], Compression::Zstd),
        ] {
            let want = match compression {
                Compression::Gzip => whole_gzip(bytes),
                _ => whole_zstd(bytes),
            };
            let got = decode(bytes, compression).0;
            assert_eq!(
                got.as_ref().ok(),
                want.as_ref().ok(),
                "{compression:?} of {} bytes",
                bytes.len()
            );
            assert_eq!(
                got.map_err(|e| e.kind()).err(),
                want.map_err(|e| e.kind()).err(),
                "{compression:?} of {} bytes",
                bytes.len()
            );
        }
    }
}
