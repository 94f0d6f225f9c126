//! Records put in order before they are written, within a memory budget, for the two steps that
//! produce them out of order under a preference other than input order (`crate::Prefer`): the
//! ranked samples of a `sign` step, in (rank, row) order within each group so that `decide`
//! merges the shards' streams as they come, and the decisions of a `decide` step, decided in
//! rank order and written in row order within each shard's stream, as `write` reads them. Past
//! the budget, the records held are sorted and spill to a temporary file (a run); the streams
//! are then merged from the runs and what is still held. Builds on `handoff` (a ranked record's
//! first 16 bytes are its rank and row, a decided one's first 8 its row).

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::fs::File;
use std::io::{self, BufReader, BufWriter, Read, Seek, SeekFrom, Write};
use std::path::PathBuf;

use crate::handoff::RecordWriter;
use crate::step_sink::StepSink;

fn word(record: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(record[at..at + 8].try_into().expect("8 bytes"))
}

/// A ranked record's sort key: its rank and row.
fn rank_then_row(record: &[u8]) -> (u64, u64) {
    (word(record, 0), word(record, 8))
}

/// A decided record's sort key: its row.
fn row(record: &[u8]) -> (u64, u64) {
    (word(record, 0), 0)
}

/// A record held in memory: where its bytes are, and its group and key.
#[derive(Clone, Copy)]
struct Held {
    group: u32,
    key: (u64, u64),
    start: usize,
    len: usize,
}

/// A spilled run: records sorted by (group, rank, row), each as its length (u64) and bytes.
struct Run {
    file: File,
    /// Records of each group, in group order.
    per_group: Vec<u64>,
}

/// Sorts the records of every group (or shard) one step writes (see the module docs).
pub(crate) struct RecordSorter {
    key: fn(&[u8]) -> (u64, u64),
    bytes: Vec<u8>,
    held: Vec<Held>,
    runs: Vec<Run>,
    groups: usize,
    memory: usize,
    spill_dir: Option<PathBuf>,
}

impl RecordSorter {
    /// A sorter of ranked records of `groups` groups into (rank, row) order that holds up to
    /// about `memory` bytes before it spills to `spill_dir` (the system's temporary directory
    /// when unset).
    pub fn by_rank(groups: usize, memory: usize, spill_dir: Option<PathBuf>) -> RecordSorter {
        RecordSorter::new(rank_then_row, groups, memory, spill_dir)
    }

    /// A sorter of decided records of `streams` streams into row order, as
    /// [`RecordSorter::by_rank`] holds and spills.
    pub fn by_row(streams: usize, memory: usize, spill_dir: Option<PathBuf>) -> RecordSorter {
        RecordSorter::new(row, streams, memory, spill_dir)
    }

    fn new(
        key: fn(&[u8]) -> (u64, u64),
        groups: usize,
        memory: usize,
        spill_dir: Option<PathBuf>,
    ) -> RecordSorter {
        RecordSorter {
            key,
            bytes: Vec::new(),
            held: Vec::new(),
            runs: Vec::new(),
            groups,
            memory,
            spill_dir,
        }
    }

    /// Adds one encoded ranked record of `group`.
    pub fn push(&mut self, group: u32, record: &[u8]) -> io::Result<()> {
        self.held.push(Held {
            group,
            key: (self.key)(record),
            start: self.bytes.len(),
            len: record.len(),
        });
        self.bytes.extend_from_slice(record);
        if self.bytes.len() + self.held.len() * std::mem::size_of::<Held>() > self.memory {
            self.spill()?;
        }
        Ok(())
    }

    /// Runs spilled so far.
    #[cfg(test)]
    pub fn runs(&self) -> usize {
        self.runs.len()
    }

    fn sort_held(&mut self) {
        self.held.sort_unstable_by_key(|h| (h.group, h.key));
    }

    fn spill(&mut self) -> io::Result<()> {
        self.sort_held();
        let file = match &self.spill_dir {
            Some(dir) => tempfile::tempfile_in(dir)?,
            None => tempfile::tempfile()?,
        };
        let mut out = BufWriter::with_capacity(1 << 20, file);
        let mut per_group = vec![0u64; self.groups];
        for h in &self.held {
            out.write_all(&(h.len as u64).to_le_bytes())?;
            out.write_all(&self.bytes[h.start..h.start + h.len])?;
            per_group[h.group as usize] += 1;
        }
        let mut file = out.into_inner().map_err(|e| e.into_error())?;
        file.seek(SeekFrom::Start(0))?;
        self.runs.push(Run { file, per_group });
        self.bytes.clear();
        self.held.clear();
        Ok(())
    }

    /// Writes each group's records in (rank, row) order to `streams[group]`.
    pub fn finish(mut self, streams: &mut [RecordWriter<StepSink>]) -> io::Result<()> {
        assert_eq!(streams.len(), self.groups, "one stream per group");
        self.sort_held();
        let mut runs: Vec<(BufReader<File>, Vec<u64>)> = std::mem::take(&mut self.runs)
            .into_iter()
            .map(|r| (BufReader::with_capacity(1 << 20, r.file), r.per_group))
            .collect();
        let mut next_held = 0;
        // One record read ahead per run.
        let mut heads: Vec<Vec<u8>> = vec![Vec::new(); runs.len()];
        let memory_source = runs.len();
        for (group, stream) in streams.iter_mut().enumerate() {
            let mut heap = BinaryHeap::new();
            for (r, (reader, per_group)) in runs.iter_mut().enumerate() {
                if per_group[group] > 0 {
                    per_group[group] -= 1;
                    read_record(reader, &mut heads[r])?;
                    heap.push(Reverse(((self.key)(&heads[r]), r)));
                }
            }
            let held_of_group = |i: usize| self.held.get(i).filter(|h| h.group as usize == group);
            if let Some(h) = held_of_group(next_held) {
                heap.push(Reverse((h.key, memory_source)));
            }
            while let Some(Reverse((_, source))) = heap.pop() {
                if source == memory_source {
                    let h = self.held[next_held];
                    stream
                        .buffer()
                        .extend_from_slice(&self.bytes[h.start..h.start + h.len]);
                    next_held += 1;
                    if let Some(h) = held_of_group(next_held) {
                        heap.push(Reverse((h.key, memory_source)));
                    }
                } else {
                    stream.buffer().extend_from_slice(&heads[source]);
                    let (reader, per_group) = &mut runs[source];
                    if per_group[group] > 0 {
                        per_group[group] -= 1;
                        read_record(reader, &mut heads[source])?;
                        heap.push(Reverse(((self.key)(&heads[source]), source)));
                    }
                }
                stream.record_done()?;
            }
        }
        Ok(())
    }
}

fn read_record(reader: &mut impl Read, into: &mut Vec<u8>) -> io::Result<()> {
    let mut len = [0u8; 8];
    reader.read_exact(&mut len)?;
    let len = usize::try_from(u64::from_le_bytes(len))
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "spilled record too long"))?;
    into.clear();
    into.resize(len, 0);
    reader.read_exact(into)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::deduper::{SampleAddr, Verdict};
    use crate::handoff::{DecidedSample, RecordReader, decode_decided, encode_decided};
    use proptest::prelude::*;

    fn record(rank: u64, row: u64, payload: &[u8]) -> Vec<u8> {
        // Stream records are length-free: this one says its payload's length after its key.
        let mut r = rank.to_le_bytes().to_vec();
        r.extend_from_slice(&row.to_le_bytes());
        r.push(payload.len() as u8);
        r.extend_from_slice(payload);
        r
    }

    /// The records of each group's stream after `sorter` sorted them (`length` says how long
    /// the record at the front of a stream's bytes is), and the runs it spilled.
    fn sorted(
        mut sorter: RecordSorter,
        groups: usize,
        input: &[(u32, Vec<u8>)],
        length: fn(&[u8]) -> usize,
    ) -> (Vec<Vec<Vec<u8>>>, usize) {
        for (g, r) in input {
            sorter.push(*g, r).unwrap();
        }
        let runs = sorter.runs();
        let mut streams: Vec<RecordWriter<StepSink>> = (0..groups)
            .map(|_| RecordWriter::new(StepSink::memory()).unwrap())
            .collect();
        sorter.finish(&mut streams).unwrap();
        let out = streams
            .into_iter()
            .map(|w| {
                let bytes = w.finish().unwrap().finish().unwrap().unwrap();
                let mut reader = RecordReader::new(bytes.as_slice()).unwrap();
                let mut records = Vec::new();
                while reader
                    .next(|b| {
                        let len = length(b);
                        records.push(b[..len].to_vec());
                        Ok(len)
                    })
                    .unwrap()
                {}
                records
            })
            .collect();
        (out, runs)
    }

    proptest! {
        #[test]
        fn every_group_comes_out_in_rank_then_row_order_however_much_spills(
            samples in prop::collection::vec((0u32..3, 0u64..5, prop::collection::vec(any::<u8>(), 0..40)), 0..200),
            memory in prop::sample::select(vec![0usize, 64, 1000, 1 << 20]),
        ) {
            // Rows are unique and rise in input order, as a shard's rows do.
            let input: Vec<(u32, Vec<u8>)> = samples
                .iter()
                .enumerate()
                .map(|(row, (g, rank, payload))| (*g, record(*rank, row as u64, payload)))
                .collect();
            let sorter = RecordSorter::by_rank(3, memory, None);
            let (out, runs) = sorted(sorter, 3, &input, |b| 17 + b[16] as usize);
            if memory == 0 && !input.is_empty() {
                prop_assert!(runs > 0);
            }
            for (g, records) in out.iter().enumerate() {
                let mut expect: Vec<Vec<u8>> = input
                    .iter()
                    .filter(|(group, _)| *group as usize == g)
                    .map(|(_, r)| r.clone())
                    .collect();
                expect.sort_by_key(|r| rank_then_row(r));
                prop_assert_eq!(records, &expect);
            }
        }

        #[test]
        fn every_stream_of_decisions_comes_out_in_row_order_however_much_spills(
            decisions in prop::collection::vec(
                (0u32..3, 0u8..3, any::<u64>(), prop::option::of("[a-z0-9é]{0,12}")),
                0..200,
            ),
            order in any::<u64>(),
            memory in prop::sample::select(vec![0usize, 64, 1000, 1 << 20]),
        ) {
            // Rows are unique, decided in an order that is not theirs (as rank order is not).
            let mut input: Vec<(u32, DecidedSample)> = decisions
                .into_iter()
                .enumerate()
                .map(|(row, (stream, kind, addr, id))| {
                    let addr = SampleAddr { file: (addr >> 48) as u32, record: addr >> 8, field: (addr & 3) as u32 };
                    let verdict = match kind {
                        0 => Verdict::Unique,
                        1 => Verdict::Exact { of: addr, cluster: addr },
                        _ => Verdict::Near { of: addr, similarity: 0.9 },
                    };
                    (stream, DecidedSample { row: row as u64, verdict, dup_of_id: id })
                })
                .collect();
            let mut state = order | 1;
            for i in (1..input.len()).rev() {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                input.swap(i, (state % (i as u64 + 1)) as usize);
            }
            let encoded: Vec<(u32, Vec<u8>)> = input
                .iter()
                .map(|(stream, d)| {
                    let mut bytes = Vec::new();
                    encode_decided(d, &mut bytes);
                    (*stream, bytes)
                })
                .collect();
            let sorter = RecordSorter::by_row(3, memory, None);
            let (out, runs) = sorted(sorter, 3, &encoded, |b| decode_decided(b).unwrap().1);
            if memory == 0 && !input.is_empty() {
                prop_assert!(runs > 0);
            }
            for (stream, records) in out.iter().enumerate() {
                let got: Vec<DecidedSample> =
                    records.iter().map(|r| decode_decided(r).unwrap().0).collect();
                let mut expect: Vec<DecidedSample> = input
                    .iter()
                    .filter(|(s, _)| *s as usize == stream)
                    .map(|(_, d)| d.clone())
                    .collect();
                expect.sort_by_key(|d| d.row);
                prop_assert_eq!(got, expect);
            }
        }
    }
}
