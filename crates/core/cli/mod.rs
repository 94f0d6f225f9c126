//! The `neardup` command line, apart from the library: arguments ([`args`]), one function per
//! command ([`commands`]), what is shown ([`view`]), the signal handlers ([`signals`]) and the
//! allocator's settings for a run ([`allocator`]). The
//! library (`crates/core/lib.rs` and the crates under it) knows nothing of flags, terminals or
//! exit codes.

pub(crate) mod allocator;
pub(crate) mod args;
pub(crate) mod commands;
pub(crate) mod signals;
pub(crate) mod view;
