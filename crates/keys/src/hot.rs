//! The key-frequency filter's products: the hot-key set and the per-row hot mask.

use std::io::{BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use hashbrown::HashSet;
use neardup_corpus::AtomicFile;
use neardup_corpus::frame::{Frame, FrameReader, FrameWriter, Hashing};
use neardup_scratch::{Backing, ScratchVec};
use neardup_sketch::NO_KEY;
use serde::{Deserialize, Serialize};

use crate::error::{Damage, KeysError, KeysSettingsError, TableName, TableProblem};
use crate::index::SortedKeyIndex;
use crate::plan::{Plan, PlanBuilder};
use crate::table::{
    BYTES_NAME, FileRows, KeyTable, ShardTables, TableIdentity, TableLayout, TableReader,
    finish_framed, open_framed, truncated, write_u64s,
};

/// Opens a hot-key file and reads and checks its header.
fn read_hot_header<R: Read>(
    input: R,
    path: &Path,
) -> Result<(FrameReader<R>, HotHeader), KeysError> {
    let (input, header) = open_framed::<_, HotHeader>(input, &HOT, path)?;
    if header.format_version == 1 {
        return Err(KeysSettingsError::HotFileVersion1 {
            path: path.to_path_buf(),
        }
        .into());
    }
    if header.format_version != HOT_FORMAT_VERSION {
        return Err(KeysError::corrupt(
            path,
            Damage::FormatVersion {
                what: "hot-key",
                found: header.format_version,
                supported: HOT_FORMAT_VERSION,
            },
        ));
    }
    Ok((input, header))
}

/// Reads what follows a hot-key file's header — its keys, its plan's group per key — and its
/// trailer, handing each key to `key` and each group to `group`. The whole is checked: the
/// checksum first (a damaged file is reported as damaged), then that the keys ascend strictly
/// and that every group is within the plan.
fn read_hot_body<R: Read>(
    mut input: FrameReader<R>,
    header: &HotHeader,
    path: &Path,
    mut key: impl FnMut(u64),
    mut group: impl FnMut(u32),
) -> Result<(), KeysError> {
    let mut buf = vec![0u8; 64 * 1024];
    let (mut previous, mut ascending) = (None::<u64>, true);
    read_values(&mut input, &mut buf, header.keys, path, |b: [u8; 8]| {
        let k = u64::from_le_bytes(b);
        ascending &= previous.is_none_or(|p| p < k);
        previous = Some(k);
        key(k);
    })?;
    let mut within_plan = true;
    if let Some(plan) = &header.plan {
        within_plan = plan.groups > 0;
        read_values(&mut input, &mut buf, header.keys, path, |b: [u8; 4]| {
            let g = u32::from_le_bytes(b);
            within_plan &= g < plan.groups;
            group(g);
        })?;
    }
    finish_framed(input, &HOT, path)?;
    if !ascending {
        return Err(KeysError::corrupt(path, Damage::NotAscending));
    }
    if let (Some(plan), false) = (&header.plan, within_plan) {
        return Err(KeysError::corrupt(
            path,
            Damage::PlanGroup {
                groups: plan.groups,
            },
        ));
    }
    Ok(())
}

/// Reads `n` little-endian values of `W` bytes through `buf`, handing each to `each`.
fn read_values<R: Read, const W: usize>(
    input: &mut R,
    buf: &mut [u8],
    n: u64,
    path: &Path,
    mut each: impl FnMut([u8; W]),
) -> Result<(), KeysError> {
    let mut left = n;
    while left > 0 {
        let take = left.min((buf.len() / W) as u64) as usize;
        input
            .read_exact(&mut buf[..take * W])
            .map_err(|e| truncated(path, e))?;
        for b in buf[..take * W].chunks_exact(W) {
            each(b.try_into().expect("W bytes"));
        }
        left -= take as u64;
    }
    Ok(())
}

/// What a hot-key file says about itself, without its keys: its settings, the tables it was
/// counted from, its groups and its fingerprint ([`HotKeys::fingerprint`]). All that a `decide`
/// step needs of it: loading it reads and checks the whole file but holds none of its keys, so
/// a decide step's memory does not grow with the corpus's hot keys.
#[derive(Clone, Debug)]
pub struct HotSummary {
    layout: TableLayout,
    keys: u64,
    tables: Vec<TableIdentity>,
    groups: u32,
    fingerprint: u64,
    /// The file it was read from (not part of its identity: see `PartialEq`).
    source: Option<PathBuf>,
}

/// Two summaries are equal when they summarise the same keys, wherever they were read from.
impl PartialEq for HotSummary {
    fn eq(&self, other: &HotSummary) -> bool {
        (
            &self.layout,
            self.keys,
            &self.tables,
            self.groups,
            self.fingerprint,
        ) == (
            &other.layout,
            other.keys,
            &other.tables,
            other.groups,
            other.fingerprint,
        )
    }
}

impl Eq for HotSummary {}

impl HotSummary {
    /// Reads a hot-key file, checking it as [`HotKeys::load`] does (checksum, key order, plan),
    /// and keeps only its summary. Its fingerprint is the hash of the file's bytes, which are
    /// the bytes [`HotKeys::fingerprint`] hashes.
    pub fn load(path: &Path) -> Result<HotSummary, KeysError> {
        let file = neardup_storage::file::open(path).map_err(|e| KeysError::io(path, e))?;
        // The whole file's hash (its trailer included) is its fingerprint; the inner one is
        // checked against the trailer.
        let mut whole = Hashing::new(BufReader::with_capacity(1 << 20, file));
        let (input, header) = read_hot_header(&mut whole, path)?;
        read_hot_body(input, &header, path, |_| {}, |_| {})?;
        let groups = header.plan.as_ref().map_or(1, |p| p.groups);
        Ok(HotSummary {
            layout: header.layout,
            keys: header.keys,
            tables: header.tables,
            groups,
            fingerprint: whole.digest(),
            source: Some(path.to_path_buf()),
        })
    }

    /// The hot-key file it was read from ([`HotSummary::load`]; `None` for keys in memory): a
    /// step that needs the keys after all (`decide` against a saved index) reads them there.
    pub fn source(&self) -> Option<&Path> {
        self.source.as_deref()
    }

    /// The settings the keys were computed with.
    pub fn layout(&self) -> &TableLayout {
        &self.layout
    }
    /// Number of hot keys.
    pub fn keys(&self) -> u64 {
        self.keys
    }
    /// The tables the keys were counted from, in shard order.
    pub fn tables(&self) -> &[TableIdentity] {
        &self.tables
    }
    /// Number of groups of the plan (1 without one).
    pub fn groups(&self) -> u32 {
        self.groups
    }
    /// The file's fingerprint ([`HotKeys::fingerprint`]).
    pub fn fingerprint(&self) -> u64 {
        self.fingerprint
    }
}

/// Builds a [`HotMask`] from keys given in row order, in pieces of any size. A mapped mask's
/// pages behind the rows marked are handed back as it goes (and all of them at the end), so that
/// marking holds only the pages at hand.
struct MaskMarker<'a> {
    mask: HotMask,
    /// Rows (and hot rows' groups) before these have been handed back.
    handed_back: (usize, usize),
    index: SortedKeyIndex<'a>,
    columns: usize,
    content_col: Option<usize>,
    /// One bit per hot key: set once a row held it as its content key, so a later row with it is
    /// a later exact copy.
    first_seen: Vec<u64>,
    /// Position of the next key.
    pos: usize,
    /// With a plan, when the rows' groups are recorded: the group of each hot key.
    group_of_key: Option<&'a [u32]>,
    /// The last row whose group was recorded.
    grouped_row: Option<usize>,
}

impl<'a> MaskMarker<'a> {
    /// A marker of `rows` rows of `columns` keys, into a mask kept as `memory` says.
    fn new(
        hot: &'a HotKeys,
        rows: usize,
        columns: usize,
        grouping: RowGrouping,
        memory: &MaskMemory,
    ) -> MaskMarker<'a> {
        let backing = memory.backing(rows, columns);
        let mut mask = HotMask::new_in(rows, columns, &backing);
        let group_of_key = match (&hot.plan, grouping) {
            (Some(plan), RowGrouping::Record) => {
                mask.row_groups = RowGroups::Recorded(ScratchVec::new(&backing));
                Some(&plan.group_of_key[..])
            }
            (None, RowGrouping::Record) => {
                mask.row_groups = RowGroups::One;
                None
            }
            (_, RowGrouping::Skip) => None,
        };
        let content_col = hot.layout().rule.exact_key.then(|| columns - 1);
        MaskMarker {
            mask,
            handed_back: (0, 0),
            index: SortedKeyIndex::new(&hot.keys),
            columns,
            content_col,
            first_seen: vec![
                0;
                if content_col.is_some() {
                    hot.keys.len().div_ceil(64)
                } else {
                    0
                }
            ],
            pos: 0,
            group_of_key,
            grouped_row: None,
        }
    }

    fn mark(&mut self, keys: &[u64]) {
        let first = self.pos;
        self.pos += keys.len();
        let index = &self.index;
        index.each_position(keys, |n, position| {
            let Some(i) = position else {
                return;
            };
            let pos = first + n;
            self.mask.set_position(pos);
            if self.content_col == Some(pos % self.columns) {
                let seen = &mut self.first_seen[i / 64];
                if *seen >> (i % 64) & 1 == 1 {
                    self.mask.set_later_copy(pos / self.columns);
                }
                *seen |= 1 << (i % 64);
            }
            let row = pos / self.columns;
            if let Some(group_of_key) = self.group_of_key
                && self.grouped_row != Some(row)
            {
                // All of a row's hot keys are in one component, so in one group: the first hot
                // key of a row tells.
                self.grouped_row = Some(row);
                if let RowGroups::Recorded(groups) = &mut self.mask.row_groups {
                    groups.push(group_of_key[i]);
                }
            }
        });
        self.hand_back(self.pos / self.columns);
    }

    /// Hands back a mapped mask's pages before `row` (the row in progress is not done), and
    /// those of the groups recorded so far but the last.
    fn hand_back(&mut self, row: usize) {
        if !self.mask.is_mapped() {
            return;
        }
        let (rows, groups) = self.handed_back;
        self.mask.hand_back_rows(rows..row);
        let recorded = match &self.mask.row_groups {
            RowGroups::Recorded(recorded) => {
                let done = recorded.len().saturating_sub(1);
                recorded.release_range(groups, done);
                done
            }
            _ => 0,
        };
        self.handed_back = (row, recorded);
    }

    /// The mask, its pages handed back when it is mapped (stage 2 reads it again from the first
    /// row).
    fn finish(self) -> HotMask {
        if self.mask.is_mapped() {
            self.mask.hand_back_rows(0..self.mask.rows);
            if let RowGroups::Recorded(recorded) = &self.mask.row_groups {
                recorded.release_range(0, recorded.len());
            }
        }
        self.mask
    }
}

/// Where a [`HotMask`] built from saved key tables is kept ([`HotMask::for_shard`],
/// [`HotMask::from_table_files`]): in ordinary memory, or, under a memory limit, once it would
/// take more than a sixteenth of it (an eighth of stage 1's half, as when stage 1 spills), in a
/// scratch file's mapping, whose pages are handed back behind the rows marked and, in stage 2,
/// decided. Decisions do not depend on it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MaskMemory {
    /// The run's memory limit (`None`: the mask stays in ordinary memory).
    pub memory_limit: Option<u64>,
    /// Where the mapping's file is (unnamed; the system's temporary directory when unset).
    pub spill_dir: Option<PathBuf>,
}

impl MaskMemory {
    /// How a mask of `rows` rows of `columns` keys is kept.
    fn backing(&self, rows: usize, columns: usize) -> Backing {
        match self.memory_limit {
            Some(limit) => mask_backing(rows, columns, limit / 16, self.spill_dir.as_deref()),
            None => Backing::Heap,
        }
    }
}

/// A mask of `rows` rows of `columns` keys goes to a scratch mapping in `spill_dir` past
/// `heap_bytes`.
pub(crate) fn mask_backing(
    rows: usize,
    columns: usize,
    heap_bytes: u64,
    spill_dir: Option<&Path>,
) -> Backing {
    if HotMask::bytes_for(rows, columns) as u64 > heap_bytes {
        Backing::Scratch {
            dir: spill_dir.map(Path::to_path_buf),
        }
    } else {
        Backing::Heap
    }
}

/// The keys seen more than `min_count` times, sorted ascending, with the settings and the key
/// tables they were counted from.
///
/// Keys counted by a spilled count (under a memory limit) are in a scratch file's mapping whose
/// pages were handed back as the count appended them: they grow with the corpus (about 0.75 hot
/// keys per sample on short documents), and a one-process run drops them before stage 2.
pub struct HotKeys {
    layout: TableLayout,
    min_count: u32,
    keys: ScratchVec<u64>,
    /// The saved tables counted, or `None` for keys counted within one run from the rows at hand
    /// (`run_keys`), which belong to that run only.
    tables: Option<Vec<TableIdentity>>,
    /// Which group decides each hot key's rows (`neardup hot --groups`); `None`: one group.
    plan: Option<Plan>,
}

impl PartialEq for HotKeys {
    fn eq(&self, other: &HotKeys) -> bool {
        (&self.layout, self.min_count, &self.tables, &self.plan)
            == (&other.layout, other.min_count, &other.tables, &other.plan)
            && self.keys[..] == other.keys[..]
    }
}

impl Eq for HotKeys {}

impl Clone for HotKeys {
    /// A copy in ordinary memory.
    fn clone(&self) -> HotKeys {
        HotKeys {
            layout: self.layout.clone(),
            min_count: self.min_count,
            keys: ScratchVec::from_vec(self.keys.to_vec()),
            tables: self.tables.clone(),
            plan: self.plan.clone(),
        }
    }
}

impl std::fmt::Debug for HotKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HotKeys")
            .field("layout", &self.layout)
            .field("min_count", &self.min_count)
            .field("keys", &self.keys.len())
            .field("mapped", &self.keys.is_mapped())
            .field("tables", &self.tables)
            .field("plan", &self.plan)
            .finish()
    }
}

/// The framing of hot-key files (see `docs/formats.md`, "Hot-key file").
const HOT: Frame = Frame {
    magic: b"NDHOTK\x00\x01",
    end: b"NDHOTEND",
};
/// Version 2 records the tables the keys were counted from (version 1 did not, so a table could
/// be left out of `apply` unnoticed).
const HOT_FORMAT_VERSION: u32 = 2;

#[derive(Serialize, Deserialize)]
struct HotHeader {
    format_version: u32,
    layout: TableLayout,
    min_count: u32,
    keys: u64,
    #[serde(default)]
    tables: Vec<TableIdentity>,
    /// The plan without its per-key groups, which follow the keys (one `u32` per key) when this
    /// is present.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    plan: Option<PlanSummary>,
}

/// A [`Plan`] without `group_of_key`.
#[derive(Serialize, Deserialize)]
struct PlanSummary {
    groups: u32,
    group_rows: Vec<u64>,
    components: u64,
    largest_component: u64,
    hot_rows: u64,
}

impl HotKeys {
    /// Wraps an ascending, duplicate-free key list counted within one run from the rows at hand:
    /// such keys belong to that run and cannot be saved for `apply` (see
    /// [`HotKeys::counted_from`]).
    pub fn new(layout: TableLayout, min_count: u32, keys: Vec<u64>) -> HotKeys {
        HotKeys::counted(layout, min_count, ScratchVec::from_vec(keys))
    }

    /// [`HotKeys::new`] of keys as a count keeps them (see the type's docs).
    pub(crate) fn counted(layout: TableLayout, min_count: u32, keys: ScratchVec<u64>) -> HotKeys {
        debug_assert!(keys.windows(2).all(|w| w[0] < w[1]));
        HotKeys {
            layout,
            min_count,
            keys,
            tables: None,
            plan: None,
        }
    }

    /// These keys with the plan of a distributed stage 2 (see [`crate::Plan`]): which group
    /// decides the rows of each key. Errors when the plan is not one for these keys.
    pub fn with_plan(mut self, plan: Plan) -> Result<HotKeys, KeysError> {
        if plan.group_of_key.len() != self.keys.len()
            || plan.group_of_key.iter().any(|g| *g >= plan.groups)
        {
            return Err(KeysSettingsError::PlanDoesNotFit {
                plan_keys: plan.group_of_key.len(),
                groups: plan.groups,
                hot_keys: self.keys.len(),
            }
            .into());
        }
        self.plan = Some(plan);
        Ok(self)
    }

    /// The plan, when the keys were counted with `--groups` (`None`: every hot row in group 0).
    pub fn plan(&self) -> Option<&Plan> {
        self.plan.as_ref()
    }

    /// The number of groups the hot rows are decided in (1 without a plan).
    pub fn groups(&self) -> u32 {
        self.plan.as_ref().map_or(1, |p| p.groups)
    }

    /// The group that decides a row with these keys: the group of any of its hot keys (all of a
    /// row's hot keys are in one component, so in one group); `None` for a cold row.
    pub fn group_of_row(&self, keys: &[u64]) -> Option<u32> {
        keys.iter()
            .filter(|k| **k != NO_KEY)
            .find_map(|k| self.keys.binary_search(k).ok())
            .map(|i| self.plan.as_ref().map_or(0, |p| p.group_of_key[i]))
    }

    /// A checksum of the file these keys save as (keys, plan and tables), so that the outputs of
    /// the distributed steps can be tied to the hot-key file they were made with. Keys counted
    /// within one run are refused, as by [`HotKeys::save`].
    pub fn fingerprint(&self) -> Result<u64, KeysError> {
        let tables = self.saved_tables(Path::new(BYTES_NAME))?;
        // The bytes are hashed as they are serialised, never held: every step process
        // fingerprints its hot-key file, which can be large.
        let mut hashing = Hashing::new(std::io::sink());
        self.write_to(&mut hashing, tables)
            .expect("hashing cannot fail");
        Ok(hashing.digest())
    }

    /// The summary a saved file of these keys has ([`HotSummary::load`]). Keys counted within
    /// one run are refused, as by [`HotKeys::save`].
    pub fn summary(&self) -> Result<HotSummary, KeysError> {
        Ok(HotSummary {
            layout: self.layout.clone(),
            keys: self.keys.len() as u64,
            tables: self.saved_tables(Path::new(BYTES_NAME))?.to_vec(),
            groups: self.groups(),
            fingerprint: self.fingerprint()?,
            source: None,
        })
    }

    /// These keys as counted from `tables` (in shard order): the tables `apply` must be given.
    pub fn counted_from(mut self, tables: Vec<TableIdentity>) -> HotKeys {
        self.tables = Some(tables);
        self
    }

    /// The tables the keys were counted from, in shard order; `None` for keys counted within one
    /// run.
    pub fn tables(&self) -> Option<&[TableIdentity]> {
        self.tables.as_deref()
    }

    /// Errors unless `given` are exactly the tables the keys were counted from (in any order),
    /// naming what is missing, extra or changed. `names` gives each table's file when known. Keys
    /// counted within one run record no tables and are taken to go with the tables at hand.
    pub fn check_tables(
        &self,
        given: &[TableIdentity],
        names: Option<&[std::path::PathBuf]>,
    ) -> Result<(), KeysError> {
        let Some(counted) = &self.tables else {
            return Ok(());
        };
        let name = |i: usize| TableName {
            shard: given[i].shard,
            path: names.and_then(|n| n.get(i)).cloned(),
        };
        let mut problems = Vec::new();
        for (i, t) in given.iter().enumerate() {
            match counted.iter().find(|c| c.shard == t.shard) {
                None => problems.push(TableProblem::NotCounted { table: name(i) }),
                Some(c) if c.rows != t.rows => problems.push(TableProblem::Rows {
                    table: name(i),
                    rows: t.rows,
                    counted: c.rows,
                }),
                Some(c) if c.checksum != t.checksum => {
                    problems.push(TableProblem::Checksum { table: name(i) })
                }
                Some(_) => {}
            }
        }
        for c in counted {
            if !given.iter().any(|t| t.shard == c.shard) {
                problems.push(TableProblem::Missing {
                    shard: c.shard,
                    rows: c.rows,
                });
            }
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(KeysSettingsError::OtherTables {
                counted: counted.iter().map(|t| t.shard).collect(),
                problems,
            }
            .into())
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

    /// Whether a file starting with `head` (its first 8 bytes or more) is a hot-key file (of any
    /// version: every version has the same magic).
    pub fn starts_like_hot_keys(head: &[u8]) -> bool {
        HOT.begins(head)
    }

    /// Writes the hot-key file atomically (see `docs/formats.md`, "Hot-key file"). Keys counted
    /// within one run are refused: a file must say which tables `apply` needs.
    pub fn save(&self, path: &Path) -> Result<(), KeysError> {
        self.saved_tables(path)?;
        self.save_to(AtomicFile::create(path).map_err(|e| KeysError::io(path, e))?)
    }

    /// The tables a saved file names; keys counted within one run record none and cannot be saved.
    fn saved_tables(&self, path: &Path) -> Result<&[TableIdentity], KeysError> {
        self.tables.as_deref().ok_or_else(|| {
            KeysSettingsError::UnsavedHotKeys {
                path: path.to_path_buf(),
            }
            .into()
        })
    }

    /// Writes the hot-key file into `file` and commits it (for a file of a
    /// [`neardup_corpus::Publication`]: marks it ready to be published with the run's report).
    /// Keys counted within one run are refused, as by [`HotKeys::save`].
    pub fn save_to(&self, file: AtomicFile) -> Result<(), KeysError> {
        let path = &file.path().to_path_buf();
        let tables = self.saved_tables(path)?;
        let mut buf = BufWriter::with_capacity(1 << 20, file);
        self.write_to(&mut buf, tables)
            .map_err(|e| KeysError::io(path, e))?;
        let file = buf
            .into_inner()
            .map_err(|e| KeysError::io(path, e.into_error()))?;
        file.commit().map_err(|e| KeysError::io(path, e))
    }

    /// The bytes [`HotKeys::save`] writes, in memory (for schedulers that pass them as values).
    /// Keys counted within one run are refused, as by [`HotKeys::save`].
    pub fn to_bytes(&self) -> Result<Vec<u8>, KeysError> {
        let tables = self.saved_tables(Path::new(BYTES_NAME))?;
        let mut bytes = Vec::with_capacity(self.keys.len() * 8 + 4096);
        self.write_to(&mut bytes, tables)
            .expect("writing to memory cannot fail");
        Ok(bytes)
    }

    fn write_to<W: Write>(&self, out: W, tables: &[TableIdentity]) -> std::io::Result<()> {
        let mut out = FrameWriter::new(out, &HOT)?;
        let header = HotHeader {
            format_version: HOT_FORMAT_VERSION,
            layout: self.layout.clone(),
            min_count: self.min_count,
            keys: self.keys.len() as u64,
            tables: tables.to_vec(),
            plan: self.plan.as_ref().map(|p| PlanSummary {
                groups: p.groups,
                group_rows: p.group_rows.clone(),
                components: p.components,
                largest_component: p.largest_component,
                hot_rows: p.hot_rows,
            }),
        };
        out.header(&header)?;
        write_u64s(&mut out, &self.keys)?;
        if let Some(plan) = &self.plan {
            let mut bytes = Vec::with_capacity(plan.group_of_key.len() * 4);
            for g in &plan.group_of_key {
                bytes.extend_from_slice(&g.to_le_bytes());
            }
            out.write_all(&bytes)?;
        }
        out.finish().map(drop)
    }

    /// Reads a hot-key file (or object, `path` holding its URL), verifying its checksum and
    /// order.
    pub fn load(path: &Path) -> Result<HotKeys, KeysError> {
        let file = neardup_storage::file::open(path).map_err(|e| KeysError::io(path, e))?;
        Self::read_from(BufReader::with_capacity(1 << 20, file), path, u64::MAX)
    }

    /// Reads hot keys from the bytes of [`HotKeys::to_bytes`] (or of a hot-key file), verifying
    /// their checksum and order.
    pub fn from_bytes(bytes: &[u8]) -> Result<HotKeys, KeysError> {
        Self::read_from(bytes, Path::new(BYTES_NAME), bytes.len() as u64)
    }

    /// Reads a hot-key file's contents from `input`; `size` bounds the keys it can hold.
    fn read_from<R: Read>(input: R, path: &Path, size: u64) -> Result<HotKeys, KeysError> {
        let (input, header) = read_hot_header(input, path)?;
        if header.keys.saturating_mul(8) > size {
            return Err(truncated(path, std::io::ErrorKind::UnexpectedEof.into()));
        }
        let mut keys = Vec::with_capacity(header.keys as usize);
        let mut group_of_key = Vec::new();
        read_hot_body(
            input,
            &header,
            path,
            |k| keys.push(k),
            |g| group_of_key.push(g),
        )?;
        let plan = header.plan.map(|summary| Plan {
            groups: summary.groups,
            group_of_key,
            group_rows: summary.group_rows,
            components: summary.components,
            largest_component: summary.largest_component,
            hot_rows: summary.hot_rows,
        });
        Ok(HotKeys {
            layout: header.layout,
            min_count: header.min_count,
            keys: ScratchVec::from_vec(keys),
            tables: Some(header.tables),
            plan,
        })
    }
}

/// Where one shard's table sits among the tables the hot keys were counted from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardPlace {
    /// Its shard number.
    pub shard: u32,
    /// Its place in shard order (0 for the lowest shard number counted).
    pub index: u32,
    /// How many tables were counted.
    pub shards: u32,
    /// Rows of the tables before it: its first row's number in the global row order.
    pub row_base: u64,
    /// Input files of the tables before it: its first file's number in the global file order.
    pub file_base: u64,
    /// Its rows.
    pub rows: u64,
    /// Its input files.
    pub files: u64,
}

/// One bit per (row, column): set when that key of that row is hot. A row with no bit set is
/// unique and stage 2 never looks at it again.
///
/// Under a memory limit, a mask too large to stay in memory lives in a scratch file's mapping
/// (`neardup_scratch`): it is read and written in row order, so its owner hands back the pages
/// of rows it is done with ([`HotMask::hand_back_rows`]) and the mask holds only the pages of
/// the rows at hand, however many rows there are.
pub struct HotMask {
    columns: usize,
    rows: usize,
    bits: ScratchVec<u64>,
    /// One bit per row: its content key is hot and an earlier row has the same one.
    copies: ScratchVec<u64>,
    /// The group of each hot row, when recorded (a `sign` step sends each hot sample to its
    /// group's stream without computing its keys).
    row_groups: RowGroups,
}

/// Whether a shard's mask records the group of each hot row ([`HotMask::groups`]): a `sign`
/// step needs them, a `write` step does not (recording costs a search per hot row).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RowGrouping {
    /// Record them.
    Record,
    /// Do not.
    Skip,
}

/// Which groups a [`HotMask`] knows its hot rows to be in.
enum RowGroups {
    /// Not recorded ([`RowGrouping::Skip`]).
    NotRecorded,
    /// One group (no plan).
    One,
    /// With a plan: the group of each hot row, in row order (kept as the mask's bits are).
    Recorded(ScratchVec<u32>),
}

impl PartialEq for RowGroups {
    fn eq(&self, other: &RowGroups) -> bool {
        match (self, other) {
            (RowGroups::NotRecorded, RowGroups::NotRecorded) | (RowGroups::One, RowGroups::One) => {
                true
            }
            (RowGroups::Recorded(a), RowGroups::Recorded(b)) => a[..] == b[..],
            _ => false,
        }
    }
}

impl Eq for RowGroups {}

impl Clone for RowGroups {
    /// A copy in ordinary memory.
    fn clone(&self) -> RowGroups {
        match self {
            RowGroups::NotRecorded => RowGroups::NotRecorded,
            RowGroups::One => RowGroups::One,
            RowGroups::Recorded(groups) => {
                RowGroups::Recorded(ScratchVec::from_vec(groups.to_vec()))
            }
        }
    }
}

impl std::fmt::Debug for RowGroups {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RowGroups::NotRecorded => f.write_str("NotRecorded"),
            RowGroups::One => f.write_str("One"),
            RowGroups::Recorded(groups) => write!(f, "Recorded({} hot rows)", groups.len()),
        }
    }
}

/// Where the table `identity` (named `name` in messages) sits among the tables `hot` was
/// counted from; an error when it is not one of them.
fn shard_place(
    identity: TableIdentity,
    hot: &HotKeys,
    name: &str,
) -> Result<ShardPlace, KeysError> {
    let Some(counted) = hot.tables() else {
        return Err(KeysSettingsError::NoCountedTables.into());
    };
    let place = counted.iter().position(|t| *t == identity).ok_or_else(|| {
        KeysError::from(KeysSettingsError::NotCountedTable {
            name: name.to_string(),
            shard: identity.shard,
            counted: counted.iter().map(|t| t.shard).collect(),
        })
    })?;
    let before = &counted[..place];
    Ok(ShardPlace {
        shard: identity.shard,
        index: place as u32,
        shards: counted.len() as u32,
        row_base: before.iter().map(|t| t.rows).sum(),
        file_base: before.iter().map(|t| t.files).sum(),
        rows: identity.rows,
        files: identity.files,
    })
}

impl PartialEq for HotMask {
    fn eq(&self, other: &HotMask) -> bool {
        (self.columns, self.rows) == (other.columns, other.rows)
            && self.bits[..] == other.bits[..]
            && self.copies[..] == other.copies[..]
            && self.row_groups == other.row_groups
    }
}

impl Eq for HotMask {}

impl Clone for HotMask {
    /// A copy in ordinary memory.
    fn clone(&self) -> HotMask {
        HotMask {
            columns: self.columns,
            rows: self.rows,
            bits: ScratchVec::from_vec(self.bits.to_vec()),
            copies: ScratchVec::from_vec(self.copies.to_vec()),
            row_groups: self.row_groups.clone(),
        }
    }
}

impl std::fmt::Debug for HotMask {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HotMask")
            .field("rows", &self.rows)
            .field("columns", &self.columns)
            .field("mapped", &self.bits.is_mapped())
            .field("row_groups", &self.row_groups)
            .finish_non_exhaustive()
    }
}

impl HotMask {
    /// An all-cold mask.
    pub fn new(rows: usize, columns: usize) -> HotMask {
        HotMask::new_in(rows, columns, &Backing::Heap)
    }

    /// An all-cold mask kept as `backing` says (see the type's docs).
    pub(crate) fn new_in(rows: usize, columns: usize, backing: &Backing) -> HotMask {
        HotMask {
            columns,
            rows,
            bits: ScratchVec::zeroed(backing, (rows * columns).div_ceil(64)),
            copies: ScratchVec::zeroed(backing, rows.div_ceil(64)),
            row_groups: RowGroups::NotRecorded,
        }
    }

    /// Bytes of the mask of `rows` rows of `columns` keys.
    pub(crate) fn bytes_for(rows: usize, columns: usize) -> usize {
        8 * ((rows * columns).div_ceil(64) + rows.div_ceil(64))
    }

    /// Whether it lives in a scratch file's mapping.
    pub fn is_mapped(&self) -> bool {
        self.bits.is_mapped()
    }

    /// Hands back the pages of a mapped mask that hold only rows before `rows.end` and not
    /// before the page of `rows.start`: for an owner done with those rows, in row order. Their
    /// bits stay in the scratch file, so a later read still sees them (a page fault). Nothing
    /// for a mask in ordinary memory.
    pub fn hand_back_rows(&self, rows: std::ops::Range<usize>) {
        let (start, end) = (rows.start.min(self.rows), rows.end.min(self.rows));
        self.bits
            .release_range(start * self.columns / 64, end * self.columns / 64);
        self.copies.release_range(start / 64, end / 64);
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
            bits: ScratchVec::from_vec(bits),
            copies: ScratchVec::from_vec(copies),
            row_groups: RowGroups::NotRecorded,
        }
    }

    /// The mask of the rows of `tables` (consecutive shards, in order) under `hot`: what stage 2
    /// needs when it runs apart from stage 1, given a hot-key file and the shards' tables, which
    /// must be exactly the tables the keys were counted from ([`HotKeys::check_tables`]).
    pub fn from_tables(tables: &[&KeyTable], hot: &HotKeys) -> Result<HotMask, KeysError> {
        for t in tables {
            t.layout().check_compatible(hot.layout())?;
        }
        let identities: Vec<TableIdentity> = tables.iter().map(|t| t.identity()).collect();
        hot.check_tables(&identities, None)?;
        let Some(first) = tables.first() else {
            return Ok(HotMask::new(0, 0));
        };
        let rows = tables.iter().map(|t| t.rows()).sum();
        let memory = MaskMemory::default();
        let mut marker = MaskMarker::new(hot, rows, first.columns(), RowGrouping::Skip, &memory);
        for t in tables {
            marker.mark(t.keys());
        }
        Ok(marker.finish())
    }

    /// [`HotMask::from_tables`] over saved tables, reading each sequentially instead of holding
    /// them, into a mask kept as `memory` says; also returns all their files' row ranges, in row
    /// order, with the places of their records (read after each table's keys) while they fit in
    /// [`crate::places_budget`] of `memory`'s limit.
    pub fn from_table_files(
        tables: &ShardTables,
        hot: &HotKeys,
        memory: &MaskMemory,
    ) -> Result<(HotMask, Vec<FileRows>), KeysError> {
        tables.layout.check_compatible(hot.layout())?;
        hot.check_tables(&tables.identities, Some(&tables.paths))?;
        let rows = tables.rows.iter().sum::<u64>() as usize;
        let columns = tables.layout.columns();
        let mut marker = MaskMarker::new(hot, rows, columns, RowGrouping::Skip, memory);
        let mut files = Vec::new();
        let mut block = Vec::new();
        let mut places_left = crate::places_budget(memory.memory_limit);
        for p in &tables.paths {
            let mut reader = TableReader::open(p)?;
            if reader.keep_places(places_left) {
                places_left -= reader.places_bytes();
            }
            loop {
                block.clear();
                if reader.read_keys(1 << 20, &mut block)? == 0 {
                    break;
                }
                marker.mark(&block);
            }
            files.extend(reader.finish()?.files);
        }
        Ok((marker.finish(), files))
    }

    /// The mask of one shard's saved table alone, for the per-shard steps of a distributed
    /// stage 2 (`sign`, `write`): the table must be one the hot keys were counted from (same
    /// shard, rows and checksum). Rows count from the shard's first row; a row that repeats a
    /// content key first seen in an earlier shard is not marked as a later copy (only this
    /// shard's rows are seen), which costs it a signature but changes no decision. Also returns
    /// the shard's files (with their records' places, as [`HotMask::shard_files`] reads them)
    /// and where it sits among all shards. The mask is kept as `memory` says.
    pub fn for_shard(
        table: &Path,
        hot: &HotKeys,
        grouping: RowGrouping,
        memory: &MaskMemory,
    ) -> Result<(HotMask, Vec<FileRows>, ShardPlace), KeysError> {
        let (files, place) = HotMask::shard_files(table, hot, memory.memory_limit)?;
        let mask = HotMask::of_checked_shard(table, &place, hot, grouping, memory)?;
        Ok((mask, files, place))
    }

    /// [`HotMask::for_shard`]'s mask of a table that [`HotMask::shard_files`] checked and
    /// placed (`place`): the keys are read through (their checksum verified at the end), the
    /// checks not made again.
    pub fn of_checked_shard(
        table: &Path,
        place: &ShardPlace,
        hot: &HotKeys,
        grouping: RowGrouping,
        memory: &MaskMemory,
    ) -> Result<HotMask, KeysError> {
        let columns = hot.layout().columns();
        let mut marker = MaskMarker::new(hot, place.rows as usize, columns, grouping, memory);
        let mut reader = TableReader::open(table)?;
        let mut block = Vec::new();
        loop {
            block.clear();
            if reader.read_keys(1 << 20, &mut block)? == 0 {
                break;
            }
            marker.mark(&block);
        }
        reader.finish()?;
        Ok(marker.finish())
    }

    /// What [`HotMask::for_shard`] returns besides the mask (the shard's files and its place
    /// among all shards), with the same checks, from the table's header alone: for a step that
    /// checks its paths, and makes its spill directory, before it builds the mask
    /// ([`HotMask::of_checked_shard`], which reads the whole table through its checksum). The
    /// files come with the places of their records if the table holds them and they fit in
    /// [`crate::places_budget`] of `memory_limit` (read from the table's end alone).
    pub fn shard_files(
        table: &Path,
        hot: &HotKeys,
        memory_limit: Option<u64>,
    ) -> Result<(Vec<FileRows>, ShardPlace), KeysError> {
        let mut shards = ShardTables::open(std::slice::from_ref(&table.to_path_buf()))?;
        shards.load_places(crate::places_budget(memory_limit))?;
        shards.layout.check_compatible(hot.layout())?;
        let place = shard_place(shards.identities[0], hot, &table.display().to_string())?;
        Ok((shards.files, place))
    }

    /// [`HotMask::shard_files`] of a table in memory (its identity computed from its keys: one
    /// pass).
    pub fn table_files(
        table: &KeyTable,
        hot: &HotKeys,
    ) -> Result<(Vec<FileRows>, ShardPlace), KeysError> {
        table.layout().check_compatible(hot.layout())?;
        let name = format!("the key table of shard {}", table.shard());
        let place = shard_place(table.identity(), hot, &name)?;
        Ok((table.files().to_vec(), place))
    }

    /// [`HotMask::for_shard`] of a table in memory: the same checks and mask, the table's
    /// identity computed from its keys (one pass, no file).
    pub fn for_table(
        table: &KeyTable,
        hot: &HotKeys,
        grouping: RowGrouping,
    ) -> Result<(HotMask, Vec<FileRows>, ShardPlace), KeysError> {
        let (files, place) = HotMask::table_files(table, hot)?;
        Ok((
            HotMask::of_checked_table(table, hot, grouping),
            files,
            place,
        ))
    }

    /// [`HotMask::for_table`]'s mask of a table that [`HotMask::table_files`] checked (the
    /// checks, and the pass over its keys they take, not made again).
    pub fn of_checked_table(table: &KeyTable, hot: &HotKeys, grouping: RowGrouping) -> HotMask {
        let memory = MaskMemory::default();
        let mut marker = MaskMarker::new(hot, table.rows(), table.columns(), grouping, &memory);
        marker.mark(table.keys());
        marker.finish()
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
    /// Whether the mask knows its hot rows' groups (made with [`RowGrouping::Record`]).
    pub fn has_groups(&self) -> bool {
        self.row_groups != RowGroups::NotRecorded
    }

    /// The groups of the hot rows, asked for in ascending row order
    /// ([`HotRowGroups::group_of`]); every answer is `None` without [`HotMask::has_groups`].
    pub fn groups(&self) -> HotRowGroups<'_> {
        HotRowGroups {
            mask: self,
            next_row: 0,
            hot_before: 0,
            handed_back: 0,
        }
    }

    /// Number of rows with at least one hot key. A mapped mask's pages are handed back behind
    /// the rows counted (counting reads all of them).
    pub fn hot_rows(&self) -> usize {
        const STRETCH: usize = 1 << 16;
        let mut hot = 0;
        for start in (0..self.rows).step_by(STRETCH) {
            let end = (start + STRETCH).min(self.rows);
            hot += (start..end).filter(|&r| self.is_hot_row(r)).count();
            self.hand_back_rows(start..end);
        }
        hot
    }
    /// Bytes held.
    pub fn heap_bytes(&self) -> usize {
        self.bits.len() * 8
    }
}

/// The group of each hot row of a [`HotMask`], for rows asked for in ascending order (each step
/// scans the rows in between, so a pass costs one bit test per row).
pub struct HotRowGroups<'a> {
    mask: &'a HotMask,
    next_row: usize,
    /// Hot rows before `next_row`.
    hot_before: usize,
    /// The groups of the hot rows before this one have been handed back (a mapped mask's).
    handed_back: usize,
}

/// A mapped mask's recorded groups are handed back behind the rows asked for every this many.
const GROUPS_HANDED_BACK: usize = 1 << 16;

impl HotRowGroups<'_> {
    /// The group that decides hot row `row`: 0 without a plan. `None` for a cold row, a row
    /// past the mask, or a row below one asked for before.
    pub fn group_of(&mut self, row: usize) -> Option<u32> {
        if row < self.next_row || row >= self.mask.rows || !self.mask.is_hot_row(row) {
            return None;
        }
        while self.next_row < row {
            self.hot_before += usize::from(self.mask.is_hot_row(self.next_row));
            self.next_row += 1;
        }
        match &self.mask.row_groups {
            RowGroups::NotRecorded => None,
            RowGroups::One => Some(0),
            RowGroups::Recorded(groups) => {
                if self.hot_before >= self.handed_back + GROUPS_HANDED_BACK {
                    groups.release_range(self.handed_back, self.hot_before);
                    self.handed_back = self.hot_before;
                }
                groups.get(self.hot_before).copied()
            }
        }
    }
}

/// The plan of `hot` over the saved `tables` it was counted from (in shard order), in `groups`
/// groups: one pass over the tables' rows, nothing per row kept. `cancelled` is looked at between
/// blocks of rows ([`KeysError::Interrupted`]).
pub fn plan_from_tables(
    tables: &ShardTables,
    hot: &HotKeys,
    groups: u32,
    cancelled: &dyn Fn() -> bool,
) -> Result<Plan, KeysError> {
    let columns = tables.layout.columns();
    if groups == 1 {
        // One group needs no components; only the hot rows are counted, for the summary.
        let mut plan = Plan::single(hot.len(), 0);
        plan.hot_rows = count_hot_rows(tables, hot, cancelled)?;
        plan.group_rows = vec![plan.hot_rows];
        return Ok(plan);
    }
    let mut builder = PlanBuilder::new(hot.keys())?;
    for_each_block_of_rows(tables, cancelled, |block| builder.add_rows(block, columns))?;
    builder.finish(groups)
}

fn count_hot_rows(
    tables: &ShardTables,
    hot: &HotKeys,
    cancelled: &dyn Fn() -> bool,
) -> Result<u64, KeysError> {
    let columns = tables.layout.columns();
    let index = SortedKeyIndex::new(hot.keys());
    let mut hot_rows = 0u64;
    for_each_block_of_rows(tables, cancelled, |block| {
        hot_rows += block
            .chunks_exact(columns)
            .filter(|row| row.iter().any(|k| *k != NO_KEY && index.contains(*k)))
            .count() as u64;
    })?;
    Ok(hot_rows)
}

/// Hands `each` the keys of the saved `tables`' rows (in shard order) a block of whole rows at a
/// time; `cancelled` is looked at between blocks ([`KeysError::Interrupted`]).
fn for_each_block_of_rows(
    tables: &ShardTables,
    cancelled: &dyn Fn() -> bool,
    mut each: impl FnMut(&[u64]),
) -> Result<(), KeysError> {
    let columns = tables.layout.columns();
    let mut block = Vec::new();
    for path in &tables.paths {
        let mut reader = TableReader::open(path)?;
        loop {
            if cancelled() {
                return Err(KeysError::Interrupted);
            }
            block.clear();
            if reader.read_keys(columns * 8192, &mut block)? == 0 {
                break;
            }
            each(&block);
        }
        reader.finish()?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::row::{RowRule, ShortTextPolicy};
    use crate::stage::merge_tables;
    use neardup_corpus::{Compression, FieldPath, Format, InputFile, TextSelector};
    use std::path::PathBuf;

    fn layout(description: &str) -> TableLayout {
        TableLayout {
            sketch_fingerprint: 7,
            sketch_description: description.to_string(),
            bands: 2,
            rule: RowRule {
                band_keys: true,
                exact_key: false,
                short_texts: ShortTextPolicy::ExactOnly,
            },
            selector: TextSelector::single(FieldPath::top("text")),
        }
    }

    const DESCRIPTION: &str = "Oph num_perm=128 seed=1 shingles=char:5:1 bands=2x64 band_keys=Fast";

    fn table(shard: u32, keys: Vec<u64>) -> KeyTable {
        let rows = keys.len() as u64 / 2;
        let files = vec![FileRows {
            input: InputFile {
                path: PathBuf::from(format!("in/{shard}.jsonl")),
                relative: PathBuf::from(format!("{shard}.jsonl")),
                format: Format::Jsonl,
                compression: Compression::None,
                size: 0,
            },
            records: rows,
            rows,
            chunks: Vec::new(),
        }];
        KeyTable::new(layout(DESCRIPTION), shard, files, keys).unwrap()
    }

    /// Saves `tables` in `dir`, one file per shard.
    fn saved(tables: &[KeyTable], dir: &std::path::Path) -> Vec<PathBuf> {
        tables
            .iter()
            .map(|t| {
                let p = dir.join(format!("keys-{}.ndk", t.shard()));
                t.save(&p).unwrap();
                p
            })
            .collect()
    }

    fn tables() -> Vec<KeyTable> {
        vec![
            table(0, vec![1, 2, 3, 4]),
            table(1, vec![1, 5, 6, 7]),
            table(2, vec![3, 8, 9, 2]),
        ]
    }

    #[test]
    fn a_mapped_mask_reads_the_same_after_its_rows_are_handed_back() {
        let dir = tempfile::tempdir().unwrap();
        let (rows, columns) = (100_000, 21);
        let backing = Backing::Scratch {
            dir: Some(dir.path().to_path_buf()),
        };
        let mut masks = [
            HotMask::new(rows, columns),
            HotMask::new_in(rows, columns, &backing),
        ];
        assert_eq!(masks[1].is_mapped(), cfg!(target_os = "linux"));
        let mut state = 0x2545_F491_4F6C_DD1Du64;
        for _ in 0..50_000 {
            let x = neardup_scratch::xorshift(&mut state);
            let pos = (x % (rows * columns) as u64) as usize;
            for m in &mut masks {
                m.set_position(pos);
                if x & 1 == 1 {
                    m.set_later_copy(pos / columns);
                }
            }
            // Rows handed back in stretches, in and out of order: the bits stay.
            if x.is_multiple_of(1_000) {
                let row = pos / columns;
                masks[1].hand_back_rows(row / 2..row);
            }
        }
        masks[1].hand_back_rows(0..rows);
        assert_eq!(masks[0], masks[1]);
        assert!(masks[1].hot_rows() > 30_000);
        for row in (0..rows).step_by(7) {
            assert_eq!(masks[0].is_later_copy(row), masks[1].is_later_copy(row));
            for col in 0..columns {
                assert_eq!(masks[0].is_hot(row, col), masks[1].is_hot(row, col));
            }
        }
    }

    /// The plan of `tables()`'s hot keys 1, 2 (one component, through row 0) and 3 in two
    /// groups.
    fn two_group_plan() -> Plan {
        Plan {
            groups: 2,
            group_of_key: vec![0, 0, 1],
            group_rows: vec![3, 2],
            components: 2,
            largest_component: 3,
            hot_rows: 5,
        }
    }

    #[test]
    fn a_summary_is_loaded_without_the_keys_and_checked_like_the_file() {
        let (hot, _, _) = merge_tables(&tables(), 1).unwrap();
        let planned = hot.clone().with_plan(two_group_plan()).unwrap();
        let dir = tempfile::tempdir().unwrap();
        for (name, keys) in [("plain.ndh", &hot), ("planned.ndh", &planned)] {
            let path = dir.path().join(name);
            keys.save(&path).unwrap();
            let summary = HotSummary::load(&path).unwrap();
            assert_eq!(summary, keys.summary().unwrap());
            assert_eq!(summary.fingerprint(), keys.fingerprint().unwrap());
            assert_eq!(summary.groups(), keys.groups());
            assert_eq!((summary.keys(), summary.tables().len()), (3, 3));
            // Damage anywhere is found, as by a full load.
            let bytes = std::fs::read(&path).unwrap();
            for at in [bytes.len() / 2, bytes.len() - 20] {
                let mut damaged = bytes.clone();
                damaged[at] ^= 1;
                std::fs::write(&path, &damaged).unwrap();
                let err = HotSummary::load(&path).unwrap_err().to_string();
                assert!(err.contains(name), "{err}");
                assert!(HotKeys::load(&path).is_err());
            }
            std::fs::write(&path, &bytes[..bytes.len() - 3]).unwrap();
            let err = HotSummary::load(&path).unwrap_err().to_string();
            assert!(err.contains("truncated"), "{err}");
        }
    }

    /// Files written before the hot-key file moved onto `neardup_corpus::frame`
    /// (`crates/keys/tests/data/hot-v2*.ndh`, with and without a plan): written byte for byte
    /// the same, read, and fingerprinted as the hash of the whole file.
    #[test]
    fn the_bytes_of_a_hot_key_file_are_unchanged() {
        let (hot, _, _) = merge_tables(&tables(), 1).unwrap();
        let planned = hot.clone().with_plan(two_group_plan()).unwrap();
        let committed: [&[u8]; 2] = [
            include_bytes!("../tests/data/hot-v2.ndh"),
            include_bytes!("../tests/data/hot-v2-planned.ndh"),
        ];
        let dir = tempfile::tempdir().unwrap();
        for (keys, (committed, name)) in [&hot, &planned].into_iter().zip(
            committed
                .into_iter()
                .zip(["hot-v2.ndh", "hot-v2-planned.ndh"]),
        ) {
            assert_eq!(keys.to_bytes().unwrap(), committed, "{name}");
            assert_eq!(&HotKeys::from_bytes(committed).unwrap(), keys);
            assert_eq!(
                keys.fingerprint().unwrap(),
                xxhash_rust::xxh3::xxh3_64(committed)
            );
            let path = dir.path().join(name);
            std::fs::write(&path, committed).unwrap();
            assert_eq!(&HotKeys::load(&path).unwrap(), keys);
            assert_eq!(HotSummary::load(&path).unwrap(), keys.summary().unwrap());
        }
    }

    #[test]
    fn with_a_plan_the_mask_knows_each_hot_rows_group() {
        let tables = tables();
        let (hot, _, _) = merge_tables(&tables, 1).unwrap();
        // Hot keys 1, 2 (one component, through row 0) and 3.
        assert_eq!(hot.keys(), &[1, 2, 3]);
        let hot = hot.with_plan(two_group_plan()).unwrap();
        // Each shard's mask numbers its own rows.
        let mut got = Vec::new();
        for t in &tables {
            let (mask, _, _) = HotMask::for_table(t, &hot, RowGrouping::Record).unwrap();
            assert!(mask.has_groups());
            let mut groups = mask.groups();
            for row in 0..2 {
                let group = groups.group_of(row);
                assert_eq!(
                    group,
                    hot.group_of_row(&t.keys()[row * 2..row * 2 + 2]),
                    "shard {} row {row}",
                    t.shard()
                );
                got.push(group);
            }
        }
        assert_eq!(got, [Some(0), Some(1), Some(0), None, Some(1), Some(0)]);
        let (mask, _, _) = HotMask::for_table(&tables[0], &hot, RowGrouping::Record).unwrap();
        let mut groups = mask.groups();
        assert_eq!(groups.group_of(1), Some(1), "rows may be skipped");
        assert_eq!(groups.group_of(0), None, "but not asked for backwards");
        assert_eq!(groups.group_of(2), None, "past the mask");
        // A mask made without groups answers none, and says so.
        let (plain_mask, _, _) = HotMask::for_table(&tables[0], &hot, RowGrouping::Skip).unwrap();
        assert!(!plain_mask.has_groups());
        assert_eq!(plain_mask.groups().group_of(0), None);
        // Without a plan every hot row is in group 0.
        let (plain, _, _) = merge_tables(&tables, 1).unwrap();
        let (mask, _, _) = HotMask::for_table(&tables[2], &plain, RowGrouping::Record).unwrap();
        let mut groups = mask.groups();
        assert_eq!((groups.group_of(0), groups.group_of(1)), (Some(0), Some(0)));
    }

    #[test]
    fn masks_of_saved_tables_are_the_same_within_a_memory_limit() {
        let tmp = tempfile::tempdir().unwrap();
        let mut exact = layout(DESCRIPTION);
        exact.rule.exact_key = true;
        let columns = exact.columns();
        // Three shards of 60,000 rows whose keys repeat often enough that many rows are hot
        // and many are later copies, in several components.
        let mut state = 0x9E37_79B9_7F4A_7C15u64;
        let rows = 60_000;
        let tables: Vec<KeyTable> = (0..3)
            .map(|shard| {
                let keys = (0..rows * columns)
                    .map(|_| neardup_scratch::xorshift(&mut state) % 400_000)
                    .collect();
                let files = table(shard, Vec::new()).files().to_vec();
                let files = vec![FileRows {
                    records: rows as u64,
                    rows: rows as u64,
                    ..files[0].clone()
                }];
                KeyTable::new(exact.clone(), shard, files, keys).unwrap()
            })
            .collect();
        let paths = saved(&tables, tmp.path());
        let (counted, in_memory, _) = merge_tables(&tables, 1).unwrap();
        let opened = ShardTables::open(&paths).unwrap();
        let plan = crate::plan_from_tables(&opened, &counted, 3, &|| false).unwrap();
        let hot = counted.with_plan(plan).unwrap();
        let unlimited = MaskMemory::default();
        let within = MaskMemory {
            memory_limit: Some(16 * 1024),
            spill_dir: Some(tmp.path().to_path_buf()),
        };
        let (all, _) = HotMask::from_table_files(&opened, &hot, &unlimited).unwrap();
        assert!(!all.is_mapped());
        assert_eq!(all, in_memory);
        assert!(all.hot_rows() > rows && all.hot_rows() < 3 * rows);
        assert!((0..3 * rows).any(|r| all.is_later_copy(r)));
        let (limited, _) = HotMask::from_table_files(&opened, &hot, &within).unwrap();
        assert_eq!(limited.is_mapped(), cfg!(target_os = "linux"));
        assert_eq!(limited, all);
        for p in &paths {
            let grouping = RowGrouping::Record;
            let (heap, files, place) = HotMask::for_shard(p, &hot, grouping, &unlimited).unwrap();
            let (mapped, files_within, place_within) =
                HotMask::for_shard(p, &hot, grouping, &within).unwrap();
            assert_eq!(mapped.is_mapped(), cfg!(target_os = "linux"));
            assert_eq!((&files, place), (&files_within, place_within));
            assert_eq!(mapped, heap);
            // The groups read back the same in row order, the mapped ones handed back behind.
            let (mut a, mut b) = (heap.groups(), mapped.groups());
            let mut groups_seen = [0usize; 3];
            for row in 0..rows {
                let group = a.group_of(row);
                assert_eq!(group, b.group_of(row), "{} row {row}", p.display());
                if let Some(g) = group {
                    groups_seen[g as usize] += 1;
                }
            }
            assert!(groups_seen.iter().all(|n| *n > 0), "{groups_seen:?}");
            // And again from the first row: the pages handed back keep their values.
            assert_eq!(mapped.groups().group_of(0), heap.groups().group_of(0));
        }
    }

    #[test]
    fn the_mask_needs_exactly_the_tables_the_keys_were_counted_from() {
        let tables = tables();
        let (hot, mask, _) = merge_tables(&tables, 1).unwrap();
        assert_eq!(hot.tables().map(<[_]>::len), Some(3));
        let all: Vec<&KeyTable> = tables.iter().collect();
        assert_eq!(HotMask::from_tables(&all, &hot).unwrap(), mask);

        let missing = [&tables[0], &tables[2]];
        let err = HotMask::from_tables(&missing, &hot)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("shards 0, 1, 2") && err.contains("shard 1 (2 rows) is missing"),
            "{err}"
        );
        let changed = table(1, vec![1, 5, 6, 8]);
        let err = HotMask::from_tables(&[&tables[0], &changed, &tables[2]], &hot)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("shard 1") && err.contains("checksum differs"),
            "{err}"
        );
        let extra = table(3, vec![1, 1, 1, 1]);
        let err = HotMask::from_tables(&[&tables[0], &tables[1], &tables[2], &extra], &hot)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("shard 3") && err.contains("was not counted"),
            "{err}"
        );
    }

    /// The errors of tables that do not go with the hot keys, or with one another, carry the
    /// tables, shards and settings their messages are made of.
    #[test]
    fn table_mismatches_are_data() {
        let tables = tables();
        let (hot, _, _) = merge_tables(&tables, 1).unwrap();
        let changed = table(1, vec![1, 5, 6, 8]);
        let err = HotMask::from_tables(&[&tables[0], &changed], &hot).unwrap_err();
        let KeysError::Config(KeysSettingsError::OtherTables { counted, problems }) = &err else {
            panic!("{err:?}");
        };
        assert_eq!(counted, &[0, 1, 2]);
        assert_eq!(
            problems,
            &[
                TableProblem::Checksum {
                    table: TableName {
                        shard: 1,
                        path: None
                    }
                },
                TableProblem::Missing { shard: 2, rows: 2 },
            ]
        );
        let mut other = layout(DESCRIPTION);
        other.sketch_description = DESCRIPTION.replace("seed=1", "seed=2");
        let err = layout(DESCRIPTION).check_compatible(&other).unwrap_err();
        let KeysError::Incompatible(crate::Incompatible::Layout { differences }) = &err else {
            panic!("{err:?}");
        };
        assert_eq!(
            differences,
            &[crate::LayoutDifference::Setting {
                setting: "--seed",
                this: "1".into(),
                other: "2".into(),
            }]
        );
        assert_eq!(
            err.to_string(),
            "made with different settings: --seed: 1 vs 2"
        );
    }

    #[test]
    fn saved_tables_and_hot_files_keep_the_identities() {
        let tmp = tempfile::tempdir().unwrap();
        let tables = tables();
        let paths = saved(&tables, tmp.path());
        let (hot, _, _) = merge_tables(&tables, 1).unwrap();
        let hot_path = tmp.path().join("hot.ndh");
        hot.save(&hot_path).unwrap();
        let loaded = HotKeys::load(&hot_path).unwrap();
        assert_eq!(loaded, hot);
        let opened = ShardTables::open(&paths).unwrap();
        assert_eq!(Some(opened.identities.as_slice()), hot.tables());
        HotMask::from_table_files(&opened, &loaded, &MaskMemory::default()).unwrap();
        let two = ShardTables::open(&paths[..2]).unwrap();
        let err = HotMask::from_table_files(&two, &loaded, &MaskMemory::default())
            .unwrap_err()
            .to_string();
        assert!(err.contains("shard 2 (2 rows) is missing"), "{err}");
        // Keys counted within one run say nothing of saved tables: they are not saved.
        let in_run = HotKeys::new(layout(DESCRIPTION), 1, hot.keys().to_vec());
        let err = in_run
            .save(&tmp.path().join("run.ndh"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("within one run"), "{err}");
        assert!(!tmp.path().join("run.ndh").exists());
    }

    #[test]
    fn a_version_1_hot_file_is_refused_with_what_to_do() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("old.ndh");
        let mut out = FrameWriter::new(Vec::new(), &HOT).unwrap();
        let header = serde_json::json!({
            "format_version": 1,
            "layout": layout(DESCRIPTION),
            "min_count": 1,
            "keys": 0,
        });
        out.header(&header).unwrap();
        std::fs::write(&path, out.finish().unwrap().0).unwrap();
        let err = HotKeys::load(&path).unwrap_err().to_string();
        assert!(
            err.contains("old.ndh") && err.contains("version 1") && err.contains("neardup hot"),
            "{err}"
        );
    }

    #[test]
    fn layout_differences_name_each_setting_and_both_values() {
        let a = layout(DESCRIPTION);
        let mut b = layout("Fast num_perm=64 seed=1 shingles=char:7:1 bands=2x32 band_keys=Fast");
        b.rule.short_texts = ShortTextPolicy::EmptySignature;
        b.selector.id_field = Some(FieldPath::top("id"));
        b.selector.mode = neardup_corpus::FieldsMode::Join {
            separator: " ".into(),
        };
        let d = a.differences(&b);
        for expected in [
            "--hash: oph vs fast",
            "--num-perm: 128 vs 64",
            ":--step): char:5:1 vs char:7:1",
            "2 × 64 vs 2 × 32",
            "short texts: exact_only vs empty_signature",
            "--id-field: none vs id",
            r#"separator of joined fields (input.separator): "\n" vs " ""#,
        ] {
            assert!(d.iter().any(|l| l.contains(expected)), "{expected}: {d:?}");
        }
        for debug in ["Some(", "{", "ExactOnly", "Join"] {
            assert!(d.iter().all(|l| !l.contains(debug)), "{debug}: {d:?}");
        }
        // Only the fingerprint differs: what the description does not show.
        let mut c = layout(DESCRIPTION);
        c.sketch_fingerprint = 8;
        let d = a.differences(&c);
        assert_eq!(d.len(), 1);
        assert!(d[0].contains("normalisation"), "{d:?}");
        assert!(a.differences(&a).is_empty() && a.check_compatible(&a).is_ok());
    }
}
