//! Input formats and their detection from file names.

use std::path::{Path, PathBuf};

/// Record format of an input or output file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    /// One JSON object per line (`.jsonl`, `.json`, `.ndjson`, optionally `.gz` / `.zst`).
    Jsonl,
    /// Apache Parquet (`.parquet`); compression is internal to the file.
    Parquet,
    /// Arrow record batches in memory ([`ArrowTable`](crate::ArrowTable)): never a file name's
    /// format, and never written out.
    Arrow,
}

/// Whole-file compression of a JSONL file (Parquet files always report [`Compression::None`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Compression {
    /// Plain bytes.
    None,
    /// gzip (`.gz`); multi-member streams are read to the end.
    Gzip,
    /// Zstandard (`.zst` / `.zstd`).
    Zstd,
}

/// One input file. `relative` is its path relative to the input argument that produced it (the
/// file name for a file argument, the path under the directory for a directory, the path under the
/// glob's literal prefix for a glob) — outputs go to `<out>/<relative>`.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct InputFile {
    /// Path as it can be opened (the argument joined with the walked components).
    pub path: PathBuf,
    /// Path of the output relative to the output directory.
    pub relative: PathBuf,
    /// Record format.
    pub format: Format,
    /// Whole-file compression.
    pub compression: Compression,
    /// Size on disk in bytes at discovery time.
    pub size: u64,
}

impl InputFile {
    /// Describes an existing file, detecting format and compression from its name; `forced`
    /// applies only when the name's extension says nothing about the format.
    /// Returns `None` when the format cannot be determined.
    pub fn detect(path: &Path, relative: &Path, forced: Option<Format>) -> Option<InputFile> {
        let name = path.file_name()?.to_string_lossy();
        let (format, compression) = detect_name(&name, forced)?;
        let size = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
        Some(InputFile {
            path: path.to_path_buf(),
            relative: relative.to_path_buf(),
            format,
            compression,
            size,
        })
    }
}

impl InputFile {
    /// Describes an object (`path` is its URL), detecting format and compression from its
    /// name as [`InputFile::detect`] does; `size` is the listed size.
    pub fn detect_object(
        url: &neardup_storage::ObjectUrl,
        relative: &Path,
        size: u64,
        forced: Option<Format>,
    ) -> Option<InputFile> {
        let (format, compression) = detect_name(url.file_name(), forced)?;
        Some(InputFile {
            path: PathBuf::from(url.to_string()),
            relative: relative.to_path_buf(),
            format,
            compression,
            size,
        })
    }

    /// The object this input is, when its path is an object storage URL.
    pub fn object_url(&self) -> Option<neardup_storage::ObjectUrl> {
        neardup_storage::ObjectUrl::from_path(&self.path)
    }
}

const JSONL_EXTS: [&str; 3] = ["jsonl", "json", "ndjson"];

/// Splits a lower-cased file name into (format, compression) by its extensions.
pub(crate) fn detect_name(name: &str, forced: Option<Format>) -> Option<(Format, Compression)> {
    let lower = name.to_ascii_lowercase();
    let (rest, compression) = if let Some(r) = lower.strip_suffix(".gz") {
        (r, Compression::Gzip)
    } else if let Some(r) = lower
        .strip_suffix(".zst")
        .or_else(|| lower.strip_suffix(".zstd"))
    {
        (r, Compression::Zstd)
    } else {
        (lower.as_str(), Compression::None)
    };
    let ext = rest.rsplit_once('.').map(|(_, e)| e).unwrap_or("");
    if JSONL_EXTS.contains(&ext) {
        return Some((Format::Jsonl, compression));
    }
    if ext == "parquet" || ext == "pq" {
        // A gzip'd Parquet file is not a format we can read record by record.
        return (compression == Compression::None).then_some((Format::Parquet, compression));
    }
    match forced {
        Some(Format::Jsonl) => Some((Format::Jsonl, compression)),
        Some(Format::Parquet) if compression == Compression::None => {
            Some((Format::Parquet, compression))
        }
        _ => None,
    }
}

/// Length of the file-name suffix that identifies the format (`.jsonl.gz`, `.parquet`, `.txt`, …),
/// so split parts can be named `<stem>-<n><suffix>`.
pub(crate) fn format_suffix_len(name: &str) -> usize {
    let lower = name.to_ascii_lowercase();
    let mut cut = lower.len();
    for comp in [".gz", ".zst", ".zstd"] {
        if lower.ends_with(comp) {
            cut -= comp.len();
            break;
        }
    }
    match lower[..cut].rfind('.') {
        Some(dot) if dot > 0 => name.len() - dot,
        _ => name.len() - cut,
    }
}

/// The size of the input file or object `path` now (for an object, a request), to compare with
/// [`InputFile::size`].
pub fn current_size(path: &Path) -> std::io::Result<u64> {
    neardup_storage::file::size(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detects_extensions() {
        assert_eq!(
            detect_name("a.jsonl", None),
            Some((Format::Jsonl, Compression::None))
        );
        assert_eq!(
            detect_name("a.JSON.GZ", None),
            Some((Format::Jsonl, Compression::Gzip))
        );
        assert_eq!(
            detect_name("a.jsonl.zst", None),
            Some((Format::Jsonl, Compression::Zstd))
        );
        assert_eq!(
            detect_name("a.parquet", None),
            Some((Format::Parquet, Compression::None))
        );
        assert_eq!(detect_name("a.parquet.gz", None), None);
        assert_eq!(detect_name("a.txt", None), None);
        assert_eq!(
            detect_name("a.txt.gz", Some(Format::Jsonl)),
            Some((Format::Jsonl, Compression::Gzip))
        );
        assert_eq!(
            detect_name("a.parquet", Some(Format::Jsonl)),
            Some((Format::Parquet, Compression::None))
        );
    }

    #[test]
    fn suffix_lengths() {
        assert_eq!(format_suffix_len("part-0.jsonl.gz"), ".jsonl.gz".len());
        assert_eq!(format_suffix_len("part-0.parquet"), ".parquet".len());
        assert_eq!(format_suffix_len("noext"), 0);
        assert_eq!(format_suffix_len("noext.zst"), ".zst".len());
        assert_eq!(format_suffix_len(".hidden"), 0);
    }
}
