//! The ordered parallel chunk executor.
//!
//! Every streaming step of neardup has the same shape: a list of jobs (chunks of input files)
//! is read block by block by worker threads, each block is prepared on a worker (sketched,
//! signed, parsed), and one consumer on the calling thread takes the prepared blocks **in job
//! order, block order** — whatever the thread count, so everything downstream is deterministic.
//!
//! - Workers claim jobs with a counter, in order, at most `window` jobs ahead of the consumer,
//!   which bounds the memory of prepared blocks waiting for their turn; under a memory budget
//!   ([`ExecOptions::block_memory`]) the blocks read and not yet consumed, with what preparing
//!   adds to them (foreseen when a block is read, counted once it is prepared), hold at most that
//!   many bytes, whatever the thread count and however large a job is: a worker that would pass
//!   it waits (preparing queued blocks meanwhile). Only one
//!   block goes past it at a time, when no other is charged or when it is of the job the
//!   consumer is at and none of that job's blocks are in flight, so the run always moves on.
//! - A job only one thread can read (a compressed file is one whole-file chunk) has its blocks
//!   shared: the reading thread queues them in a bounded [`BlockQueue`] and every thread without
//!   a job of its own (or waiting for the window) prepares queued blocks.
//! - A step whose blocks need a running position (stage 2 needs the table row each block starts
//!   at) sets [`ChunkWork::RELAYS_POSITION`]: a shared block is first counted ([`ChunkWork::advance`],
//!   a cheap pass), the count is relayed to the next block ([`Relay`]), then the block is prepared.
//! - Read errors are events in the same order as blocks; the job's reader decides whether more
//!   blocks follow one.
//! - The consumer stops the run by returning an error; a caller stops it by its cancel predicate
//!   (polled between blocks and at least every 50 ms by the consumer's thread).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use crate::share::{BlockQueue, Relay};

/// One step's work: how a job is read and how each block is prepared. Shared by all threads.
pub trait ChunkWork: Sync {
    /// A unit of reading work (usually a chunk of an input file).
    type Job: Sync;
    /// What reading a job yields, in order.
    type Block: Send;
    /// A read error, delivered to the consumer in order among the blocks.
    type ReadError: Send;
    /// Per-thread state (scratch buffers that outlive one block).
    type Worker;
    /// A prepared block.
    type Out: Send;

    /// Whether [`ChunkWork::prepare`] needs the position its block starts at.
    const RELAYS_POSITION: bool = false;

    /// A new worker's state.
    fn worker(&self) -> Self::Worker;

    /// Reads `job` block by block (on the thread that claimed it).
    fn read(&self, job: &Self::Job) -> impl Iterator<Item = Result<Self::Block, Self::ReadError>>;

    /// Whether `job`'s blocks are prepared by any free thread instead of its reader only (a job
    /// that cannot be split further, such as a compressed file).
    fn shares_blocks(&self, job: &Self::Job) -> bool;

    /// The position `job`'s first block starts at ([`ChunkWork::RELAYS_POSITION`] only).
    fn first_position(&self, _job: &Self::Job) -> u64 {
        0
    }

    /// The bytes `block` holds, and at most what preparing it will add (signatures, keys,
    /// shingle sets): charged against [`ExecOptions::block_memory`] from when it is read until
    /// it is prepared ([`ChunkWork::out_bytes`]) or the consumer has taken it (0: not counted).
    fn block_bytes(&self, _block: &Self::Block) -> u64 {
        0
    }

    /// The bytes a prepared block holds in all (what is left of its block, and what preparing
    /// added): once it is prepared, charged instead of its [`ChunkWork::block_bytes`] until the
    /// consumer has taken it; `None`: the charge made when it was read stays.
    fn out_bytes(&self, _out: &Self::Out) -> Option<u64> {
        None
    }

    /// How far `block` moves the position, without preparing it ([`ChunkWork::RELAYS_POSITION`]
    /// only; called for shared blocks, so that the next block can start before this one is done).
    fn advance(&self, _block: &Self::Block) -> u64 {
        0
    }

    /// Prepares one block. `position` is where the block starts ([`ChunkWork::RELAYS_POSITION`];
    /// otherwise 0); returns the output and the position after the block.
    fn prepare(
        &self,
        worker: &mut Self::Worker,
        job: &Self::Job,
        block: Self::Block,
        position: u64,
    ) -> (Self::Out, u64);
}

/// What the consumer is handed, in job order and, within a job, in read order.
#[derive(Debug)]
pub enum Event<O, E> {
    /// A prepared block of job `job`.
    Block {
        /// The job's index.
        job: usize,
        /// The prepared block.
        out: O,
    },
    /// A read error of job `job`, after the blocks read before it.
    ReadError {
        /// The job's index.
        job: usize,
        /// The error.
        error: E,
    },
    /// Job `job` has no more events.
    JobEnd {
        /// The job's index.
        job: usize,
    },
}

/// How a run ended when the consumer did not fail it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Completion {
    /// Every job was read and consumed.
    Finished,
    /// The cancel predicate became true; the consumer saw a prefix of the events.
    Cancelled,
}

/// How the executor runs.
#[derive(Clone, Copy, Debug)]
pub struct ExecOptions {
    /// Worker threads (at least 1).
    pub threads: usize,
    /// Jobs a worker may claim ahead of the consumer (0: twice the threads).
    pub window: usize,
    /// Bytes of blocks ([`ChunkWork::block_bytes`]) read and not yet consumed at most (a block
    /// larger than that alone, or one of the job the consumer is at, still goes); `None`: no
    /// bound beyond the window.
    pub block_memory: Option<u64>,
}

impl ExecOptions {
    /// `threads` workers (0: one per available core) and the default window.
    pub fn threads(threads: usize) -> ExecOptions {
        let threads = if threads == 0 {
            std::thread::available_parallelism().map_or(1, |n| n.get())
        } else {
            threads
        };
        ExecOptions {
            threads,
            window: 0,
            block_memory: None,
        }
    }
}

/// How often a waiting consumer or worker looks at the stop flags.
const POLL: Duration = Duration::from_millis(20);

/// What a worker hands the consumer about a job: a prepared block, a read error, or the job's
/// end.
enum JobOutput<O, E> {
    Block(O),
    Error(E),
    End,
}

/// A [`JobOutput`] with its place in the order: (job, its number within the job, the output,
/// the bytes charged for it against the block memory).
type Numbered<O, E> = (usize, usize, JobOutput<O, E>, u64);

/// Outputs received ahead of the consumer's turn, by (job, number within the job), with the
/// bytes charged for each.
type Pending<O, E> = BTreeMap<(usize, usize), (JobOutput<O, E>, u64)>;

/// A shared block waiting for any thread to prepare it.
struct Queued<B> {
    block: B,
    job: usize,
    /// Its event number within the job.
    seq: usize,
    /// Its number among the job's blocks (the relay's index).
    nth_block: usize,
    relay: Option<Arc<Relay>>,
    /// Bytes charged for it when it was read.
    charged: u64,
}

/// The bytes of blocks in flight, against [`ExecOptions::block_memory`].
struct BlockMemory {
    limit: u64,
    used: Mutex<Charged>,
    freed: Condvar,
}

/// What is charged against the block memory: in all, and per job (a job's blocks in flight).
#[derive(Default)]
struct Charged {
    total: u64,
    by_job: BTreeMap<usize, u64>,
}

impl Charged {
    fn add(&mut self, job: usize, bytes: u64) {
        if bytes > 0 {
            self.total += bytes;
            *self.by_job.entry(job).or_default() += bytes;
        }
    }

    /// Replaces `was` charged for a block of `job` by `now`.
    fn recharge(&mut self, job: usize, was: u64, now: u64) {
        self.add(job, now);
        self.release(job, was);
    }

    fn release(&mut self, job: usize, bytes: u64) {
        if bytes == 0 {
            return;
        }
        self.total -= bytes;
        if let Some(held) = self.by_job.get_mut(&job) {
            *held -= bytes;
            if *held == 0 {
                self.by_job.remove(&job);
            }
        }
    }
}

struct Run<'a, W: ChunkWork> {
    work: &'a W,
    jobs: &'a [W::Job],
    threads: usize,
    window: usize,
    next_job: AtomicUsize,
    /// Jobs fully consumed.
    consumed: Mutex<usize>,
    consumed_changed: Condvar,
    stop: AtomicBool,
    cancelled: &'a (dyn Fn() -> bool + Sync),
    queue: BlockQueue<Queued<W::Block>>,
    memory: Option<BlockMemory>,
}

impl<W: ChunkWork> Run<'_, W> {
    fn should_stop(&self) -> bool {
        self.stop.load(Ordering::Relaxed) || (self.cancelled)()
    }

    fn stop_all(&self) {
        self.stop.store(true, Ordering::Relaxed);
        self.consumed_changed.notify_all();
    }

    /// Charges `block` of job `i` against the block memory, waiting while it would pass the
    /// bound (preparing queued blocks meanwhile: the consumer may wait for them). A block goes
    /// past the bound only when nothing else is charged, or when it is of the job the consumer
    /// is at and none of that job's blocks are in flight: otherwise the consumer is bound to
    /// take one of them and free its bytes, so waiting cannot stall the run, and a job read
    /// faster than it is consumed holds no more than the bound either. Returns the bytes
    /// charged, or `None` when the run stopped.
    fn charge(
        &self,
        i: usize,
        block: &W::Block,
        worker: &mut W::Worker,
        tx: &crossbeam_channel::Sender<Numbered<W::Out, W::ReadError>>,
    ) -> Option<u64> {
        let Some(memory) = &self.memory else {
            return Some(0);
        };
        let bytes = self.work.block_bytes(block);
        loop {
            if self.should_stop() {
                return None;
            }
            let at_head = i <= *self.consumed.lock().unwrap_or_else(|e| e.into_inner());
            let mut used = memory.used.lock().unwrap_or_else(|e| e.into_inner());
            let head_idle = at_head && !used.by_job.contains_key(&i);
            if head_idle || used.total == 0 || used.total + bytes <= memory.limit {
                used.add(i, bytes);
                return Some(bytes);
            }
            if let Some(queued) = self.queue.try_pop() {
                drop(used);
                self.run_queued(queued, worker, tx);
                continue;
            }
            let _ = memory
                .freed
                .wait_timeout(used, POLL)
                .unwrap_or_else(|e| e.into_inner());
        }
    }

    /// Charges a prepared block of job `i` what it holds ([`ChunkWork::out_bytes`]) instead of
    /// the `charged` bytes its block was charged when read; returns what it is charged now.
    fn recharge(&self, i: usize, charged: u64, out: &W::Out) -> u64 {
        let Some(memory) = &self.memory else {
            return charged;
        };
        let Some(bytes) = self.work.out_bytes(out) else {
            return charged;
        };
        memory
            .used
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .recharge(i, charged, bytes);
        if bytes < charged {
            memory.freed.notify_all();
        }
        bytes
    }

    fn run_queued(
        &self,
        queued: Queued<W::Block>,
        worker: &mut W::Worker,
        tx: &crossbeam_channel::Sender<Numbered<W::Out, W::ReadError>>,
    ) {
        let Queued {
            block,
            job,
            seq,
            nth_block,
            relay,
            charged,
        } = queued;
        let position = match &relay {
            Some(relay) => {
                let advance = self.work.advance(&block);
                let Some(first) = relay.wait(nth_block, &self.stop) else {
                    return;
                };
                relay.set(nth_block + 1, first + advance);
                first
            }
            None => 0,
        };
        let (out, _end) = self.work.prepare(worker, &self.jobs[job], block, position);
        let charged = self.recharge(job, charged, &out);
        // Fails only when the consumer has stopped.
        let _ = tx.send((job, seq, JobOutput::Block(out), charged));
    }

    /// Waits until job `i` is within the window of the consumer, preparing queued blocks
    /// meanwhile (they may be the very blocks the consumer waits for). False when stopped.
    fn wait_for_window(
        &self,
        i: usize,
        worker: &mut W::Worker,
        tx: &crossbeam_channel::Sender<Numbered<W::Out, W::ReadError>>,
    ) -> bool {
        loop {
            if self.should_stop() {
                return false;
            }
            let consumed = self.consumed.lock().unwrap_or_else(|e| e.into_inner());
            if i < *consumed + self.window {
                return true;
            }
            if let Some(queued) = self.queue.try_pop() {
                drop(consumed);
                self.run_queued(queued, worker, tx);
                continue;
            }
            let _ = self
                .consumed_changed
                .wait_timeout(consumed, POLL)
                .unwrap_or_else(|e| e.into_inner());
        }
    }

    /// Reads and prepares job `i` on this thread alone.
    fn read_alone(
        &self,
        i: usize,
        worker: &mut W::Worker,
        tx: &crossbeam_channel::Sender<Numbered<W::Out, W::ReadError>>,
    ) {
        let job = &self.jobs[i];
        let mut position = if W::RELAYS_POSITION {
            self.work.first_position(job)
        } else {
            0
        };
        let mut seq = 0;
        for item in self.work.read(job) {
            if self.should_stop() {
                return;
            }
            let (msg, charged) = match item {
                Ok(block) => {
                    let Some(charged) = self.charge(i, &block, worker, tx) else {
                        return;
                    };
                    let (out, end) = self.work.prepare(worker, job, block, position);
                    if W::RELAYS_POSITION {
                        position = end;
                    }
                    let charged = self.recharge(i, charged, &out);
                    (JobOutput::Block(out), charged)
                }
                Err(e) => (JobOutput::Error(e), 0),
            };
            if tx.send((i, seq, msg, charged)).is_err() {
                return;
            }
            seq += 1;
        }
        let _ = tx.send((i, seq, JobOutput::End, 0));
    }

    /// Reads job `i` on this thread and queues its blocks for every free thread.
    fn read_shared(
        &self,
        i: usize,
        worker: &mut W::Worker,
        tx: &crossbeam_channel::Sender<Numbered<W::Out, W::ReadError>>,
    ) {
        let job = &self.jobs[i];
        let relay = W::RELAYS_POSITION.then(|| Arc::new(Relay::new(self.work.first_position(job))));
        let (mut seq, mut nth_block) = (0, 0);
        for item in self.work.read(job) {
            if self.should_stop() {
                return;
            }
            match item {
                Ok(block) => {
                    let Some(charged) = self.charge(i, &block, worker, tx) else {
                        return;
                    };
                    let queued = Queued {
                        block,
                        job: i,
                        seq,
                        nth_block,
                        relay: relay.clone(),
                        charged,
                    };
                    nth_block += 1;
                    if let Some(oldest) = self.queue.push(queued) {
                        self.run_queued(oldest, worker, tx);
                    }
                }
                Err(e) => {
                    if tx.send((i, seq, JobOutput::Error(e), 0)).is_err() {
                        return;
                    }
                }
            }
            seq += 1;
        }
        // The end goes behind every block in the consumer's order, whoever prepares them.
        let _ = tx.send((i, seq, JobOutput::End, 0));
    }

    fn worker_loop(&self, tx: crossbeam_channel::Sender<Numbered<W::Out, W::ReadError>>) {
        let mut worker = self.work.worker();
        loop {
            let i = self.next_job.fetch_add(1, Ordering::Relaxed);
            if i >= self.jobs.len() {
                // No job left to claim: prepare other threads' shared blocks.
                self.queue.help(&self.stop, |queued| {
                    self.run_queued(queued, &mut worker, &tx)
                });
                return;
            }
            if !self.wait_for_window(i, &mut worker, &tx) {
                return;
            }
            if self.threads > 1 && self.work.shares_blocks(&self.jobs[i]) {
                self.read_shared(i, &mut worker, &tx);
            } else {
                self.read_alone(i, &mut worker, &tx);
            }
            self.queue.chunk_finished();
        }
    }
}

/// Runs `work` over `jobs` with `options.threads` workers and hands every event to `consume`, in
/// order, on the calling thread. Returns the consumer's first error (the run stops at once), or
/// how the run ended. `cancelled` is polled between blocks; once it is true the run stops
/// promptly with [`Completion::Cancelled`].
pub fn run_ordered<W: ChunkWork, C>(
    work: &W,
    jobs: &[W::Job],
    options: ExecOptions,
    cancelled: &(dyn Fn() -> bool + Sync),
    mut consume: impl FnMut(Event<W::Out, W::ReadError>) -> Result<(), C>,
) -> Result<Completion, C> {
    let threads = options.threads.max(1);
    let window = if options.window == 0 {
        2 * threads
    } else {
        options.window
    };
    let run = Run {
        work,
        jobs,
        threads,
        window,
        next_job: AtomicUsize::new(0),
        consumed: Mutex::new(0),
        consumed_changed: Condvar::new(),
        stop: AtomicBool::new(false),
        cancelled,
        queue: BlockQueue::new(jobs.len(), threads),
        memory: options.block_memory.map(|limit| BlockMemory {
            limit,
            used: Mutex::new(Charged::default()),
            freed: Condvar::new(),
        }),
    };
    let (tx, rx) = crossbeam_channel::bounded::<Numbered<W::Out, W::ReadError>>(window * 4);
    let mut failure: Option<C> = None;
    let mut next = (0usize, 0usize);
    std::thread::scope(|scope| {
        for _ in 0..threads {
            let tx = tx.clone();
            let run = &run;
            scope.spawn(move || run.worker_loop(tx));
        }
        drop(tx);
        let mut pending: Pending<W::Out, W::ReadError> = BTreeMap::new();
        'receive: loop {
            if (run.cancelled)() {
                break;
            }
            let (job, seq, msg, charged) = match rx.recv_timeout(POLL) {
                Ok(sent) => sent,
                Err(crossbeam_channel::RecvTimeoutError::Timeout) => continue,
                Err(crossbeam_channel::RecvTimeoutError::Disconnected) => break,
            };
            pending.insert((job, seq), (msg, charged));
            while let Some((msg, charged)) = pending.remove(&next) {
                let (job, seq) = next;
                let consumed = match msg {
                    JobOutput::Block(out) => consume(Event::Block { job, out }),
                    JobOutput::Error(error) => consume(Event::ReadError { job, error }),
                    JobOutput::End => {
                        next = (job + 1, 0);
                        *run.consumed.lock().unwrap_or_else(|e| e.into_inner()) = job + 1;
                        run.consumed_changed.notify_all();
                        if let Some(memory) = &run.memory {
                            // The next job's blocks no longer wait.
                            memory.freed.notify_all();
                        }
                        consume(Event::JobEnd { job })
                    }
                };
                if let Some(memory) = run.memory.as_ref().filter(|_| charged > 0) {
                    memory
                        .used
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .release(job, charged);
                    memory.freed.notify_all();
                }
                if let Err(e) = consumed {
                    failure = Some(e);
                    break 'receive;
                }
                if next == (job, seq) {
                    next = (job, seq + 1);
                }
            }
        }
        run.stop_all();
        drop(rx);
    });
    if let Some(e) = failure {
        return Err(e);
    }
    if next.0 == jobs.len() {
        Ok(Completion::Finished)
    } else {
        Ok(Completion::Cancelled)
    }
}
