//! Saved indexes: what a later run needs of an earlier run's decisions to deduplicate against it
//! (`--index-out`, `--against`, `neardup index`).
//!
//! The contract: B deduplicated against the index of A gets, for every record of B, the
//! decision (keep, reason, `dup_of`, cluster) it gets in one run over A then B; an index made by
//! that run (`--against idx-a --index-out idx-ab`) serves C as one run over A, B, C would. A's
//! decisions never change: its records come first.
//!
//! What that needs, and nothing more (with `min_count` = 1, the only count an index supports —
//! with more, a key seen once in A and once in B becomes hot and A's own decisions could change):
//! - **Which of B's keys are hot.** In the joint run a key of B is hot when B holds it twice, or
//!   once and A holds it. A key whose A holders were all dropped changes nothing for B (its
//!   buckets hold no A representative, and a key B holds once has no second B holder to meet),
//!   so the index keeps the band keys of A's *kept* samples and the content keys of A's texts
//!   ([`SavedIndex::prior_keys`], counted by stage 1 as [`neardup_keys::PriorKeys`]).
//! - **The buckets as A leaves them.** Bucket k starts with the first `max_reps` kept samples of
//!   A holding k, in A's order (a dropped sample is never a representative): the kept samples'
//!   addresses and band keys.
//! - **The texts A has seen.** Each text maps to A's first sample with it and the kept sample
//!   its cluster resolves to (a text first seen in a dropped sample resolves to what it
//!   duplicates). Exact copies are never first copies, so every sample of A that was not an
//!   exact copy is an entry, with its content key and cluster.
//!
//! Signatures, shingle sets, ids and full 128-bit content hashes are not stored: for the few
//! entries B's hot keys reach, [`SavedIndex::resolve`] reads the records back from A's files by
//! address (only the chunks holding them) and sketches them again, checking that their keys are
//! still the index's. An index is therefore about the size of its kept samples' rows in a key
//! table — `24 + 8 × bands` bytes per kept sample, `32` per near-duplicate first copy, nothing
//! per exact copy — and it needs A's files, unchanged, wherever B reaches A.
//!
//! This crate owns the index file format (versioned, checksummed), building an index from a
//! run's decisions and key rows ([`IndexBuilder`]), combining several indexes, and turning an
//! index into the keys stage 1 counts and the state stage 2 starts from
//! ([`neardup_dedup::PriorState`]). It does not count keys (`neardup-keys`), decide
//! (`neardup-dedup`), or parse files (`neardup-corpus`).
#![warn(missing_docs)]

mod error;
mod online;
mod resolve;

use std::io::{BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use hashbrown::HashMap;
use neardup_corpus::frame::{Frame, FrameError, FrameWriter};
use neardup_corpus::{InputFile, Reason, SampleAddr};
use neardup_dedup::{Decision, Verify};
use neardup_keys::{ChunkRows, FileRows, PriorKeys, TableLayout};
use neardup_sketch::NO_KEY;
use serde::{Deserialize, Serialize};
use xxhash_rust::xxh3::Xxh3;

pub use error::{DecisionsMismatch, FileChange, IndexDamage, IndexError};
pub use online::{EntryRecord, ONLINE_FILE, OnlineState, SavedDecision, StoredEntry, StoredId};
pub use resolve::ResolveOptions;

const FRAME: Frame = Frame {
    magic: b"NDINDEX1",
    end: b"NDIDXEND",
};
/// The format version written; an index of another version is refused with a message.
///
/// Version 2 (written by `neardup dedup --index-out`, `neardup index` and the online index)
/// adds to version 1, which is still read: each stored id's kind (an integer or a string), the
/// kept entries' shingle sets (so that an index verified by exact Jaccard can be
/// self-contained), and the online index's state (every id's decision, so that a retry after
/// reopening gets its first decision, and the counters it numbers documents with).
pub const FORMAT_VERSION: u32 = 2;
/// The versions read.
const READ_VERSIONS: [u32; 2] = [1, 2];

/// The settings an index was made with. A run against it must use the same: every one of them
/// changes which samples are kept or which keys they have.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct IndexSettings {
    /// Sketch settings, row rule and text selection (as key tables record them).
    pub layout: TableLayout,
    /// Stage 1's `min_count` (always 1: see the crate docs).
    pub min_count: u32,
    /// The similarity threshold.
    pub threshold: f64,
    /// Representatives per bucket (`None`: unbounded).
    pub max_reps: Option<usize>,
    /// How candidates were confirmed.
    pub verify: Verify,
}

impl IndexSettings {
    /// Each setting that differs from `run`'s, as "name: index value vs this run's value".
    pub fn differences(&self, run: &IndexSettings) -> Vec<String> {
        let mut out = self.layout.differences(&run.layout);
        if self.min_count != run.min_count {
            out.push(format!(
                "min_key_count: {} vs {}",
                self.min_count, run.min_count
            ));
        }
        if self.threshold != run.threshold {
            out.push(format!(
                "threshold: {} vs {}",
                self.threshold, run.threshold
            ));
        }
        if self.max_reps != run.max_reps {
            let show = |m: Option<usize>| m.map_or("unbounded".to_string(), |m| m.to_string());
            out.push(format!(
                "max_reps: {} vs {}",
                show(self.max_reps),
                show(run.max_reps)
            ));
        }
        if self.verify != run.verify {
            let show = |v: Verify| match v {
                Verify::Estimate => "estimate",
                Verify::Jaccard => "exact",
            };
            out.push(format!(
                "verify: {} vs {}",
                show(self.verify),
                show(run.verify)
            ));
        }
        out
    }
}

/// An input file of an indexed run: how decisions name it, and how to read its records back.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct IndexFile {
    /// The file as decisions name it.
    pub name: String,
    /// The file as it was read (path, format, compression, size).
    pub input: InputFile,
    /// The chunks it was read in, with their counts (records are numbered chunk after chunk).
    pub chunks: Vec<ChunkRows>,
}

impl IndexFile {
    /// The file of a stage-1 shard, named as decisions name it.
    pub fn from_rows(rows: &FileRows) -> IndexFile {
        IndexFile {
            name: rows.input.path.display().to_string(),
            input: rows.input.clone(),
            chunks: rows.chunks.clone(),
        }
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
struct Header {
    format: u32,
    settings: IndexSettings,
    files: Vec<IndexFile>,
    /// Samples decided in the indexed runs (for the report).
    samples: u64,
    entries: u64,
    kept: u64,
    /// Signature positions of the stored sketches, when the index holds them (`--verify
    /// estimate`: a run against it reads nothing back).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    sketches: Option<usize>,
    /// Whether the stored sketches hold the kept entries' shingle sets too (version 2).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    shingles: bool,
    /// The online index's state (version 2, written by the online index).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    online: Option<online::OnlineHeader>,
}

/// What a run against an index would read back of each entry, stored (indexes made under
/// `--verify estimate`, which then need none of the indexed runs' files). Covers the first
/// `content_hashes.len()` entries.
#[derive(Clone, Debug, PartialEq)]
struct Sketches {
    num_perm: usize,
    /// Per entry: the 128-bit content hash of its text.
    content_hashes: Vec<u128>,
    /// Per entry: its id.
    ids: Vec<Option<StoredId>>,
    /// Per kept entry, in order: its signature (`num_perm` values).
    signatures: Vec<u32>,
    /// Per kept entry, in order: its shingle set, when stored (`shingle_ends[k]` is where the
    /// set of the k-th kept entry ends in `shingle_values`).
    shingles: Option<ShingleSets>,
}

/// Shingle sets one after the other.
#[derive(Clone, Debug, Default, PartialEq)]
struct ShingleSets {
    ends: Vec<u64>,
    values: Vec<u32>,
}

impl ShingleSets {
    fn get(&self, k: usize) -> &[u32] {
        let start = if k == 0 { 0 } else { self.ends[k - 1] as usize };
        &self.values[start..self.ends[k] as usize]
    }

    fn push(&mut self, set: &[u32]) {
        self.values.extend_from_slice(set);
        self.ends.push(self.values.len() as u64);
    }
}

/// A saved index: see the crate docs for what it holds and why.
#[derive(Clone, Debug, PartialEq)]
pub struct SavedIndex {
    settings: IndexSettings,
    files: Vec<IndexFile>,
    samples: u64,
    /// Per entry, in the indexed runs' order: the sample.
    addrs: Vec<SampleAddr>,
    /// Per entry: the kept sample its cluster resolves to (`addrs[i]` when kept).
    clusters: Vec<SampleAddr>,
    /// Per entry: the content key of its text.
    content_keys: Vec<u64>,
    /// Per entry: the index of its band keys in `bands` (`u32::MAX`: a dropped sample, none).
    band_row: Vec<u32>,
    /// Band keys of the kept entries, `settings.layout.bands` each, in entry order.
    bands: Vec<u64>,
    /// The entries' sketches, when stored (see [`Sketches`]).
    sketches: Option<Sketches>,
    /// What the online index keeps beside the entries (made or opened by it).
    online: Option<OnlineState>,
}

const DROPPED: u32 = u32::MAX;

impl SavedIndex {
    /// An index of no runs yet, made with `settings`, without sketches.
    fn empty(settings: IndexSettings) -> SavedIndex {
        SavedIndex {
            settings,
            files: Vec::new(),
            samples: 0,
            addrs: Vec::new(),
            clusters: Vec::new(),
            content_keys: Vec::new(),
            band_row: Vec::new(),
            bands: Vec::new(),
            sketches: None,
            online: None,
        }
    }

    /// The settings it was made with.
    pub fn settings(&self) -> &IndexSettings {
        &self.settings
    }

    /// The indexed runs' files, in order.
    pub fn files(&self) -> &[IndexFile] {
        &self.files
    }

    /// Samples the indexed runs decided.
    pub fn samples(&self) -> u64 {
        self.samples
    }

    /// Entries (samples that were not exact copies).
    pub fn entries(&self) -> usize {
        self.addrs.len()
    }

    /// Whether a file starting with `head` is a neardup index (of any version).
    pub fn starts_like_index(head: &[u8]) -> bool {
        FRAME.begins(head)
    }

    /// Kept samples among the entries.
    pub fn kept(&self) -> usize {
        self.band_row.iter().filter(|r| **r != DROPPED).count()
    }

    /// Whether it holds every entry's sketch, so that a run against it needs none of the
    /// indexed runs' files (an index made under `--verify estimate`).
    pub fn self_contained(&self) -> bool {
        self.sketches
            .as_ref()
            .is_some_and(|s| s.content_hashes.len() == self.addrs.len())
    }

    /// Whether it is self-contained with the kept entries' shingle sets too, so that a run
    /// verifying by exact Jaccard needs none of the indexed runs' files.
    pub fn self_contained_with_shingles(&self) -> bool {
        self.self_contained() && self.sketches.as_ref().is_some_and(|s| s.shingles.is_some())
    }

    /// Whether some entries' sketches are stored (all of them, or the first ones: an index
    /// made against a self-contained one).
    pub fn has_sketches(&self) -> bool {
        self.sketches.is_some()
    }

    /// The keys stage 1 of a run against this index counts once more each: the band keys of the
    /// kept samples and the content keys of every entry.
    pub fn prior_keys(&self) -> PriorKeys {
        let mut pairs: Vec<(u64, bool)> = Vec::with_capacity(self.bands.len() + self.addrs.len());
        pairs.extend(
            self.bands
                .iter()
                .filter(|k| **k != NO_KEY)
                .map(|k| (*k, false)),
        );
        pairs.extend(
            self.content_keys
                .iter()
                .filter(|k| **k != NO_KEY)
                .map(|k| (*k, true)),
        );
        PriorKeys::new(pairs)
    }

    /// What its header says (settings, files, counts), without its entries.
    pub fn summary(&self) -> IndexSummary {
        IndexSummary {
            settings: self.settings.clone(),
            files: self.files.clone(),
            samples: self.samples,
            entries: self.addrs.len() as u64,
        }
    }

    /// Refuses a run whose settings differ from the index's, naming each setting.
    pub fn check_settings(&self, run: &IndexSettings, path: &Path) -> Result<(), IndexError> {
        check_settings(&self.settings, &self.files, run, path)
    }

    /// Several indexes as one, in the order given: their files numbered one after the other,
    /// their entries likewise (so a run against them sees the first index's samples first). All
    /// must have the same settings, and no file may be in two of them (an index made
    /// `--against` another already holds that one's files: pass only the later).
    pub fn combine(indexes: Vec<(PathBuf, SavedIndex)>) -> Result<SavedIndex, IndexError> {
        IndexSummary::combine(
            indexes
                .iter()
                .map(|(p, i)| (p.clone(), i.summary()))
                .collect(),
        )?;
        let mut iter = indexes.into_iter().map(|(_, i)| i);
        let Some(mut all) = iter.next() else {
            return Err(IndexError::NoIndex);
        };
        for next in iter {
            let base = u32::try_from(all.files.len()).map_err(|_| IndexError::TooManyFiles)?;
            let shift = |a: SampleAddr| SampleAddr {
                file: a.file + base,
                ..a
            };
            let band_base = u32::try_from(all.bands.len() / all.settings.layout.bands.max(1))
                .map_err(|_| IndexError::TooManyFiles)?;
            all.sketches = match (all.sketches.take(), next.sketches) {
                (Some(mut a), Some(b)) if a.content_hashes.len() == all.addrs.len() => {
                    a.content_hashes.extend(b.content_hashes);
                    a.ids.extend(b.ids);
                    a.signatures.extend(b.signatures);
                    a.shingles = match (a.shingles.take(), b.shingles) {
                        (Some(mut sa), Some(sb)) => {
                            for k in 0..sb.ends.len() {
                                sa.push(sb.get(k));
                            }
                            Some(sa)
                        }
                        _ => None,
                    };
                    Some(a)
                }
                // Stored for some entries only: the run reads the others back.
                (a, _) => a,
            };
            all.online = OnlineState::combined(all.online.take(), next.online, base);
            all.files.extend(next.files);
            all.samples += next.samples;
            all.addrs.extend(next.addrs.into_iter().map(shift));
            all.clusters.extend(next.clusters.into_iter().map(shift));
            all.content_keys.extend(next.content_keys);
            all.band_row.extend(
                next.band_row
                    .into_iter()
                    .map(|r| if r == DROPPED { r } else { r + band_base }),
            );
            all.bands.extend(next.bands);
        }
        Ok(all)
    }

    /// Writes the index: a header (settings, files, counts), the entries, the online index's
    /// decisions (when it has them), a checksum. Returns its size in bytes.
    pub fn write_to(&self, out: impl Write) -> std::io::Result<u64> {
        let mut out = FrameWriter::new(BufWriter::with_capacity(1 << 20, out), &FRAME)?;
        let sketches = self.sketches.as_ref().filter(|_| self.self_contained());
        let header = Header {
            format: FORMAT_VERSION,
            settings: self.settings.clone(),
            files: self.files.clone(),
            samples: self.samples,
            entries: self.addrs.len() as u64,
            kept: self.kept() as u64,
            sketches: sketches.map(|s| s.num_perm),
            shingles: sketches.is_some_and(|s| s.shingles.is_some()),
            online: self.online.as_ref().map(OnlineState::header),
        };
        out.header(&header)?;
        let bands = self.settings.layout.bands;
        let mut kept_seen = 0usize;
        let mut rec = Vec::with_capacity(48 + 8 * bands);
        for i in 0..self.addrs.len() {
            rec.clear();
            let (a, c) = (self.addrs[i], self.clusters[i]);
            let kept = self.band_row[i] != DROPPED;
            rec.push(u8::from(kept));
            put_addr(&mut rec, a);
            rec.extend_from_slice(&self.content_keys[i].to_le_bytes());
            if kept {
                let at = self.band_row[i] as usize * bands;
                for k in &self.bands[at..at + bands] {
                    rec.extend_from_slice(&k.to_le_bytes());
                }
            } else {
                put_addr(&mut rec, c);
            }
            if let Some(sk) = sketches {
                rec.extend_from_slice(&sk.content_hashes[i].to_le_bytes());
                online::put_id(&mut rec, sk.ids[i].as_ref());
                if kept {
                    let at = self.band_row[i] as usize * sk.num_perm;
                    for v in &sk.signatures[at..at + sk.num_perm] {
                        rec.extend_from_slice(&v.to_le_bytes());
                    }
                    if let Some(sets) = &sk.shingles {
                        let set = sets.get(kept_seen);
                        rec.extend_from_slice(&(set.len() as u32).to_le_bytes());
                        for v in set {
                            rec.extend_from_slice(&v.to_le_bytes());
                        }
                    }
                }
            }
            kept_seen += usize::from(kept);
            out.write_all(&rec)?;
        }
        if let Some(o) = &self.online {
            for d in &o.decisions {
                rec.clear();
                d.put(&mut rec);
                out.write_all(&rec)?;
            }
        }
        Ok(out.finish()?.1)
    }

    /// Reads an index written by [`SavedIndex::write_to`] (this version or an earlier one),
    /// verifying its checksum.
    pub fn load(path: &Path) -> Result<SavedIndex, IndexError> {
        let io = |e: std::io::Error| IndexError::Io {
            path: path.to_path_buf(),
            error: e,
        };
        // A local file or an object (`s3://…`) alike.
        let file = neardup_storage::file::open(path).map_err(io)?;
        let mut bytes = Vec::new();
        BufReader::new(file).read_to_end(&mut bytes).map_err(io)?;
        SavedIndex::from_bytes(&bytes, path)
    }

    /// An index from the bytes [`SavedIndex::write_to`] wrote (`path` names it in errors).
    pub fn from_bytes(bytes: &[u8], path: &Path) -> Result<SavedIndex, IndexError> {
        let damaged = |damage: IndexDamage| IndexError::Damaged {
            path: path.to_path_buf(),
            damage,
        };
        if bytes.len() < 32 || !FRAME.begins(bytes) {
            return Err(IndexError::NotAnIndex {
                path: path.to_path_buf(),
            });
        }
        let contents = FRAME.contents(bytes).map_err(|e| match e {
            FrameError::Checksum { .. } => damaged(IndexDamage::Checksum),
            _ => damaged(IndexDamage::CutShort),
        })?;
        let body_end = 8 + contents.len();
        let header_len = u64::from_le_bytes(bytes[8..16].try_into().expect("8")) as usize;
        let header_end = 16usize
            .checked_add(header_len)
            .filter(|e| *e <= body_end)
            .ok_or_else(|| damaged(IndexDamage::HeaderLength))?;
        let header = parse_header(&bytes[16..header_end], path)?;
        let typed_ids = header.format >= 2;
        let bands = header.settings.layout.bands;
        // Counts come from the file: reserve no more than its bytes could hold.
        let cap = |n: u64| (n as usize).min(bytes.len());
        let mut index = SavedIndex {
            settings: header.settings,
            files: header.files,
            samples: header.samples,
            addrs: Vec::with_capacity(cap(header.entries)),
            clusters: Vec::with_capacity(cap(header.entries)),
            content_keys: Vec::with_capacity(cap(header.entries)),
            band_row: Vec::with_capacity(cap(header.entries)),
            bands: Vec::with_capacity(cap(header.kept * bands as u64)),
            sketches: header.sketches.map(|num_perm| Sketches {
                num_perm,
                content_hashes: Vec::with_capacity(cap(header.entries)),
                ids: Vec::with_capacity(cap(header.entries)),
                signatures: Vec::with_capacity(cap(header.kept * num_perm as u64)),
                shingles: header.shingles.then(ShingleSets::default),
            }),
            online: None,
        };
        let mut input = Input {
            bytes: &bytes[..body_end],
            at: header_end,
        };
        let short = || damaged(IndexDamage::EntriesShort);
        for _ in 0..header.entries {
            let kept = input.take(1).ok_or_else(short)?[0] == 1;
            let addr = input.addr().ok_or_else(short)?;
            let content_key = input.u64().ok_or_else(short)?;
            if addr.file as usize >= index.files.len() {
                return Err(damaged(IndexDamage::UnknownFile));
            }
            index.addrs.push(addr);
            index.content_keys.push(content_key);
            if kept {
                let row = u32::try_from(index.bands.len() / bands.max(1))
                    .map_err(|_| damaged(IndexDamage::TooManyEntries))?;
                for _ in 0..bands {
                    index.bands.push(input.u64().ok_or_else(short)?);
                }
                index.band_row.push(row);
                index.clusters.push(addr);
            } else {
                index.band_row.push(DROPPED);
                index.clusters.push(input.addr().ok_or_else(short)?);
            }
            if let Some(sk) = &mut index.sketches {
                sk.content_hashes.push(u128::from_le_bytes(
                    input.take(16).ok_or_else(short)?.try_into().expect("16"),
                ));
                let id = if typed_ids {
                    online::take_id(&mut input)
                } else {
                    online::take_v1_id(&mut input)
                };
                sk.ids.push(id.map_err(damaged)?);
                if kept {
                    for _ in 0..sk.num_perm {
                        sk.signatures.push(input.u32().ok_or_else(short)?);
                    }
                    if let Some(sets) = &mut sk.shingles {
                        let n = input.u32().ok_or_else(short)? as usize;
                        let set = input.take(n.checked_mul(4).ok_or_else(short)?);
                        let set = set.ok_or_else(short)?;
                        sets.values.extend(set.chunks_exact(4).map(u32_of));
                        sets.ends.push(sets.values.len() as u64);
                    }
                }
            }
        }
        if let Some(h) = header.online {
            let mut decisions = Vec::with_capacity(cap(h.decisions));
            for _ in 0..h.decisions {
                decisions.push(SavedDecision::take(&mut input).map_err(damaged)?);
            }
            if h.file as usize >= index.files.len() {
                return Err(damaged(IndexDamage::UnknownFile));
            }
            index.online = Some(OnlineState::from_header(h, decisions));
        }
        if input.at != body_end {
            return Err(damaged(IndexDamage::Trailing));
        }
        Ok(index)
    }

    /// Saves to `path` (not atomically: callers publish through their own atomic file).
    pub fn save(&self, path: &Path) -> Result<(), IndexError> {
        let file = std::fs::File::create(path).map_err(|e| IndexError::Io {
            path: path.to_path_buf(),
            error: e,
        })?;
        self.write_to(file).map(|_| ()).map_err(|e| IndexError::Io {
            path: path.to_path_buf(),
            error: e,
        })
    }
}

/// The header of the index at `path` from its JSON, refused when damaged or written by another
/// format version.
fn parse_header(json: &[u8], path: &Path) -> Result<Header, IndexError> {
    let header: Header = serde_json::from_slice(json).map_err(|e| IndexError::Damaged {
        path: path.to_path_buf(),
        damage: IndexDamage::Header(e.to_string()),
    })?;
    if !READ_VERSIONS.contains(&header.format) {
        return Err(IndexError::Version {
            path: path.to_path_buf(),
            found: header.format,
        });
    }
    Ok(header)
}

/// Refuses settings `run` that differ from those of an index of `files` made with `settings`,
/// naming each. An index only the online index made holds texts, not records: which field of a
/// record a run reads (and its ids) is the run's own.
fn check_settings(
    settings: &IndexSettings,
    files: &[IndexFile],
    run: &IndexSettings,
    path: &Path,
) -> Result<(), IndexError> {
    let online_only = files.iter().all(|f| f.name == online::ONLINE_FILE);
    let differences = if online_only {
        let mut settings = settings.clone();
        settings.layout.selector = run.layout.selector.clone();
        settings.differences(run)
    } else {
        settings.differences(run)
    };
    if differences.is_empty() {
        Ok(())
    } else {
        Err(IndexError::OtherSettings {
            path: path.to_path_buf(),
            differences,
        })
    }
}

/// What an index's header says: its settings, the indexed runs' files and its counts. Read
/// without the entries ([`IndexSummary::load`]), it is all a step needs that only numbers its
/// files after the indexed runs' or checks that other steps used the same indexes.
#[derive(Clone, Debug, PartialEq)]
pub struct IndexSummary {
    settings: IndexSettings,
    files: Vec<IndexFile>,
    samples: u64,
    entries: u64,
}

impl IndexSummary {
    /// The header of the index at `path` (the entries are neither read nor checked:
    /// [`SavedIndex::load`] does that).
    pub fn load(path: &Path) -> Result<IndexSummary, IndexError> {
        let io = |e: std::io::Error| IndexError::Io {
            path: path.to_path_buf(),
            error: e,
        };
        let mut input = BufReader::new(neardup_storage::file::open(path).map_err(io)?);
        let mut head = [0u8; 16];
        input
            .read_exact(&mut head)
            .map_err(|_| IndexError::NotAnIndex {
                path: path.to_path_buf(),
            })?;
        if !FRAME.begins(&head) {
            return Err(IndexError::NotAnIndex {
                path: path.to_path_buf(),
            });
        }
        let len = u64::from_le_bytes(head[8..16].try_into().expect("8"));
        let mut json = Vec::new();
        input.take(len).read_to_end(&mut json).map_err(io)?;
        let header = parse_header(&json, path)?;
        Ok(IndexSummary {
            settings: header.settings,
            files: header.files,
            samples: header.samples,
            entries: header.entries,
        })
    }

    /// The settings the index was made with.
    pub fn settings(&self) -> &IndexSettings {
        &self.settings
    }

    /// The indexed runs' files, in order.
    pub fn files(&self) -> &[IndexFile] {
        &self.files
    }

    /// Refuses a run whose settings differ from the index's, naming each setting.
    pub fn check_settings(&self, run: &IndexSettings, path: &Path) -> Result<(), IndexError> {
        check_settings(&self.settings, &self.files, run, path)
    }

    /// What identifies the indexed runs, for steps that must agree on it: a hash of the files'
    /// names and sizes and of the counts (the same for indexes combined as for their summaries
    /// combined).
    pub fn fingerprint(&self) -> u64 {
        let mut h = Xxh3::new();
        for f in &self.files {
            h.update(f.name.as_bytes());
            h.update(&[0]);
            h.update(&f.input.size.to_le_bytes());
        }
        h.update(&self.samples.to_le_bytes());
        h.update(&self.entries.to_le_bytes());
        h.digest()
    }

    /// Several indexes' summaries as the summary of [`SavedIndex::combine`]: the same settings
    /// (else the setting is named), no file in two of them (an index made `--against` another
    /// already holds that one's files: pass only the later), files in the order given.
    pub fn combine(summaries: Vec<(PathBuf, IndexSummary)>) -> Result<IndexSummary, IndexError> {
        let mut iter = summaries.into_iter();
        let Some((first_path, mut all)) = iter.next() else {
            return Err(IndexError::NoIndex);
        };
        let mut owner: HashMap<String, PathBuf> = all
            .files
            .iter()
            .map(|f| (f.name.clone(), first_path.clone()))
            .collect();
        for (path, next) in iter {
            next.check_settings(&all.settings, &path)?;
            for f in &next.files {
                if let Some(other) = owner.insert(f.name.clone(), path.clone()) {
                    return Err(IndexError::Overlap {
                        file: f.name.clone(),
                        first: other,
                        second: path,
                    });
                }
            }
            all.files.extend(next.files);
            all.samples += next.samples;
            all.entries += next.entries;
        }
        Ok(all)
    }
}

fn put_addr(rec: &mut Vec<u8>, a: SampleAddr) {
    rec.extend_from_slice(&a.file.to_le_bytes());
    rec.extend_from_slice(&a.record.to_le_bytes());
    rec.extend_from_slice(&a.field.to_le_bytes());
}

fn u32_of(b: &[u8]) -> u32 {
    u32::from_le_bytes(b.try_into().expect("4"))
}

/// An index's body being read: each read is `None` past its end.
struct Input<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Input<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let s = self.bytes.get(self.at..self.at.checked_add(n)?)?;
        self.at += n;
        Some(s)
    }

    fn u32(&mut self) -> Option<u32> {
        self.take(4).map(u32_of)
    }

    fn u64(&mut self) -> Option<u64> {
        self.take(8)
            .map(|b| u64::from_le_bytes(b.try_into().expect("8")))
    }

    fn addr(&mut self) -> Option<SampleAddr> {
        Some(SampleAddr {
            file: self.u32()?,
            record: self.u64()?,
            field: self.u32()?,
        })
    }
}

/// One decision as the index needs it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct IndexedDecision {
    /// The sample (files numbered with any earlier indexed runs' first).
    pub addr: SampleAddr,
    /// Why it was kept or dropped.
    pub reason: Reason,
    /// Whether it was kept.
    pub keep: bool,
    /// The kept sample its cluster resolves to.
    pub cluster: SampleAddr,
}

impl From<&Decision> for IndexedDecision {
    fn from(d: &Decision) -> IndexedDecision {
        IndexedDecision {
            addr: d.addr,
            reason: d.reason,
            keep: d.keep,
            cluster: d.cluster,
        }
    }
}

/// Builds an index from a run's decisions, in input order, each with its row of keys (the row
/// stage 1 computed; samples that could not be read have none).
pub struct IndexBuilder {
    index: SavedIndex,
    columns: usize,
    /// Files of earlier indexes the run was made against (their entries come first).
    earlier_files: u32,
}

impl IndexBuilder {
    /// An index of a run over `files` with `settings`, made against `earlier` (the indexes it
    /// was given with `--against`, combined), if any: the new index holds the earlier entries
    /// first, so it serves the next run as one over all the inputs would.
    pub fn new(
        settings: IndexSettings,
        files: Vec<IndexFile>,
        earlier: Option<SavedIndex>,
    ) -> Result<IndexBuilder, IndexError> {
        if settings.min_count != 1 {
            return Err(IndexError::MinCount(settings.min_count));
        }
        let columns = settings.layout.columns();
        let mut index = match earlier {
            Some(mut e) => {
                e.check_settings(&settings, Path::new("the index given"))?;
                // An index only the online index made takes the run's text selection.
                e.settings = settings;
                e
            }
            None => SavedIndex::empty(settings),
        };
        let earlier_files =
            u32::try_from(index.files.len()).map_err(|_| IndexError::TooManyFiles)?;
        index.files.extend(files);
        Ok(IndexBuilder {
            index,
            columns,
            earlier_files,
        })
    }

    /// Whether a decision with this reason has a row of keys (every sample with a text, blank
    /// ones too; not a sample that could not be read).
    pub fn has_row(reason: Reason) -> bool {
        reason != Reason::Error
    }

    /// Adds one decision and its row (`None` exactly when [`IndexBuilder::has_row`] is false).
    pub fn push(&mut self, d: IndexedDecision, row: Option<&[u64]>) -> Result<(), IndexError> {
        if d.addr.file < self.earlier_files || d.addr.file as usize >= self.index.files.len() {
            return Err(IndexError::Decisions {
                path: None,
                mismatch: DecisionsMismatch::FileOutsideRun { file: d.addr.file },
            });
        }
        self.index.samples += 1;
        let Some(row) = row else { return Ok(()) };
        if row.len() != self.columns {
            return Err(IndexError::Decisions {
                path: None,
                mismatch: DecisionsMismatch::RowWidth {
                    found: row.len(),
                    expected: self.columns,
                },
            });
        }
        let bands = self.index.settings.layout.bands;
        let content_key = if self.index.settings.layout.rule.exact_key {
            row[bands]
        } else {
            NO_KEY
        };
        // Blank texts and exact copies are no one's original (an exact copy's text maps to its
        // first copy, which is an entry).
        let blank = row.iter().all(|k| *k == NO_KEY);
        if blank || d.reason == Reason::Exact || d.reason == Reason::Empty {
            return Ok(());
        }
        self.index.addrs.push(d.addr);
        self.index.content_keys.push(content_key);
        if d.keep {
            let at = u32::try_from(self.index.bands.len() / bands.max(1))
                .map_err(|_| IndexError::TooManyFiles)?;
            self.index.bands.extend_from_slice(&row[..bands]);
            self.index.band_row.push(at);
            self.index.clusters.push(d.addr);
        } else {
            self.index.band_row.push(DROPPED);
            self.index.clusters.push(d.cluster);
        }
        Ok(())
    }

    /// The index.
    pub fn finish(self) -> SavedIndex {
        self.index
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use neardup_corpus::{ChunkRange, Compression, FieldPath, Format, TextSelector};
    use neardup_keys::RowRule;

    const BANDS: usize = 3;

    fn settings() -> IndexSettings {
        IndexSettings {
            layout: TableLayout {
                sketch_fingerprint: 7,
                sketch_description: "test".into(),
                bands: BANDS,
                rule: RowRule::default(),
                selector: TextSelector::single(FieldPath::top("text")),
            },
            min_count: 1,
            threshold: 0.8,
            max_reps: Some(2),
            verify: Verify::Jaccard,
        }
    }

    fn file(name: &str) -> IndexFile {
        IndexFile {
            name: name.into(),
            input: InputFile {
                path: name.into(),
                relative: name.into(),
                format: Format::Jsonl,
                compression: Compression::None,
                size: 100,
            },
            chunks: vec![ChunkRows {
                range: ChunkRange::Whole,
                records: 5,
                rows: 5,
                read_error: false,
                unreadable: Vec::new(),
                places: None,
            }],
        }
    }

    fn addr(file: u32, record: u64) -> SampleAddr {
        SampleAddr {
            file,
            record,
            field: 0,
        }
    }

    /// Five samples of one file: kept, near duplicate of 0, exact copy of 0, empty, kept.
    fn index(name: &str, earlier: Option<SavedIndex>) -> SavedIndex {
        let base = earlier.as_ref().map_or(0, |e| e.files().len() as u32);
        let mut b = IndexBuilder::new(settings(), vec![file(name)], earlier).unwrap();
        let d = |record: u64, reason: Reason, keep: bool, cluster: u64| IndexedDecision {
            addr: addr(base, record),
            reason,
            keep,
            cluster: addr(base, cluster),
        };
        b.push(d(0, Reason::Unique, true, 0), Some(&[11, 12, 13, 100]))
            .unwrap();
        b.push(d(1, Reason::Near, false, 0), Some(&[11, 22, 23, 101]))
            .unwrap();
        b.push(d(2, Reason::Exact, false, 0), Some(&[11, 12, 13, 100]))
            .unwrap();
        b.push(d(3, Reason::Empty, true, 3), Some(&[NO_KEY; 4]))
            .unwrap();
        b.push(d(4, Reason::Unique, true, 4), Some(&[41, NO_KEY, 43, 104]))
            .unwrap();
        b.finish()
    }

    #[test]
    fn entries_are_the_samples_that_were_not_exact_copies() {
        let i = index("a", None);
        assert_eq!((i.samples(), i.entries(), i.kept()), (5, 3, 2));
        let prior = i.prior_keys();
        // Band keys of kept samples and content keys of every entry; a dropped sample's band
        // keys are not there.
        for k in [11, 12, 13, 41, 43, 100, 101, 104] {
            assert!(prior.lookup(k).is_some(), "{k}");
        }
        assert_eq!(prior.lookup(22), None);
        assert_eq!(prior.lookup(100), Some(true));
        assert_eq!(prior.lookup(11), Some(false));
    }

    #[test]
    fn an_index_reads_back_as_written_and_damage_is_found() {
        let dir = tempfile::tempdir().unwrap();
        let mut i = index("a", None);
        for sketches in [false, true] {
            if sketches {
                i.sketches = Some(Sketches {
                    num_perm: 2,
                    content_hashes: vec![1, 2, 3],
                    ids: vec![
                        Some(StoredId::Str("x".into())),
                        None,
                        Some(StoredId::Int(-3)),
                    ],
                    signatures: vec![5, 6, 7, 8],
                    shingles: Some(ShingleSets {
                        ends: vec![2, 2],
                        values: vec![9, 10],
                    }),
                });
            }
            let path = dir.path().join("idx");
            i.save(&path).unwrap();
            let back = SavedIndex::load(&path).unwrap();
            assert_eq!(back, i);
            assert_eq!(back.self_contained(), sketches);
            assert_eq!(IndexSummary::load(&path).unwrap().files, i.files);
            let bytes = std::fs::read(&path).unwrap();
            for at in [20, bytes.len() / 2, bytes.len() - 20] {
                let mut bad = bytes.clone();
                bad[at] ^= 1;
                std::fs::write(&path, &bad).unwrap();
                assert!(
                    matches!(SavedIndex::load(&path), Err(IndexError::Damaged { .. })),
                    "a flipped bit at {at} went unnoticed"
                );
            }
            std::fs::write(&path, &bytes[..bytes.len() - 3]).unwrap();
            assert!(matches!(
                SavedIndex::load(&path),
                Err(IndexError::Damaged { .. })
            ));
            std::fs::write(&path, b"{\"not\": \"an index\"}").unwrap();
            assert!(matches!(
                SavedIndex::load(&path),
                Err(IndexError::NotAnIndex { .. })
            ));
        }
    }

    #[test]
    fn a_chained_index_and_combined_indexes_number_files_in_order() {
        let a = index("a", None);
        let ab = index("b", Some(a.clone()));
        assert_eq!(ab.files().len(), 2);
        assert_eq!(ab.entries(), 6);
        assert_eq!(ab.addrs[3], addr(1, 0));
        assert_eq!(ab.clusters[4], addr(1, 0));
        // Two indexes made apart, combined: the second's files are numbered after the first's.
        let b = index("b", None);
        let combined = SavedIndex::combine(vec![("a".into(), a.clone()), ("b".into(), b)]).unwrap();
        assert_eq!(combined, ab);
        // An index and one made against it hold the same file twice.
        let e = SavedIndex::combine(vec![("a".into(), a.clone()), ("ab".into(), ab)]).unwrap_err();
        assert!(e.to_string().contains("give only the later one"), "{e}");
        // Other settings are named.
        let mut other = index("c", None);
        other.settings.max_reps = None;
        let e = SavedIndex::combine(vec![("a".into(), a), ("c".into(), other)]).unwrap_err();
        assert!(e.to_string().contains("max_reps: unbounded vs 2"), "{e}");
    }

    #[test]
    fn an_index_needs_min_key_count_one() {
        let mut s = settings();
        s.min_count = 2;
        assert!(matches!(
            IndexBuilder::new(s, vec![file("a")], None),
            Err(IndexError::MinCount(2))
        ));
    }
}
