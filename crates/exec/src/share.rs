//! Sharing the blocks of a whole-file chunk among threads.
//!
//! A compressed file can only be decompressed front to back, so it is one chunk read by one
//! thread; but its blocks are independent once read. The reading thread pushes each block (as a
//! job of the stage's own type) into a [`BlockQueue`], and the threads that have no chunk of
//! their own run the queued jobs. The queue is bounded: when it is full, the reader runs the
//! oldest queued job itself before going on, so reading never runs far ahead of the work.
//!
//! Jobs are taken in the order they were queued. A stage whose job `n` of a chunk needs a result
//! of job `n - 1` (stage 2 needs the row number a block starts at) may wait for it inside the job:
//! the earliest job of a chunk not yet run is always queued or running, never waiting behind a
//! later one.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::Duration;

/// A bounded queue of jobs that any thread of a stage may run; see the module docs.
pub struct BlockQueue<J> {
    state: Mutex<State<J>>,
    changed: Condvar,
    capacity: usize,
}

struct State<J> {
    queue: VecDeque<J>,
    /// Chunks not yet finished by the threads that claim them (or not claimed yet): while any
    /// remain, a thread without a chunk may still be handed jobs.
    unfinished: usize,
}

/// How often a waiting thread looks at the stage's stop flag.
const STOP_POLL: Duration = Duration::from_millis(20);

impl<J> BlockQueue<J> {
    /// A queue for a stage of `chunks` chunks on `threads` threads (`2 × threads` jobs at most).
    pub fn new(chunks: usize, threads: usize) -> BlockQueue<J> {
        BlockQueue {
            state: Mutex::new(State {
                queue: VecDeque::new(),
                unfinished: chunks,
            }),
            changed: Condvar::new(),
            capacity: 2 * threads.max(1),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State<J>> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queues `job`; when the queue is full, the oldest queued job makes room and is returned
    /// for the caller to run.
    #[must_use = "a job returned by push must be run"]
    pub fn push(&self, job: J) -> Option<J> {
        let mut state = self.lock();
        if state.queue.len() < self.capacity {
            state.queue.push_back(job);
            drop(state);
            self.changed.notify_one();
            return None;
        }
        let oldest = state.queue.pop_front();
        state.queue.push_back(job);
        oldest
    }

    /// The oldest queued job, if any, without waiting.
    pub fn try_pop(&self) -> Option<J> {
        self.lock().queue.pop_front()
    }

    /// Marks one chunk finished (call it once per chunk, whoever read it).
    pub fn chunk_finished(&self) {
        let mut state = self.lock();
        state.unfinished = state.unfinished.saturating_sub(1);
        drop(state);
        self.changed.notify_all();
    }

    /// Runs queued jobs until every chunk is finished, or `stop` is set.
    pub fn help(&self, stop: &AtomicBool, mut run: impl FnMut(J)) {
        loop {
            let job = {
                let mut state = self.lock();
                loop {
                    if let Some(job) = state.queue.pop_front() {
                        break Some(job);
                    }
                    if state.unfinished == 0 || stop.load(Ordering::Relaxed) {
                        break None;
                    }
                    // Timed, so that a stop set while chunks are left unclaimed is seen.
                    state = self
                        .changed
                        .wait_timeout(state, STOP_POLL)
                        .unwrap_or_else(|e| e.into_inner())
                        .0;
                }
            };
            match job {
                Some(job) => run(job),
                None => return,
            }
        }
    }
}

/// A value per job of a chunk that the next job waits for (stage 2: the row each block starts
/// at, known once the block before it is parsed).
pub struct Relay {
    values: Mutex<Vec<Option<u64>>>,
    known: Condvar,
}

impl Relay {
    /// A relay whose first value (job 0's) is `first`.
    pub fn new(first: u64) -> Relay {
        Relay {
            values: Mutex::new(vec![Some(first)]),
            known: Condvar::new(),
        }
    }

    /// Publishes the value of job `n`.
    pub fn set(&self, n: usize, value: u64) {
        let mut values = self.values.lock().unwrap_or_else(|e| e.into_inner());
        if values.len() <= n {
            values.resize(n + 1, None);
        }
        values[n] = Some(value);
        drop(values);
        self.known.notify_all();
    }

    /// The value of job `n`, waiting until it is published; `None` if `stop` is set first.
    pub fn wait(&self, n: usize, stop: &AtomicBool) -> Option<u64> {
        let mut values = self.values.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if let Some(&Some(v)) = values.get(n) {
                return Some(v);
            }
            if stop.load(Ordering::Relaxed) {
                return None;
            }
            values = self
                .known
                .wait_timeout(values, STOP_POLL)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    /// The value of job `n` if it is published.
    pub fn get(&self, n: usize) -> Option<u64> {
        let values = self.values.lock().unwrap_or_else(|e| e.into_inner());
        values.get(n).copied().flatten()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_queue_hands_back_its_oldest_job() {
        let q = BlockQueue::new(1, 1);
        assert_eq!(q.push(1), None);
        assert_eq!(q.push(2), None);
        assert_eq!(q.push(3), Some(1));
        assert_eq!(q.try_pop(), Some(2));
        assert_eq!(q.try_pop(), Some(3));
        assert_eq!(q.try_pop(), None);
    }

    #[test]
    fn helpers_run_every_job_and_leave_when_the_chunks_are_done() {
        let q = BlockQueue::new(1, 3);
        let stop = AtomicBool::new(false);
        let ran = Mutex::new(Vec::new());
        std::thread::scope(|s| {
            for _ in 0..3 {
                s.spawn(|| q.help(&stop, |j| ran.lock().unwrap().push(j)));
            }
            for j in 0..100 {
                if let Some(oldest) = q.push(j) {
                    ran.lock().unwrap().push(oldest);
                }
            }
            while let Some(j) = q.try_pop() {
                ran.lock().unwrap().push(j);
            }
            q.chunk_finished();
        });
        let mut ran = ran.into_inner().unwrap();
        ran.sort_unstable();
        assert_eq!(ran, (0..100).collect::<Vec<_>>());
    }

    #[test]
    fn a_stop_releases_waiting_threads() {
        let q: BlockQueue<u32> = BlockQueue::new(5, 2);
        let relay = Relay::new(7);
        let stop = AtomicBool::new(false);
        std::thread::scope(|s| {
            let helper = s.spawn(|| q.help(&stop, |_| {}));
            let waiter = s.spawn(|| relay.wait(3, &stop));
            assert_eq!(relay.wait(0, &stop), Some(7));
            relay.set(1, 9);
            assert_eq!(relay.get(1), Some(9));
            stop.store(true, Ordering::Relaxed);
            helper.join().unwrap();
            assert_eq!(waiter.join().unwrap(), None);
        });
    }
}
