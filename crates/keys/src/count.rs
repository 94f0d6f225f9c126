//! The exact key-frequency filter.
//!
//! Keys are radix-partitioned by their high bits together with their position in the table. Each
//! partition is counted exactly (in memory: an open-addressing table, then a pass in position
//! order; spilled: a sort and a scan for runs, which needs no memory beyond the pairs), and a key
//! seen more than `min_count` times is hot and sets the hot bit of every position it holds.
//! Partitions are ordered by high bits, so the hot keys come out sorted without a global sort. In
//! memory the partitions are processed in parallel; past a memory limit they are spilled to files
//! and counted one by one (a partition too large for the budget is split again on the next bits). Both ways give the same result, exactly: nothing
//! here is approximate.

use std::fs::{self, File};
use std::io::{self, BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use neardup_corpus::ScratchDir;
use neardup_exec::CancelToken;
use neardup_scratch::{Backing, ScratchVec};
use neardup_sketch::NO_KEY;
use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use crate::error::{Damage, KeysError};
use crate::hot::{HotMask, mask_backing};
use crate::prior::{HotRule, PriorKeys};

/// What counting found.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CountStats {
    /// Keys counted (every column of every row except [`NO_KEY`]).
    pub keys: u64,
    /// Distinct keys among them.
    pub distinct_keys: u64,
    /// Keys seen more than `min_count` times.
    pub hot_keys: u64,
    /// Partitions the keys were split into.
    pub partitions: u64,
    /// Whether counting went through spill files.
    pub spilled: bool,
}

/// The result of counting: the sorted hot keys, the per-position hot mask and statistics.
pub struct Counted {
    /// Hot keys, ascending: in a scratch file's mapping, its pages handed back, when the count
    /// spilled (they grow with the corpus).
    pub hot_keys: ScratchVec<u64>,
    /// Hot bit per (row, column).
    pub mask: HotMask,
    /// Statistics.
    pub stats: CountStats,
}

type Pair = (u64, u64);

/// Scans a sorted partition: appends hot keys, reports hot positions in ascending order (and,
/// for the first position of each run, whether a prior run held the key as a content key),
/// returns the distinct count. A position for which `mark` returns `Some(flags)` is kept as
/// `(position, flags)` in place of the pairs (in the order they were reported); the pairs are
/// truncated to those.
fn scan_runs(
    pairs: &mut Vec<Pair>,
    rule: HotRule<'_>,
    hot: &mut ScratchVec<u64>,
    mut mark: impl FnMut(u64, Option<bool>) -> Option<u64>,
) -> u64 {
    let (mut distinct, mut kept) = (0, 0);
    let mut i = 0;
    while i < pairs.len() {
        let key = pairs[i].0;
        let mut j = i + 1;
        while j < pairs.len() && pairs[j].0 == key {
            j += 1;
        }
        distinct += 1;
        let (is_hot, prior_content) = rule.judge(key, (j - i) as u64);
        if is_hot {
            hot.push(key);
            for n in i..j {
                let pos = pairs[n].1;
                if let Some(flags) = mark(pos, (n == i).then_some(prior_content)) {
                    // `kept <= n`: no pair still to be read is overwritten.
                    pairs[kept] = (pos, flags);
                    kept += 1;
                }
            }
        }
        i = j;
    }
    pairs.truncate(kept);
    distinct
}

/// An open-addressing count of one in-memory partition's keys, reused from partition to partition.
/// Two passes over the partition's pairs (count, then mark) replaced sorting them, which cost
/// about twice as much: the pairs arrive in position order, which is all the marking pass needs.
/// (Spilled partitions are still sorted: this table would need more memory than the budget
/// leaves them.)
#[derive(Default)]
struct KeyCounts {
    /// Open addressing, at most half full; a key and its count share a cache line.
    slots: Vec<KeySlot>,
    /// The slot of each pair, found by the counting pass, so the marking pass goes straight to it.
    slot_of: Vec<u32>,
}

/// One key of a [`KeyCounts`] table.
#[derive(Clone, Copy, Default)]
struct KeySlot {
    key: u64,
    /// The count in the low bits, [`KeyCounts::LISTED`] and [`KeyCounts::CONTENT_SEEN`].
    count: u64,
}

impl KeyCounts {
    /// The slot's key is already in the partition's hot list.
    const LISTED: u64 = 1 << 63;
    /// A content-column position of the slot's key was already marked.
    const CONTENT_SEEN: u64 = 1 << 62;
    const COUNT: u64 = (1 << 62) - 1;

    /// Counts the pairs of `pairs`' slices (positions ascending, no [`NO_KEY`]): appends the hot
    /// keys ascending, calls `mark` for every position of a hot key and `later_copy` for every row
    /// whose content key is hot and was seen in an earlier row; returns the number of distinct
    /// keys.
    #[allow(clippy::too_many_arguments)]
    fn count(
        &mut self,
        pairs: &[&[Pair]],
        rule: HotRule<'_>,
        content_col: Option<usize>,
        columns: usize,
        hot: &mut Vec<u64>,
        mut mark: impl FnMut(u64),
        mut later_copy: impl FnMut(usize),
    ) -> u64 {
        let n: usize = pairs.iter().map(|p| p.len()).sum();
        let bits = (n * 2).next_power_of_two().max(64).trailing_zeros();
        assert!(bits <= 32, "a partition holds fewer than 2^31 keys");
        let size = 1usize << bits;
        self.slots.clear();
        self.slots.resize(size, KeySlot::default());
        self.slot_of.clear();
        self.slot_of.reserve(n);
        let mut distinct = 0;
        for &(k, _) in pairs.iter().copied().flatten() {
            // Partitions share their keys' high bits, and keys need not be uniform hashes
            // (lshcurator's band keys are not): spread them with a multiplicative hash.
            let mut i = (k.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - bits)) as usize;
            loop {
                let s = &mut self.slots[i];
                if s.key == k {
                    break;
                }
                if s.key == NO_KEY {
                    s.key = k;
                    distinct += 1;
                    break;
                }
                i = (i + 1) & (size - 1);
            }
            self.slots[i].count += 1;
            self.slot_of.push(i as u32);
        }
        if let Some(prior) = rule.prior {
            // Each prior key counts once more; a prior content copy came before all of these.
            for s in self.slots.iter_mut().filter(|s| s.key != NO_KEY) {
                if let Some(content) = prior.lookup(s.key) {
                    s.count += 1;
                    if content {
                        s.count |= Self::CONTENT_SEEN;
                    }
                }
            }
        }
        let min_count = rule.min_count;
        let first_hot = hot.len();
        let in_order = pairs.iter().copied().flatten().zip(&self.slot_of);
        for (&(k, pos), &i) in in_order {
            let c = &mut self.slots[i as usize].count;
            if *c & Self::COUNT <= u64::from(min_count) {
                continue;
            }
            if *c & Self::LISTED == 0 {
                *c |= Self::LISTED;
                hot.push(k);
            }
            mark(pos);
            if content_col == Some(pos as usize % columns) {
                if *c & Self::CONTENT_SEEN != 0 {
                    later_copy(pos as usize / columns);
                }
                *c |= Self::CONTENT_SEEN;
            }
        }
        hot[first_hot..].sort_unstable();
        distinct
    }
}

/// One slice of the table scattered by partition: partition `p` is `pairs[starts[p]..starts[p + 1]]`.
struct Scattered {
    pairs: Vec<Pair>,
    starts: Vec<usize>,
}

impl Scattered {
    fn partition(&self, p: usize) -> &[Pair] {
        &self.pairs[self.starts[p]..self.starts[p + 1]]
    }
}

/// One thread's share of [`count_in_memory`]'s work: its key-count table and the hot positions
/// and later copies it found.
#[derive(Default)]
struct LocalMarks {
    table: KeyCounts,
    hot_bits: Vec<u64>,
    copy_bits: Vec<u64>,
}

/// Within one run of equal hot keys (positions ascending), finds the content-column positions
/// that follow an earlier content-column position: rows whose exact text was seen before.
struct LaterCopies {
    content_col: Option<usize>,
    columns: usize,
    seen_in_run: bool,
}

impl LaterCopies {
    fn new(content_col: Option<usize>, columns: usize) -> Self {
        LaterCopies {
            content_col,
            columns,
            seen_in_run: false,
        }
    }

    /// `run_start` is set on a run's first position: whether a prior run held the key as a
    /// content key (then even this run's first content-column copy is a later one).
    fn later_copy(&mut self, pos: u64, run_start: Option<bool>) -> Option<usize> {
        if let Some(prior_content) = run_start {
            self.seen_in_run = prior_content;
        }
        if self.content_col != Some(pos as usize % self.columns) {
            return None;
        }
        let later = self.seen_in_run;
        self.seen_in_run = true;
        later.then_some(pos as usize / self.columns)
    }
}

fn partition_bits_for(keys: usize) -> u32 {
    // 2k-4k pairs per partition: its count table (16 bytes a slot, at most half full) stays
    // within 128 KiB, in L2 (larger partitions measured slower: docs/benchmarks.md).
    let parts = (keys / 4_096).max(1).next_power_of_two().min(1 << 14);
    parts.trailing_zeros()
}

#[inline]
fn partition_of(key: u64, shift: u32, bits: u32) -> usize {
    if bits == 0 {
        0
    } else {
        ((key << shift) >> (64 - bits)) as usize
    }
}

/// Counts the keys of a row-major table held in memory, in parallel on the current rayon pool.
///
/// `content_col` names the content-key column, if any: rows whose content key is hot but not
/// first seen are marked as later exact copies ([`HotMask::is_later_copy`]).
pub fn count_in_memory(
    keys: &[u64],
    columns: usize,
    min_count: u32,
    content_col: Option<usize>,
) -> Counted {
    count_in_memory_until(
        keys,
        columns,
        HotRule::counting(min_count),
        content_col,
        &CancelToken::new(),
    )
    .expect("never cancelled")
}

/// [`count_in_memory`] under `rule` (prior keys count too), giving up between partitions
/// (`None`) once `cancel` is set.
pub(crate) fn count_in_memory_until(
    keys: &[u64],
    columns: usize,
    rule: HotRule<'_>,
    content_col: Option<usize>,
    cancel: &CancelToken,
) -> Option<Counted> {
    assert!(columns > 0 && keys.len().is_multiple_of(columns));
    let rows = keys.len() / columns;
    let bits = partition_bits_for(keys.len());
    let parts = 1usize << bits;
    let threads = rayon::current_num_threads().max(1);
    let span = keys.len().div_ceil(threads).div_ceil(columns).max(1) * columns;
    let slices: Vec<(usize, &[u64])> = keys
        .chunks(span)
        .enumerate()
        .map(|(i, s)| (i * span, s))
        .collect();

    // Each thread scatters its slice into one buffer of its own, partition after partition
    // (a counting sort on the partition bits: one histogram pass, one placing pass).
    let scattered: Vec<Scattered> = slices
        .par_iter()
        .map(|&(base, slice)| {
            let mut starts = vec![0usize; parts + 1];
            for &k in slice {
                if k != NO_KEY {
                    starts[partition_of(k, 0, bits) + 1] += 1;
                }
            }
            for p in 0..parts {
                starts[p + 1] += starts[p];
            }
            let mut next = starts.clone();
            // Not zeroed first: zeroing the buffer doubled the memory traffic of large tables.
            let mut pairs: Vec<Pair> = Vec::with_capacity(starts[parts]);
            let spare = &mut pairs.spare_capacity_mut()[..starts[parts]];
            for (i, &k) in slice.iter().enumerate() {
                if k != NO_KEY {
                    let at = &mut next[partition_of(k, 0, bits)];
                    spare[*at].write((k, (base + i) as u64));
                    *at += 1;
                }
            }
            // Partition p was written at starts[p]..next[p]: all of it, exactly once each, iff
            // every cursor reached the next partition's start.
            assert!((0..parts).all(|p| next[p] == starts[p + 1]));
            // SAFETY: the assertion above shows that all `starts[parts]` slots were initialised.
            unsafe { pairs.set_len(starts[parts]) };
            Scattered { pairs, starts }
        })
        .collect();

    // Each thread marks hot positions in bitmaps of its own, ORed together at the end: atomic
    // ORs into one shared bitmap serialised the marking loop (every locked instruction drains
    // the store buffer) and bounced cache lines between the cores.
    let words = (rows * columns).div_ceil(64);
    let local: Vec<Mutex<LocalMarks>> = (0..threads)
        .map(|_| Mutex::new(LocalMarks::default()))
        .collect();
    let results: Vec<(Vec<u64>, u64, u64)> = (0..parts)
        .into_par_iter()
        .map(|p| {
            if cancel.is_cancelled() {
                return (Vec::new(), 0, 0);
            }
            let slot = rayon::current_thread_index().unwrap_or(0) % threads;
            let mut guard = local[slot].lock().unwrap_or_else(|e| e.into_inner());
            let LocalMarks {
                table,
                hot_bits,
                copy_bits,
            } = &mut *guard;
            if hot_bits.is_empty() {
                hot_bits.resize(words, 0);
                copy_bits.resize(rows.div_ceil(64), 0);
            }
            let slices: Vec<&[Pair]> = scattered.iter().map(|t| t.partition(p)).collect();
            let n: usize = slices.iter().map(|s| s.len()).sum();
            let mut hot = Vec::new();
            let distinct = table.count(
                &slices,
                rule,
                content_col,
                columns,
                &mut hot,
                |pos| hot_bits[(pos / 64) as usize] |= 1 << (pos % 64),
                |row| copy_bits[row / 64] |= 1 << (row % 64),
            );
            (hot, distinct, n as u64)
        })
        .collect();
    drop(scattered);
    if cancel.is_cancelled() {
        return None;
    }
    let local: Vec<LocalMarks> = local
        .into_iter()
        .map(|m| m.into_inner().unwrap_or_else(|e| e.into_inner()))
        .filter(|m| !m.hot_bits.is_empty())
        .collect();
    let or_all = |pick: fn(&LocalMarks) -> &Vec<u64>, len: usize| -> Vec<u64> {
        let mut out = vec![0u64; len];
        out.par_chunks_mut(1 << 14)
            .enumerate()
            .for_each(|(c, out)| {
                let at = c << 14;
                for m in &local {
                    for (o, w) in out.iter_mut().zip(&pick(m)[at..]) {
                        *o |= w;
                    }
                }
            });
        out
    };
    let bits_vec = or_all(|m| &m.hot_bits, words);
    let copies = or_all(|m| &m.copy_bits, rows.div_ceil(64));
    drop(local);

    let mut stats = CountStats {
        partitions: parts as u64,
        ..CountStats::default()
    };
    let mut hot_keys = Vec::with_capacity(results.iter().map(|r| r.0.len()).sum());
    for (hot, distinct, n) in results {
        stats.distinct_keys += distinct;
        stats.keys += n;
        hot_keys.extend_from_slice(&hot);
    }
    stats.hot_keys = hot_keys.len() as u64;
    Some(Counted {
        hot_keys: ScratchVec::from_vec(hot_keys),
        mask: HotMask::from_bits(rows, columns, bits_vec, copies),
        stats,
    })
}

const SPILL_FANOUT_BITS: u32 = 8;

/// Counts keys streamed row block by row block, spilling (key, position) pairs into partition
/// files under a spill directory (`neardup-spill-<id>`, removed when the counter is dropped, and
/// by the next run if this process dies) so that memory stays within `budget_bytes` (plus the
/// hot mask, one bit per key slot).
pub struct SpillCounter {
    dir: ScratchDir,
    columns: usize,
    content_col: Option<usize>,
    rows: u64,
    writers: Vec<BufWriter<File>>,
    budget_bytes: u64,
}

impl SpillCounter {
    /// Starts a counter spilling under `parent` (the system temp dir when `None`; created when
    /// missing); `content_col` as for [`count_in_memory`].
    pub fn new(
        parent: Option<&Path>,
        columns: usize,
        content_col: Option<usize>,
        budget_bytes: u64,
    ) -> Result<SpillCounter, KeysError> {
        let dir = ScratchDir::create(parent).map_err(|e| {
            KeysError::io(
                &parent.map_or_else(std::env::temp_dir, Path::to_path_buf),
                e,
            )
        })?;
        let writers = (0..1usize << SPILL_FANOUT_BITS)
            .map(|p| {
                let path = part_path(dir.path(), &[p]);
                File::create(&path)
                    .map(|f| BufWriter::with_capacity(32 * 1024, f))
                    .map_err(|e| KeysError::io(&path, e))
            })
            .collect::<Result<_, _>>()?;
        Ok(SpillCounter {
            dir,
            columns,
            content_col,
            rows: 0,
            writers,
            budget_bytes: budget_bytes.max(1 << 20),
        })
    }

    /// Appends rows (row-major, `columns` keys each).
    pub fn push_rows(&mut self, keys: &[u64]) -> Result<(), KeysError> {
        let base = self.rows * self.columns as u64;
        for (i, &k) in keys.iter().enumerate() {
            if k == NO_KEY {
                continue;
            }
            let p = partition_of(k, 0, SPILL_FANOUT_BITS);
            let w = &mut self.writers[p];
            let mut rec = [0u8; 16];
            rec[..8].copy_from_slice(&k.to_le_bytes());
            rec[8..].copy_from_slice(&(base + i as u64).to_le_bytes());
            w.write_all(&rec)
                .map_err(|e| KeysError::io(self.dir.path(), e))?;
        }
        self.rows += (keys.len() / self.columns) as u64;
        Ok(())
    }

    /// Rows pushed so far.
    pub fn rows(&self) -> u64 {
        self.rows
    }

    /// Counts partition by partition; stops between partitions with
    /// [`KeysError::Interrupted`] once `cancel` is set.
    pub fn finish(self, min_count: u32, cancel: &CancelToken) -> Result<Counted, KeysError> {
        self.finish_with_prior(min_count, None, cancel)
    }

    /// [`SpillCounter::finish`], with the keys of earlier runs counting once more each
    /// ([`PriorKeys`]).
    pub fn finish_with_prior(
        self,
        min_count: u32,
        prior: Option<&PriorKeys>,
        cancel: &CancelToken,
    ) -> Result<Counted, KeysError> {
        let rule = HotRule { min_count, prior };
        let SpillCounter {
            dir,
            columns,
            content_col,
            rows,
            writers,
            budget_bytes,
        } = self;
        for w in writers {
            w.into_inner()
                .map_err(|e| KeysError::io(dir.path(), e.into_error()))?;
        }
        let rows = rows as usize;
        // The mask grows with the corpus (a bit per key): past an eighth of the budget it goes
        // to a scratch file's mapping, marked a partition at a time in row order and handed
        // back behind (`PartCount::mark_in_row_order`), so that it too stays within the limit.
        let backing = mask_backing(rows, columns, budget_bytes / 8, Some(dir.path()));
        let mut mask = HotMask::new_in(rows, columns, &backing);
        // The hot keys grow with the corpus too: appended in key order, their pages handed back
        // after each partition until the caller reads them (or, in a one-process run, drops
        // them).
        let mut hot_keys = ScratchVec::new(&Backing::Scratch {
            dir: Some(dir.path().to_path_buf()),
        });
        let mut handed_back = 0;
        let mut stats = CountStats {
            spilled: true,
            ..CountStats::default()
        };
        for p in 0..1usize << SPILL_FANOUT_BITS {
            if cancel.is_cancelled() {
                return Err(KeysError::Interrupted);
            }
            let part = PartCount {
                dir: dir.path(),
                budget: budget_bytes,
                rule,
                content_col,
                columns,
            };
            part.count(
                &[p],
                SPILL_FANOUT_BITS,
                &mut mask,
                &mut hot_keys,
                &mut stats,
            )?;
            hot_keys.release_range(handed_back, hot_keys.len());
            handed_back = hot_keys.len();
        }
        stats.hot_keys = hot_keys.len() as u64;
        // Stage 2 reads it again from the first row.
        mask.hand_back_rows(0..rows);
        Ok(Counted {
            hot_keys,
            mask,
            stats,
        })
    }
}

fn part_path(dir: &Path, trail: &[usize]) -> PathBuf {
    let name: Vec<String> = trail.iter().map(|p| format!("{p:03}")).collect();
    dir.join(format!("part-{}.bin", name.join("-")))
}

/// The fixed parameters of counting spilled partitions.
struct PartCount<'a> {
    dir: &'a Path,
    budget: u64,
    rule: HotRule<'a>,
    content_col: Option<usize>,
    columns: usize,
}

impl PartCount<'_> {
    fn count(
        &self,
        trail: &[usize],
        bits_used: u32,
        mask: &mut HotMask,
        hot: &mut ScratchVec<u64>,
        stats: &mut CountStats,
    ) -> Result<(), KeysError> {
        let dir = self.dir;
        let path = part_path(dir, trail);
        let len = fs::metadata(&path)
            .map_err(|e| KeysError::io(&path, e))?
            .len();
        // Sorting needs the pairs plus a little slack; split again when that would not fit.
        if len > self.budget / 2 && bits_used + SPILL_FANOUT_BITS <= 64 {
            let mut writers: Vec<BufWriter<File>> = (0..1usize << SPILL_FANOUT_BITS)
                .map(|q| {
                    let mut t = trail.to_vec();
                    t.push(q);
                    let p = part_path(dir, &t);
                    File::create(&p)
                        .map(|f| BufWriter::with_capacity(32 * 1024, f))
                        .map_err(|e| KeysError::io(&p, e))
                })
                .collect::<Result<_, _>>()?;
            for_each_pair(&path, |k, pos| {
                let q = partition_of(k, bits_used, SPILL_FANOUT_BITS);
                let mut rec = [0u8; 16];
                rec[..8].copy_from_slice(&k.to_le_bytes());
                rec[8..].copy_from_slice(&pos.to_le_bytes());
                writers[q].write_all(&rec)
            })?;
            for w in writers {
                w.into_inner()
                    .map_err(|e| KeysError::io(dir, e.into_error()))?;
            }
            fs::remove_file(&path).map_err(|e| KeysError::io(&path, e))?;
            for q in 0..1usize << SPILL_FANOUT_BITS {
                let mut t = trail.to_vec();
                t.push(q);
                self.count(&t, bits_used + SPILL_FANOUT_BITS, mask, hot, stats)?;
            }
            return Ok(());
        }
        let mut pairs: Vec<Pair> = Vec::with_capacity((len / 16) as usize);
        for_each_pair(&path, |k, pos| {
            pairs.push((k, pos));
            Ok(())
        })?;
        fs::remove_file(&path).map_err(|e| KeysError::io(&path, e))?;
        pairs.sort_unstable();
        stats.partitions += 1;
        stats.keys += pairs.len() as u64;
        if mask.is_mapped() {
            self.mark_in_row_order(pairs, mask, hot, stats);
            return Ok(());
        }
        let mut copies = LaterCopies::new(self.content_col, self.columns);
        stats.distinct_keys += scan_runs(&mut pairs, self.rule, hot, |pos, run_start| {
            mask.set_position(pos as usize);
            if let Some(row) = copies.later_copy(pos, run_start) {
                mask.set_later_copy(row);
            }
            None
        });
        Ok(())
    }

    /// Marks the hot positions of one partition's sorted `pairs` in a mapped mask in position
    /// order, handing back the pages behind as it goes: in key order they land anywhere, and
    /// every partition would map in most of the mask. The positions to mark take the place of
    /// the pairs they come from (no memory beyond the partition's), then are sorted.
    fn mark_in_row_order(
        &self,
        mut pairs: Vec<Pair>,
        mask: &mut HotMask,
        hot: &mut ScratchVec<u64>,
        stats: &mut CountStats,
    ) {
        /// A position that is also a later copy's content key.
        const LATER_COPY: u64 = 1;
        let mut copies = LaterCopies::new(self.content_col, self.columns);
        stats.distinct_keys += scan_runs(&mut pairs, self.rule, hot, |pos, run_start| {
            let later = copies.later_copy(pos, run_start).is_some();
            Some(if later { LATER_COPY } else { 0 })
        });
        pairs.sort_unstable();
        // About a megabyte of mask between two hand-backs.
        let every = (1usize << 23) / self.columns.max(1);
        let mut done = 0;
        for &(pos, flags) in &pairs {
            let row = pos as usize / self.columns;
            mask.set_position(pos as usize);
            if flags & LATER_COPY != 0 {
                mask.set_later_copy(row);
            }
            if row >= done + every {
                mask.hand_back_rows(done..row);
                done = row;
            }
        }
        mask.hand_back_rows(done..mask.rows());
    }
}

fn for_each_pair(
    path: &Path,
    mut f: impl FnMut(u64, u64) -> io::Result<()>,
) -> Result<(), KeysError> {
    let file = File::open(path).map_err(|e| KeysError::io(path, e))?;
    let mut reader = BufReader::with_capacity(256 * 1024, file);
    let mut buf = vec![0u8; 256 * 1024];
    loop {
        let mut filled = 0;
        while filled < buf.len() {
            let n = reader
                .read(&mut buf[filled..])
                .map_err(|e| KeysError::io(path, e))?;
            if n == 0 {
                break;
            }
            filled += n;
        }
        if filled % 16 != 0 {
            return Err(KeysError::corrupt(path, Damage::SpillTruncated));
        }
        for rec in buf[..filled].chunks_exact(16) {
            let k = u64::from_le_bytes(rec[..8].try_into().expect("8 bytes"));
            let pos = u64::from_le_bytes(rec[8..].try_into().expect("8 bytes"));
            f(k, pos).map_err(|e| KeysError::io(path, e))?;
        }
        if filled < buf.len() {
            return Ok(());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn brute(keys: &[u64], columns: usize, min_count: u32) -> (Vec<u64>, Vec<bool>) {
        let mut counts: HashMap<u64, u64> = HashMap::new();
        for &k in keys {
            if k != NO_KEY {
                *counts.entry(k).or_default() += 1;
            }
        }
        let mut hot: Vec<u64> = counts
            .iter()
            .filter(|(_, c)| **c > u64::from(min_count))
            .map(|(k, _)| *k)
            .collect();
        hot.sort_unstable();
        let bits = keys
            .iter()
            .map(|k| *k != NO_KEY && counts[k] > u64::from(min_count))
            .collect();
        let _ = columns;
        (hot, bits)
    }

    fn sample_keys(n: usize, distinct: u64, seed: u64) -> Vec<u64> {
        let mut x = seed;
        (0..n)
            .map(|_| {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let v = (x >> 33) % distinct;
                if v == 0 {
                    NO_KEY
                } else {
                    v.wrapping_mul(0x9E3779B97F4A7C15) | 1
                }
            })
            .collect()
    }

    fn check(c: &Counted, keys: &[u64], columns: usize, min_count: u32) {
        let (hot, bits) = brute(keys, columns, min_count);
        assert_eq!(c.hot_keys[..], hot[..]);
        for (pos, b) in bits.iter().enumerate() {
            assert_eq!(
                c.mask.is_hot(pos / columns, pos % columns),
                *b,
                "position {pos}"
            );
        }
        // Later copies: rows whose last-column key appeared in an earlier row (and is hot).
        let mut seen = std::collections::HashSet::new();
        for row in 0..keys.len() / columns {
            let k = keys[row * columns + columns - 1];
            let later = k != NO_KEY && !seen.insert(k);
            assert_eq!(
                c.mask.is_later_copy(row),
                later && bits[row * columns + columns - 1],
                "row {row}"
            );
        }
    }

    #[test]
    fn in_memory_equals_brute_force() {
        for (n, distinct, min_count) in [
            (0, 10, 1),
            (17 * 3, 5, 1),
            (17 * 4000, 30_000, 1),
            (17 * 20_000, 90_000, 2),
        ] {
            let keys = sample_keys(n, distinct, n as u64 + 1);
            let c = count_in_memory(&keys, 17, min_count, Some(16));
            check(&c, &keys, 17, min_count);
        }
    }

    #[test]
    fn structured_keys_count_exactly() {
        // Keys that are not uniform hashes (small integers, equal low bits, one huge run) in
        // tables large enough for many partitions.
        for (n, key) in [
            (17 * 9_000, (|i: u64| (i % 5_000) + 1) as fn(u64) -> u64),
            (17 * 9_000, |i| ((i % 7_000) << 40) | 1),
            (17 * 9_000, |i| if i % 3 == 0 { 42 } else { i + 1 }),
        ] {
            let keys: Vec<u64> = (0..n as u64).map(key).collect();
            let c = count_in_memory(&keys, 17, 1, Some(16));
            check(&c, &keys, 17, 1);
            assert_eq!(
                c.stats.distinct_keys,
                keys.iter().collect::<std::collections::HashSet<_>>().len() as u64
            );
        }
    }

    #[test]
    fn spilled_equals_in_memory_even_when_partitions_split() {
        let keys = sample_keys(9 * 30_000, 100_000, 7);
        let mem = count_in_memory(&keys, 9, 1, Some(8));
        // A budget far below the data forces the recursive split path, and puts the mask (34 KB)
        // in a scratch mapping marked in row order; a large one leaves it in memory.
        for (budget, mapped) in [(8 * 1024, true), (1 << 30, false)] {
            let mut sc = SpillCounter::new(None, 9, Some(8), 1).unwrap();
            sc.budget_bytes = budget;
            for block in keys.chunks(9 * 1000) {
                sc.push_rows(block).unwrap();
            }
            let spilled = sc.finish(1, &CancelToken::new()).unwrap();
            assert_eq!(
                spilled.mask.is_mapped(),
                mapped && cfg!(target_os = "linux")
            );
            // The hot keys of a spilled count are in a mapping whose pages were handed back.
            assert_eq!(spilled.hot_keys.is_mapped(), cfg!(target_os = "linux"));
            assert_eq!(spilled.hot_keys[..], mem.hot_keys[..]);
            assert_eq!(spilled.mask, mem.mask);
            assert_eq!(spilled.stats.distinct_keys, mem.stats.distinct_keys);
            assert_eq!(spilled.stats.keys, mem.stats.keys);
            check(&spilled, &keys, 9, 1);
        }
    }

    /// Counting B with A's keys as prior keys gives B's rows the hot bits and later copies they
    /// get when A's rows come first in one table; the hot keys are the joint ones that B holds.
    #[test]
    fn prior_keys_count_as_if_their_rows_came_first() {
        let columns = 9;
        for (seed, a_rows, b_rows) in [
            (3u64, 2_000usize, 1_500usize),
            (5, 1, 40),
            (9, 4_000, 4_000),
        ] {
            let all = sample_keys(columns * (a_rows + b_rows), 6_000, seed);
            let (a, b) = all.split_at(columns * a_rows);
            let joint = count_in_memory(&all, columns, 1, Some(columns - 1));
            let prior = PriorKeys::new(
                a.iter()
                    .enumerate()
                    .filter(|(_, k)| **k != NO_KEY)
                    .map(|(i, k)| (*k, i % columns == columns - 1))
                    .collect(),
            );
            let rule = HotRule {
                min_count: 1,
                prior: Some(&prior),
            };
            let mem =
                count_in_memory_until(b, columns, rule, Some(columns - 1), &CancelToken::new())
                    .unwrap();
            let mut sc = SpillCounter::new(None, columns, Some(columns - 1), 1).unwrap();
            sc.budget_bytes = 8 * 1024;
            for block in b.chunks(columns * 100) {
                sc.push_rows(block).unwrap();
            }
            let spilled = sc
                .finish_with_prior(1, Some(&prior), &CancelToken::new())
                .unwrap();
            let b_keys: std::collections::HashSet<u64> = b.iter().copied().collect();
            let want: Vec<u64> = joint
                .hot_keys
                .iter()
                .copied()
                .filter(|k| b_keys.contains(k))
                .collect();
            for c in [&mem, &spilled] {
                assert_eq!(c.hot_keys[..], want[..]);
                for row in 0..b_rows {
                    for col in 0..columns {
                        assert_eq!(
                            c.mask.is_hot(row, col),
                            joint.mask.is_hot(a_rows + row, col),
                            "row {row} column {col}"
                        );
                    }
                    assert_eq!(
                        c.mask.is_later_copy(row),
                        joint.mask.is_later_copy(a_rows + row),
                        "row {row}"
                    );
                }
            }
        }
    }
}
