//! Reading a local file or an object alike, by a path that may hold a URL: what the steps of a
//! run pass one another (key tables, hot-key files, sign and decide outputs) is read this way,
//! so each of them may live on a local disk, shared storage or object storage.
//!
//! Errors are I/O errors without the path (callers name the file themselves); a missing file or
//! object is [`std::io::ErrorKind::NotFound`], and a failed storage request is recognised by
//! [`crate::is_storage_failure`].

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::path::Path;

use crate::client::StorageError;
use crate::location::ObjectUrl;
use crate::read::{ObjectReader, head};

/// The object `path` names, when it is a URL; an error when it names a known scheme but no
/// object (`s3:///key`).
fn object_of(path: &Path) -> io::Result<Option<ObjectUrl>> {
    let Some(text) = path.to_str() else {
        return Ok(None);
    };
    ObjectUrl::parse(text).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e.to_string()))
}

/// The size of the object `url`; a missing object is a `NotFound` error.
fn object_size(url: &ObjectUrl) -> io::Result<u64> {
    match head(url) {
        Ok(Some(size)) => Ok(size),
        Ok(None) => Err(StorageError::not_found(url, "no such object").into_unnamed_io()),
        Err(e) => Err(e.into_unnamed_io()),
    }
}

/// Opens the file or object `path` for a sequential read from its start (an object streams in
/// ranged requests with read-ahead, see [`ObjectReader`]).
pub fn open(path: &Path) -> io::Result<Box<dyn Read + Send>> {
    match object_of(path)? {
        Some(url) => {
            let size = object_size(&url)?;
            let reader =
                ObjectReader::open(&url, size, 0, u64::MAX).map_err(|e| e.into_unnamed_io())?;
            Ok(Box::new(reader))
        }
        None => Ok(Box::new(File::open(path)?)),
    }
}

/// The whole file or object `path`.
pub fn read(path: &Path) -> io::Result<Vec<u8>> {
    match object_of(path)? {
        Some(url) => {
            let size = object_size(&url)?;
            let mut reader =
                ObjectReader::open(&url, size, 0, u64::MAX).map_err(|e| e.into_unnamed_io())?;
            let mut bytes = Vec::with_capacity(size as usize);
            reader.read_to_end(&mut bytes)?;
            Ok(bytes)
        }
        None => std::fs::read(path),
    }
}

/// The last `len` bytes of the file or object `path` (all of it when it is shorter), read
/// without the rest.
pub fn read_end(path: &Path, len: u64) -> io::Result<Vec<u8>> {
    let mut bytes = Vec::new();
    match object_of(path)? {
        Some(url) => {
            let size = object_size(&url)?;
            let start = size.saturating_sub(len);
            ObjectReader::open(&url, size, start, size)
                .map_err(|e| e.into_unnamed_io())?
                .read_to_end(&mut bytes)?;
        }
        None => {
            let mut file = File::open(path)?;
            let size = file.metadata()?.len();
            file.seek(SeekFrom::Start(size.saturating_sub(len)))?;
            file.read_to_end(&mut bytes)?;
        }
    }
    Ok(bytes)
}

/// The size of the file or object `path` now (for an object, a request).
pub fn size(path: &Path) -> io::Result<u64> {
    match object_of(path)? {
        Some(url) => object_size(&url),
        None => Ok(std::fs::metadata(path)?.len()),
    }
}

/// Whether the file or object `path` exists (for an object, a request; its failure is an
/// error, not a "no").
pub fn exists(path: &Path) -> io::Result<bool> {
    match object_of(path)? {
        Some(url) => head(&url)
            .map(|s| s.is_some())
            .map_err(|e| e.into_unnamed_io()),
        None => match std::fs::metadata(path) {
            Ok(_) => Ok(true),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(e),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_files_read_whole_from_the_end_and_as_streams() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f.bin");
        std::fs::write(&p, b"0123456789").unwrap();
        assert_eq!(read(&p).unwrap(), b"0123456789");
        assert_eq!(read_end(&p, 4).unwrap(), b"6789");
        assert_eq!(read_end(&p, 40).unwrap(), b"0123456789");
        let mut s = Vec::new();
        open(&p).unwrap().read_to_end(&mut s).unwrap();
        assert_eq!(s, b"0123456789");
        assert!(exists(&p).unwrap());
        let missing = dir.path().join("g.bin");
        assert!(!exists(&missing).unwrap());
        assert_eq!(read(&missing).unwrap_err().kind(), io::ErrorKind::NotFound);
        assert_eq!(
            read(Path::new("s3:///k")).unwrap_err().kind(),
            io::ErrorKind::InvalidInput
        );
    }
}
