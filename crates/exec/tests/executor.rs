//! The executor hands every event to the consumer in job and read order, whatever the threads,
//! the sharing of blocks and the timing; relayed positions are the running sums; a failing
//! consumer and a cancel stop the run.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

use neardup_exec::{ChunkWork, Completion, Event, ExecOptions, run_ordered};
use proptest::prelude::*;

#[derive(Clone, Debug)]
struct Job {
    /// Each item: a block that moves the position by n, or a read error.
    items: Vec<Result<u64, u32>>,
    shared: bool,
    first: u64,
}

struct Work<const RELAY: bool> {
    /// Spins per block, to vary the interleaving.
    spin: u32,
    prepared: AtomicUsize,
    /// Bytes of blocks prepared and not yet consumed (a block of n weighs n, and what preparing
    /// it made n more), and their most.
    in_flight: AtomicU64,
    most_in_flight: AtomicU64,
}

impl<const RELAY: bool> Work<RELAY> {
    fn new(spin: u32) -> Self {
        Work {
            spin,
            prepared: AtomicUsize::new(0),
            in_flight: AtomicU64::new(0),
            most_in_flight: AtomicU64::new(0),
        }
    }
}

impl<const RELAY: bool> ChunkWork for Work<RELAY> {
    type Job = Job;
    type Block = u64;
    type ReadError = u32;
    type Worker = ();
    type Out = (u64, u64);
    const RELAYS_POSITION: bool = RELAY;

    fn worker(&self) {}

    fn read(&self, job: &Job) -> impl Iterator<Item = Result<u64, u32>> {
        job.items.clone().into_iter()
    }

    fn shares_blocks(&self, job: &Job) -> bool {
        job.shared
    }

    fn first_position(&self, job: &Job) -> u64 {
        job.first
    }

    fn advance(&self, block: &u64) -> u64 {
        *block
    }

    /// A block and what preparing it makes.
    fn block_bytes(&self, block: &u64) -> u64 {
        2 * *block
    }

    fn out_bytes(&self, out: &(u64, u64)) -> Option<u64> {
        Some(2 * out.1)
    }

    fn prepare(&self, _: &mut (), _: &Job, block: u64, position: u64) -> ((u64, u64), u64) {
        for _ in 0..(block as u32 % 7) * self.spin {
            std::hint::spin_loop();
        }
        if block.is_multiple_of(5) {
            std::thread::yield_now();
        }
        self.prepared.fetch_add(1, Ordering::Relaxed);
        let now = self.in_flight.fetch_add(2 * block, Ordering::SeqCst) + 2 * block;
        self.most_in_flight.fetch_max(now, Ordering::SeqCst);
        ((position, block), position + block)
    }
}

#[derive(Debug, PartialEq, Eq)]
enum Seen {
    Block(usize, u64, u64),
    Error(usize, u32),
    End(usize),
}

fn expected(jobs: &[Job], relay: bool) -> Vec<Seen> {
    let mut out = Vec::new();
    for (j, job) in jobs.iter().enumerate() {
        let mut pos = job.first;
        for item in &job.items {
            match item {
                Ok(n) => {
                    out.push(Seen::Block(j, if relay { pos } else { 0 }, *n));
                    pos += n;
                }
                Err(e) => out.push(Seen::Error(j, *e)),
            }
        }
        out.push(Seen::End(j));
    }
    out
}

fn record(event: Event<(u64, u64), u32>, seen: &mut Vec<Seen>) {
    seen.push(match event {
        Event::Block { job, out } => Seen::Block(job, out.0, out.1),
        Event::ReadError { job, error } => Seen::Error(job, error),
        Event::JobEnd { job } => Seen::End(job),
    });
}

fn run<const RELAY: bool>(jobs: &[Job], threads: usize, window: usize) -> Vec<Seen> {
    run_within::<RELAY>(jobs, threads, window, None).0
}

/// [`run`] with the blocks in flight bounded to `block_memory` bytes; also returns the most
/// bytes of blocks that were prepared and not yet consumed at once.
fn run_within<const RELAY: bool>(
    jobs: &[Job],
    threads: usize,
    window: usize,
    block_memory: Option<u64>,
) -> (Vec<Seen>, u64) {
    let work = Work::<RELAY>::new(50);
    let mut seen = Vec::new();
    let done = run_ordered(
        &work,
        jobs,
        ExecOptions {
            threads,
            window,
            block_memory,
        },
        &|| false,
        |e| {
            if let Event::Block { out, .. } = &e {
                work.in_flight.fetch_sub(2 * out.1, Ordering::SeqCst);
            }
            record(e, &mut seen);
            Ok::<(), ()>(())
        },
    )
    .unwrap();
    assert_eq!(done, Completion::Finished);
    (seen, work.most_in_flight.load(Ordering::SeqCst))
}

fn jobs_strategy() -> impl Strategy<Value = Vec<Job>> {
    let item = prop_oneof![9 => (0u64..40).prop_map(Ok), 1 => (0u32..1000).prop_map(Err)];
    let job = (
        prop::collection::vec(item, 0..30),
        any::<bool>(),
        0u64..1_000_000,
    )
        .prop_map(|(items, shared, first)| Job {
            items,
            shared,
            first,
        });
    prop::collection::vec(job, 0..12)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn events_arrive_in_order_for_any_threads_and_sharing(
        jobs in jobs_strategy(),
        threads in 1usize..6,
        window in 0usize..4,
    ) {
        prop_assert_eq!(run::<true>(&jobs, threads, window), expected(&jobs, true));
        prop_assert_eq!(run::<false>(&jobs, threads, window), expected(&jobs, false));
    }

    #[test]
    fn a_memory_bound_keeps_the_order_and_never_stalls(
        jobs in jobs_strategy(),
        threads in 1usize..6,
        window in 0usize..4,
        block_memory in 0u64..100,
    ) {
        let within = Some(block_memory);
        prop_assert_eq!(run_within::<true>(&jobs, threads, window, within).0, expected(&jobs, true));
        prop_assert_eq!(run_within::<false>(&jobs, threads, window, within).0, expected(&jobs, false));
    }
}

/// Under a memory bound, the blocks prepared and not yet consumed, with what preparing made of
/// them, weigh at most the bound, plus one block of the job the consumer is at; however many
/// threads and jobs ahead there are, and however fast one job is read.
#[test]
fn a_memory_bound_holds_the_blocks_in_flight_whatever_the_threads() {
    // 40 jobs of 8 blocks of 10 bytes (20 once prepared): 160 bytes a job.
    let jobs: Vec<Job> = (0..40)
        .map(|j| Job {
            items: (0..8).map(|_| Ok(10)).collect(),
            shared: j % 2 == 0,
            first: 0,
        })
        .collect();
    for threads in [1, 2, 4, 7] {
        let (seen, most) = run_within::<true>(&jobs, threads, 0, Some(100));
        assert_eq!(seen, expected(&jobs, true));
        assert!(
            most <= 100 + 20,
            "{threads} threads: {most} bytes in flight"
        );
    }
    // One long job, read faster than it is consumed, is held to the bound as well.
    let long = [Job {
        items: (0..400).map(|_| Ok(10)).collect(),
        shared: false,
        first: 0,
    }];
    for threads in [1, 3] {
        let (seen, most) = run_within::<true>(&long, threads, 0, Some(100));
        assert_eq!(seen, expected(&long, true));
        assert!(
            most <= 100 + 20 + 10 * threads as u64,
            "{most} bytes in flight"
        );
    }
}

#[test]
fn one_long_shared_job_among_many_small_ones_with_a_tight_window() {
    // A whole-file job of 5,000 blocks is read by one thread while every other thread is either
    // waiting for the window or helping: nothing may deadlock, and order holds.
    let mut jobs = vec![Job {
        items: (0..5000).map(|i| Ok(i % 13)).collect(),
        shared: true,
        first: 7,
    }];
    for j in 0..20 {
        jobs.push(Job {
            items: (0..j % 4).map(|i| Ok(i + 1)).collect(),
            shared: j % 3 == 0,
            first: 0,
        });
    }
    for threads in [2, 3, 4] {
        assert_eq!(run::<true>(&jobs, threads, 1), expected(&jobs, true));
    }
}

#[test]
fn a_failing_consumer_stops_the_run_with_its_error() {
    let jobs: Vec<Job> = (0..200)
        .map(|_| Job {
            items: (0..50).map(Ok).collect(),
            shared: false,
            first: 0,
        })
        .collect();
    let work = Work::<true>::new(0);
    let mut events = 0;
    let r = run_ordered(&work, &jobs, ExecOptions::threads(3), &|| false, |_| {
        events += 1;
        if events == 100 { Err("enough") } else { Ok(()) }
    });
    assert_eq!(r, Err("enough"));
    assert_eq!(events, 100);
    // Workers stopped long before preparing everything.
    assert!(work.prepared.load(Ordering::Relaxed) < 200 * 50);
}

#[test]
fn a_cancel_ends_the_run_promptly_after_a_prefix() {
    let jobs: Vec<Job> = (0..400)
        .map(|j| Job {
            items: (0..40).map(Ok).collect(),
            shared: j % 2 == 0,
            first: 0,
        })
        .collect();
    let work = Work::<true>::new(200);
    let cancel = AtomicBool::new(false);
    let mut seen = Vec::new();
    let r = run_ordered(
        &work,
        &jobs,
        ExecOptions::threads(2),
        &|| cancel.load(Ordering::Relaxed),
        |e| {
            record(e, &mut seen);
            if seen.len() == 500 {
                cancel.store(true, Ordering::Relaxed);
            }
            Ok::<(), ()>(())
        },
    );
    assert_eq!(r, Ok(Completion::Cancelled));
    let all = expected(&jobs, true);
    assert!(seen.len() >= 500 && seen.len() < all.len());
    assert_eq!(seen[..], all[..seen.len()]);
}
