//! The one framing of neardup's own binary files and values: key tables, hot-key files, the
//! distributed steps' streams, saved indexes and step values. Each is an 8-byte magic naming
//! its kind and version, its contents (some begin with a JSON header: a `u64` length, then the
//! JSON), then an xxh3-64 checksum of every byte before it (the magic included) and an 8-byte
//! end marker. A file cut short lacks its end marker, a damaged one fails its checksum, and a
//! reader can refuse another kind's file by its first eight bytes.
//!
//! The framing is written and checked here only; what each kind holds, and the messages its
//! damage gets, stay with its owner, which maps a [`FrameError`] to its own error.

use std::io::{self, Read, Write};

use serde::Serialize;
use serde::de::DeserializeOwned;
use xxhash_rust::xxh3::{Xxh3, xxh3_64};

/// The markers of one kind of framed file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Frame {
    /// Its first eight bytes: its kind, and usually its version.
    pub magic: &'static [u8; 8],
    /// Its last eight bytes, after the checksum.
    pub end: &'static [u8; 8],
}

/// Bytes after the contents: the checksum and the end marker.
pub const TRAILER_BYTES: usize = 16;

/// JSON headers longer than this are taken for damage rather than allocated.
const MAX_HEADER_BYTES: u64 = 1 << 34;

/// What is wrong with a framed file's framing.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    /// It ends (or its read fails) before its magic does.
    #[error("it is shorter than its marker ({error})")]
    Short {
        /// What the read met.
        error: io::Error,
    },
    /// Its first eight bytes are not the kind's magic.
    #[error("it does not begin with its marker")]
    OtherMagic,
    /// It ends before its contents or its trailer do.
    #[error("it is truncated ({error})")]
    Truncated {
        /// What the read met.
        error: io::Error,
    },
    /// Its header says it is longer than any header is.
    #[error("its header length {0} is implausible")]
    HeaderLength(u64),
    /// Its header is not the JSON of its kind's header.
    #[error("its header cannot be read ({0})")]
    Header(serde_json::Error),
    /// Its last eight bytes are not the end marker.
    #[error("it is truncated (no end marker)")]
    NoEndMarker,
    /// The checksum stored does not match the bytes.
    #[error(
        "its checksum does not match its contents (stored {stored:016x}, computed {computed:016x})"
    )]
    Checksum {
        /// The checksum in the file.
        stored: u64,
        /// The checksum of the bytes read.
        computed: u64,
    },
}

impl Frame {
    /// Whether `bytes` begin with this kind's magic.
    pub fn begins(&self, bytes: &[u8]) -> bool {
        bytes.starts_with(self.magic)
    }

    /// Appends the trailer to `bytes`, a whole framed value but its trailer (its magic first).
    pub fn seal(&self, bytes: &mut Vec<u8>) {
        let sum = xxh3_64(bytes);
        bytes.extend_from_slice(&sum.to_le_bytes());
        bytes.extend_from_slice(self.end);
    }

    /// Checks the trailer of `bytes`, a whole framed value whose magic was checked: the end
    /// marker, then the checksum. Returns what lies between the magic and the trailer.
    pub fn contents<'a>(&self, bytes: &'a [u8]) -> Result<&'a [u8], FrameError> {
        if bytes.len() < self.magic.len() + TRAILER_BYTES || !bytes.ends_with(self.end) {
            return Err(FrameError::NoEndMarker);
        }
        let body_end = bytes.len() - TRAILER_BYTES;
        let stored = u64::from_le_bytes(bytes[body_end..body_end + 8].try_into().expect("8 bytes"));
        let computed = xxh3_64(&bytes[..body_end]);
        if stored != computed {
            return Err(FrameError::Checksum { stored, computed });
        }
        Ok(&bytes[self.magic.len()..body_end])
    }
}

/// Hashes (xxh3-64) every byte read or written through it: the checksum of a framed file's
/// contents inside [`FrameWriter`] and [`FrameReader`], and, around one, the hash of a whole
/// file, trailer included, that names it (a hot-key file's fingerprint).
pub struct Hashing<T> {
    inner: T,
    hash: Xxh3,
}

impl<T> Hashing<T> {
    /// Starts hashing what goes through `inner`.
    pub fn new(inner: T) -> Hashing<T> {
        Hashing {
            inner,
            hash: Xxh3::new(),
        }
    }

    /// The hash of the bytes so far.
    pub fn digest(&self) -> u64 {
        self.hash.digest()
    }

    /// The reader or writer, after what went through it.
    pub fn into_inner(self) -> T {
        self.inner
    }
}

impl<W: Write> Write for Hashing<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hash.update(&buf[..n]);
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

impl<R: Read> Read for Hashing<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.hash.update(&buf[..n]);
        Ok(n)
    }
}

/// Writes a framed file: the magic at once, the contents through [`Write`] (or
/// [`FrameWriter::header`]), the trailer at [`FrameWriter::finish`].
pub struct FrameWriter<W: Write> {
    out: Hashing<W>,
    bytes: u64,
    end: &'static [u8; 8],
}

impl<W: Write> FrameWriter<W> {
    /// Starts a framed file of kind `frame` on `out`.
    pub fn new(out: W, frame: &Frame) -> io::Result<FrameWriter<W>> {
        let mut w = FrameWriter {
            out: Hashing::new(out),
            bytes: 0,
            end: frame.end,
        };
        w.write_all(frame.magic)?;
        Ok(w)
    }

    /// Writes a JSON header: its length as a `u64`, then the JSON of `header`.
    pub fn header<T: Serialize>(&mut self, header: &T) -> io::Result<()> {
        let json = serde_json::to_vec(header).map_err(io::Error::other)?;
        self.write_all(&(json.len() as u64).to_le_bytes())?;
        self.write_all(&json)
    }

    /// Bytes written so far (the magic included).
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// The checksum of the bytes written so far: the one [`FrameWriter::finish`] writes when
    /// nothing more is, which a file's readers may record to name this very file.
    pub fn checksum(&self) -> u64 {
        self.out.digest()
    }

    /// Writes the trailer and flushes; returns the sink and the file's size in bytes.
    pub fn finish(self) -> io::Result<(W, u64)> {
        let sum = self.out.digest();
        let mut out = self.out.into_inner();
        out.write_all(&sum.to_le_bytes())?;
        out.write_all(self.end)?;
        out.flush()?;
        Ok((out, self.bytes + TRAILER_BYTES as u64))
    }
}

impl<W: Write> Write for FrameWriter<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.out.write(buf)?;
        self.bytes += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }
}

/// Reads a framed file as a stream: its magic is checked at [`FrameReader::open`], the
/// contents read through [`Read`] (or [`FrameReader::header`]), then the trailer
/// ([`FrameReader::trailer`]).
pub struct FrameReader<R: Read> {
    input: Hashing<R>,
    end: &'static [u8; 8],
}

/// The trailer of a framed file read as a stream, and what the reader computed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Trailer {
    /// The checksum stored.
    pub stored: u64,
    /// The checksum of the bytes read before it.
    pub computed: u64,
    /// Whether the end marker followed it.
    pub ends: bool,
}

impl Trailer {
    /// The trailer's verdict: the end marker, then the checksum.
    pub fn check(&self) -> Result<(), FrameError> {
        if !self.ends {
            return Err(FrameError::NoEndMarker);
        }
        if self.stored != self.computed {
            return Err(FrameError::Checksum {
                stored: self.stored,
                computed: self.computed,
            });
        }
        Ok(())
    }
}

impl<R: Read> FrameReader<R> {
    /// Reads and checks the magic of kind `frame`.
    pub fn open(input: R, frame: &Frame) -> Result<FrameReader<R>, FrameError> {
        let mut input = Hashing::new(input);
        let mut magic = [0u8; 8];
        input
            .read_exact(&mut magic)
            .map_err(|error| FrameError::Short { error })?;
        if &magic != frame.magic {
            return Err(FrameError::OtherMagic);
        }
        Ok(FrameReader {
            input,
            end: frame.end,
        })
    }

    /// Reads a JSON header written by [`FrameWriter::header`].
    pub fn header<T: DeserializeOwned>(&mut self) -> Result<T, FrameError> {
        let truncated = |error| FrameError::Truncated { error };
        let mut len = [0u8; 8];
        self.read_exact(&mut len).map_err(truncated)?;
        let len = u64::from_le_bytes(len);
        if len > MAX_HEADER_BYTES {
            return Err(FrameError::HeaderLength(len));
        }
        let mut json = vec![0u8; len as usize];
        self.read_exact(&mut json).map_err(truncated)?;
        serde_json::from_slice(&json).map_err(FrameError::Header)
    }

    /// Reads the trailer (the contents must have been read to their end).
    pub fn trailer(&mut self) -> Result<Trailer, FrameError> {
        let computed = self.input.digest();
        let mut trailer = [0u8; TRAILER_BYTES];
        self.input
            .inner
            .read_exact(&mut trailer)
            .map_err(|error| FrameError::Truncated { error })?;
        let stored = u64::from_le_bytes(trailer[..8].try_into().expect("8 bytes"));
        Ok(Trailer {
            stored,
            computed,
            ends: &trailer[8..] == self.end,
        })
    }

    /// The input, after what was read of it.
    pub fn into_inner(self) -> R {
        self.input.into_inner()
    }
}

impl<R: Read> Read for FrameReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.input.read(buf)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEST: Frame = Frame {
        magic: b"NDTEST\x00\x01",
        end: b"NDTESTEN",
    };

    fn framed(header: &serde_json::Value, body: &[u8]) -> Vec<u8> {
        let mut w = FrameWriter::new(Vec::new(), &TEST).unwrap();
        w.header(header).unwrap();
        w.write_all(body).unwrap();
        let written = w.bytes();
        let checksum = w.checksum();
        let (bytes, size) = w.finish().unwrap();
        assert_eq!(
            &bytes[bytes.len() - 16..bytes.len() - 8],
            &checksum.to_le_bytes()
        );
        assert_eq!(size, written + 16);
        assert_eq!(size as usize, bytes.len());
        bytes
    }

    #[test]
    fn a_stream_and_a_value_frame_alike() {
        let header = serde_json::json!({"rows": 3});
        let bytes = framed(&header, b"body");
        // The layout: magic, header length and JSON, body, checksum of all that, end marker.
        let json = serde_json::to_vec(&header).unwrap();
        let mut want = TEST.magic.to_vec();
        want.extend_from_slice(&(json.len() as u64).to_le_bytes());
        want.extend_from_slice(&json);
        want.extend_from_slice(b"body");
        TEST.seal(&mut want);
        assert_eq!(bytes, want);
        assert_eq!(
            &bytes[bytes.len() - 16..bytes.len() - 8],
            &xxh3_64(&want[..want.len() - 16]).to_le_bytes()
        );

        let mut r = FrameReader::open(bytes.as_slice(), &TEST).unwrap();
        assert_eq!(r.header::<serde_json::Value>().unwrap(), header);
        let mut body = [0u8; 4];
        r.read_exact(&mut body).unwrap();
        assert_eq!(&body, b"body");
        r.trailer().unwrap().check().unwrap();
        assert!(r.into_inner().is_empty());

        assert!(TEST.begins(&bytes));
        let contents = TEST.contents(&bytes).unwrap();
        assert_eq!(contents.len(), 8 + json.len() + 4);
    }

    #[test]
    fn damage_is_told_apart() {
        let bytes = framed(&serde_json::json!({}), b"some contents");
        // Another kind, or too short for a magic.
        assert!(matches!(
            FrameReader::open(&b"NDOTHER\x00rest"[..], &TEST),
            Err(FrameError::OtherMagic)
        ));
        assert!(matches!(
            FrameReader::open(&bytes[..5], &TEST),
            Err(FrameError::Short { .. })
        ));
        // A flipped byte of the contents: the checksum.
        let mut flipped = bytes.clone();
        flipped[20] ^= 1;
        assert!(matches!(
            TEST.contents(&flipped),
            Err(FrameError::Checksum { .. })
        ));
        let mut r = FrameReader::open(flipped.as_slice(), &TEST).unwrap();
        r.header::<serde_json::Value>().unwrap();
        let mut body = vec![0u8; 13];
        r.read_exact(&mut body).unwrap();
        let trailer = r.trailer().unwrap();
        assert!(trailer.ends);
        assert!(matches!(trailer.check(), Err(FrameError::Checksum { .. })));
        // Cut short: no end marker; cut inside the trailer: truncated.
        let cut = &bytes[..bytes.len() - 1];
        assert!(matches!(TEST.contents(cut), Err(FrameError::NoEndMarker)));
        let mut r = FrameReader::open(cut, &TEST).unwrap();
        r.header::<serde_json::Value>().unwrap();
        r.read_exact(&mut body).unwrap();
        assert!(matches!(r.trailer(), Err(FrameError::Truncated { .. })));
        // A header length no file has.
        let mut long = TEST.magic.to_vec();
        long.extend_from_slice(&u64::MAX.to_le_bytes());
        let mut r = FrameReader::open(long.as_slice(), &TEST).unwrap();
        assert!(matches!(
            r.header::<serde_json::Value>(),
            Err(FrameError::HeaderLength(u64::MAX))
        ));
    }
}
