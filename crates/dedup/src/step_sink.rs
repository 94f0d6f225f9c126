//! Where the streams of the distributed steps go ([`StepSink`]): a file of a publication,
//! memory, or a one-process run's scratch file. A leaf of the crate, so that the ranked order's
//! sorter (`rank_order`) and the steps (`distributed`) write through it alike.

use std::fs::File;
use std::io::{self, BufWriter, Write};

use neardup_corpus::AtomicFile;

/// Where one stream of a step goes: a file being published, or memory (for schedulers that pass
/// the steps' values as bytes).
pub struct StepSink {
    target: Target,
    bytes: u64,
}

enum Target {
    File(BufWriter<AtomicFile>),
    Memory(Vec<u8>),
    Scratch(BufWriter<File>),
}

impl StepSink {
    /// A sink writing to `file` (a file of a [`neardup_corpus::Publication`], committed by
    /// [`StepSink::finish`]).
    pub fn file(file: AtomicFile) -> StepSink {
        StepSink {
            target: Target::File(BufWriter::with_capacity(1 << 20, file)),
            bytes: 0,
        }
    }

    /// A sink writing to a scratch file (a one-process run's own steps, [`crate::run_dedup`]
    /// with a preference), read back through another handle of the file.
    pub(crate) fn scratch(file: File) -> StepSink {
        StepSink {
            target: Target::Scratch(BufWriter::with_capacity(1 << 20, file)),
            bytes: 0,
        }
    }

    /// A sink collecting the bytes in memory.
    pub fn memory() -> StepSink {
        StepSink {
            target: Target::Memory(Vec::new()),
            bytes: 0,
        }
    }

    /// Bytes written so far.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Flushes and commits a file (marking it ready to publish); returns the bytes of a memory
    /// sink.
    pub fn finish(self) -> io::Result<Option<Vec<u8>>> {
        match self.target {
            Target::File(w) => {
                let file = w.into_inner().map_err(|e| e.into_error())?;
                file.commit()?;
                Ok(None)
            }
            Target::Memory(bytes) => Ok(Some(bytes)),
            Target::Scratch(mut w) => {
                w.flush()?;
                Ok(None)
            }
        }
    }
}

impl Write for StepSink {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = match &mut self.target {
            Target::File(w) => w.write(buf)?,
            Target::Memory(v) => v.write(buf)?,
            Target::Scratch(w) => w.write(buf)?,
        };
        self.bytes += n as u64;
        Ok(n)
    }
    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        match &mut self.target {
            Target::File(w) => w.write_all(buf)?,
            Target::Memory(v) => v.write_all(buf)?,
            Target::Scratch(w) => w.write_all(buf)?,
        }
        self.bytes += buf.len() as u64;
        Ok(())
    }
    fn flush(&mut self) -> io::Result<()> {
        match &mut self.target {
            Target::File(w) => w.flush(),
            Target::Memory(_) => Ok(()),
            Target::Scratch(w) => w.flush(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Seek, SeekFrom};

    #[test]
    fn each_sink_counts_what_it_was_given_and_keeps_it() {
        let mut memory = StepSink::memory();
        memory.write_all(b"abc").unwrap();
        assert_eq!(memory.write(b"de").unwrap(), 2);
        assert_eq!(memory.bytes(), 5);
        assert_eq!(memory.finish().unwrap().as_deref(), Some(&b"abcde"[..]));

        // A scratch file is read back through another handle once the sink is finished.
        let file = tempfile::tempfile().unwrap();
        let mut again = file.try_clone().unwrap();
        let mut scratch = StepSink::scratch(file);
        scratch.write_all(b"signed").unwrap();
        assert_eq!(scratch.bytes(), 6);
        assert_eq!(scratch.finish().unwrap(), None);
        let mut read = String::new();
        again.seek(SeekFrom::Start(0)).unwrap();
        again.read_to_string(&mut read).unwrap();
        assert_eq!(read, "signed");
    }

    #[test]
    fn a_file_sink_commits_its_file_only_when_finished() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("stream-0");
        let mut sink = StepSink::file(AtomicFile::create(&path).unwrap());
        sink.write_all(b"decided").unwrap();
        sink.flush().unwrap();
        assert_eq!(sink.bytes(), 7);
        assert!(!path.exists(), "published before its sink was finished");
        assert_eq!(sink.finish().unwrap(), None);
        assert_eq!(std::fs::read(&path).unwrap(), b"decided");
    }
}
