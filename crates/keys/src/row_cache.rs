//! The rows of texts stage 1 signed lately, by content hash, so that an exact copy of a text is
//! not signed again: its row is the same by construction (the row rule is a function of the
//! normalised text), and web crawls hold many copies of a page (how many in the rustdocs crawl:
//! docs/benchmarks.md, "Measurements behind the code").
//!
//! A bounded, lossy table shared by the workers: each content hash has a set of four slots, and
//! a new row takes the slot of the set used least recently, so a copy finds its row as long as
//! its set has not seen four other texts since. A miss costs nothing but the signing the copy
//! would have had anyway, and which thread fills a slot first changes only how often copies hit,
//! never a row: the key table is identical whatever the thread count. A hit trusts the 128-bit
//! content hash, as stage 2 does when it finds the first copy of a text.

use std::sync::Mutex;

use crate::row::{KnownRows, RowKind};

/// At most this many rows are kept: 65,536 rows of 17 columns take 10 MB.
const MAX_ROWS: usize = 1 << 16;
/// The table has a row per this many input bytes (within [`MIN_ROWS`] and [`MAX_ROWS`]): a
/// small input needs few, and the table is written whole before the first text.
const INPUT_BYTES_PER_ROW: u64 = 4096;
/// Independently locked parts: workers sketching different texts rarely wait on one another.
const STRIPES: usize = 64;
/// Slots a content hash may occupy (a set, kept in order of last use): a copy finds its row
/// even after a few other texts landed in the same set.
const WAYS: usize = 4;
/// One set per stripe, the least table there is (40 KB for rows of 17 columns).
const MIN_ROWS: usize = STRIPES * WAYS;

/// One stripe's sets, each `RowCache::set_words` long: the four hashes' low words, then their high
/// words (one cache line, all a lookup reads on a miss), then per slot its last use and kind
/// (`use << 2 | kind`, 0 for a slot no text has filled), then the slots' rows.
struct Stripe {
    sets: Vec<u64>,
    /// Counts lookups and insertions: a slot's last use.
    clock: u64,
}

/// Where the parts of a set are, in words from its start.
const HIGH_WORDS: usize = WAYS;
const USE_WORDS: usize = 2 * WAYS;
const ROW_WORDS: usize = 3 * WAYS;

fn kind_code(kind: RowKind) -> u64 {
    match kind {
        RowKind::Blank => 1,
        RowKind::Short => 2,
        RowKind::Normal => 3,
    }
}

fn code_kind(code: u64) -> Option<RowKind> {
    match code & 3 {
        1 => Some(RowKind::Blank),
        2 => Some(RowKind::Short),
        3 => Some(RowKind::Normal),
        _ => None,
    }
}

/// Rows of recently signed texts by content hash (see the module doc).
pub(crate) struct RowCache {
    stripes: Box<[Mutex<Stripe>]>,
    columns: usize,
    /// Sets per stripe minus one (a power of two minus one).
    set_mask: usize,
}

impl RowCache {
    /// A table for rows of `columns` keys with a row per [`INPUT_BYTES_PER_ROW`] of
    /// `input_bytes`, rounded down to a power of two within [`MIN_ROWS`] and [`MAX_ROWS`], in at
    /// most `bytes`; `None` when `bytes` cannot hold [`MIN_ROWS`] rows.
    pub fn new(columns: usize, bytes: u64, input_bytes: u64) -> Option<RowCache> {
        let row_bytes = (8 * (3 + columns)) as u64;
        let fit = usize::try_from(bytes / row_bytes).unwrap_or(usize::MAX);
        if fit < MIN_ROWS {
            return None;
        }
        let wanted = usize::try_from(input_bytes / INPUT_BYTES_PER_ROW).unwrap_or(usize::MAX);
        // The largest power of two within the bounds.
        let rows = 1 << wanted.clamp(MIN_ROWS, MAX_ROWS).min(fit).ilog2();
        let sets = rows / STRIPES / WAYS;
        let stripes = (0..STRIPES)
            .map(|_| {
                // Written here, before any worker takes a lock: zeroed memory is mapped on first
                // use, and a page fault under a stripe's lock made the other workers wait.
                let mut words = Vec::new();
                words.resize(sets * Self::set_words(columns), std::hint::black_box(0));
                Mutex::new(Stripe {
                    sets: words,
                    clock: 0,
                })
            })
            .collect();
        Some(RowCache {
            stripes,
            columns,
            set_mask: sets - 1,
        })
    }

    fn set_words(columns: usize) -> usize {
        ROW_WORDS + WAYS * columns
    }

    #[cfg(test)]
    fn slots(&self) -> usize {
        self.stripes.len() * (self.set_mask + 1) * WAYS
    }

    /// Bytes the table takes once every slot is filled.
    #[cfg(test)]
    fn bytes(&self) -> u64 {
        (self.stripes.len() * (self.set_mask + 1) * Self::set_words(self.columns) * 8) as u64
    }

    /// The stripe of a content hash and where its set of [`WAYS`] slots starts in it.
    fn place(&self, content_hash: u128) -> (&Mutex<Stripe>, usize) {
        let stripe = (content_hash as usize) % STRIPES;
        let set = ((content_hash >> 64) as usize) & self.set_mask;
        (&self.stripes[stripe], set * Self::set_words(self.columns))
    }

    /// Copies into `row` the row of the text with this content hash, if the table still holds
    /// it, and returns its kind.
    pub fn get(&self, content_hash: u128, row: &mut [u64]) -> Option<RowKind> {
        let (stripe, at) = self.place(content_hash);
        let mut stripe = stripe.lock().unwrap_or_else(|e| e.into_inner());
        stripe.clock += 1;
        let clock = stripe.clock;
        let set = &mut stripe.sets[at..at + Self::set_words(self.columns)];
        let (low, high) = (content_hash as u64, (content_hash >> 64) as u64);
        let way = (0..WAYS)
            .find(|&w| set[w] == low && set[HIGH_WORDS + w] == high && set[USE_WORDS + w] != 0)?;
        let kind = code_kind(set[USE_WORDS + way])?;
        set[USE_WORDS + way] = clock << 2 | kind_code(kind);
        let rows = &set[ROW_WORDS..];
        row.copy_from_slice(&rows[way * self.columns..(way + 1) * self.columns]);
        Some(kind)
    }

    /// Keeps the row of the text with this content hash in its set, in place of the row used
    /// least recently.
    pub fn put(&self, content_hash: u128, kind: RowKind, row: &[u64]) {
        let (stripe, at) = self.place(content_hash);
        let mut stripe = stripe.lock().unwrap_or_else(|e| e.into_inner());
        stripe.clock += 1;
        let clock = stripe.clock;
        let set = &mut stripe.sets[at..at + Self::set_words(self.columns)];
        // An empty slot's use is 0, the least of all.
        let way = (0..WAYS)
            .min_by_key(|&w| set[USE_WORDS + w] >> 2)
            .expect("a set has slots");
        set[way] = content_hash as u64;
        set[HIGH_WORDS + way] = (content_hash >> 64) as u64;
        set[USE_WORDS + way] = clock << 2 | kind_code(kind);
        let rows = &mut set[ROW_WORDS..];
        rows[way * self.columns..(way + 1) * self.columns].copy_from_slice(row);
    }
}

impl KnownRows for RowCache {
    fn get(&self, content_hash: u128, row: &mut [u64]) -> Option<RowKind> {
        RowCache::get(self, content_hash, row)
    }
    fn put(&self, content_hash: u128, kind: RowKind, row: &[u64]) {
        RowCache::put(self, content_hash, kind, row)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_row_comes_back_until_enough_other_texts_take_its_set() {
        let cache = RowCache::new(3, 1 << 20, u64::MAX).expect("1 MiB is room enough");
        let mut row = [0u64; 3];
        assert_eq!(cache.get(7, &mut row), None);
        cache.put(7, RowKind::Normal, &[1, 2, 3]);
        assert_eq!(cache.get(7, &mut row), Some(RowKind::Normal));
        assert_eq!(row, [1, 2, 3]);
        // Same stripe and set (the low bits and the high word's masked bits agree), other texts.
        let rival = |i: u128| 7 + ((i * (cache.set_mask as u128 + 1)) << 64);
        assert_eq!(
            cache.get(rival(1), &mut row),
            None,
            "another hash is no hit"
        );
        for i in 1..WAYS as u128 {
            cache.put(rival(i), RowKind::Short, &[4, 5, i as u64]);
        }
        assert_eq!(
            cache.get(7, &mut row),
            Some(RowKind::Normal),
            "the set has room"
        );
        assert_eq!(row, [1, 2, 3]);
        // 7 was used last: the next rival takes the slot of the one used least recently.
        cache.put(rival(WAYS as u128), RowKind::Short, &[4, 5, 0]);
        assert_eq!(
            cache.get(rival(1), &mut row),
            None,
            "the least recently used left"
        );
        assert_eq!(cache.get(7, &mut row), Some(RowKind::Normal));
        for i in 2..=WAYS as u128 {
            assert_eq!(cache.get(rival(i), &mut row), Some(RowKind::Short));
            assert_eq!(row, [4, 5, if i == WAYS as u128 { 0 } else { i as u64 }]);
        }
    }

    #[test]
    fn the_table_fits_its_bytes_or_is_not_made() {
        assert!(
            RowCache::new(17, 40_000, u64::MAX).is_none(),
            "under MIN_ROWS rows"
        );
        let small = RowCache::new(17, 1 << 20, u64::MAX).expect("fits 6,000 rows");
        assert!(small.bytes() <= 1 << 20);
        assert_eq!(small.slots(), 4096);
        let big = RowCache::new(17, u64::MAX, u64::MAX).expect("no limit");
        assert_eq!(big.slots(), MAX_ROWS);
        let for_input = RowCache::new(17, u64::MAX, 40 << 20).expect("40 MiB of input");
        assert_eq!(
            for_input.slots(),
            8192,
            "a row per 4 KiB, rounded down to a power of two"
        );
        let tiny = RowCache::new(17, u64::MAX, 1000).expect("a small input");
        assert_eq!(tiny.slots(), MIN_ROWS);
        assert_eq!(tiny.bytes(), 256 * 20 * 8);
    }
}
