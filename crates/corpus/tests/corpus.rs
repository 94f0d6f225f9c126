//! The corpus crate's integration tests, one test binary (each links Arrow, Parquet and the
//! object-store client once): a module per concern, with the helpers they share in `common`.
//! `cargo test -p neardup-corpus --test corpus roundtrip::` runs one.

mod common;

mod bad_inputs;
mod discover_chunks;
mod roundtrip;
mod unreadable;
