//! What the online index (`neardup-online`) keeps in a saved index beside the entries a batch run
//! writes: typed ids, every id's decision (so that checking an id again after reopening returns
//! its first decision), and the counters it numbers documents with. Its documents are the
//! records of one file of the index (named [`ONLINE_FILE`]), numbered in the order they were
//! decided, so that a batch run `--against` the index names them as it names any indexed
//! record.

use neardup_corpus::{Compression, Format, InputFile, Reason, SampleAddr};
use neardup_sketch::NO_KEY;
use serde::{Deserialize, Serialize};

use crate::{
    DROPPED, IndexDamage, IndexFile, IndexSettings, Input, SavedIndex, ShingleSets, Sketches,
};

/// The name of the file an online index's documents are records of (no such file exists: an
/// online index is self-contained, so nothing is ever read back from it).
pub const ONLINE_FILE: &str = "<online index>";

/// An id as the online index gives it: an integer or a string (`7` and `"7"` differ). A batch
/// run's ids (its `--id-field`) are strings.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum StoredId {
    /// An integer id.
    Int(i64),
    /// A string id.
    Str(String),
}

impl std::fmt::Display for StoredId {
    /// As a batch run's decisions name it (`dup_of_id`): the integer's digits or the string.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StoredId::Int(n) => write!(f, "{n}"),
            StoredId::Str(s) => f.write_str(s),
        }
    }
}

const ID_NONE: u8 = 0;
const ID_STR: u8 = 1;
const ID_INT: u8 = 2;

pub(crate) fn put_id(rec: &mut Vec<u8>, id: Option<&StoredId>) {
    match id {
        None => rec.push(ID_NONE),
        Some(StoredId::Str(s)) => {
            rec.push(ID_STR);
            rec.extend_from_slice(&(s.len() as u32).to_le_bytes());
            rec.extend_from_slice(s.as_bytes());
        }
        Some(StoredId::Int(n)) => {
            rec.push(ID_INT);
            rec.extend_from_slice(&n.to_le_bytes());
        }
    }
}

pub(crate) fn take_id(input: &mut Input<'_>) -> Result<Option<StoredId>, IndexDamage> {
    let short = IndexDamage::EntriesShort;
    match input.take(1).ok_or(short.clone())?[0] {
        ID_NONE => Ok(None),
        ID_STR => {
            let n = input.u32().ok_or(short.clone())? as usize;
            let s = input.take(n).ok_or(short)?;
            let s = String::from_utf8(s.to_vec()).map_err(|_| IndexDamage::IdNotUtf8)?;
            Ok(Some(StoredId::Str(s)))
        }
        ID_INT => {
            let n = input.u64().ok_or(short)?;
            Ok(Some(StoredId::Int(n as i64)))
        }
        _ => Err(IndexDamage::Unknown("kind of id")),
    }
}

/// An id as version 1 wrote it: a string, or none.
pub(crate) fn take_v1_id(input: &mut Input<'_>) -> Result<Option<StoredId>, IndexDamage> {
    let short = IndexDamage::EntriesShort;
    let n = input.u32().ok_or(short.clone())?;
    if n == u32::MAX {
        return Ok(None);
    }
    let s = input.take(n as usize).ok_or(short)?;
    let s = String::from_utf8(s.to_vec()).map_err(|_| IndexDamage::IdNotUtf8)?;
    Ok(Some(StoredId::Str(s)))
}

/// The online index's part of a header.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct OnlineHeader {
    pub(crate) file: u32,
    next_record: u64,
    next_auto: i64,
    keep_empty: bool,
    pub(crate) decisions: u64,
}

/// The decision an id got from the online index.
#[derive(Clone, Debug, PartialEq)]
pub struct SavedDecision {
    /// The document.
    pub id: StoredId,
    /// Whether it was kept.
    pub keep: bool,
    /// Why.
    pub reason: Reason,
    /// The earlier document it duplicates.
    pub dup_of: Option<StoredId>,
    /// The similarity that decided.
    pub similarity: Option<f64>,
}

impl SavedDecision {
    pub(crate) fn put(&self, rec: &mut Vec<u8>) {
        put_id(rec, Some(&self.id));
        rec.push(u8::from(self.keep));
        rec.push(self.reason.code());
        put_id(rec, self.dup_of.as_ref());
        match self.similarity {
            Some(s) => {
                rec.push(1);
                rec.extend_from_slice(&s.to_le_bytes());
            }
            None => rec.push(0),
        }
    }

    pub(crate) fn take(input: &mut Input<'_>) -> Result<SavedDecision, IndexDamage> {
        let short = || IndexDamage::EntriesShort;
        let id = take_id(input)?.ok_or(IndexDamage::Unknown("decision without an id"))?;
        let flags = input.take(2).ok_or_else(short)?;
        let (keep, reason) = (flags[0] == 1, flags[1]);
        let reason = Reason::from_code(reason).ok_or(IndexDamage::Unknown("reason"))?;
        let dup_of = take_id(input)?;
        let similarity = match input.take(1).ok_or_else(short)?[0] {
            0 => None,
            _ => Some(f64::from_bits(input.u64().ok_or_else(short)?)),
        };
        Ok(SavedDecision {
            id,
            keep,
            reason,
            dup_of,
            similarity,
        })
    }
}

/// What the online index keeps in a saved index beside its entries.
#[derive(Clone, Debug, PartialEq)]
pub struct OnlineState {
    /// The index's file its documents are records of.
    pub file: u32,
    /// The record number of the next document given to the decision core.
    pub next_record: u64,
    /// The next integer to try for a document checked without an id.
    pub next_auto: i64,
    /// Whether empty texts are kept (`empty="keep"`): a setting of the online index the batch
    /// settings do not hold.
    pub keep_empty: bool,
    /// Every id checked or inserted, with its decision, in the order they were decided.
    pub decisions: Vec<SavedDecision>,
}

impl OnlineState {
    pub(crate) fn header(&self) -> OnlineHeader {
        OnlineHeader {
            file: self.file,
            next_record: self.next_record,
            next_auto: self.next_auto,
            keep_empty: self.keep_empty,
            decisions: self.decisions.len() as u64,
        }
    }

    pub(crate) fn from_header(h: OnlineHeader, decisions: Vec<SavedDecision>) -> OnlineState {
        OnlineState {
            file: h.file,
            next_record: h.next_record,
            next_auto: h.next_auto,
            keep_empty: h.keep_empty,
            decisions,
        }
    }

    /// Two indexes' online states as one (the second's files numbered from `base`): every id's
    /// decision, the first one's first; the later index's documents are the online ones a
    /// reopened index adds to.
    pub(crate) fn combined(
        a: Option<OnlineState>,
        b: Option<OnlineState>,
        base: u32,
    ) -> Option<OnlineState> {
        match (a, b) {
            (a, None) => a,
            (None, Some(b)) => Some(OnlineState {
                file: b.file + base,
                ..b
            }),
            (Some(mut a), Some(b)) => {
                a.decisions.extend(b.decisions);
                a.file = b.file + base;
                a.next_record = b.next_record;
                a.next_auto = a.next_auto.max(b.next_auto);
                Some(a)
            }
        }
    }
}

/// One document the online index gave its decision core, as an entry of the index.
pub struct EntryRecord<'a> {
    /// Its record number in the online file.
    pub record: u64,
    /// Whether it was kept (or inserted).
    pub kept: bool,
    /// The kept document its cluster resolves to (its own record when kept).
    pub cluster: SampleAddr,
    /// Its row of keys.
    pub row: &'a [u64],
    /// The 128-bit content hash of its text.
    pub content_hash: u128,
    /// Its id.
    pub id: Option<StoredId>,
    /// Its signature.
    pub signature: &'a [u32],
    /// Its shingle set (exact verification).
    pub shingles: Option<&'a [u32]>,
}

impl SavedIndex {
    /// An empty index of the online index, self-contained: it stores every entry's sketch, and
    /// its shingle set when `shingles` (exact verification).
    pub fn new_online(
        settings: IndexSettings,
        num_perm: usize,
        shingles: bool,
        keep_empty: bool,
    ) -> SavedIndex {
        let mut index = SavedIndex {
            sketches: Some(Sketches {
                num_perm,
                content_hashes: Vec::new(),
                ids: Vec::new(),
                signatures: Vec::new(),
                shingles: shingles.then(ShingleSets::default),
            }),
            ..SavedIndex::empty(settings)
        };
        index.start_online(keep_empty);
        index
    }

    /// Makes the index ready for the online index to add documents: its online state (kept
    /// when it has one whose file is the index's last, else a new file for its documents).
    /// The index must be self-contained.
    pub fn start_online(&mut self, keep_empty: bool) {
        let last = self.files.len().checked_sub(1);
        if let Some(o) = &mut self.online
            && Some(o.file as usize) == last
        {
            o.keep_empty = keep_empty;
            return;
        }
        self.files.push(IndexFile {
            name: ONLINE_FILE.to_string(),
            input: InputFile {
                path: ONLINE_FILE.into(),
                relative: ONLINE_FILE.into(),
                format: Format::Jsonl,
                compression: Compression::None,
                size: 0,
            },
            chunks: Vec::new(),
        });
        let decisions = self.online.take().map(|o| o.decisions).unwrap_or_default();
        let next_auto = decisions
            .iter()
            .filter_map(|d| match d.id {
                StoredId::Int(n) => n.checked_add(1),
                StoredId::Str(_) => None,
            })
            .max()
            .unwrap_or(0);
        self.online = Some(OnlineState {
            file: (self.files.len() - 1) as u32,
            next_record: 0,
            next_auto,
            keep_empty,
            decisions,
        });
    }

    /// The online index's state, when it has one.
    pub fn online(&self) -> Option<&OnlineState> {
        self.online.as_ref()
    }

    /// The online index's state, to record decisions and counters in.
    pub fn online_mut(&mut self) -> Option<&mut OnlineState> {
        self.online.as_mut()
    }

    /// Counts one more document decided (every document, entry or not).
    pub fn count_sample(&mut self) {
        self.samples += 1;
    }

    /// Adds a document the online index gave its decision core (not an exact copy: those are
    /// no entries), after [`SavedIndex::start_online`].
    ///
    /// # Panics
    /// When the index is not self-contained or has no online state.
    pub fn push_entry(&mut self, e: EntryRecord<'_>) {
        let file = self.online.as_ref().expect("online state").file;
        let bands = self.settings.layout.bands;
        let addr = SampleAddr {
            file,
            record: e.record,
            field: 0,
        };
        let content_key = if self.settings.layout.rule.exact_key {
            e.row[bands]
        } else {
            NO_KEY
        };
        assert!(self.self_contained(), "an online index stores its sketches");
        let sk = self.sketches.as_mut().expect("self-contained");
        self.addrs.push(addr);
        self.content_keys.push(content_key);
        sk.content_hashes.push(e.content_hash);
        sk.ids.push(e.id);
        if e.kept {
            self.band_row.push((self.bands.len() / bands.max(1)) as u32);
            self.bands.extend_from_slice(&e.row[..bands]);
            self.clusters.push(addr);
            sk.signatures.extend_from_slice(e.signature);
            if let Some(sets) = &mut sk.shingles {
                sets.push(e.shingles.unwrap_or_default());
            }
        } else {
            self.band_row.push(DROPPED);
            self.clusters.push(e.cluster);
        }
    }

    /// Per entry, whether it was kept and its stored id (`None` when not stored).
    pub fn entry_ids(&self) -> impl Iterator<Item = (bool, Option<&StoredId>)> + '_ {
        let ids = self.sketches.as_ref().map(|s| &s.ids);
        self.band_row
            .iter()
            .enumerate()
            .map(move |(i, r)| (*r != DROPPED, ids.and_then(|ids| ids.get(i)?.as_ref())))
    }
}

/// One entry of a self-contained index, as [`SavedIndex::stored_entries`] gives it.
pub struct StoredEntry<'a> {
    /// Its address.
    pub addr: SampleAddr,
    /// Its id.
    pub id: Option<&'a StoredId>,
    /// Its band keys, when kept.
    pub bands: Option<&'a [u64]>,
    /// Its content key ([`NO_KEY`] when exact detection is off).
    pub content_key: u64,
    /// The 128-bit content hash of its text.
    pub content_hash: u128,
    /// Its signature (kept entries; empty for the others).
    pub signature: &'a [u32],
    /// Its shingle set (kept entries of an index storing them).
    pub shingles: Option<&'a [u32]>,
}

impl SavedIndex {
    /// The entries of a self-contained index, in order, with what it stores of each.
    ///
    /// # Panics
    /// When the index is not self-contained.
    pub fn stored_entries(&self) -> impl Iterator<Item = StoredEntry<'_>> + '_ {
        assert!(
            self.self_contained(),
            "stored entries of a self-contained index"
        );
        let sk = self.sketches.as_ref().expect("self-contained");
        let bands = self.settings.layout.bands;
        let mut kept_before = 0usize;
        (0..self.addrs.len()).map(move |i| {
            let row = self.band_row[i];
            let kept = row != DROPPED;
            let k = kept_before;
            kept_before += usize::from(kept);
            let row = row as usize;
            StoredEntry {
                addr: self.addrs[i],
                id: sk.ids[i].as_ref(),
                bands: kept.then(|| &self.bands[row * bands..(row + 1) * bands]),
                content_key: self.content_keys[i],
                content_hash: sk.content_hashes[i],
                signature: if kept {
                    &sk.signatures[row * sk.num_perm..(row + 1) * sk.num_perm]
                } else {
                    &[]
                },
                shingles: sk.shingles.as_ref().filter(|_| kept).map(|s| s.get(k)),
            }
        })
    }

    /// Kept entries that represent at least one bucket (each bucket holding its first
    /// `max_reps` kept entries), and the buckets holding one.
    pub fn representatives_and_buckets(&self) -> (u64, u64) {
        let bands = self.settings.layout.bands;
        let mut held: hashbrown::HashMap<u64, usize> = hashbrown::HashMap::new();
        let mut reps = 0u64;
        for &row in &self.band_row {
            if row == DROPPED {
                continue;
            }
            let row = row as usize;
            let mut joined = false;
            for &key in &self.bands[row * bands..(row + 1) * bands] {
                if key == NO_KEY {
                    continue;
                }
                let n = held.entry(key).or_insert(0);
                if self.settings.max_reps.is_none_or(|m| *n < m) {
                    *n += 1;
                    joined = true;
                }
            }
            reps += u64::from(joined);
        }
        (reps, held.len() as u64)
    }
}
