//! How neardup runs its streaming steps on many threads.
//!
//! This crate owns:
//! - the **ordered parallel chunk executor** ([`run_ordered`]): jobs (chunks of input files) read
//!   block by block by worker threads, each block prepared on a worker, and every prepared block
//!   handed to one consumer in job and block order whatever the thread count, with bounded
//!   look-ahead. Stage 1 (keys), stage 2's sign and write steps and the one-process stage 2 all
//!   run on it, so parallelism, ordering and back-pressure are written once;
//! - sharing the blocks of a job only one thread can read ([`BlockQueue`]) and relaying a running
//!   position from block to block ([`Relay`]);
//! - a bounded fan-out for a slice of items that is not a stream ([`map_in_parts`]: one part per
//!   worker, each with its own state, results in order), e.g. decide's sketching ahead;
//! - what every streaming step shares about running: the live counters a caller watches it by
//!   ([`Progress`]), the token that stops it ([`CancelToken`]; publishing outputs looks at it
//!   too), both handed to a step beside its settings as one [`StepControl`], and the policy for
//!   input it cannot read ([`OnError`]).
//!
//! It does not know what a block is: reading files is `neardup-corpus`, and what a step does
//! with a block is the step's own ([`ChunkWork`]).
#![warn(missing_docs)]

// Modules from the bottom up: each names only those above it.
mod progress;
mod control;
mod share;
mod executor;
mod on_error;
mod parts;

pub use control::{CancelToken, StepControl};
pub use executor::{ChunkWork, Completion, Event, ExecOptions, run_ordered};
pub use on_error::OnError;
pub use parts::map_in_parts;
pub use progress::Progress;
pub use share::{BlockQueue, Relay};
