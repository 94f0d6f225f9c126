//! Shingle sets of texts too long to hold their sets in memory (under a memory limit): built by
//! an external sort into an unnamed scratch file, compared by a streaming merge, so that a text's
//! set costs a bounded buffer whatever its length, and the exact Jaccard stays exact.
//!
//! A set in memory is the sorted distinct fingerprints of a text's shingle hashes
//! ([`neardup_sketch::fingerprint_set`]); a [`SpilledSet`] is the same values in the same order,
//! in a file. [`SetBuilder`] takes the hashes a piece at a time, sorts each [`RUN_VALUES`] of
//! fingerprints into a run, and merges the runs ([`FAN_IN`] at a time, in passes when there are
//! more) into the set's file. [`jaccard_at_least`] compares two sets, either of which may be
//! spilled, reading a spilled one [`READ_VALUES`] values at a time, with the same result as
//! [`neardup_sketch::jaccard_at_least`] on the sets in memory.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use neardup_sketch::fingerprint;

/// Fingerprints sorted at once into one run (4 MiB).
pub const RUN_VALUES: usize = 1 << 20;
/// Runs merged at once; more are merged in passes.
pub const FAN_IN: usize = 32;
/// Values a reader of a spilled set or run holds (64 KiB).
pub const READ_VALUES: usize = 1 << 14;

/// A text's shingle set in an unnamed scratch file: sorted distinct fingerprints, 4 bytes each,
/// little-endian. Cloning shares the file, which is removed when the last clone is dropped.
#[derive(Clone, Debug)]
pub struct SpilledSet {
    file: Arc<File>,
    len: u64,
}

impl SpilledSet {
    /// Its bytes on disk.
    pub fn disk_bytes(&self) -> u64 {
        4 * self.len
    }

    /// Its values in order, a few at a time (for tests and comparisons).
    fn reader(&self) -> Reader<'_> {
        Reader::new(&self.file, 0, self.len)
    }
}

/// A shingle set in memory or spilled: what a candidate brings to its verification.
#[derive(Clone, Copy, Debug)]
pub enum SetRef<'a> {
    /// Sorted distinct fingerprints in memory.
    Memory(&'a [u32]),
    /// In a scratch file.
    Spilled(&'a SpilledSet),
}

impl SetRef<'_> {
    fn len(&self) -> u64 {
        match self {
            SetRef::Memory(s) => s.len() as u64,
            SetRef::Spilled(s) => s.len,
        }
    }
}

fn scratch_file(dir: Option<&Path>) -> io::Result<File> {
    match dir {
        Some(dir) => tempfile::tempfile_in(dir),
        None => tempfile::tempfile(),
    }
}

/// Builds a [`SpilledSet`] from shingle hashes given a piece at a time, holding at most
/// [`RUN_VALUES`] fingerprints and [`FAN_IN`] readers' buffers.
pub struct SetBuilder {
    dir: Option<PathBuf>,
    run: Vec<u32>,
    /// Sorted runs written so far: one file, each run a range of values.
    runs_file: Option<BufWriter<File>>,
    runs: Vec<(u64, u64)>,
    written: u64,
}

impl SetBuilder {
    /// A builder whose scratch files go to `dir` (the system's temporary directory when `None`).
    pub fn new(dir: Option<PathBuf>) -> SetBuilder {
        SetBuilder {
            dir,
            run: Vec::new(),
            runs_file: None,
            runs: Vec::new(),
            written: 0,
        }
    }

    /// Adds shingle hashes (repeats allowed, any order).
    pub fn add(&mut self, hashes: &[u64]) -> io::Result<()> {
        for &h in hashes {
            if self.run.len() == RUN_VALUES {
                self.flush_run()?;
            }
            self.run.push(fingerprint(h));
        }
        Ok(())
    }

    /// Sorts the fingerprints held into a run and appends it to the runs' file.
    fn flush_run(&mut self) -> io::Result<()> {
        if self.run.is_empty() {
            return Ok(());
        }
        self.run.sort_unstable();
        self.run.dedup();
        if self.runs_file.is_none() {
            let file = scratch_file(self.dir.as_deref())?;
            self.runs_file = Some(BufWriter::with_capacity(4 * READ_VALUES, file));
        }
        let out = self.runs_file.as_mut().expect("made above");
        write_values(out, &self.run)?;
        let len = self.run.len() as u64;
        self.runs.push((self.written, len));
        self.written += len;
        self.run.clear();
        Ok(())
    }

    /// The set of every hash added.
    pub fn finish(mut self) -> io::Result<SpilledSet> {
        self.flush_run()?;
        let run = std::mem::take(&mut self.run);
        drop(run);
        let Some(out) = self.runs_file.take() else {
            return write_set(self.dir.as_deref(), |_| Ok(0));
        };
        let mut file = out.into_inner().map_err(|e| e.into_error())?;
        let mut runs = std::mem::take(&mut self.runs);
        // Passes of FAN_IN runs at a time until one pass merges them all into the set.
        while runs.len() > FAN_IN {
            let next = scratch_file(self.dir.as_deref())?;
            let mut out = BufWriter::with_capacity(4 * READ_VALUES, next);
            let mut merged = Vec::new();
            let mut at = 0u64;
            for group in runs.chunks(FAN_IN) {
                let len = merge(&file, group, |v| write_values(&mut out, v))?;
                merged.push((at, len));
                at += len;
            }
            file = out.into_inner().map_err(|e| e.into_error())?;
            runs = merged;
        }
        write_set(self.dir.as_deref(), |out| {
            merge(&file, &runs, |v| write_values(out, v))
        })
    }
}

/// A set's file written by `fill` (which returns how many values it wrote).
fn write_set(
    dir: Option<&Path>,
    fill: impl FnOnce(&mut BufWriter<File>) -> io::Result<u64>,
) -> io::Result<SpilledSet> {
    let mut out = BufWriter::with_capacity(4 * READ_VALUES, scratch_file(dir)?);
    let len = fill(&mut out)?;
    let file = out.into_inner().map_err(|e| e.into_error())?;
    Ok(SpilledSet {
        file: Arc::new(file),
        len,
    })
}

fn write_values(out: &mut impl Write, values: &[u32]) -> io::Result<()> {
    let mut bytes = [0u8; 4096];
    for chunk in values.chunks(bytes.len() / 4) {
        for (b, v) in bytes.chunks_exact_mut(4).zip(chunk) {
            b.copy_from_slice(&v.to_le_bytes());
        }
        out.write_all(&bytes[..4 * chunk.len()])?;
    }
    Ok(())
}

/// Merges the sorted runs `runs` (ranges of values of `file`) into their sorted distinct union,
/// handed to `out` a buffer at a time; returns how many values that is.
fn merge(
    file: &File,
    runs: &[(u64, u64)],
    mut out: impl FnMut(&[u32]) -> io::Result<()>,
) -> io::Result<u64> {
    let mut readers: Vec<Reader<'_>> = runs
        .iter()
        .map(|&(start, len)| Reader::new(file, start, len))
        .collect();
    let mut heap = BinaryHeap::with_capacity(readers.len());
    for (i, r) in readers.iter_mut().enumerate() {
        if let Some(v) = r.next()? {
            heap.push(Reverse((v, i)));
        }
    }
    let mut buf = Vec::with_capacity(READ_VALUES);
    let mut last = None;
    let mut len = 0u64;
    while let Some(Reverse((v, i))) = heap.pop() {
        if last != Some(v) {
            buf.push(v);
            last = Some(v);
            if buf.len() == READ_VALUES {
                out(&buf)?;
                len += buf.len() as u64;
                buf.clear();
            }
        }
        if let Some(next) = readers[i].next()? {
            heap.push(Reverse((next, i)));
        }
    }
    out(&buf)?;
    Ok(len + buf.len() as u64)
}

/// Values `start..start + len` of a file of little-endian `u32`s, read [`READ_VALUES`] at a
/// time by positioned reads.
struct Reader<'f> {
    file: &'f File,
    next_value: u64,
    end: u64,
    values: Vec<u32>,
    at: usize,
}

impl<'f> Reader<'f> {
    fn new(file: &'f File, start: u64, len: u64) -> Reader<'f> {
        Reader {
            file,
            next_value: start,
            end: start + len,
            values: Vec::new(),
            at: 0,
        }
    }

    /// The values still unread.
    fn remaining(&self) -> u64 {
        (self.values.len() - self.at) as u64 + (self.end - self.next_value)
    }

    fn next(&mut self) -> io::Result<Option<u32>> {
        if self.at == self.values.len() && !self.refill()? {
            return Ok(None);
        }
        self.at += 1;
        Ok(Some(self.values[self.at - 1]))
    }

    /// The next values, [`READ_VALUES`] at most; false at the end.
    fn refill(&mut self) -> io::Result<bool> {
        let n = (self.end - self.next_value).min(READ_VALUES as u64) as usize;
        if n == 0 {
            return Ok(false);
        }
        let mut bytes = vec![0u8; 4 * n];
        self.file.read_exact_at(&mut bytes, 4 * self.next_value)?;
        self.values.clear();
        self.values.extend(
            bytes
                .chunks_exact(4)
                .map(|b| u32::from_le_bytes(b.try_into().expect("4 bytes"))),
        );
        self.next_value += n as u64;
        self.at = 0;
        Ok(true)
    }
}

/// A set's values in order, from memory or a reader.
enum Values<'a> {
    Memory(&'a [u32], usize),
    Spilled(Reader<'a>),
}

impl<'a> Values<'a> {
    fn of(set: SetRef<'a>) -> Values<'a> {
        match set {
            SetRef::Memory(s) => Values::Memory(s, 0),
            SetRef::Spilled(s) => Values::Spilled(s.reader()),
        }
    }

    fn remaining(&self) -> u64 {
        match self {
            Values::Memory(s, at) => (s.len() - at) as u64,
            Values::Spilled(r) => r.remaining(),
        }
    }

    fn next(&mut self) -> io::Result<Option<u32>> {
        match self {
            Values::Memory(s, at) => {
                let v = s.get(*at).copied();
                *at += 1;
                Ok(v)
            }
            Values::Spilled(r) => r.next(),
        }
    }
}

/// [`neardup_sketch::jaccard_at_least`] of two sets, either of which may be spilled: the same
/// result (the Jaccard when it reaches `threshold`, `None` below it), with the same early ends;
/// sets both in memory are compared by the SIMD kernels there.
pub fn jaccard_at_least(a: SetRef<'_>, b: SetRef<'_>, threshold: f64) -> io::Result<Option<f64>> {
    if let (SetRef::Memory(a), SetRef::Memory(b)) = (a, b) {
        return Ok(neardup_sketch::jaccard_at_least(a, b, threshold));
    }
    let (la, lb) = (a.len(), b.len());
    if la == 0 && lb == 0 {
        return Ok((1.0 >= threshold).then_some(1.0));
    }
    let (small, large) = (la.min(lb), la.max(lb));
    if (small as f64 / large as f64) < threshold {
        return Ok(None);
    }
    let needed = ((threshold * (la + lb) as f64) / (1.0 + threshold)).floor() as u64;
    let needed = needed.saturating_sub(1);
    let (mut a, mut b) = (Values::of(a), Values::of(b));
    let mut inter = 0u64;
    let (mut x, mut y) = (a.next()?, b.next()?);
    let mut steps = 0u32;
    while let (Some(p), Some(q)) = (x, y) {
        if p == q {
            inter += 1;
        }
        if p <= q {
            x = a.next()?;
        }
        if q <= p {
            y = b.next()?;
        }
        steps += 1;
        // The early end of the in-memory merge: once the intersection the threshold needs can no
        // longer be reached, the count so far gives a Jaccard below it.
        if needed > 0 && steps.is_multiple_of(4096) {
            let left = (a.remaining() + u64::from(x.is_some()))
                .min(b.remaining() + u64::from(y.is_some()));
            if inter + left < needed {
                break;
            }
        }
    }
    let j = inter as f64 / (la + lb - inter) as f64;
    Ok((j >= threshold).then_some(j))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values(set: &SpilledSet) -> Vec<u32> {
        let mut r = set.reader();
        let mut out = Vec::new();
        while let Some(v) = r.next().unwrap() {
            out.push(v);
        }
        out
    }

    fn hashes(n: usize, seed: u64) -> Vec<u64> {
        let mut s = seed;
        (0..n)
            .map(|_| {
                s = s
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                // Few distinct values, so that runs repeat one another's.
                (s >> 40) % (3 * n as u64 / 2)
            })
            .collect()
    }

    #[test]
    fn a_spilled_set_is_the_set_in_memory_with_one_run_or_many_passes() {
        let dir = tempfile::tempdir().unwrap();
        for n in [0, 1, 1000, RUN_VALUES + 7, (FAN_IN + 3) * RUN_VALUES / 16] {
            let h = hashes(n, n as u64 + 1);
            let mut want = Vec::new();
            neardup_sketch::fingerprint_set(&h, &mut want, &mut Default::default());
            let mut b = SetBuilder::new(Some(dir.path().into()));
            for piece in h.chunks(777) {
                b.add(piece).unwrap();
            }
            let got = b.finish().unwrap();
            assert_eq!(got.len, want.len() as u64, "{n}");
            assert_eq!(values(&got), want, "{n}");
        }
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    #[test]
    fn many_passes_merge_every_run() {
        // More runs than FAN_IN: small runs, made by adding few values per run.
        let dir = tempfile::tempdir().unwrap();
        let mut b = SetBuilder::new(Some(dir.path().into()));
        let mut want = Vec::new();
        for r in 0..(2 * FAN_IN as u64 + 5) {
            let h: Vec<u64> = (0..50).map(|i| r * 37 + i * 1001).collect();
            b.add(&h).unwrap();
            b.flush_run().unwrap();
            want.extend(h.iter().map(|&h| fingerprint(h)));
        }
        want.sort_unstable();
        want.dedup();
        let got = b.finish().unwrap();
        assert_eq!(values(&got), want);
    }

    #[test]
    fn streamed_jaccard_is_the_in_memory_jaccard() {
        let dir = tempfile::tempdir().unwrap();
        let spill = |set: &[u32]| {
            // Fingerprints of hashes whose halves fold to the values themselves.
            let h: Vec<u64> = set.iter().map(|&v| u64::from(v)).collect();
            let mut b = SetBuilder::new(Some(dir.path().into()));
            b.add(&h).unwrap();
            b.finish().unwrap()
        };
        let a: Vec<u32> = (0..50_000).map(|i| i * 3).collect();
        let cases: Vec<Vec<u32>> = vec![
            a.clone(),
            (0..50_000)
                .map(|i| i * 3 + u32::from(i % 10 == 0))
                .collect(),
            (0..48_000).map(|i| i * 3).collect(),
            (0..50_000).map(|i| i * 3 + u32::from(i % 2 == 0)).collect(),
            (0..50_000).map(|i| i * 5).collect(),
            Vec::new(),
        ];
        let sa = spill(&a);
        for b in &cases {
            let sb = spill(b);
            for t in [0.0, 0.5, 0.8, 0.9, 0.95, 1.0] {
                let want = neardup_sketch::jaccard_at_least(&a, b, t);
                for (x, y) in [
                    (SetRef::Spilled(&sa), SetRef::Memory(b)),
                    (SetRef::Memory(&a), SetRef::Spilled(&sb)),
                    (SetRef::Spilled(&sa), SetRef::Spilled(&sb)),
                ] {
                    assert_eq!(jaccard_at_least(x, y, t).unwrap(), want, "{t}");
                }
            }
        }
        let empty = spill(&[]);
        assert_eq!(
            jaccard_at_least(SetRef::Spilled(&empty), SetRef::Memory(&[]), 1.0).unwrap(),
            Some(1.0)
        );
    }
}
