//! The values passed between the steps of a distributed stage 2, and their byte encoding.
//!
//! - **sign** (per shard) writes, for each hot sample, what deciding it needs: a
//!   [`SignedSample`]. Samples are partitioned by the plan's group and stay in global row order
//!   within a group (in (rank, row) order when ranked, [`SignedShape::ranked`]).
//! - **decide** (per group) reads its group's signed samples of every shard, runs the decision
//!   core in global row order (or (rank, row) order) and writes one [`DecidedSample`] per hot
//!   sample, partitioned by shard, in row order.
//! - **write** (per shard) reads its shard's decided samples of every group, merged by row.
//!
//! Records are length-free and little-endian; a stream of records is framed by
//! [`RecordWriter`]/[`RecordReader`] (`neardup_corpus::frame`): a magic, the records, then the
//! record count, an xxh3-64 checksum of everything before it and an end magic, so a truncated
//! or altered stream is refused instead of misread.

use std::io::{self, Read, Write};

use neardup_corpus::frame::{Frame, FrameError, FrameReader, FrameWriter};

use crate::deduper::{SampleAddr, Verdict};

/// How a signed sample is decided, and so what it carries.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SignedKind {
    /// A later exact copy of an earlier hot sample of its own shard (same full content hash):
    /// the hash alone decides it, and it carries nothing else.
    #[default]
    Copy,
    /// A later exact copy by stage 1's count whose original is not a hot sample of its own shard:
    /// the hash decides it, unless no earlier sample of the group has the same full hash (two
    /// texts' content keys collided); then decide sketches its text. Carries its hot columns and
    /// its text, under either `--verify`.
    CopyWithText,
    /// Any other hot sample. Under exact verification it carries its hot columns and its text,
    /// which decide sketches once for both its signature and its shingle set (as a one-process
    /// run sketches it once); under `--verify estimate`, its signature and hot columns.
    Full,
}

/// What deciding one hot sample needs (see the module docs). Its row of keys is not carried:
/// decide computes the band keys from the signature (its own, from the text, under exact
/// verification) and the content key from the content hash.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SignedSample {
    /// Its rank when the stream is ranked ([`SignedShape::ranked`]; 0 otherwise): decide takes
    /// the samples in (rank, row) order.
    pub rank: u64,
    /// Its row in the global row order (all shards' tables, in shard order).
    pub row: u64,
    /// Its address; `file` numbers the files of all shards in shard order.
    pub addr: SampleAddr,
    /// Its id, when an id field is configured and present.
    pub id: Option<String>,
    /// The 128-bit content hash of its normalised text.
    pub content_hash: u128,
    /// How it is decided.
    pub kind: SignedKind,
    /// Its MinHash signature ([`SignedKind::Full`] without texts, `--verify estimate`; with
    /// texts decide sketches the text instead).
    pub signature: Vec<u32>,
    /// Which of its keys are hot ([`SignedKind::Full`] and [`SignedKind::CopyWithText`]).
    pub hot: Vec<bool>,
    /// Its text, as stage 1 sketched it: what exact verification builds its shingle set from
    /// ([`SignedKind::Full`] under exact verification, [`SignedKind::CopyWithText`]).
    pub text: String,
}

/// A signed sample as borrowed parts: what [`encode_signed`] writes, without copying a sample
/// into a [`SignedSample`] first.
pub(crate) struct SignedParts<'a> {
    pub rank: u64,
    pub row: u64,
    pub addr: SampleAddr,
    pub id: Option<&'a str>,
    pub content_hash: u128,
    pub kind: SignedKind,
    pub signature: &'a [u32],
    pub hot: &'a [bool],
    pub text: &'a str,
}

/// The decision of one hot sample, as decide hands it to write.
#[derive(Clone, Debug, PartialEq)]
pub struct DecidedSample {
    /// Its row in the global row order.
    pub row: u64,
    /// The verdict; `of` addresses use the global file numbering of [`SignedSample::addr`].
    pub verdict: Verdict,
    /// The id of the sample it duplicates, when that sample has one.
    pub dup_of_id: Option<String>,
}

/// The shape every signed sample of one stream has.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SignedShape {
    /// Signature width.
    pub num_perm: usize,
    /// Keys per row.
    pub columns: usize,
    /// Whether full samples carry their texts (exact verification, which compares the shingle
    /// sets decide builds from them).
    pub texts: bool,
    /// Whether samples carry a rank and a stream is in (rank, row) order instead of row order
    /// (a preference other than input order, `crate::Prefer`). A ranked sample begins with its
    /// rank, so that a record's first 16 bytes are its sort key.
    pub ranked: bool,
}

fn put_u32(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_le_bytes());
}
fn put_u64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_le_bytes());
}
fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}
fn put_str(out: &mut Vec<u8>, s: Option<&str>) {
    match s {
        None => out.push(0),
        Some(s) => {
            out.push(1);
            put_varint(out, s.len() as u64);
            out.extend_from_slice(s.as_bytes());
        }
    }
}

fn put_addr(out: &mut Vec<u8>, a: SampleAddr) {
    put_u32(out, a.file);
    put_u64(out, a.record);
    put_u32(out, a.field);
}

/// Appends one signed sample of `shape` to `out`.
pub fn encode_signed(s: &SignedSample, shape: SignedShape, out: &mut Vec<u8>) {
    encode_signed_parts(
        &SignedParts {
            rank: s.rank,
            row: s.row,
            addr: s.addr,
            id: s.id.as_deref(),
            content_hash: s.content_hash,
            kind: s.kind,
            signature: &s.signature,
            hot: &s.hot,
            text: &s.text,
        },
        shape,
        out,
    );
}

fn put_hot(out: &mut Vec<u8>, hot: &[bool]) {
    for bits in hot.chunks(8) {
        out.push(
            bits.iter()
                .enumerate()
                .fold(0u8, |b, (i, h)| b | (u8::from(*h) << i)),
        );
    }
}

fn put_text(out: &mut Vec<u8>, text: &str) {
    put_varint(out, text.len() as u64);
    out.extend_from_slice(text.as_bytes());
}

/// [`encode_signed`] of borrowed parts.
pub(crate) fn encode_signed_parts(s: &SignedParts<'_>, shape: SignedShape, out: &mut Vec<u8>) {
    if shape.ranked {
        put_u64(out, s.rank);
    }
    put_u64(out, s.row);
    put_addr(out, s.addr);
    put_str(out, s.id);
    out.extend_from_slice(&s.content_hash.to_le_bytes());
    match s.kind {
        SignedKind::Copy => out.push(0),
        SignedKind::CopyWithText => {
            out.push(1);
            debug_assert_eq!(s.hot.len(), shape.columns);
            put_hot(out, s.hot);
            put_text(out, s.text);
        }
        SignedKind::Full => {
            out.push(2);
            debug_assert_eq!(s.hot.len(), shape.columns);
            if shape.texts {
                put_hot(out, s.hot);
                put_text(out, s.text);
            } else {
                debug_assert_eq!(s.signature.len(), shape.num_perm);
                out.reserve(4 * s.signature.len());
                for v in s.signature {
                    put_u32(out, *v);
                }
                put_hot(out, s.hot);
            }
        }
    }
}

/// Appends one decided sample to `out`.
pub fn encode_decided(d: &DecidedSample, out: &mut Vec<u8>) {
    put_u64(out, d.row);
    match d.verdict {
        Verdict::Unique => out.push(0),
        Verdict::Exact { of, cluster } => {
            out.push(1);
            put_addr(out, of);
            put_addr(out, cluster);
        }
        Verdict::Near { of, similarity } => {
            out.push(2);
            put_addr(out, of);
            out.extend_from_slice(&similarity.to_le_bytes());
        }
    }
    put_str(out, d.dup_of_id.as_deref());
}

/// Reads values back from a byte slice, failing cleanly (never panicking) on short or bad input.
struct Cursor<'a> {
    bytes: &'a [u8],
}

fn corrupt(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.to_string())
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> io::Result<&'a [u8]> {
        if self.bytes.len() < n {
            return Err(corrupt("record ends early"));
        }
        let (head, rest) = self.bytes.split_at(n);
        self.bytes = rest;
        Ok(head)
    }
    fn u8(&mut self) -> io::Result<u8> {
        Ok(self.take(1)?[0])
    }
    fn u32(&mut self) -> io::Result<u32> {
        Ok(u32::from_le_bytes(
            self.take(4)?.try_into().expect("4 bytes"),
        ))
    }
    fn u64(&mut self) -> io::Result<u64> {
        Ok(u64::from_le_bytes(
            self.take(8)?.try_into().expect("8 bytes"),
        ))
    }
    fn u128(&mut self) -> io::Result<u128> {
        Ok(u128::from_le_bytes(
            self.take(16)?.try_into().expect("16 bytes"),
        ))
    }
    fn varint(&mut self) -> io::Result<u64> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.u8()?;
            v |= u64::from(b & 0x7f) << shift;
            if b < 0x80 {
                return Ok(v);
            }
        }
        Err(corrupt("varint longer than 64 bits"))
    }
    fn string(&mut self) -> io::Result<Option<String>> {
        match self.u8()? {
            0 => Ok(None),
            1 => {
                let n = usize::try_from(self.varint()?).map_err(|_| corrupt("string too long"))?;
                let s = std::str::from_utf8(self.take(n)?).map_err(|_| corrupt("invalid UTF-8"))?;
                Ok(Some(s.to_string()))
            }
            _ => Err(corrupt("bad string tag")),
        }
    }
    fn addr(&mut self) -> io::Result<SampleAddr> {
        Ok(SampleAddr {
            file: self.u32()?,
            record: self.u64()?,
            field: self.u32()?,
        })
    }
}

/// Decodes one signed sample of `shape` from the front of `bytes` into `s` (reusing its
/// buffers); returns the bytes it took.
pub fn decode_signed(bytes: &[u8], shape: SignedShape, s: &mut SignedSample) -> io::Result<usize> {
    let mut c = Cursor { bytes };
    s.rank = if shape.ranked { c.u64()? } else { 0 };
    s.row = c.u64()?;
    s.addr = c.addr()?;
    s.id = c.string()?;
    s.content_hash = c.u128()?;
    s.kind = match c.u8()? {
        0 => SignedKind::Copy,
        1 => SignedKind::CopyWithText,
        2 => SignedKind::Full,
        _ => return Err(corrupt("bad sample kind")),
    };
    s.signature.clear();
    s.hot.clear();
    s.text.clear();
    if s.kind == SignedKind::Full && !shape.texts {
        let sig = c.take(4 * shape.num_perm)?;
        s.signature.extend(
            sig.chunks_exact(4)
                .map(|b| u32::from_le_bytes(b.try_into().expect("4 bytes"))),
        );
    }
    if s.kind != SignedKind::Copy {
        let bits = c.take(shape.columns.div_ceil(8))?;
        s.hot
            .extend((0..shape.columns).map(|i| bits[i / 8] >> (i % 8) & 1 == 1));
    }
    if s.kind == SignedKind::CopyWithText || (s.kind == SignedKind::Full && shape.texts) {
        let n = usize::try_from(c.varint()?).map_err(|_| corrupt("text too long"))?;
        // Every text of a decide step passes here: the SIMD check is several times faster.
        let text = simdutf8::basic::from_utf8(c.take(n)?).map_err(|_| corrupt("invalid UTF-8"))?;
        s.text.push_str(text);
    }
    Ok(bytes.len() - c.bytes.len())
}

/// Decodes one decided sample from the front of `bytes`; returns it and the bytes it took.
pub fn decode_decided(bytes: &[u8]) -> io::Result<(DecidedSample, usize)> {
    let mut c = Cursor { bytes };
    let row = c.u64()?;
    let verdict = match c.u8()? {
        0 => Verdict::Unique,
        1 => Verdict::Exact {
            of: c.addr()?,
            cluster: c.addr()?,
        },
        2 => {
            let of = c.addr()?;
            let similarity = f64::from_le_bytes(c.take(8)?.try_into().expect("8 bytes"));
            Verdict::Near { of, similarity }
        }
        _ => return Err(corrupt("bad verdict")),
    };
    let dup_of_id = c.string()?;
    Ok((
        DecidedSample {
            row,
            verdict,
            dup_of_id,
        },
        bytes.len() - c.bytes.len(),
    ))
}

/// Version 4 (the decided samples of exact copies name their cluster); see
/// `STEP_FORMAT_VERSION` in the facade for the history.
const STREAM: Frame = Frame {
    magic: b"NDSTEP\x00\x04",
    end: b"NDSTEPEN",
};
/// Records are written and read in batches of about this many bytes (a batch holds whole
/// records, so a reader never needs more than one batch in memory).
const BATCH_BYTES: usize = 1 << 20;

/// Writes a framed stream of records: a magic, batches of whole records (each `u32` length then
/// bytes), an empty batch, the record count, an xxh3-64 checksum of everything before it and an
/// end magic.
pub struct RecordWriter<W: Write> {
    out: FrameWriter<W>,
    buf: Vec<u8>,
    records: u64,
}

impl<W: Write> RecordWriter<W> {
    /// Starts a stream.
    pub fn new(out: W) -> io::Result<RecordWriter<W>> {
        Ok(RecordWriter {
            out: FrameWriter::new(out, &STREAM)?,
            buf: Vec::with_capacity(BATCH_BYTES + 4096),
            records: 0,
        })
    }

    /// The buffer to append one record to with an `encode_*` function; call
    /// [`RecordWriter::record_done`] after.
    pub fn buffer(&mut self) -> &mut Vec<u8> {
        &mut self.buf
    }

    /// Counts the record just appended, and writes out a full batch.
    pub fn record_done(&mut self) -> io::Result<()> {
        self.records += 1;
        if self.buf.len() >= BATCH_BYTES {
            self.write_batch()?;
        }
        Ok(())
    }

    fn put(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.out.write_all(bytes)
    }

    fn write_batch(&mut self) -> io::Result<()> {
        let len = u32::try_from(self.buf.len())
            .map_err(|_| io::Error::other("a single record larger than 4 GiB"))?;
        let buf = std::mem::take(&mut self.buf);
        self.put(&len.to_le_bytes())?;
        self.put(&buf)?;
        self.buf = buf;
        self.buf.clear();
        Ok(())
    }

    /// Records written so far.
    pub fn records(&self) -> u64 {
        self.records
    }

    /// Writes the last batch and the trailer, and returns the sink.
    pub fn finish(mut self) -> io::Result<W> {
        if !self.buf.is_empty() {
            self.write_batch()?;
        }
        self.put(&0u32.to_le_bytes())?;
        let records = self.records;
        self.put(&records.to_le_bytes())?;
        Ok(self.out.finish()?.0)
    }
}

/// Reads a stream written by [`RecordWriter`] batch by batch. The checksum and count are
/// verified when the end is reached: a caller that stops at the first error and publishes only
/// after reading to the end never acts on a damaged stream.
pub struct RecordReader<R: Read> {
    input: FrameReader<R>,
    batch: Vec<u8>,
    pos: usize,
    records: u64,
    done: bool,
}

impl<R: Read> RecordReader<R> {
    /// Opens a stream (reads its magic).
    pub fn new(input: R) -> io::Result<RecordReader<R>> {
        let input = FrameReader::open(input, &STREAM).map_err(|e| match e {
            FrameError::Short { .. } => corrupt("not a neardup step stream (too short)"),
            _ => corrupt("not a neardup step stream (bad magic)"),
        })?;
        Ok(RecordReader {
            input,
            batch: Vec::new(),
            pos: 0,
            records: 0,
            done: false,
        })
    }

    fn read_hashed(&mut self, n: usize) -> io::Result<()> {
        // `read_to_end` fills the spare capacity without zeroing it first (a resize would
        // write every batch twice).
        self.batch.clear();
        let got = (&mut self.input)
            .take(n as u64)
            .read_to_end(&mut self.batch)?;
        if got < n {
            return Err(corrupt("the stream is truncated"));
        }
        Ok(())
    }

    /// Hands the front of the unread records to `decode`, which returns how many bytes the
    /// record it decoded took. False once every record was read (and the trailer verified).
    pub fn next(&mut self, decode: impl FnOnce(&[u8]) -> io::Result<usize>) -> io::Result<bool> {
        while self.pos >= self.batch.len() {
            if self.done {
                return Ok(false);
            }
            self.read_hashed(4)?;
            let len = u32::from_le_bytes(self.batch[..4].try_into().expect("4 bytes")) as usize;
            if len == 0 {
                self.read_hashed(8)?;
                let count = u64::from_le_bytes(self.batch[..8].try_into().expect("8 bytes"));
                self.check_trailer()?;
                if count != self.records {
                    return Err(corrupt(
                        "the stream holds another number of records than it says",
                    ));
                }
                self.batch.clear();
                self.pos = 0;
                self.done = true;
                return Ok(false);
            }
            self.read_hashed(len)?;
            self.pos = 0;
        }
        let taken = decode(&self.batch[self.pos..])?;
        if taken == 0 {
            return Err(corrupt("an empty record"));
        }
        self.pos += taken;
        if self.pos > self.batch.len() {
            return Err(corrupt("a record runs past its batch"));
        }
        self.records += 1;
        Ok(true)
    }

    /// Records read so far.
    pub fn records(&self) -> u64 {
        self.records
    }

    /// Reads and checks the trailer: the checksum, then the end marker.
    fn check_trailer(&mut self) -> io::Result<()> {
        let trailer = self
            .input
            .trailer()
            .map_err(|_| corrupt("the stream is truncated"))?;
        if trailer.stored != trailer.computed {
            return Err(corrupt("the stream's checksum does not match its contents"));
        }
        if !trailer.ends {
            return Err(corrupt("the stream is truncated (no end marker)"));
        }
        Ok(())
    }

    /// Reads the rest of the stream without decoding a record, and verifies its checksum and
    /// end marker: what a step does with a stream before it uses any of it, so that damage is
    /// reported as damage, not as whatever a flipped byte made a record say. (The record count is
    /// verified by the reading proper.)
    pub fn verify(mut self) -> io::Result<()> {
        loop {
            self.read_hashed(4)?;
            let len = u32::from_le_bytes(self.batch[..4].try_into().expect("4 bytes")) as usize;
            if len == 0 {
                self.read_hashed(8)?;
                self.check_trailer()?;
                return Ok(());
            }
            self.read_hashed(len)?;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn shape(texts: bool) -> SignedShape {
        SignedShape {
            num_perm: 8,
            columns: 11,
            texts,
            ranked: false,
        }
    }

    fn signed_strategy(texts: bool) -> impl Strategy<Value = SignedSample> {
        (
            any::<u64>(),
            (any::<u32>(), any::<u64>(), any::<u32>()),
            prop::option::of("[a-zé]{0,12}"),
            any::<u128>(),
            0u8..3,
            prop::collection::vec(any::<u32>(), 8),
            prop::collection::vec(any::<bool>(), 11),
            "\\PC{0,300}",
        )
            .prop_map(
                move |(row, (file, record, field), id, content_hash, kind, sig, hot, text)| {
                    let kind = match kind {
                        0 => SignedKind::Copy,
                        1 => SignedKind::CopyWithText,
                        _ => SignedKind::Full,
                    };
                    let mut s = SignedSample {
                        row,
                        addr: SampleAddr {
                            file,
                            record,
                            field,
                        },
                        id,
                        content_hash,
                        kind,
                        ..SignedSample::default()
                    };
                    if kind == SignedKind::Full && !texts {
                        s.signature = sig;
                    }
                    if kind != SignedKind::Copy {
                        s.hot = hot;
                    }
                    if kind == SignedKind::CopyWithText || (kind == SignedKind::Full && texts) {
                        s.text = text;
                    }
                    s
                },
            )
    }

    proptest! {
        #[test]
        fn signed_samples_round_trip_through_a_stream(texts in any::<bool>(), ranked in any::<bool>(), rank in any::<u64>(), samples in prop::collection::vec(signed_strategy(true), 0..20)) {
            // Full samples carry their text with texts, their signature without.
            let samples: Vec<SignedSample> = samples
                .into_iter()
                .map(|mut s| {
                    if !texts && s.kind == SignedKind::Full {
                        s.text.clear();
                        s.signature = (0..8).map(|i| s.row as u32 ^ i).collect();
                    }
                    // A ranked sample carries its rank; an unranked one reads back as rank 0.
                    if ranked {
                        s.rank = rank ^ s.row;
                    }
                    s
                })
                .collect();
            let shape = SignedShape { ranked, ..shape(texts) };
            let mut w = RecordWriter::new(Vec::new()).unwrap();
            for s in &samples {
                encode_signed(s, shape, w.buffer());
                w.record_done().unwrap();
            }
            let bytes = w.finish().unwrap();
            let mut r = RecordReader::new(bytes.as_slice()).unwrap();
            let mut got = SignedSample::default();
            for s in &samples {
                prop_assert!(r.next(|b| decode_signed(b, shape, &mut got)).unwrap());
                prop_assert_eq!(&got, s);
            }
            prop_assert!(!r.next(|_| unreachable!()).unwrap());
            prop_assert_eq!(r.records(), samples.len() as u64);
        }

        #[test]
        fn decided_samples_round_trip(row in any::<u64>(), kind in 0u8..3, file in any::<u32>(), record in any::<u64>(), sim in 0.0f64..=1.0, id in prop::option::of("[a-z]{0,5}")) {
            let of = SampleAddr { file, record, field: 2 };
            let verdict = match kind {
                0 => Verdict::Unique,
                1 => Verdict::Exact {
                    of,
                    cluster: SampleAddr { record: record ^ 1, ..of },
                },
                _ => Verdict::Near { of, similarity: sim },
            };
            let d = DecidedSample { row, verdict, dup_of_id: id };
            let mut buf = Vec::new();
            encode_decided(&d, &mut buf);
            let (back, n) = decode_decided(&buf).unwrap();
            prop_assert_eq!(n, buf.len());
            prop_assert_eq!(back, d);
        }
    }

    #[test]
    fn a_damaged_or_truncated_stream_is_refused() {
        // Enough records for several batches.
        let mut w = RecordWriter::new(Vec::new()).unwrap();
        for row in 0..200_000 {
            encode_decided(
                &DecidedSample {
                    row,
                    verdict: Verdict::Unique,
                    dup_of_id: None,
                },
                w.buffer(),
            );
            w.record_done().unwrap();
        }
        let bytes = w.finish().unwrap();
        let read_all = |bytes: &[u8]| -> io::Result<u64> {
            let mut r = RecordReader::new(bytes)?;
            while r.next(|b| decode_decided(b).map(|(_, n)| n))? {}
            Ok(r.records())
        };
        assert_eq!(read_all(&bytes).unwrap(), 200_000);
        for at in [9, 5000, bytes.len() / 2, bytes.len() - 30] {
            let mut flipped = bytes.clone();
            flipped[at] ^= 1;
            assert!(
                read_all(&flipped).is_err(),
                "a flipped bit at {at} went unnoticed"
            );
        }
        for cut in [0, 7, 12, 1 << 20, bytes.len() - 20, bytes.len() - 1] {
            let e = read_all(&bytes[..cut]).err().unwrap();
            assert!(
                e.to_string().contains("truncated") || e.to_string().contains("short"),
                "{e}"
            );
        }
        // Decoding never panics on garbage.
        for cut in 0..30 {
            let mut s = SignedSample::default();
            let _ = decode_signed(&bytes[12..12 + cut], shape(true), &mut s);
            let _ = decode_decided(&bytes[12..12 + cut]);
        }
    }
}
