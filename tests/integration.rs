//! neardup's integration tests, one binary as ripgrep has them: each module is one concern, run
//! against the real `neardup` binary (`CARGO_BIN_EXE_neardup`) or the library facade.
//!
//! `cargo test --test integration cli::` runs one module; a test name filters as usual.

mod support;

mod accounting;
mod against;
mod cli;
mod cli_safety;
mod cli_sharded;
mod compat_lshcurator;
mod distributed;
mod eval;
mod interrupt;
mod memory_limit;
mod object_storage;
mod pipeline;
mod publish;
mod stage2_reads;
mod step_values;
