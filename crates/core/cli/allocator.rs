//! How the command line's process sets glibc's allocator for a run: the process is the run's
//! alone, which a library caller's (a Python interpreter, a scheduler) is not, so this is not
//! the library's to do.

/// Largest allocation served from the allocator's heaps (glibc allows at most half of a
/// thread's 64 MiB heap).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const MMAP_THRESHOLD: i32 = 32 << 20;

/// Free memory at the top of a heap that glibc keeps rather than hands back: what its own
/// dynamic setting reaches once the threshold above is reached.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const TRIM_THRESHOLD: i32 = 64 << 20;

/// Largest allocation served from the allocator's heaps under a memory limit: glibc's default,
/// fixed (see [`keep_freed_memory`]).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const LIMITED_MMAP_THRESHOLD: i32 = 128 << 10;

/// Free memory at the top of a heap kept under a memory limit: glibc's default, fixed.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const LIMITED_TRIM_THRESHOLD: i32 = 128 << 10;

/// Without a memory limit, lets glibc's allocator keep what a run frees for its next
/// allocations. By default it serves blocks of 128 KiB and more from fresh mappings and hands
/// free memory at the top of a thread's heap back to the kernel, raising both thresholds only
/// as such blocks are freed: the buffers of a few megabytes a run allocates per block (bytes,
/// decoded texts, shingle sets) were faulted in and zeroed by the kernel again and again. Fixed
/// where glibc's dynamic setting ends up, a run takes fewer page faults and less time for a
/// slightly higher peak (figures in docs/benchmarks.md, "Fewer page faults").
///
/// Under `--memory-limit` the thresholds are fixed at glibc's starting values instead: left to
/// rise, each thread's heap came to keep up to twice the largest block it had freed (tens of
/// megabytes with a few threads on Parquet), which no budget of the run counts.
pub(crate) fn keep_freed_memory(memory_limit: Option<u64>) {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    let (mmap, trim) = match memory_limit {
        None => (MMAP_THRESHOLD, TRIM_THRESHOLD),
        Some(_) => (LIMITED_MMAP_THRESHOLD, LIMITED_TRIM_THRESHOLD),
    };
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets parameters of the allocator, which takes them under its lock;
    // an invalid value is refused (returns 0) and changes nothing.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, mmap);
        libc::mallopt(libc::M_TRIM_THRESHOLD, trim);
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    let _ = memory_limit;
}
