//! Representatives' shingle sets for exact verification, within a memory budget.
//!
//! Sets are stored as sorted 32-bit shingle fingerprints (4 bytes per distinct shingle, see
//! [`neardup_sketch::fingerprint`]). Up to the
//! budget they stay in memory; past it, further sets are appended to an anonymous temporary file
//! (in the configured spill directory, else the system's) and read back with positioned reads,
//! helped by the page cache, only when a candidate needs confirming.
//!
//! A disk error does not abort the decision in progress: the set that could not be written or
//! read confirms nothing (so nothing is dropped on its account), and the error is kept for the
//! stage to report as a failed run — a run that lost sets is never reported as complete.

use std::fs::File;
use std::io::{self, Write};
use std::os::unix::fs::FileExt;
use std::path::PathBuf;

use neardup_sketch::jaccard_at_least;

use crate::reps::RepId;

enum Place {
    Memory {
        chunk: usize,
        start: usize,
        len: usize,
    },
    Disk {
        offset: u64,
        len: usize,
    },
}

/// Sets live in fixed chunks of this many values (4 MB), never moved once written: one growing
/// vector would copy everything held so far at each doubling (and fault its pages in twice).
const CHUNK_VALUES: usize = 1 << 20;

pub struct ShingleStore {
    budget: u64,
    spill_dir: Option<PathBuf>,
    chunks: Vec<Vec<u32>>,
    memory_values: usize,
    places: Vec<Option<Place>>,
    spill: Option<File>,
    spill_len: u64,
    buf: Vec<u32>,
    bytes: Vec<u8>,
    error: Option<io::Error>,
}

impl ShingleStore {
    pub fn new(budget: u64, spill_dir: Option<PathBuf>) -> ShingleStore {
        ShingleStore {
            budget,
            spill_dir,
            chunks: Vec::new(),
            memory_values: 0,
            places: Vec::new(),
            spill: None,
            spill_len: 0,
            buf: Vec::new(),
            bytes: Vec::new(),
            error: None,
        }
    }

    fn memory_bytes(&self) -> u64 {
        (self.memory_values * 4) as u64
    }

    fn place(&mut self, id: RepId) -> &mut Option<Place> {
        let id = id as usize;
        if self.places.len() <= id {
            self.places.resize_with(id + 1, || None);
        }
        &mut self.places[id]
    }

    pub fn push(&mut self, id: RepId, set: &[u32]) {
        if self.memory_bytes() + (set.len() * 4) as u64 <= self.budget {
            let fits = self
                .chunks
                .last()
                .is_some_and(|c| c.capacity() - c.len() >= set.len());
            if !fits {
                self.chunks
                    .push(Vec::with_capacity(CHUNK_VALUES.max(set.len())));
            }
            let chunk = self.chunks.len() - 1;
            let c = &mut self.chunks[chunk];
            let place = Place::Memory {
                chunk,
                start: c.len(),
                len: set.len(),
            };
            c.extend_from_slice(set);
            self.memory_values += set.len();
            *self.place(id) = Some(place);
            return;
        }
        self.bytes.clear();
        self.bytes.extend(set.iter().flat_map(|v| v.to_le_bytes()));
        match self.spill_bytes() {
            Ok(offset) => {
                *self.place(id) = Some(Place::Disk {
                    offset,
                    len: set.len(),
                })
            }
            Err(e) => {
                *self.place(id) = None;
                self.fail(e);
            }
        }
    }

    fn fail(&mut self, e: io::Error) {
        self.error.get_or_insert(io::Error::new(
            e.kind(),
            format!("exact-verification spill file: {e}"),
        ));
    }

    /// Appends `self.bytes` to the spill file; returns where they start.
    fn spill_bytes(&mut self) -> io::Result<u64> {
        if self.spill.is_none() {
            self.spill = Some(match &self.spill_dir {
                Some(dir) => tempfile::tempfile_in(dir)?,
                None => tempfile::tempfile()?,
            });
        }
        let file = self.spill.as_mut().expect("spill file was just created");
        file.write_all(&self.bytes)?;
        let offset = self.spill_len;
        self.spill_len += self.bytes.len() as u64;
        Ok(offset)
    }

    /// Reads `len` bytes at `offset` of the spill file into `self.bytes`.
    fn read_spilled(&mut self, offset: u64, len: usize) -> bool {
        let file = self
            .spill
            .as_ref()
            .expect("a value on disk has a spill file");
        self.bytes.resize(len, 0);
        if let Err(e) = file.read_exact_at(&mut self.bytes, offset) {
            self.fail(e);
            return false;
        }
        true
    }

    /// Exact Jaccard between representative `id`'s set and `other` when it reaches `threshold`.
    pub fn jaccard_at_least(&mut self, id: RepId, other: &[u32], threshold: f64) -> Option<f64> {
        match self.places.get(id as usize).and_then(|p| p.as_ref()) {
            Some(&Place::Memory { chunk, start, len }) => {
                jaccard_at_least(&self.chunks[chunk][start..start + len], other, threshold)
            }
            Some(&Place::Disk { offset, len }) => {
                if !self.read_spilled(offset, len * 4) {
                    return None;
                }
                self.buf.clear();
                self.buf.extend(
                    self.bytes
                        .chunks_exact(4)
                        .map(|b| u32::from_le_bytes(b.try_into().expect("4 bytes"))),
                );
                jaccard_at_least(&self.buf, other, threshold)
            }
            // A representative stored without its set (its spill write failed) confirms nothing.
            None => None,
        }
    }

    pub fn bytes(&self) -> u64 {
        self.memory_bytes() + self.spill_len
    }

    /// The first disk error, if any (taken: reported once).
    pub fn take_error(&mut self) -> Option<io::Error> {
        self.error.take()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sets_past_the_budget_spill_and_still_verify() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = ShingleStore::new(4 * 10, Some(dir.path().to_path_buf()));
        let a: Vec<u32> = (0..10).collect();
        let b: Vec<u32> = (5..15).collect();
        store.push(0, &a);
        store.push(1, &b); // over budget: on disk
        assert_eq!(store.bytes(), 80);
        assert_eq!(store.jaccard_at_least(0, &a, 0.8), Some(1.0));
        assert_eq!(store.jaccard_at_least(1, &b, 0.8), Some(1.0));
        assert_eq!(store.jaccard_at_least(1, &a, 0.3), Some(5.0 / 15.0));
        assert_eq!(store.jaccard_at_least(1, &a, 0.8), None);
        assert!(store.take_error().is_none());
    }

    #[test]
    fn an_unusable_spill_dir_is_an_error_not_a_panic_nor_a_drop() {
        let mut store = ShingleStore::new(0, Some(PathBuf::from("/nonexistent/neardup-spill")));
        let a: Vec<u32> = (0..10).collect();
        store.push(0, &a);
        assert_eq!(store.jaccard_at_least(0, &a, 0.5), None);
        let e = store.take_error().expect("the failed spill is reported");
        assert!(e.to_string().contains("spill"), "{e}");
    }
}
