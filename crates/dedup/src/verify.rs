//! Representatives' shingle sets for exact verification, within a memory budget.
//!
//! Sets are stored as sorted 32-bit shingle fingerprints (4 bytes per distinct shingle, see
//! [`neardup_sketch::fingerprint`]). Up to the
//! budget they stay in memory; past it, further sets are appended to an anonymous temporary file
//! (in the configured spill directory, else the system's) and read back with positioned reads,
//! helped by the page cache, only when a candidate needs confirming.
//!
//! A representative may instead be held as its text (a distributed decide step's samples carry
//! texts, not sets): its set is built the first time a candidate is compared with it, and kept.
//!
//! A disk error does not abort the decision in progress: the set that could not be written or
//! read confirms nothing (so nothing is dropped on its account), and the error is kept for the
//! stage to report as a failed run — a run that lost sets is never reported as complete.

use std::fs::File;
use std::io::{self, Write};
use std::os::unix::fs::FileExt;
use std::path::PathBuf;

use neardup_sketch::{Scratch, Sketcher, jaccard_at_least};

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
    /// A text whose set is built only when a candidate is first compared with it.
    TextMemory {
        chunk: usize,
        start: usize,
        len: usize,
    },
    TextDisk {
        offset: u64,
        len: usize,
    },
}

/// Sets live in fixed chunks of this many values (4 MB), never moved once written: one growing
/// vector would copy everything held so far at each doubling (and fault its pages in twice).
const CHUNK_VALUES: usize = 1 << 20;
/// Texts live in fixed chunks of this many bytes, for the same reason.
const CHUNK_BYTES: usize = 4 << 20;

/// Builds shingle sets from texts ([`Sketcher::shingle_set`]): for a store whose
/// representatives come as texts (a distributed `decide` step, whose samples carry their texts
/// instead of their sets).
pub struct SetBuilder {
    sketcher: Sketcher,
    scratch: Scratch,
}

impl SetBuilder {
    pub fn new(sketcher: Sketcher) -> SetBuilder {
        SetBuilder {
            sketcher,
            scratch: Scratch::default(),
        }
    }

    /// Replaces `out` with the shingle set of `text`.
    pub fn build(&mut self, text: &str, out: &mut Vec<u32>) {
        self.sketcher.shingle_set(text, &mut self.scratch, out);
    }
}

pub struct ShingleStore {
    budget: u64,
    spill_dir: Option<PathBuf>,
    chunks: Vec<Vec<u32>>,
    memory_values: usize,
    text_chunks: Vec<Vec<u8>>,
    memory_text_bytes: usize,
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
            text_chunks: Vec::new(),
            memory_text_bytes: 0,
            places: Vec::new(),
            spill: None,
            spill_len: 0,
            buf: Vec::new(),
            bytes: Vec::new(),
            error: None,
        }
    }

    fn memory_bytes(&self) -> u64 {
        (self.memory_values * 4 + self.memory_text_bytes) as u64
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

    /// Holds representative `id`'s text; its set is built the first time a candidate is compared
    /// with it (most representatives of a distributed decide step never are).
    pub fn push_text(&mut self, id: RepId, text: &str) {
        let text = text.as_bytes();
        if self.memory_bytes() + text.len() as u64 <= self.budget {
            let fits = self
                .text_chunks
                .last()
                .is_some_and(|c| c.capacity() - c.len() >= text.len());
            if !fits {
                self.text_chunks
                    .push(Vec::with_capacity(CHUNK_BYTES.max(text.len())));
            }
            let chunk = self.text_chunks.len() - 1;
            let c = &mut self.text_chunks[chunk];
            let place = Place::TextMemory {
                chunk,
                start: c.len(),
                len: text.len(),
            };
            c.extend_from_slice(text);
            self.memory_text_bytes += text.len();
            *self.place(id) = Some(place);
            return;
        }
        self.bytes.clear();
        self.bytes.extend_from_slice(text);
        match self.spill_bytes() {
            Ok(offset) => {
                *self.place(id) = Some(Place::TextDisk {
                    offset,
                    len: text.len(),
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
    /// A representative held as its text gets its set built by `builder` (and kept: a
    /// representative compared once is often compared again).
    pub fn jaccard_at_least(
        &mut self,
        id: RepId,
        other: &[u32],
        threshold: f64,
        builder: Option<&mut SetBuilder>,
    ) -> Option<f64> {
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
            Some(&Place::TextMemory { chunk, start, len }) => {
                let builder = builder.expect("a store holding texts has a set builder");
                let text = std::str::from_utf8(&self.text_chunks[chunk][start..start + len])
                    .expect("texts are stored from &str");
                let mut set = std::mem::take(&mut self.buf);
                builder.build(text, &mut set);
                self.push(id, &set);
                let j = jaccard_at_least(&set, other, threshold);
                self.buf = set;
                j
            }
            Some(&Place::TextDisk { offset, len }) => {
                let builder = builder.expect("a store holding texts has a set builder");
                if !self.read_spilled(offset, len) {
                    return None;
                }
                let Ok(text) = std::str::from_utf8(&self.bytes) else {
                    self.fail(io::Error::new(
                        io::ErrorKind::InvalidData,
                        "a text read back is not UTF-8",
                    ));
                    return None;
                };
                let mut set = std::mem::take(&mut self.buf);
                builder.build(text, &mut set);
                self.push(id, &set);
                let j = jaccard_at_least(&set, other, threshold);
                self.buf = set;
                j
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
        assert_eq!(store.jaccard_at_least(0, &a, 0.8, None), Some(1.0));
        assert_eq!(store.jaccard_at_least(1, &b, 0.8, None), Some(1.0));
        assert_eq!(store.jaccard_at_least(1, &a, 0.3, None), Some(5.0 / 15.0));
        assert_eq!(store.jaccard_at_least(1, &a, 0.8, None), None);
        assert!(store.take_error().is_none());
    }

    /// A representative held as its text verifies as its set would, in memory and spilled.
    #[test]
    fn texts_held_for_representatives_verify_as_their_sets() {
        use neardup_sketch::{BandKeyScheme, HashScheme, LshParams, Normalizer, SketchConfig};
        let sketcher = Sketcher::new(SketchConfig {
            normalizer: Normalizer::default(),
            shingler: neardup_sketch::Shingler::Chars { k: 5, step: 1 },
            scheme: HashScheme::Oph,
            num_perm: 128,
            seed: 1,
            lsh: LshParams::new(16, 8).unwrap(),
            band_keys: BandKeyScheme::Fast,
        })
        .unwrap();
        let mut builder = SetBuilder::new(sketcher.clone());
        let texts = [
            "a text that is held as its text, and long enough",
            "another text entirely",
        ];
        let mut sets = Vec::new();
        for t in texts {
            let mut set = Vec::new();
            sketcher.shingle_set(t, &mut Scratch::default(), &mut set);
            sets.push(set);
        }
        let dir = tempfile::tempdir().unwrap();
        for budget in [1 << 20, 0] {
            let mut store = ShingleStore::new(budget, Some(dir.path().to_path_buf()));
            store.push_text(0, texts[0]);
            store.push_text(1, texts[1]);
            for _ in 0..2 {
                assert_eq!(
                    store.jaccard_at_least(0, &sets[0], 0.9, Some(&mut builder)),
                    Some(1.0)
                );
                assert_eq!(
                    store.jaccard_at_least(1, &sets[0], 0.9, Some(&mut builder)),
                    None
                );
            }
            assert!(store.take_error().is_none());
        }
    }

    #[test]
    fn an_unusable_spill_dir_is_an_error_not_a_panic_nor_a_drop() {
        let mut store = ShingleStore::new(0, Some(PathBuf::from("/nonexistent/neardup-spill")));
        let a: Vec<u32> = (0..10).collect();
        store.push(0, &a);
        assert_eq!(store.jaccard_at_least(0, &a, 0.5, None), None);
        let e = store.take_error().expect("the failed spill is reported");
        assert!(e.to_string().contains("spill"), "{e}");
    }
}
