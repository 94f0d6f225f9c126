//! The bounds a [`Config`](crate::Config)'s values are checked against, which its errors name: a
//! leaf of the facade.

/// Most worker threads a run may ask for. Decisions never depend on the thread count, and each
/// thread holds buffers and chunks in flight, so thousands only cost memory and start-up time
/// (20,000 threads ran for minutes before doing anything); 0 still means every core, however
/// many the machine has. Beyond the bound the setting is refused, not clamped: a number that
/// large is a typo more often than a plan.
pub const MAX_THREADS: usize = 1024;

/// Widest signature a run may use. Published setups go up to about 9,000 permutations (20 bands
/// of 450 rows); each representative holds 4 bytes per permutation, and the search for the
/// optimal bands and rows must stay instant.
pub const MAX_NUM_PERM: usize = 16384;
