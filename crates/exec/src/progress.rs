//! Live counters a caller can watch while a stage runs (progress bars, log lines).

use std::sync::atomic::{AtomicU64, Ordering};

/// Counters updated by a stage's workers as blocks finish; read them from any thread.
#[derive(Debug, Default)]
pub struct Progress {
    bytes: AtomicU64,
    samples: AtomicU64,
    total_bytes: AtomicU64,
}

impl Progress {
    /// Sets the expected input size: the inputs' bytes on disk, the units [`Progress::add`] counts
    /// in (a compressed file or a Parquet file decodes to more, but its blocks are counted by the
    /// bytes of the file they stand for, so the count ends at the total and never passes it).
    pub fn set_total(&self, bytes: u64) {
        self.total_bytes.store(bytes, Ordering::Relaxed);
    }
    /// The expected input size, 0 when unknown.
    pub fn total(&self) -> u64 {
        self.total_bytes.load(Ordering::Relaxed)
    }
    /// Records a finished block: the bytes on disk it stands for, and its samples.
    pub fn add(&self, bytes: u64, samples: u64) {
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
        self.samples.fetch_add(samples, Ordering::Relaxed);
    }
    /// Starts the counts again from zero, for a stage that reads its inputs a second time.
    pub fn restart(&self) {
        self.bytes.store(0, Ordering::Relaxed);
        self.samples.store(0, Ordering::Relaxed);
    }
    /// Input bytes on disk done so far.
    pub fn bytes(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }
    /// Samples done so far.
    pub fn samples(&self) -> u64 {
        self.samples.load(Ordering::Relaxed)
    }
}
