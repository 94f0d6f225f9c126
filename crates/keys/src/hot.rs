//! The key-frequency filter's products: the hot-key set and the per-row hot mask.

use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::Path;

use hashbrown::HashSet;
use neardup_corpus::AtomicFile;
use neardup_sketch::NO_KEY;
use serde::{Deserialize, Serialize};

use crate::error::KeysError;
use crate::table::{
    BYTES_NAME, ChecksumReader, ChecksumWriter, FileRows, KeyTable, ShardTables, TableLayout,
    TableReader, read_framed_header, read_u64s, truncated, verify_trailer, write_framed_header,
    write_u64s,
};

/// Builds a [`HotMask`] from keys given in row order, in pieces of any size.
struct MaskMarker {
    mask: HotMask,
    set: HashSet<u64>,
    columns: usize,
    content_col: Option<usize>,
    /// Hot content keys seen so far: a later row with one is a later exact copy.
    first_seen: HashSet<u64>,
    /// Position of the next key.
    pos: usize,
}

impl MaskMarker {
    fn new(hot: &HotKeys, rows: usize, columns: usize) -> MaskMarker {
        MaskMarker {
            mask: HotMask::new(rows, columns),
            set: hot.lookup(),
            columns,
            content_col: hot.layout().rule.exact_key.then(|| columns - 1),
            first_seen: HashSet::new(),
            pos: 0,
        }
    }

    fn mark(&mut self, keys: &[u64]) {
        for key in keys {
            let pos = self.pos;
            self.pos += 1;
            if *key != NO_KEY && self.set.contains(key) {
                self.mask.set_position(pos);
                if self.content_col == Some(pos % self.columns) && !self.first_seen.insert(*key) {
                    self.mask.set_later_copy(pos / self.columns);
                }
            }
        }
    }
}

/// The keys seen more than `min_count` times, sorted ascending, with the settings they came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HotKeys {
    layout: TableLayout,
    min_count: u32,
    keys: Vec<u64>,
}

const HOT_MAGIC: &[u8; 8] = b"NDHOTK\x00\x01";
const HOT_END: &[u8; 8] = b"NDHOTEND";

#[derive(Serialize, Deserialize)]
struct HotHeader {
    format_version: u32,
    layout: TableLayout,
    min_count: u32,
    keys: u64,
}

impl HotKeys {
    /// Wraps an ascending, duplicate-free key list.
    pub fn new(layout: TableLayout, min_count: u32, keys: Vec<u64>) -> HotKeys {
        debug_assert!(keys.windows(2).all(|w| w[0] < w[1]));
        HotKeys {
            layout,
            min_count,
            keys,
        }
    }
    /// The settings of the tables the keys were counted from.
    pub fn layout(&self) -> &TableLayout {
        &self.layout
    }
    /// A key is hot when seen more than this many times.
    pub fn min_count(&self) -> u32 {
        self.min_count
    }
    /// The hot keys, ascending.
    pub fn keys(&self) -> &[u64] {
        &self.keys
    }
    /// Number of hot keys.
    pub fn len(&self) -> usize {
        self.keys.len()
    }
    /// True when no key is hot.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }
    /// Whether `key` is hot (binary search; build a [`HotKeys::lookup`] set for many queries).
    pub fn contains(&self, key: u64) -> bool {
        self.keys.binary_search(&key).is_ok()
    }
    /// A hash set of the hot keys for fast membership tests.
    pub fn lookup(&self) -> HashSet<u64> {
        self.keys.iter().copied().collect()
    }

    /// Writes the hot-key file atomically (see `docs/formats.md`, "Hot-key file").
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

    /// The bytes [`HotKeys::save`] writes, in memory (for schedulers that pass them as values).
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut bytes = Vec::with_capacity(self.keys.len() * 8 + 4096);
        self.write_to(&mut bytes)
            .expect("writing to memory cannot fail");
        bytes
    }

    fn write_to<W: Write>(&self, out: W) -> std::io::Result<()> {
        let mut out = ChecksumWriter::new(out);
        let header = HotHeader {
            format_version: 1,
            layout: self.layout.clone(),
            min_count: self.min_count,
            keys: self.keys.len() as u64,
        };
        write_framed_header(&mut out, HOT_MAGIC, &header)?;
        write_u64s(&mut out, &self.keys)?;
        let (mut out, sum) = out.finish();
        out.write_all(&sum.to_le_bytes())?;
        out.write_all(HOT_END)
    }

    /// Reads a hot-key file, verifying its checksum and order.
    pub fn load(path: &Path) -> Result<HotKeys, KeysError> {
        let file = File::open(path).map_err(|e| KeysError::io(path, e))?;
        Self::read_from(BufReader::with_capacity(1 << 20, file), path, u64::MAX)
    }

    /// Reads hot keys from the bytes of [`HotKeys::to_bytes`] (or of a hot-key file), verifying
    /// their checksum and order.
    pub fn from_bytes(bytes: &[u8]) -> Result<HotKeys, KeysError> {
        Self::read_from(bytes, Path::new(BYTES_NAME), bytes.len() as u64)
    }

    /// Reads a hot-key file's contents from `input`; `size` bounds the keys it can hold.
    fn read_from<R: Read>(input: R, path: &Path, size: u64) -> Result<HotKeys, KeysError> {
        let mut input = ChecksumReader::new(input);
        let header: HotHeader = read_framed_header(&mut input, HOT_MAGIC, path)?;
        if header.format_version != 1 {
            return Err(KeysError::Corrupt(format!(
                "{}: hot-key format version {} is not supported (this build reads version 1)",
                path.display(),
                header.format_version
            )));
        }
        if header.keys.saturating_mul(8) > size {
            return Err(truncated(path, std::io::ErrorKind::UnexpectedEof.into()));
        }
        let keys = read_u64s(&mut input, header.keys as usize).map_err(|e| truncated(path, e))?;
        verify_trailer(input, path, HOT_END)?;
        if !keys.windows(2).all(|w| w[0] < w[1]) {
            return Err(KeysError::Corrupt(format!(
                "{}: hot keys are not strictly ascending",
                path.display()
            )));
        }
        Ok(HotKeys {
            layout: header.layout,
            min_count: header.min_count,
            keys,
        })
    }
}

/// One bit per (row, column): set when that key of that row is hot. A row with no bit set is
/// unique and stage 2 never looks at it again.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HotMask {
    columns: usize,
    rows: usize,
    bits: Vec<u64>,
    /// One bit per row: its content key is hot and an earlier row has the same one.
    copies: Vec<u64>,
}

impl HotMask {
    /// An all-cold mask.
    pub fn new(rows: usize, columns: usize) -> HotMask {
        HotMask {
            columns,
            rows,
            bits: vec![0; (rows * columns).div_ceil(64)],
            copies: vec![0; rows.div_ceil(64)],
        }
    }

    pub(crate) fn from_bits(
        rows: usize,
        columns: usize,
        bits: Vec<u64>,
        copies: Vec<u64>,
    ) -> HotMask {
        debug_assert_eq!(bits.len(), (rows * columns).div_ceil(64));
        debug_assert_eq!(copies.len(), rows.div_ceil(64));
        HotMask {
            columns,
            rows,
            bits,
            copies,
        }
    }

    /// The mask of the rows of `tables` (consecutive shards, in order) under `hot`: what stage 2
    /// needs when it runs apart from stage 1, given a hot-key file and the shards' tables.
    pub fn from_tables(tables: &[&KeyTable], hot: &HotKeys) -> Result<HotMask, KeysError> {
        let Some(first) = tables.first() else {
            return Ok(HotMask::new(0, 0));
        };
        for t in tables {
            t.layout().check_compatible(hot.layout())?;
        }
        let rows = tables.iter().map(|t| t.rows()).sum();
        let mut marker = MaskMarker::new(hot, rows, first.columns());
        for t in tables {
            marker.mark(t.keys());
        }
        Ok(marker.mask)
    }

    /// [`HotMask::from_tables`] over saved tables, reading each sequentially instead of holding
    /// them; also returns all their files' row ranges, in row order.
    pub fn from_table_files(
        tables: &ShardTables,
        hot: &HotKeys,
    ) -> Result<(HotMask, Vec<FileRows>), KeysError> {
        tables.layout.check_compatible(hot.layout())?;
        let rows = tables.rows.iter().sum::<u64>() as usize;
        let mut marker = MaskMarker::new(hot, rows, tables.layout.columns());
        let mut files = Vec::new();
        let mut block = Vec::new();
        for p in &tables.paths {
            let mut reader = TableReader::open(p)?;
            loop {
                block.clear();
                if reader.read_keys(1 << 20, &mut block)? == 0 {
                    break;
                }
                marker.mark(&block);
            }
            files.extend(reader.finish()?.files);
        }
        Ok((marker.mask, files))
    }

    pub(crate) fn set_later_copy(&mut self, row: usize) {
        self.copies[row / 64] |= 1 << (row % 64);
    }

    /// Whether `row`'s content key is hot and first appeared in an earlier row: the row is an
    /// exact-copy candidate that needs no signature (stage 2 still confirms the full hash).
    pub fn is_later_copy(&self, row: usize) -> bool {
        self.copies[row / 64] >> (row % 64) & 1 == 1
    }

    pub(crate) fn set_position(&mut self, pos: usize) {
        self.bits[pos / 64] |= 1 << (pos % 64);
    }
    fn get_position(&self, pos: usize) -> bool {
        self.bits[pos / 64] >> (pos % 64) & 1 == 1
    }

    /// Rows covered.
    pub fn rows(&self) -> usize {
        self.rows
    }
    /// Columns per row.
    pub fn columns(&self) -> usize {
        self.columns
    }
    /// Whether column `col` of `row` holds a hot key.
    pub fn is_hot(&self, row: usize, col: usize) -> bool {
        self.get_position(row * self.columns + col)
    }
    /// Whether any key of `row` is hot.
    pub fn is_hot_row(&self, row: usize) -> bool {
        let start = row * self.columns;
        (start..start + self.columns).any(|p| self.get_position(p))
    }
    /// Number of rows with at least one hot key.
    pub fn hot_rows(&self) -> usize {
        (0..self.rows).filter(|&r| self.is_hot_row(r)).count()
    }
    /// Bytes held.
    pub fn heap_bytes(&self) -> usize {
        self.bits.len() * 8
    }
}
