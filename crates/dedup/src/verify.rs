//! Representatives' shingle sets for exact verification, within a memory budget.
//!
//! Sets are stored as sorted 64-bit shingle hashes (8 bytes per distinct shingle). Up to the
//! budget they stay in memory; past it, further sets are appended to a temporary file and read
//! back (positioned reads, helped by the page cache) only when a candidate needs confirming — which
//! happens only for the few pairs whose estimate already reached the threshold.

use std::fs::File;
use std::io::{self, Write};
use std::os::unix::fs::FileExt;

use neardup_sketch::jaccard_sorted;

use crate::reps::RepId;

enum Place {
    Memory { start: usize, len: usize },
    Disk { offset: u64, len: usize },
}

pub struct ShingleStore {
    budget: u64,
    memory: Vec<u64>,
    places: Vec<Option<Place>>,
    spill: Option<File>,
    spill_len: u64,
    buf: Vec<u64>,
}

impl ShingleStore {
    pub fn new(budget: u64) -> io::Result<ShingleStore> {
        Ok(ShingleStore {
            budget,
            memory: Vec::new(),
            places: Vec::new(),
            spill: None,
            spill_len: 0,
            buf: Vec::new(),
        })
    }

    pub fn push(&mut self, id: RepId, set: &[u64]) {
        let id = id as usize;
        if self.places.len() <= id {
            self.places.resize_with(id + 1, || None);
        }
        if ((self.memory.len() + set.len()) * 8) as u64 <= self.budget {
            self.places[id] = Some(Place::Memory {
                start: self.memory.len(),
                len: set.len(),
            });
            self.memory.extend_from_slice(set);
            return;
        }
        let place = self
            .spill_set(set)
            .expect("cannot write the exact-verification spill file");
        self.places[id] = Some(place);
    }

    fn spill_set(&mut self, set: &[u64]) -> io::Result<Place> {
        if self.spill.is_none() {
            self.spill = Some(tempfile::tempfile()?);
        }
        let file = self.spill.as_mut().expect("spill file");
        let bytes: Vec<u8> = set.iter().flat_map(|v| v.to_le_bytes()).collect();
        file.write_all(&bytes)?;
        let place = Place::Disk {
            offset: self.spill_len,
            len: set.len(),
        };
        self.spill_len += bytes.len() as u64;
        Ok(place)
    }

    /// Exact Jaccard between representative `id`'s set and `other`.
    pub fn jaccard(&mut self, id: RepId, other: &[u64]) -> f64 {
        match self.places.get(id as usize).and_then(|p| p.as_ref()) {
            Some(Place::Memory { start, len }) => {
                jaccard_sorted(&self.memory[*start..*start + *len], other)
            }
            Some(Place::Disk { offset, len }) => {
                let file = self.spill.as_ref().expect("spill file");
                let mut bytes = vec![0u8; len * 8];
                file.read_exact_at(&mut bytes, *offset)
                    .expect("cannot read the exact-verification spill file");
                self.buf.clear();
                self.buf.extend(
                    bytes
                        .chunks_exact(8)
                        .map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes"))),
                );
                jaccard_sorted(&self.buf, other)
            }
            // A representative stored without its set cannot be confirmed.
            None => 0.0,
        }
    }

    pub fn bytes(&self) -> u64 {
        (self.memory.len() * 8) as u64 + self.spill_len
    }
}
