//! The key table: one row of u64 keys per sample, and the map from rows back to input files.

use std::fs::File;
use std::io::{self, BufReader, BufWriter, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use neardup_corpus::frame::{Frame, FrameError, FrameReader, FrameWriter, TRAILER_BYTES};
use neardup_corpus::{
    AtomicFile, ChunkRange, FieldsMode, InputFile, ScratchFile, TextSelector, Unreadable,
};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::error::{
    Damage, Incompatible, KeysError, KeysSettingsError, LayoutDifference, TableName,
};
use crate::places::{PlacesEntry, RecordPlaces};
use crate::row::{RowRule, ShortTextPolicy};

/// Rows of one input file, in the order the file's samples were read.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileRows {
    /// The input file.
    pub input: InputFile,
    /// Records read from the file (JSONL lines, Parquet rows).
    pub records: u64,
    /// Rows (samples with a text) the file contributed, consecutive in the table.
    pub rows: u64,
    /// The chunks the file was read in, in order, with their counts: stage 2 reads the same chunks
    /// so that every worker knows the table row of each sample it reads.
    pub chunks: Vec<ChunkRows>,
}

/// Records and rows of one chunk of a file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChunkRows {
    /// The chunk's part of the file.
    pub range: ChunkRange,
    /// Records read from it.
    pub records: u64,
    /// Rows it contributed.
    pub rows: u64,
    /// Whether reading it met an error (some of its records are lost; see `unreadable`).
    pub read_error: bool,
    /// The records of the chunk that could not be read, chunk-local, in order: stage 2 reads up
    /// to the same places, so both stages see the same records. Empty (and left out of the
    /// table file) when the chunk was read whole.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unreadable: Vec<Unreadable>,
    /// Where each record lies, for a chunk of a JSONL file read whole (of a compressed file,
    /// one of several members or frames, see [`RecordPlaces`]) or of a Parquet file: stage 2 then reads only the
    /// records it has to decide. A key-table file holds them after its keys, not in its
    /// header's JSON (`docs/formats.md`); a chunk without places is read whole.
    #[serde(skip)]
    pub places: Option<RecordPlaces>,
}

impl ChunkRows {
    /// The records of the file this chunk covers, as far as known: those read and those lost
    /// (an unknown count adds nothing). The next chunk's records are numbered after these.
    pub fn records_spanned(&self) -> u64 {
        self.records
            + self
                .unreadable
                .iter()
                .map(|u| u.records.unwrap_or(0))
                .sum::<u64>()
    }
}

/// Which table a hot-key file was counted from: its shard, its rows and the checksum its file
/// ends with (the same for a table saved with [`KeyTable::save`] or streamed by
/// [`KeyTableWriter`], and computed for an in-memory table by [`KeyTable::identity`]). `apply`
/// must be given exactly the tables the hot keys were counted from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TableIdentity {
    /// The table's shard number.
    pub shard: u32,
    /// Its rows.
    pub rows: u64,
    /// The xxh3-64 checksum of its file.
    pub checksum: u64,
    /// Its input files: the files of the shards before it number a distributed run's files
    /// (a sample's file in the decisions is its shard's file count offset plus its own index).
    #[serde(default)]
    pub files: u64,
}

/// Everything a table's keys depend on; two tables can be merged only when their layouts match.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TableLayout {
    /// [`neardup_sketch::SketchConfig::fingerprint`] of the sketch settings.
    pub sketch_fingerprint: u64,
    /// Human-readable sketch settings, for error messages and reports.
    pub sketch_description: String,
    /// Band-key columns (the first columns; 0 when band keys are off).
    pub bands: usize,
    /// The per-sample rule (decides whether a content-key column follows the bands).
    pub rule: RowRule,
    /// How texts were selected from records.
    pub selector: TextSelector,
}

impl TableLayout {
    /// Columns per row.
    pub fn columns(&self) -> usize {
        self.bands + usize::from(self.rule.exact_key)
    }

    /// Errors when `other` was made with different settings, naming each setting that differs
    /// with this layout's value first.
    pub fn check_compatible(&self, other: &TableLayout) -> Result<(), KeysError> {
        if self == other {
            return Ok(());
        }
        Err(KeysError::Incompatible(Incompatible::Layout {
            differences: self.setting_differences(other),
        }))
    }

    /// The settings that differ between two layouts, each as `setting: this value vs other
    /// value`, settings named by their flags. Empty when the layouts are equal.
    pub fn differences(&self, other: &TableLayout) -> Vec<String> {
        self.setting_differences(other)
            .iter()
            .map(LayoutDifference::to_string)
            .collect()
    }

    /// The settings that differ between two layouts, this layout's values first. Empty when the
    /// layouts are equal.
    pub fn setting_differences(&self, other: &TableLayout) -> Vec<LayoutDifference> {
        let mut out = Vec::new();
        if self == other {
            return out;
        }
        let mut differ = |setting: &'static str, this: String, other: String| {
            if this != other {
                out.push(LayoutDifference::Setting {
                    setting,
                    this,
                    other,
                });
            }
        };
        let (a, b) = (
            SketchDescription::parse(&self.sketch_description),
            SketchDescription::parse(&other.sketch_description),
        );
        differ("--hash", a.get("scheme"), b.get("scheme"));
        differ("--num-perm", a.get("num_perm"), b.get("num_perm"));
        differ("--seed", a.get("seed"), b.get("seed"));
        differ(
            "shingles (--tokenize:--shingle:--step)",
            a.get("shingles"),
            b.get("shingles"),
        );
        differ(
            "bands × rows (--bands/--rows, or chosen from --threshold, --num-perm and --verify)",
            a.get("bands").replace('x', " × "),
            b.get("bands").replace('x', " × "),
        );
        differ("--band-keys", a.get("band_keys"), b.get("band_keys"));
        let on_off = |v: bool| if v { "on" } else { "off" }.to_string();
        differ(
            "near-duplicate band keys (off in `neardup exact`)",
            on_off(self.rule.band_keys),
            on_off(other.rule.band_keys),
        );
        differ(
            "content key (--no-exact turns it off)",
            on_off(self.rule.exact_key),
            on_off(other.rule.exact_key),
        );
        let short = |p: ShortTextPolicy| match p {
            ShortTextPolicy::ExactOnly => "exact_only".to_string(),
            ShortTextPolicy::EmptySignature => "empty_signature (--compat lshcurator)".to_string(),
        };
        differ(
            "short texts",
            short(self.rule.short_texts),
            short(other.rule.short_texts),
        );
        let fields = |s: &TextSelector| {
            s.fields
                .iter()
                .map(|f| f.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        };
        differ("--field", fields(&self.selector), fields(&other.selector));
        let mode = |s: &TextSelector| match &s.mode {
            FieldsMode::Join { .. } => "join".to_string(),
            FieldsMode::Expand => "expand".to_string(),
        };
        differ("--fields-mode", mode(&self.selector), mode(&other.selector));
        let separator = |s: &TextSelector| match &s.mode {
            FieldsMode::Join { separator } => {
                serde_json::to_string(separator).expect("a string serialises")
            }
            FieldsMode::Expand => "none".to_string(),
        };
        if mode(&self.selector) == mode(&other.selector) {
            differ(
                "the separator of joined fields (input.separator)",
                separator(&self.selector),
                separator(&other.selector),
            );
        }
        let id = |s: &TextSelector| s.id_field.as_ref().map_or("none".into(), |f| f.to_string());
        differ("--id-field", id(&self.selector), id(&other.selector));
        if out.is_empty() && self.sketch_fingerprint != other.sketch_fingerprint {
            // Everything the description shows is equal, so the fingerprint differs by what it
            // does not show: the normalisation.
            out.push(LayoutDifference::Normalisation {
                this: self.sketch_fingerprint,
                other: other.sketch_fingerprint,
            });
        }
        if out.is_empty() {
            out.push(LayoutDifference::Unnamed);
        }
        out
    }
}

/// The parts of [`TableLayout::sketch_description`] (`Oph num_perm=128 seed=1 shingles=char:5:1
/// bands=16x8 band_keys=Fast`), whose format is frozen in saved tables.
struct SketchDescription<'a> {
    parts: Vec<(&'a str, &'a str)>,
}

impl<'a> SketchDescription<'a> {
    fn parse(description: &'a str) -> SketchDescription<'a> {
        let mut words = description.split_whitespace();
        let mut parts: Vec<(&str, &str)> =
            words.next().map(|s| ("scheme", s)).into_iter().collect();
        parts.extend(words.filter_map(|w| w.split_once('=')));
        SketchDescription { parts }
    }

    /// The value of `key` as a user writes it (`Oph` → `oph`), or `?` when absent.
    fn get(&self, key: &str) -> String {
        self.parts
            .iter()
            .find(|(k, _)| *k == key)
            .map_or_else(|| "?".to_string(), |(_, v)| v.to_ascii_lowercase())
    }
}

/// Stage 1's product for one shard of the inputs: `rows × columns` keys, row-major.
///
/// Column `b < bands` holds band `b`'s bucket key; when the layout's rule has `exact_key`, the last
/// column holds the content key. [`neardup_sketch::NO_KEY`] marks "no key" (blank or short samples).
/// Rows follow the input order: file by file, record by record, field by field.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyTable {
    layout: TableLayout,
    /// Position of this shard among the shards of one run; global row ids are assigned by shard
    /// order when tables are merged.
    shard: u32,
    files: Vec<FileRows>,
    keys: Vec<u64>,
}

/// The framing of key-table files (see `docs/formats.md`, "Key table file").
const TABLE: Frame = Frame {
    magic: b"NDKEYS\x00\x01",
    end: b"NDKEYEND",
};

impl KeyTable {
    /// Assembles a table; `keys.len()` must be the files' total rows × columns.
    pub fn new(
        layout: TableLayout,
        shard: u32,
        files: Vec<FileRows>,
        keys: Vec<u64>,
    ) -> Result<KeyTable, KeysError> {
        let rows: u64 = files.iter().map(|f| f.rows).sum();
        if rows as usize * layout.columns() != keys.len() {
            return Err(KeysError::Corrupt {
                path: None,
                damage: Damage::KeyCount {
                    keys: keys.len() as u64,
                    rows,
                    columns: layout.columns(),
                    written: false,
                },
            });
        }
        Ok(KeyTable {
            layout,
            shard,
            files,
            keys,
        })
    }

    /// The settings the keys were made with.
    pub fn layout(&self) -> &TableLayout {
        &self.layout
    }
    /// This table's shard number.
    pub fn shard(&self) -> u32 {
        self.shard
    }
    /// The input files and their row counts, in row order.
    pub fn files(&self) -> &[FileRows] {
        &self.files
    }
    /// Number of rows.
    pub fn rows(&self) -> usize {
        self.keys.len() / self.layout.columns().max(1)
    }
    /// Columns per row.
    pub fn columns(&self) -> usize {
        self.layout.columns()
    }
    /// All keys, row-major.
    pub fn keys(&self) -> &[u64] {
        &self.keys
    }
    /// The keys of one row.
    pub fn row(&self, row: usize) -> &[u64] {
        let c = self.columns();
        &self.keys[row * c..(row + 1) * c]
    }
    /// Bytes of key storage per row (8 × columns).
    pub fn bytes_per_row(&self) -> usize {
        8 * self.columns()
    }

    /// Which table this is, as a hot-key file records it: shard, rows, and the checksum
    /// [`KeyTable::save`] would end the file with (computed by hashing the file's bytes without
    /// writing them).
    pub fn identity(&self) -> TableIdentity {
        let mut out = FrameWriter::new(io::sink(), &TABLE).expect("writing to a sink cannot fail");
        self.write_body(&mut out)
            .expect("writing to a sink cannot fail");
        TableIdentity {
            shard: self.shard,
            rows: self.rows() as u64,
            checksum: out.checksum(),
            files: self.files.len() as u64,
        }
    }

    /// Whether a file starting with `head` (its first 8 bytes or more) is a key table (of any
    /// version: every version has the same magic).
    pub fn starts_like_table(head: &[u8]) -> bool {
        TABLE.begins(head)
    }

    /// Writes the table atomically (see `docs/formats.md`, "Key table file").
    pub fn save(&self, path: &Path) -> Result<(), KeysError> {
        let file = AtomicFile::create(path).map_err(|e| KeysError::io(path, e))?;
        let mut buf = BufWriter::with_capacity(1 << 20, file);
        self.write_to(&mut buf)
            .map_err(|e| KeysError::io(path, e))?;
        let file = buf
            .into_inner()
            .map_err(|e| KeysError::io(path, e.into_error()))?;
        file.commit().map_err(|e| KeysError::io(path, e))
    }

    /// The bytes [`KeyTable::save`] writes, in memory (for schedulers that pass tables as values).
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut bytes = Vec::with_capacity(self.keys.len() * 8 + 4096);
        self.write_to(&mut bytes)
            .expect("writing to memory cannot fail");
        bytes
    }

    /// Writes everything the checksum covers: the header, the keys, the records' places.
    fn write_body<W: Write>(&self, out: &mut FrameWriter<W>) -> io::Result<()> {
        let header = TableHeader::new(self.layout.clone(), self.shard, self.files.clone());
        out.header(&header)?;
        write_u64s(out, &self.keys)?;
        for f in &self.files {
            for c in &f.chunks {
                if let Some(places) = &c.places {
                    for part in places.encoded() {
                        out.write_all(part)?;
                    }
                }
            }
        }
        Ok(())
    }

    fn write_to<W: Write>(&self, out: W) -> io::Result<()> {
        let mut out = FrameWriter::new(out, &TABLE)?;
        self.write_body(&mut out)?;
        out.finish().map(drop)
    }

    /// Reads a table written by [`KeyTable::save`] (its records' places too), verifying its
    /// checksum.
    pub fn load(path: &Path) -> Result<KeyTable, KeysError> {
        let mut reader = TableReader::open(path)?;
        reader.keep_places(u64::MAX);
        let mut keys = Vec::with_capacity(reader.keys_left().min(1 << 30) as usize);
        while reader.read_keys(usize::MAX, &mut keys)? > 0 {}
        let header = reader.finish()?;
        KeyTable::new(header.layout, header.shard, header.files, keys).map_err(|e| e.in_file(path))
    }

    /// Reads a table from the bytes of [`KeyTable::to_bytes`] (or of a table file), verifying
    /// its checksum.
    pub fn from_bytes(bytes: &[u8]) -> Result<KeyTable, KeysError> {
        let name = Path::new(BYTES_NAME);
        let (mut input, mut header) = open_framed::<_, TableHeader>(bytes, &TABLE, name)?;
        let keys_left = check_header(&header, name)?;
        if keys_left.saturating_mul(8) > bytes.len() as u64 {
            return Err(truncated(name, io::ErrorKind::UnexpectedEof.into()));
        }
        let keys = read_u64s(&mut input, keys_left as usize).map_err(|e| truncated(name, e))?;
        let places = read_places(&mut input, &header.places, name)?;
        finish_framed(input, &TABLE, name)?;
        header.attach_places(places, name)?;
        KeyTable::new(header.layout, header.shard, header.files, keys).map_err(|e| e.in_file(name))
    }
}

/// How messages name a table or hot-key set read from bytes rather than a file.
pub(crate) const BYTES_NAME: &str = "<bytes>";

/// The version of the key-table files this build writes: 2 carries the records' places after
/// the keys. Version 1 (no places: stage 2 reads such a table's inputs whole) is still read.
const TABLE_VERSION: u32 = 2;

/// Checks a table header's version and row counts; returns the number of keys that follow.
fn check_header(header: &TableHeader, path: &Path) -> Result<u64, KeysError> {
    if !(1..=TABLE_VERSION).contains(&header.format_version)
        || (header.format_version == 1 && !header.places.is_empty())
    {
        return Err(KeysError::corrupt(
            path,
            Damage::FormatVersion {
                what: "key table",
                found: header.format_version,
                supported: TABLE_VERSION,
            },
        ));
    }
    let files_rows: u64 = header.files.iter().map(|f| f.rows).sum();
    if files_rows != header.rows {
        return Err(KeysError::corrupt(
            path,
            Damage::DeclaredRows {
                files_rows,
                declared: header.rows,
            },
        ));
    }
    header
        .rows
        .checked_mul(header.layout.columns() as u64)
        .ok_or_else(|| KeysError::corrupt(path, Damage::ImplausibleSize))
}

/// Writes a key table file as its rows are produced, holding none of them: for a shard whose table
/// would not fit in memory (`neardup keys`). The rows go to a scratch file beside the table
/// (`.neardup-<id>.rows`, see [`neardup_corpus::ScratchFile`]); when the header (which lists
/// every file's row counts) is known, [`KeyTableWriter::finish`] writes the table — the same
/// bytes [`KeyTable::save`] writes for the same table — into its [`AtomicFile`] and removes the
/// scratch file. Dropped unfinished, it leaves nothing behind.
pub struct KeyTableWriter {
    target: AtomicFile,
    columns: usize,
    rows_file: ScratchFile,
    body: BufWriter<File>,
    keys: u64,
    buf: Vec<u8>,
    /// The records' places pushed so far wait in their own scratch file
    /// (`.neardup-<id>.places`), made with the first.
    places_file: Option<(ScratchFile, BufWriter<File>)>,
    /// What the header says of each chunk's places, in the order they were pushed.
    places: Vec<PlacesEntry>,
}

impl KeyTableWriter {
    /// Starts a table of `columns` keys per row, to be written at `path` on its own.
    pub fn create(path: &Path, columns: usize) -> Result<KeyTableWriter, KeysError> {
        let target = AtomicFile::create(path).map_err(|e| KeysError::io(path, e))?;
        KeyTableWriter::to_file(target, columns)
    }

    /// Starts a table of `columns` keys per row, written into `target` (e.g. one output of a
    /// [`neardup_corpus::Publication`], published with the run's report).
    pub fn to_file(target: AtomicFile, columns: usize) -> Result<KeyTableWriter, KeysError> {
        let path = target.path().to_path_buf();
        // The rows wait beside the table; a table going to object storage has no "beside", and
        // they wait in the temporary directory (TMPDIR).
        let temp;
        let dir = match path.parent() {
            _ if neardup_storage::is_url_path(&path) => {
                temp = std::env::temp_dir();
                &temp
            }
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        let rows_file = ScratchFile::create(dir, "rows").map_err(|e| KeysError::io(dir, e))?;
        let body = rows_file
            .file()
            .try_clone()
            .map_err(|e| KeysError::io(rows_file.path(), e))?;
        Ok(KeyTableWriter {
            target,
            columns: columns.max(1),
            rows_file,
            body: BufWriter::with_capacity(1 << 20, body),
            keys: 0,
            buf: Vec::new(),
            places_file: None,
            places: Vec::new(),
        })
    }

    /// Adds the places of the records of chunk `chunk` of file `file` (the files
    /// [`KeyTableWriter::finish`] is given; chunks pushed in file and chunk order), which the
    /// table holds after its keys, so stage 2's steps read only the records they have to: they
    /// go to a scratch file, not memory.
    pub fn push_places(
        &mut self,
        file: usize,
        chunk: usize,
        places: &RecordPlaces,
    ) -> Result<(), KeysError> {
        if self.places_file.is_none() {
            let dir = self.rows_file.path().parent().unwrap_or(Path::new("."));
            let scratch = ScratchFile::create(dir, "places").map_err(|e| KeysError::io(dir, e))?;
            let out = scratch
                .file()
                .try_clone()
                .map_err(|e| KeysError::io(scratch.path(), e))?;
            self.places_file = Some((scratch, BufWriter::with_capacity(1 << 16, out)));
        }
        let (scratch, out) = self.places_file.as_mut().expect("made above");
        for part in places.encoded() {
            out.write_all(part)
                .map_err(|e| KeysError::io(scratch.path(), e))?;
        }
        self.places.push(places.entry(file, chunk));
        Ok(())
    }

    /// Appends rows (row-major, whole rows).
    pub fn push_rows(&mut self, keys: &[u64]) -> Result<(), KeysError> {
        assert!(
            keys.len().is_multiple_of(self.columns),
            "rows are pushed whole"
        );
        self.buf.clear();
        self.buf.reserve(keys.len() * 8);
        for k in keys {
            self.buf.extend_from_slice(&k.to_le_bytes());
        }
        self.body
            .write_all(&self.buf)
            .map_err(|e| KeysError::io(self.rows_file.path(), e))?;
        self.keys += keys.len() as u64;
        Ok(())
    }

    /// Rows pushed so far.
    pub fn rows(&self) -> u64 {
        self.keys / self.columns as u64
    }

    /// Writes the table file: header, the pushed rows, checksum and end marker.
    pub fn finish(
        self,
        layout: TableLayout,
        shard: u32,
        files: Vec<FileRows>,
    ) -> Result<(), KeysError> {
        let path = self.target.path().to_path_buf();
        let io_err = |e: io::Error| KeysError::io(&path, e);
        let rows: u64 = files.iter().map(|f| f.rows).sum();
        if layout.columns() != self.columns || rows * self.columns as u64 != self.keys {
            return Err(KeysError::corrupt(
                &path,
                Damage::KeyCount {
                    keys: self.keys,
                    rows,
                    columns: layout.columns(),
                    written: true,
                },
            ));
        }
        let scratch = self.rows_file.path().to_path_buf();
        let mut body = self
            .body
            .into_inner()
            .map_err(|e| KeysError::io(&scratch, e.into_error()))?;
        body.seek(SeekFrom::Start(0))
            .map_err(|e| KeysError::io(&scratch, e))?;
        let mut out = FrameWriter::new(BufWriter::with_capacity(1 << 20, self.target), &TABLE)
            .map_err(io_err)?;
        let header = TableHeader::with_places(layout, shard, files, self.places);
        let places_bytes = header.places_bytes();
        out.header(&header).map_err(io_err)?;
        let copied = io::copy(&mut (&mut body).take(self.keys * 8), &mut out).map_err(io_err)?;
        if copied != self.keys * 8 {
            return Err(KeysError::corrupt(
                &path,
                Damage::ScratchSize {
                    copied,
                    written: self.keys * 8,
                },
            ));
        }
        if let Some((scratch, places)) = self.places_file {
            let mut places = places
                .into_inner()
                .map_err(|e| KeysError::io(scratch.path(), e.into_error()))?;
            places
                .seek(SeekFrom::Start(0))
                .map_err(|e| KeysError::io(scratch.path(), e))?;
            let copied =
                io::copy(&mut (&mut places).take(places_bytes), &mut out).map_err(io_err)?;
            if copied != places_bytes {
                return Err(KeysError::corrupt(
                    &path,
                    Damage::ScratchSize {
                        copied,
                        written: places_bytes,
                    },
                ));
            }
        }
        let (buf, _) = out.finish().map_err(io_err)?;
        let file = buf.into_inner().map_err(|e| io_err(e.into_error()))?;
        drop(body);
        drop(self.rows_file);
        file.commit().map_err(io_err)
    }
}

/// Reads a saved key table sequentially, a bounded number of keys at a time, so that shards'
/// tables can be merged or turned into a hot mask without holding them: the header (settings,
/// shard, files) is available at once, the keys follow in row order, and
/// [`TableReader::finish`] verifies the checksum once everything was read.
pub struct TableReader {
    path: PathBuf,
    header: TableHeader,
    input: FrameReader<BufReader<Box<dyn Read + Send>>>,
    keys_left: u64,
    buf: Vec<u8>,
    /// Whether [`TableReader::finish`] keeps the records' places ([`TableReader::keep_places`]).
    keep_places: bool,
}

impl TableReader {
    /// Opens a table file (or object, `path` holding its URL) and reads its header.
    pub fn open(path: &Path) -> Result<TableReader, KeysError> {
        let file = neardup_storage::file::open(path).map_err(|e| KeysError::io(path, e))?;
        let (input, header) =
            open_framed::<_, TableHeader>(BufReader::with_capacity(1 << 20, file), &TABLE, path)?;
        let keys_left = check_header(&header, path)?;
        Ok(TableReader {
            path: path.to_path_buf(),
            header,
            input,
            keys_left,
            buf: Vec::new(),
            keep_places: false,
        })
    }

    /// The bytes of the records' places the table holds after its keys (0 for a table of
    /// version 1, or without any).
    pub fn places_bytes(&self) -> u64 {
        self.header.places_bytes()
    }

    /// Has [`TableReader::finish`] give the files' chunks the places of their records (see
    /// [`ChunkRows::places`]) if they take at most `budget` bytes; returns whether it will.
    /// Without, they are read through (and checked) but not kept.
    pub fn keep_places(&mut self, budget: u64) -> bool {
        self.keep_places = self.places_bytes() <= budget && !self.header.places.is_empty();
        self.keep_places
    }

    /// The table's settings.
    pub fn layout(&self) -> &TableLayout {
        &self.header.layout
    }
    /// The shard number.
    pub fn shard(&self) -> u32 {
        self.header.shard
    }
    /// Per-file row ranges, in row order.
    pub fn files(&self) -> &[FileRows] {
        &self.header.files
    }
    /// Rows in the table.
    pub fn rows(&self) -> u64 {
        self.header.rows
    }
    /// Keys not read yet.
    pub fn keys_left(&self) -> u64 {
        self.keys_left
    }

    /// Appends up to `max` of the next keys (whole rows when `max` is a multiple of the column
    /// count) to `out`; returns how many, 0 at the end.
    pub fn read_keys(&mut self, max: usize, out: &mut Vec<u64>) -> Result<usize, KeysError> {
        let mut done = 0usize;
        while done < max && self.keys_left > 0 {
            let take = (max - done).min(8192).min(self.keys_left as usize);
            self.buf.resize(take * 8, 0);
            self.input
                .read_exact(&mut self.buf)
                .map_err(|e| truncated(&self.path, e))?;
            out.extend(
                self.buf
                    .chunks_exact(8)
                    .map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes"))),
            );
            done += take;
            self.keys_left -= take as u64;
        }
        Ok(done)
    }

    /// Verifies the checksum and end marker after all keys were read; returns the header parts
    /// (with the records' places, as [`TableReader::keep_places`] asked).
    pub fn finish(mut self) -> Result<TableParts, KeysError> {
        if self.keys_left > 0 {
            return Err(KeysSettingsError::KeysLeft {
                path: self.path.clone(),
                left: self.keys_left,
            }
            .into());
        }
        let places = if self.keep_places {
            read_places(&mut self.input, &self.header.places, &self.path)?
        } else {
            skip_places(&mut self.input, self.header.places_bytes(), &self.path)?;
            Vec::new()
        };
        finish_framed(self.input, &TABLE, &self.path)?;
        if self.keep_places {
            self.header.attach_places(places, &self.path)?;
        }
        Ok(TableParts {
            layout: self.header.layout,
            shard: self.header.shard,
            files: self.header.files,
        })
    }
}

/// Checks that tables share one layout and that no shard number repeats; returns the layout.
/// Tables are named by their file when they have one.
pub(crate) fn check_shards<'a>(
    tables: impl IntoIterator<Item = (u32, &'a TableLayout, Option<&'a Path>)>,
) -> Result<&'a TableLayout, KeysError> {
    let name = |shard: u32, path: Option<&Path>| TableName {
        shard,
        path: path.map(Path::to_path_buf),
    };
    let mut first: Option<(u32, &TableLayout, Option<&Path>)> = None;
    let mut shards: Vec<(u32, Option<&Path>)> = Vec::new();
    for (shard, l, path) in tables {
        match first {
            Some((first_shard, first_layout, first_path)) if first_layout != l => {
                return Err(KeysError::Incompatible(Incompatible::Tables {
                    first: name(first_shard, first_path),
                    other: name(shard, path),
                    differences: first_layout.setting_differences(l),
                }));
            }
            Some(_) => {}
            None => first = Some((shard, l, path)),
        }
        if let Some((_, other)) = shards.iter().find(|(s, _)| *s == shard) {
            return Err(KeysSettingsError::SameShard {
                first: name(shard, *other),
                other: name(shard, path),
            }
            .into());
        }
        shards.push((shard, path));
    }
    first
        .map(|(_, layout, _)| layout)
        .ok_or_else(|| KeysSettingsError::NoTables.into())
}

/// The saved tables of all shards of a run, from their headers and trailers only (nothing is
/// loaded): in shard order, checked to share one layout and to have distinct shard numbers.
pub struct ShardTables {
    /// The bytes of each table's records' places (after its keys), and where they start in
    /// its file, in the same order: [`ShardTables::load_places`] reads them.
    places: Vec<(Vec<PlacesEntry>, u64)>,
    /// The layout all tables share.
    pub layout: TableLayout,
    /// The table files, in shard order.
    pub paths: Vec<PathBuf>,
    /// Rows of each table, in the same order.
    pub rows: Vec<u64>,
    /// Each table's identity, in the same order: the checksum is the one the file ends with,
    /// verified when the table is read through.
    pub identities: Vec<TableIdentity>,
    /// The input files of all tables, in row order.
    pub files: Vec<FileRows>,
}

impl ShardTables {
    /// Reads the headers of `paths` (in any order) and orders them by shard number.
    pub fn open(paths: &[PathBuf]) -> Result<ShardTables, KeysError> {
        let mut headers = Vec::with_capacity(paths.len());
        for p in paths {
            let r = TableReader::open(p)?;
            let identity = TableIdentity {
                shard: r.shard(),
                rows: r.rows(),
                checksum: stored_checksum(p)?,
                files: r.files().len() as u64,
            };
            let places_bytes = r.header.places_bytes();
            let places = (r.header.places, places_bytes);
            headers.push((identity, r.header.layout, p.clone(), r.header.files, places));
        }
        let layout = check_shards(
            headers
                .iter()
                .map(|(id, layout, path, ..)| (id.shard, layout, Some(path.as_path()))),
        )?
        .clone();
        headers.sort_by_key(|(id, ..)| id.shard);
        let mut tables = ShardTables {
            places: Vec::with_capacity(headers.len()),
            layout,
            paths: Vec::with_capacity(headers.len()),
            rows: Vec::with_capacity(headers.len()),
            identities: Vec::with_capacity(headers.len()),
            files: Vec::new(),
        };
        for (identity, _, path, files, places) in headers {
            tables.places.push(places);
            tables.paths.push(path);
            tables.rows.push(identity.rows);
            tables.identities.push(identity);
            tables.files.extend(files);
        }
        Ok(tables)
    }

    /// Keys in all tables together.
    pub fn total_keys(&self) -> u64 {
        self.rows.iter().sum::<u64>() * self.layout.columns() as u64
    }

    /// Gives the files' chunks the places of their records ([`ChunkRows::places`]) that the
    /// tables hold, table by table in shard order while they fit in `budget` bytes, each read
    /// from its table's end alone (one request for an object) and checked against its header.
    /// Their checksum is the table's, verified when the table is read through (as every step
    /// that reads a table's inputs does first, to build its hot mask).
    pub fn load_places(&mut self, mut budget: u64) -> Result<(), KeysError> {
        let mut file_base = 0usize;
        for (t, (entries, bytes)) in self.places.iter().enumerate() {
            let path = &self.paths[t];
            let files = self.identities[t].files as usize;
            if entries.is_empty() || *bytes > budget {
                file_base += files;
                continue;
            }
            budget -= bytes;
            let end = neardup_storage::file::read_end(path, bytes + TRAILER_BYTES as u64)
                .map_err(|e| KeysError::io(path, e))?;
            if end.len() as u64 != bytes + TRAILER_BYTES as u64 {
                return Err(truncated(path, io::ErrorKind::UnexpectedEof.into()));
            }
            let data = read_places(&mut &end[..*bytes as usize], entries, path)?;
            let mut header = TableHeader::with_places(
                self.layout.clone(),
                self.identities[t].shard,
                self.files[file_base..file_base + files].to_vec(),
                entries.clone(),
            );
            header.attach_places(data, path)?;
            for (at, f) in header.files.into_iter().enumerate() {
                self.files[file_base + at] = f;
            }
            file_base += files;
        }
        Ok(())
    }
}

/// The checksum a table file ends with (before its end marker), read without reading the rest.
fn stored_checksum(path: &Path) -> Result<u64, KeysError> {
    let end = neardup_storage::file::read_end(path, TRAILER_BYTES as u64)
        .map_err(|e| KeysError::io(path, e))?;
    let trailer: [u8; TRAILER_BYTES] = end
        .try_into()
        .map_err(|_| truncated(path, io::ErrorKind::UnexpectedEof.into()))?;
    if &trailer[8..] != TABLE.end {
        return Err(KeysError::corrupt(path, Damage::MissingEndMarker));
    }
    Ok(u64::from_le_bytes(
        trailer[..8].try_into().expect("8 bytes"),
    ))
}

/// The header of a table read with [`TableReader`], once its checksum was verified.
pub struct TableParts {
    /// The table's settings.
    pub layout: TableLayout,
    /// The shard number.
    pub shard: u32,
    /// Per-file row ranges, in row order.
    pub files: Vec<FileRows>,
}

#[derive(Serialize, Deserialize)]
struct TableHeader {
    format_version: u32,
    layout: TableLayout,
    shard: u32,
    files: Vec<FileRows>,
    rows: u64,
    /// The chunks whose records' places follow the keys, in the order their bytes do.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    places: Vec<PlacesEntry>,
}

impl TableHeader {
    /// The header of a table of `files`, listing the places its chunks hold.
    fn new(layout: TableLayout, shard: u32, files: Vec<FileRows>) -> TableHeader {
        let mut places = Vec::new();
        for (fi, f) in files.iter().enumerate() {
            for (ci, c) in f.chunks.iter().enumerate() {
                if let Some(p) = &c.places {
                    places.push(p.entry(fi, ci));
                }
            }
        }
        TableHeader::with_places(layout, shard, files, places)
    }

    fn with_places(
        layout: TableLayout,
        shard: u32,
        files: Vec<FileRows>,
        places: Vec<PlacesEntry>,
    ) -> TableHeader {
        TableHeader {
            format_version: TABLE_VERSION,
            layout,
            shard,
            rows: files.iter().map(|f| f.rows).sum(),
            files,
            places,
        }
    }

    /// The bytes of the places that follow the keys.
    fn places_bytes(&self) -> u64 {
        self.places.iter().map(|p| p.bytes).sum()
    }

    /// Gives each chunk its places read back ([`read_places`]), each checked against what the
    /// header says of it.
    fn attach_places(&mut self, places: Vec<Vec<u8>>, path: &Path) -> Result<(), KeysError> {
        for (entry, data) in self.places.iter().zip(places) {
            let damaged = || {
                KeysError::corrupt(
                    path,
                    Damage::Places {
                        file: entry.file,
                        chunk: entry.chunk,
                    },
                )
            };
            let chunk = usize::try_from(entry.file)
                .ok()
                .and_then(|f| self.files.get_mut(f))
                .and_then(|f| f.chunks.get_mut(usize::try_from(entry.chunk).ok()?))
                .ok_or_else(damaged)?;
            if chunk.places.is_some() || chunk.records != entry.records {
                return Err(damaged());
            }
            chunk.places = Some(RecordPlaces::decode(entry, data, chunk.rows).ok_or_else(damaged)?);
        }
        Ok(())
    }
}

/// Reads the places that follow a table's keys (`entries`, from its header), each chunk's
/// encoding apart.
fn read_places<R: Read>(
    input: &mut R,
    entries: &[PlacesEntry],
    path: &Path,
) -> Result<Vec<Vec<u8>>, KeysError> {
    let mut out = Vec::with_capacity(entries.len());
    for e in entries {
        let mut data = Vec::new();
        let read = input
            .take(e.bytes)
            .read_to_end(&mut data)
            .map_err(|e| truncated(path, e))?;
        if read as u64 != e.bytes {
            return Err(truncated(path, io::ErrorKind::UnexpectedEof.into()));
        }
        out.push(data);
    }
    Ok(out)
}

/// Reads through the places that follow a table's keys without keeping them (their bytes still
/// go through the checksum).
fn skip_places<R: Read>(input: &mut R, bytes: u64, path: &Path) -> Result<(), KeysError> {
    let skipped =
        io::copy(&mut input.take(bytes), &mut io::sink()).map_err(|e| truncated(path, e))?;
    if skipped != bytes {
        return Err(truncated(path, io::ErrorKind::UnexpectedEof.into()));
    }
    Ok(())
}

/// Opens a file framed as `frame` (`neardup_corpus::frame`) and reads its JSON header; damage
/// to either is the keys' own [`Damage`] of the file at `path`.
pub(crate) fn open_framed<R: Read, T: DeserializeOwned>(
    input: R,
    frame: &Frame,
    path: &Path,
) -> Result<(FrameReader<R>, T), KeysError> {
    let damaged = |e| frame_damage(frame, path, e);
    let mut input = FrameReader::open(input, frame).map_err(damaged)?;
    let header = input.header().map_err(damaged)?;
    Ok((input, header))
}

/// Checks the trailer of a framed file whose contents were read (its end marker, then its
/// checksum), and that nothing follows it.
pub(crate) fn finish_framed<R: Read>(
    mut input: FrameReader<R>,
    frame: &Frame,
    path: &Path,
) -> Result<(), KeysError> {
    input
        .trailer()
        .and_then(|trailer| trailer.check())
        .map_err(|e| frame_damage(frame, path, e))?;
    let mut extra = [0u8; 1];
    if input
        .into_inner()
        .read(&mut extra)
        .map_err(|e| KeysError::io(path, e))?
        != 0
    {
        return Err(KeysError::corrupt(path, Damage::TrailingBytes));
    }
    Ok(())
}

/// What damage to the framing of a key-table or hot-key file is, in these files' own words: a
/// read that ends early is [`Damage::Truncated`] (another failed read an I/O error), another
/// kind's file is [`Damage::BadMagic`] naming the kind expected.
fn frame_damage(frame: &Frame, path: &Path, e: FrameError) -> KeysError {
    let damage = match e {
        FrameError::Short { error } | FrameError::Truncated { error } => {
            return truncated(path, error);
        }
        FrameError::OtherMagic => Damage::BadMagic {
            kind: String::from_utf8_lossy(&frame.magic[..6]).into_owned(),
        },
        FrameError::HeaderLength(len) => Damage::HeaderLength(len),
        FrameError::Header(e) => Damage::Header(e),
        FrameError::NoEndMarker => Damage::MissingEndMarker,
        FrameError::Checksum { stored, computed } => Damage::Checksum { stored, computed },
    };
    KeysError::corrupt(path, damage)
}

pub(crate) fn write_u64s<W: Write>(out: &mut W, values: &[u64]) -> io::Result<()> {
    let mut buf = Vec::with_capacity(64 * 1024);
    for chunk in values.chunks(8 * 1024) {
        buf.clear();
        for v in chunk {
            buf.extend_from_slice(&v.to_le_bytes());
        }
        out.write_all(&buf)?;
    }
    Ok(())
}

pub(crate) fn read_u64s<R: Read>(input: &mut R, n: usize) -> io::Result<Vec<u64>> {
    let mut values = Vec::with_capacity(n);
    let mut buf = vec![0u8; 64 * 1024];
    let mut left = n;
    while left > 0 {
        let take = left.min(buf.len() / 8);
        input.read_exact(&mut buf[..take * 8])?;
        values.extend(
            buf[..take * 8]
                .chunks_exact(8)
                .map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes"))),
        );
        left -= take;
    }
    Ok(values)
}

pub(crate) fn truncated(path: &Path, e: io::Error) -> KeysError {
    if e.kind() == io::ErrorKind::UnexpectedEof {
        KeysError::corrupt(path, Damage::Truncated(e))
    } else {
        KeysError::io(path, e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hot::HotKeys;
    use neardup_corpus::{Compression, FieldPath, FieldsMode, Format};

    fn table() -> KeyTable {
        let layout = TableLayout {
            sketch_fingerprint: 0x5eed,
            sketch_description: "test".into(),
            bands: 2,
            rule: RowRule::default(),
            selector: TextSelector {
                fields: vec![FieldPath::top("text")],
                mode: FieldsMode::Expand,
                id_field: None,
                rank_field: None,
            },
        };
        let file = |name: &str, rows: u64| FileRows {
            input: InputFile {
                path: name.into(),
                relative: name.into(),
                format: Format::Jsonl,
                compression: Compression::None,
                size: 10,
            },
            records: rows + 1,
            rows,
            chunks: Vec::new(),
        };
        let keys = (1..=9u64)
            .map(|k| k.wrapping_mul(0x9e37_79b9_7f4a_7c15))
            .collect();
        KeyTable::new(
            layout,
            3,
            vec![file("a.jsonl", 1), file("b.jsonl", 2)],
            keys,
        )
        .unwrap()
    }

    #[test]
    fn table_bytes_are_the_saved_file_and_read_back() {
        let t = table();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.ndk");
        t.save(&path).unwrap();
        let bytes = t.to_bytes();
        assert_eq!(bytes, std::fs::read(&path).unwrap());
        assert_eq!(KeyTable::from_bytes(&bytes).unwrap(), t);
        assert_eq!(KeyTable::load(&path).unwrap(), t);
    }

    #[test]
    fn damaged_table_bytes_are_refused() {
        let bytes = table().to_bytes();
        let err = |b: &[u8]| KeyTable::from_bytes(b).unwrap_err().to_string();
        assert!(err(&bytes[..bytes.len() - 1]).contains("truncated"));
        assert!(err(&bytes[..40]).contains("truncated"));
        let mut flipped = bytes.clone();
        let at = bytes.len() - 30;
        flipped[at] ^= 1;
        assert!(err(&flipped).contains("checksum mismatch"));
        assert!(err(b"NDHOTK\x00\x01rest").contains("bad magic"));
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(err(&longer).contains("trailing bytes"));
    }

    #[test]
    fn damage_is_refused_with_its_file_its_values_and_its_source() {
        use std::error::Error as _;
        let bytes = table().to_bytes();
        let mut flipped = bytes.clone();
        let at = bytes.len() - 30;
        flipped[at] ^= 1;
        match KeyTable::from_bytes(&flipped).unwrap_err() {
            KeysError::Corrupt {
                path: Some(path),
                damage: Damage::Checksum { stored, computed },
            } => {
                assert_eq!(path, Path::new(BYTES_NAME));
                assert_ne!(stored, computed);
            }
            other => panic!("{other:?}"),
        }
        let truncated = KeyTable::from_bytes(&bytes[..40]).unwrap_err();
        let KeysError::Corrupt {
            damage: Damage::Truncated(read),
            ..
        } = &truncated
        else {
            panic!("{truncated:?}")
        };
        assert_eq!(read.kind(), io::ErrorKind::UnexpectedEof);
        // The error's message prints the damage, so it is not its source (a chain would print
        // it twice); the read's error, which the damage's message does not print, is the
        // damage's.
        assert!(truncated.source().is_none());
        let KeysError::Corrupt { damage, .. } = &truncated else {
            unreachable!()
        };
        let read_again = damage.source().and_then(|e| e.downcast_ref::<io::Error>());
        assert_eq!(
            read_again.map(io::Error::kind),
            Some(io::ErrorKind::UnexpectedEof)
        );
        // Rows that do not fill the declared table: no file yet, then the file named.
        let t = table();
        let err = KeyTable::new(t.layout().clone(), 0, t.files().to_vec(), vec![1]).unwrap_err();
        assert!(
            matches!(
                &err,
                KeysError::Corrupt {
                    path: None,
                    damage: Damage::KeyCount { keys: 1, .. }
                }
            ),
            "{err:?}"
        );
        assert!(
            err.in_file(Path::new("t.ndk"))
                .to_string()
                .starts_with("t.ndk: table holds 1 keys")
        );
    }

    #[test]
    fn hot_key_bytes_are_the_saved_file_and_read_back() {
        let t = table();
        let in_run = HotKeys::new(t.layout().clone(), 1, vec![3, 17, 99]);
        assert!(in_run.to_bytes().is_err(), "in-run keys name no tables");
        let hot = in_run.counted_from(vec![t.identity()]);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("h.ndh");
        hot.save(&path).unwrap();
        let bytes = hot.to_bytes().unwrap();
        assert_eq!(bytes, std::fs::read(&path).unwrap());
        assert_eq!(HotKeys::from_bytes(&bytes).unwrap(), hot);
        assert_eq!(HotKeys::load(&path).unwrap(), hot);
        let err = HotKeys::from_bytes(&bytes[..bytes.len() - 9]).unwrap_err();
        assert!(err.to_string().starts_with("<bytes>: "), "{err}");
        assert!(HotKeys::from_bytes(&t.to_bytes()).is_err());
    }

    /// [`table`] whose first file was read in one chunk of two records, one of them placed
    /// and plain, the other a blank line.
    fn table_with_places() -> KeyTable {
        let t = table();
        let mut files = t.files().to_vec();
        let mut places = RecordPlaces::new(0, 1);
        places.push(6, 1, true);
        places.push(4, 0, false);
        files[0].chunks.push(ChunkRows {
            range: ChunkRange::Whole,
            records: 2,
            rows: 1,
            read_error: false,
            unreadable: Vec::new(),
            places: Some(places),
        });
        files[1].chunks.push(ChunkRows {
            range: ChunkRange::Whole,
            records: 3,
            rows: 2,
            read_error: false,
            unreadable: Vec::new(),
            places: None,
        });
        KeyTable::new(t.layout().clone(), t.shard(), files, t.keys().to_vec()).unwrap()
    }

    /// The bytes of `table` as a file of `version` (1: as builds before places wrote them,
    /// without the places), its checksum right.
    fn table_bytes_of_version(table: &KeyTable, version: u32) -> Vec<u8> {
        let mut files = table.files().to_vec();
        for f in &mut files {
            for c in &mut f.chunks {
                c.places = None;
            }
        }
        let mut header = TableHeader::new(table.layout().clone(), table.shard(), files);
        header.format_version = version;
        let mut out = FrameWriter::new(Vec::new(), &TABLE).unwrap();
        out.header(&header).unwrap();
        write_u64s(&mut out, table.keys()).unwrap();
        out.finish().unwrap().0
    }

    #[test]
    fn tables_carry_their_records_places_and_version_1_files_are_still_read() {
        let t = table_with_places();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.ndk");
        t.save(&path).unwrap();
        let bytes = t.to_bytes();
        assert_eq!(bytes, std::fs::read(&path).unwrap());
        assert_eq!(KeyTable::from_bytes(&bytes).unwrap(), t);
        assert_eq!(KeyTable::load(&path).unwrap(), t);
        assert_eq!(t.identity().checksum, stored_checksum(&path).unwrap());
        // Streamed, the places waiting in a scratch file: the same bytes.
        let streamed = dir.path().join("s.ndk");
        let mut w = KeyTableWriter::create(&streamed, t.columns()).unwrap();
        w.push_rows(t.keys()).unwrap();
        w.push_places(0, 0, t.files()[0].chunks[0].places.as_ref().unwrap())
            .unwrap();
        let mut files = t.files().to_vec();
        files[0].chunks[0].places = None;
        w.finish(t.layout().clone(), t.shard(), files).unwrap();
        assert_eq!(std::fs::read(&streamed).unwrap(), bytes);
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names.len(), 2, "no scratch file is left: {names:?}");
        // A reader keeps them within its budget, or reads them through unkept.
        let read = |budget: u64| {
            let mut r = TableReader::open(&path).unwrap();
            assert_eq!(r.places_bytes(), 3);
            r.keep_places(budget);
            let mut keys = Vec::new();
            while r.read_keys(4, &mut keys).unwrap() > 0 {}
            assert_eq!(keys, t.keys());
            r.finish().unwrap().files
        };
        assert_eq!(read(3), t.files());
        assert!(read(2)[0].chunks[0].places.is_none());
        // From the table's end alone.
        let mut shards = ShardTables::open(std::slice::from_ref(&path)).unwrap();
        assert!(shards.files[0].chunks[0].places.is_none());
        shards.load_places(2).unwrap();
        assert!(shards.files[0].chunks[0].places.is_none());
        shards.load_places(3).unwrap();
        assert_eq!(shards.files, t.files());
        // A version 1 file (no places) is read; its chunks are read whole by stage 2.
        let v1 = table_bytes_of_version(&t, 1);
        let back = KeyTable::from_bytes(&v1).unwrap();
        assert!(back.files()[0].chunks[0].places.is_none());
        assert_eq!(back.keys(), t.keys());
        let v1_path = dir.path().join("v1.ndk");
        std::fs::write(&v1_path, &v1).unwrap();
        let mut shards = ShardTables::open(std::slice::from_ref(&v1_path)).unwrap();
        shards.load_places(u64::MAX).unwrap();
        assert_eq!(shards.files, back.files());
        assert_eq!(KeyTable::load(&v1_path).unwrap(), back);
        // A newer version is refused, saying so.
        let err = KeyTable::from_bytes(&table_bytes_of_version(&t, 3)).unwrap_err();
        assert!(
            err.to_string().contains(
                "key table format version 3 is not supported (this build reads versions up to 2)"
            ),
            "{err}"
        );
    }

    /// Files written before the key table moved onto `neardup_corpus::frame`
    /// (`crates/keys/tests/data/table-v2.ndk`): written byte for byte the same, and read.
    #[test]
    fn the_bytes_of_a_table_file_are_unchanged() {
        let t = table_with_places();
        let committed: &[u8] = include_bytes!("../tests/data/table-v2.ndk");
        assert_eq!(t.to_bytes(), committed);
        assert_eq!(KeyTable::from_bytes(committed).unwrap(), t);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.ndk");
        t.save(&path).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), committed);
        assert_eq!(t.identity().checksum, stored_checksum(&path).unwrap());
    }

    /// Every way a key-table or hot-key file's framing can be damaged gets the message it had
    /// before the files moved onto `neardup_corpus::frame`, naming the file, read from bytes,
    /// from a file and (tables) streamed.
    #[test]
    fn damage_to_the_framing_of_either_file_keeps_its_message() {
        let t = table_with_places();
        let hot =
            HotKeys::new(t.layout().clone(), 1, vec![3, 17, 99]).counted_from(vec![t.identity()]);
        let table_bytes = t.to_bytes();
        let hot_bytes = hot.to_bytes().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("damaged");
        // Each file's messages from bytes, then from a file (loaded whole, and for a table
        // opened and read through as `apply` does), the file's name first.
        let messages = |bytes: &[u8], table: bool| -> Vec<String> {
            std::fs::write(&path, bytes).unwrap();
            let named = format!("{}: ", path.display());
            let from_file = |e: KeysError| {
                let message = e.to_string();
                message
                    .strip_prefix(&named)
                    .unwrap_or_else(|| panic!("{message}"))
                    .to_string()
            };
            if table {
                let streamed = TableReader::open(&path).and_then(|mut r| {
                    while r.read_keys(2, &mut Vec::new())? > 0 {}
                    r.finish()
                });
                let from_bytes = KeyTable::from_bytes(bytes).unwrap_err().to_string();
                vec![
                    from_bytes.strip_prefix("<bytes>: ").unwrap().to_string(),
                    from_file(KeyTable::load(&path).unwrap_err()),
                    from_file(streamed.err().unwrap()),
                ]
            } else {
                let from_bytes = HotKeys::from_bytes(bytes).unwrap_err().to_string();
                vec![
                    from_bytes.strip_prefix("<bytes>: ").unwrap().to_string(),
                    from_file(HotKeys::load(&path).unwrap_err()),
                    from_file(crate::HotSummary::load(&path).unwrap_err()),
                ]
            }
        };
        let check = |bytes: &[u8], table: bool, want: &str| {
            for message in messages(bytes, table) {
                assert!(message.starts_with(want), "{want:?}: {message:?}");
            }
        };
        for (bytes, table, kind) in [
            (&table_bytes, true, "NDKEYS"),
            (&hot_bytes, false, "NDHOTK"),
        ] {
            let magic = &bytes[..8];
            check(&[], table, "file is truncated");
            check(&magic[..5], table, "file is truncated");
            let other: &[u8] = if table { &hot_bytes } else { &table_bytes };
            check(
                other,
                table,
                &format!("not a neardup {kind} file (bad magic bytes)"),
            );
            let with_header = |len: u64, json: &[u8]| {
                let mut b = magic.to_vec();
                b.extend_from_slice(&len.to_le_bytes());
                b.extend_from_slice(json);
                b
            };
            check(
                &with_header(u64::MAX, b""),
                table,
                "implausible header length 18446744073709551615",
            );
            check(&with_header(3, b"xyz"), table, "unreadable header: ");
            check(&with_header(100, b"{}"), table, "file is truncated");
            check(&bytes[..bytes.len() - 1], table, "file is truncated");
            let mut no_end = bytes.clone();
            *no_end.last_mut().unwrap() ^= 1;
            check(&no_end, table, "missing end marker (truncated?)");
            let mut flipped = bytes.clone();
            flipped[bytes.len() - 17] ^= 1;
            check(&flipped, table, "checksum mismatch (stored ");
            let mut longer = bytes.clone();
            longer.push(0);
            check(&longer, table, "trailing bytes after end marker");
        }
        // A read that fails otherwise than by ending is the file's I/O error.
        let failed = frame_damage(
            &TABLE,
            Path::new("t.ndk"),
            FrameError::Truncated {
                error: io::Error::other("the disk is gone"),
            },
        );
        assert!(matches!(failed, KeysError::Io { .. }), "{failed:?}");
        assert!(failed.to_string().contains("the disk is gone"), "{failed}");
    }

    #[test]
    fn places_that_are_not_what_the_header_says_are_refused() {
        let t = table_with_places();
        let bytes = t.to_bytes();
        // A byte of the places changed: the checksum.
        let mut flipped = bytes.clone();
        let at = bytes.len() - 17;
        flipped[at] ^= 1;
        let err = KeyTable::from_bytes(&flipped).unwrap_err().to_string();
        assert!(err.contains("checksum mismatch"), "{err}");
        // Places that disagree with their chunk, the checksum right: named as such.
        let mut lying = t.clone();
        lying.files[0].chunks[0].places = Some({
            let mut p = RecordPlaces::new(0, 1);
            p.push(6, 1, true);
            p
        });
        let err = KeyTable::from_bytes(&lying.to_bytes()).unwrap_err();
        assert!(
            matches!(
                err,
                KeysError::Corrupt {
                    damage: Damage::Places { file: 0, chunk: 0 },
                    ..
                }
            ),
            "{err:?}"
        );
        assert!(
            err.to_string()
                .contains("the places of the records of chunk 0 of input 0")
        );
    }

    #[test]
    fn merging_borrowed_tables_equals_merging_owned_ones() {
        let t = table();
        let owned = crate::merge_tables(std::slice::from_ref(&t), 0).unwrap();
        let borrowed = crate::merge_tables(&[&t], 0).unwrap();
        assert_eq!(owned.0, borrowed.0);
        assert_eq!(owned.1, borrowed.1);
        assert_eq!(owned.0.len(), 9);
    }
}
