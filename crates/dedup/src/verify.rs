//! Records of 32-bit values (representatives' signatures, their shingle sets) that stay in
//! memory while a budget allows and otherwise go to a scratch file.
//!
//! In memory, records live in fixed chunks of [`CHUNK_VALUES`] values, never moved within memory:
//! one growing vector would copy everything held so far at each doubling (and fault its pages in
//! twice). When what else the caller holds grows, the oldest chunk's records can be moved to the
//! scratch file and the chunk freed ([`SpillArena::evict_oldest_chunk`]). Past the budget, records are appended to an unnamed temporary file (in the configured
//! spill directory, else the system's: nothing is left behind whatever ends the run) and read
//! back with positioned reads, helped by the page cache, when they are needed. The page cache is
//! the kernel's to reclaim, so what spills does not count against the process.
//!
//! A disk error does not abort the decision in progress: a record that could not be written or
//! read is reported missing (so nothing is compared with it or confirmed by it, and nothing is
//! dropped on its account), and the error is kept for the stage to report as a failed run: a run
//! that lost records is never reported as complete.

use std::fs::File;
use std::io::{self, Write};
use std::os::unix::fs::FileExt;
use std::path::PathBuf;

use neardup_scratch::{Backing, Plain, ScratchVec, prefetch_line};

/// Where one record is.
#[derive(Clone, Copy)]
enum Place {
    Memory {
        chunk: u32,
        start: u32,
        len: u32,
    },
    Disk {
        offset: u64,
        len: u32,
    },
    /// Its spill write failed, or it was pushed missing.
    Lost,
}

// SAFETY: integers only.
unsafe impl Plain for Place {}

/// Chunk size of records in memory: 4 MB.
const CHUNK_VALUES: usize = 1 << 20;

/// Records numbered from 0 in the order pushed, each in memory or in the scratch file.
pub struct SpillArena {
    /// What the records are, for error messages ("signature", "shingle set").
    what: &'static str,
    spill_dir: Option<PathBuf>,
    chunks: Vec<Vec<u32>>,
    /// Chunks before this one have been evicted (freed).
    first_held_chunk: usize,
    /// Records before this one are in an evicted chunk or not in memory.
    eviction_cursor: usize,
    memory_values: usize,
    /// Where each record is: bookkeeping that stays wherever the records go ([`ScratchVec`]).
    places: ScratchVec<Place>,
    spill: Option<File>,
    spill_len: u64,
    /// The last record read back from disk.
    read: Vec<u32>,
    bytes: Vec<u8>,
    error: Option<io::Error>,
}

impl SpillArena {
    /// An empty arena of `what` records spilling to `spill_dir`, its places kept as `places`
    /// says.
    pub fn new(what: &'static str, spill_dir: Option<PathBuf>, places: &Backing) -> SpillArena {
        SpillArena {
            what,
            spill_dir,
            chunks: Vec::new(),
            first_held_chunk: 0,
            eviction_cursor: 0,
            memory_values: 0,
            places: ScratchVec::new(places),
            spill: None,
            spill_len: 0,
            read: Vec::new(),
            bytes: Vec::new(),
            error: None,
        }
    }

    /// Records pushed.
    pub fn len(&self) -> usize {
        self.places.len()
    }

    /// Appends a record, in memory when `in_memory`, else to the scratch file.
    pub fn push(&mut self, values: &[u32], in_memory: bool) {
        let len = u32::try_from(values.len()).expect("a record of fewer than 2^32 values");
        let place = if in_memory {
            let fits = self
                .chunks
                .last()
                .is_some_and(|c| c.capacity() - c.len() >= values.len());
            if !fits {
                self.chunks
                    .push(Vec::with_capacity(CHUNK_VALUES.max(values.len())));
            }
            let chunk = self.chunks.len() - 1;
            let c = &mut self.chunks[chunk];
            let start = c.len() as u32;
            c.extend_from_slice(values);
            self.memory_values += values.len();
            Place::Memory {
                chunk: chunk as u32,
                start,
                len,
            }
        } else {
            self.bytes.clear();
            self.bytes
                .extend(values.iter().flat_map(|v| v.to_le_bytes()));
            match self.append_bytes() {
                Ok(offset) => Place::Disk { offset, len },
                Err(e) => {
                    self.fail(e);
                    Place::Lost
                }
            }
        };
        self.places.push(place);
    }

    /// Makes room for the bookkeeping of one more record, so that [`Self::place_bytes`] counts it
    /// before the record is pushed.
    pub fn reserve_place(&mut self) {
        self.places.reserve(1);
    }

    /// Appends a record that is not known: reading it gives `None`, as for one lost.
    pub fn push_missing(&mut self) {
        self.places.push(Place::Lost);
    }

    fn fail(&mut self, e: io::Error) {
        let what = self.what;
        self.error.get_or_insert_with(|| {
            io::Error::new(e.kind(), format!("representatives' {what} spill file: {e}"))
        });
    }

    /// Appends `self.bytes` to the scratch file; returns where they start.
    fn append_bytes(&mut self) -> io::Result<u64> {
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

    /// Record `id`, or `None` when it was lost to a disk error (kept for [`Self::take_error`]).
    /// Asks the CPU to start loading the first `values` values of record `id` when it is in
    /// memory (a hint; nothing when it is not).
    #[inline]
    pub fn prefetch(&self, id: usize, values: usize) {
        let Some(&Place::Memory { chunk, start, len }) = self.places.get(id) else {
            return;
        };
        let start = start as usize;
        let record = &self.chunks[chunk as usize][start..start + (len as usize).min(values)];
        // One hint per 64-byte line.
        for line in record.chunks(16) {
            prefetch_line(line.as_ptr());
        }
    }

    /// Asks the CPU to start loading where record `id` is (a hint).
    #[inline]
    pub fn prefetch_place(&self, id: usize) {
        if let Some(place) = self.places.get(id) {
            prefetch_line((place as *const Place).cast());
        }
    }

    pub fn get(&mut self, id: usize) -> Option<&[u32]> {
        match *self.places.get(id)? {
            Place::Memory { chunk, start, len } => {
                let start = start as usize;
                Some(&self.chunks[chunk as usize][start..start + len as usize])
            }
            Place::Disk { offset, len } => {
                let file = self
                    .spill
                    .as_ref()
                    .expect("a record on disk has a spill file");
                self.bytes.resize(len as usize * 4, 0);
                if let Err(e) = file.read_exact_at(&mut self.bytes, offset) {
                    self.fail(e);
                    return None;
                }
                self.read.clear();
                self.read.extend(
                    self.bytes
                        .chunks_exact(4)
                        .map(|b| u32::from_le_bytes(b.try_into().expect("4 bytes"))),
                );
                Some(&self.read)
            }
            Place::Lost => None,
        }
    }

    /// Moves every record of the oldest chunk still in memory to the scratch file and frees the
    /// chunk. Returns the bytes of records it moved: 0 when no chunk is left. A record that cannot
    /// be written is lost (and the error kept), as one that could not be spilled when pushed.
    pub fn evict_oldest_chunk(&mut self) -> u64 {
        let Some(chunk) = self.chunks.get_mut(self.first_held_chunk) else {
            return 0;
        };
        let values = std::mem::take(chunk);
        let evicted = self.first_held_chunk as u32;
        self.first_held_chunk += 1;
        // Records fill chunks in the order pushed, so this chunk's records come after the
        // earlier chunks' and before the later ones'.
        while let Some(&place) = self.places.get(self.eviction_cursor) {
            match place {
                Place::Memory { chunk, start, len } if chunk == evicted => {
                    let start = start as usize;
                    self.bytes.clear();
                    self.bytes.extend(
                        values[start..start + len as usize]
                            .iter()
                            .flat_map(|v| v.to_le_bytes()),
                    );
                    self.places[self.eviction_cursor] = match self.append_bytes() {
                        Ok(offset) => Place::Disk { offset, len },
                        Err(e) => {
                            self.fail(e);
                            Place::Lost
                        }
                    };
                }
                Place::Memory { chunk, .. } if chunk > evicted => break,
                _ => {}
            }
            self.eviction_cursor += 1;
        }
        self.memory_values -= values.len();
        4 * values.len() as u64
    }

    /// Bytes of records held in memory.
    pub fn memory_bytes(&self) -> u64 {
        (self.memory_values * 4) as u64
    }

    /// Bytes of records in the scratch file.
    pub fn disk_bytes(&self) -> u64 {
        self.spill_len
    }

    /// Bytes of the bookkeeping per record, which stays wherever the record is (all of it, in
    /// memory or mapped).
    pub fn place_bytes(&self) -> u64 {
        self.places.memory_bytes() as u64
    }

    /// Hands one of `parts` parts of the mapped places back to the kernel
    /// ([`ScratchVec::release_part`]).
    pub fn release_places_part(&mut self, parts: usize) {
        self.places.release_part(parts);
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
    fn records_in_memory_and_on_disk_read_back_alike() {
        let dir = tempfile::tempdir().unwrap();
        let mut arena = SpillArena::new("test", Some(dir.path().to_path_buf()), &Backing::Heap);
        let records: Vec<Vec<u32>> = (0..50u32)
            .map(|i| {
                (0..i * 37 % 200)
                    .map(|v| v.wrapping_mul(2654435761) ^ i)
                    .collect()
            })
            .collect();
        for (i, r) in records.iter().enumerate() {
            arena.push(r, i % 3 != 1);
        }
        for (i, r) in records.iter().enumerate().rev() {
            // A prefetch of any record (empty, shorter or longer than asked, on disk) is only a
            // hint: the record reads back the same after it.
            arena.prefetch(i, 128);
            assert_eq!(arena.get(i), Some(&r[..]), "record {i}");
        }
        arena.prefetch(records.len(), 128);
        let (memory, disk): (Vec<_>, Vec<_>) =
            records.iter().enumerate().partition(|(i, _)| i % 3 != 1);
        let bytes = |rs: Vec<(usize, &Vec<u32>)>| -> u64 {
            rs.iter().map(|(_, r)| r.len() as u64 * 4).sum()
        };
        assert_eq!(arena.memory_bytes(), bytes(memory));
        assert_eq!(arena.disk_bytes(), bytes(disk));
        assert!(arena.take_error().is_none());
        assert_eq!(arena.get(records.len()), None);
    }

    #[test]
    fn evicted_chunks_read_back_alike_and_free_their_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let mut arena = SpillArena::new("test", Some(dir.path().to_path_buf()), &Backing::Heap);
        // Records of 300,000 values: three chunks, one record in each of the first two, a
        // record on disk between them.
        let records: Vec<Vec<u32>> = (0..7u32)
            .map(|i| (0..300_000u32).map(|v| v ^ (i << 20)).collect())
            .collect();
        for (i, r) in records.iter().enumerate() {
            arena.push(r, i != 3);
        }
        let held = arena.memory_bytes();
        assert_eq!(held, 6 * 300_000 * 4);
        let freed = arena.evict_oldest_chunk();
        assert_eq!(freed, 3 * 300_000 * 4, "the first chunk held three records");
        assert_eq!(arena.memory_bytes(), held - freed);
        while arena.evict_oldest_chunk() > 0 {}
        assert_eq!(arena.memory_bytes(), 0);
        assert_eq!(arena.disk_bytes(), 7 * 300_000 * 4);
        for (i, r) in records.iter().enumerate() {
            arena.prefetch(i, 128);
            assert_eq!(arena.get(i), Some(&r[..]), "record {i}");
        }
        // Pushing goes on after evictions.
        arena.push(&records[0], true);
        assert_eq!(arena.get(7), Some(&records[0][..]));
        assert!(arena.take_error().is_none());
    }

    #[test]
    fn an_unusable_spill_dir_is_an_error_not_a_panic_nor_a_record() {
        let mut arena = SpillArena::new(
            "test",
            Some(PathBuf::from("/nonexistent/neardup-spill")),
            &Backing::Heap,
        );
        arena.push(&[1, 2, 3], true);
        arena.push(&[4, 5, 6], false);
        arena.prefetch(1, 128);
        assert_eq!(arena.get(0), Some(&[1, 2, 3][..]));
        assert_eq!(arena.get(1), None);
        let e = arena.take_error().expect("the failed spill is reported");
        assert!(e.to_string().contains("spill"), "{e}");
        assert!(arena.take_error().is_none(), "reported once");
    }
}
