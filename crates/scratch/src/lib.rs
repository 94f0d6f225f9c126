//! Memory that can be handed back: growable arrays of plain values that live on the heap or in a
//! shared mapping of an unnamed scratch file, and an open-addressing table over them.
//!
//! This crate owns [`ScratchVec`] (the array), [`ProbeTable`] (a hash table of fixed-size slots
//! in one), and [`MappedResidency`] (how much of the scratch mappings the process holds in
//! memory). They hold what a run under a memory limit cannot spill the way records do, because
//! it is looked up everywhere: stage 1's hot mask, and stage 2's bookkeeping (the bucket index,
//! the places of representatives' records, the first copies of texts, the ids a later decision
//! may name and the clusters' sizes). It does not decide when to hand pages back or how much to
//! hold: the mask's owner and the decision core do (`neardup-keys`, `neardup-dedup`).
//!
//! Without a memory limit the arrays are heap arrays. Under one they live in a shared mapping of
//! an unnamed scratch file in the spill directory ([`Backing::Scratch`]): the kernel keeps their
//! contents in the file (helped by the page cache, which it may reclaim), so the pages this
//! process holds can be handed back at any time ([`ScratchVec::release`]) and fault back in,
//! unchanged, when touched. Their owner then bounds what it holds of them, however large they
//! grow; a lookup of a page handed back costs a minor fault while the page cache has it, a read
//! when it does not.
//!
//! A scratch file's blocks are reserved when it grows (`fallocate`), so a full disk is an error
//! when growing, never a `SIGBUS` on a later write. Any error of the scratch file (it cannot be
//! created, reserved or mapped) moves the array to the heap, with a warning: the run goes on
//! with the same results, no longer bounded.
#![warn(missing_docs)]

use std::marker::PhantomData;
use std::mem::{ManuallyDrop, size_of};
use std::ops::{Deref, DerefMut};
use std::path::PathBuf;
use std::ptr::NonNull;

/// Where a [`ScratchVec`] keeps its values.
#[derive(Clone, Debug, Default)]
pub enum Backing {
    /// Heap memory (no memory limit).
    #[default]
    Heap,
    /// A shared mapping of an unnamed file in `dir` (the system's temp dir when `None`).
    Scratch {
        /// The spill directory.
        dir: Option<PathBuf>,
    },
}

/// Values that are only bytes: no pointers, nothing to drop, so a value written to a scratch
/// file's mapping reads back as written.
///
/// # Safety
/// The type must hold no references, pointers or handles, and must not implement `Drop`.
pub unsafe trait Plain: Copy + 'static {}

/// [`Plain`] values for which all-zero bytes are a valid value (the contents of a scratch file's
/// new blocks, and of [`ScratchVec::zeroed`]).
///
/// # Safety
/// As [`Plain`], and the all-zero bit pattern must be a valid value of the type.
#[allow(
    dead_code,
    reason = "a marker named only in bounds, which the lint does not count"
)]
pub unsafe trait Zeroable: Plain {}

// SAFETY: plain integers.
unsafe impl Plain for u32 {}
// SAFETY: as above.
unsafe impl Zeroable for u32 {}
// SAFETY: as above.
unsafe impl Plain for u64 {}
// SAFETY: as above.
unsafe impl Zeroable for u64 {}
// SAFETY: a pair of plain integers.
unsafe impl Plain for (u32, u32) {}
// SAFETY: a plain integer (the bytes of ids).
unsafe impl Plain for u8 {}

#[cfg(target_os = "linux")]
fn page_bytes() -> usize {
    rustix::param::page_size()
}

#[cfg(not(target_os = "linux"))]
fn page_bytes() -> usize {
    4096
}

/// A hint to load the cache line holding `p`.
#[inline(always)]
pub fn prefetch_line(p: *const u32) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch is a hint that never faults, whatever the address; SSE is part of
    // x86_64.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p.cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

enum Store {
    /// `ptr`/`cap` are the raw parts of a `Vec<T>` of length `len`.
    Heap,
    /// `ptr` starts a shared mapping of `bytes` bytes of `file` (none yet when `bytes` is 0).
    Mapped {
        dir: Option<PathBuf>,
        file: Option<std::fs::File>,
        bytes: usize,
    },
}

/// Heap arrays smaller than this fault their pages in as they are touched
/// ([`ScratchVec::prefault`]): a system call saves little on a few pages.
const PREFAULT_MIN_BYTES: usize = 64 * 1024;

/// A growable array of [`Plain`] values, on the heap or in a scratch file's mapping
/// ([`Backing`]). Dereferences to a slice of its values.
pub struct ScratchVec<T: Plain> {
    ptr: NonNull<T>,
    len: usize,
    cap: usize,
    store: Store,
    /// The part of the mapping [`ScratchVec::release_part`] hands back next.
    next_part: usize,
    _values: PhantomData<T>,
}

// SAFETY: the array owns its values (heap memory, or a shared mapping of an unnamed file only it
// has open).
unsafe impl<T: Plain + Send> Send for ScratchVec<T> {}
// SAFETY: shared references only read.
unsafe impl<T: Plain + Sync> Sync for ScratchVec<T> {}

impl<T: Plain> ScratchVec<T> {
    /// An empty array kept as `backing` says.
    pub fn new(backing: &Backing) -> ScratchVec<T> {
        assert!(size_of::<T>() > 0, "no zero-sized values");
        let store = match backing {
            #[cfg(target_os = "linux")]
            Backing::Scratch { dir } => Store::Mapped {
                dir: dir.clone(),
                file: None,
                bytes: 0,
            },
            _ => Store::Heap,
        };
        ScratchVec {
            ptr: NonNull::dangling(),
            len: 0,
            cap: 0,
            store,
            next_part: 0,
            _values: PhantomData,
        }
    }

    /// Values held.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it holds no value.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether its values are in a scratch file's mapping.
    pub fn is_mapped(&self) -> bool {
        matches!(self.store, Store::Mapped { .. })
    }

    /// Appends a value.
    pub fn push(&mut self, value: T) {
        if self.len == self.cap {
            self.reserve(1);
        }
        // SAFETY: len < cap after reserving, and the slot is within the allocation or mapping.
        unsafe { self.ptr.as_ptr().add(self.len).write(value) };
        self.len += 1;
    }

    /// Appends copies of `values`.
    pub fn extend_from_slice(&mut self, values: &[T]) {
        self.reserve(values.len());
        // SAFETY: room for `values.len()` more values was reserved; a slice of the caller's never
        // overlaps this array's spare capacity.
        unsafe {
            std::ptr::copy_nonoverlapping(
                values.as_ptr(),
                self.ptr.as_ptr().add(self.len),
                values.len(),
            );
        }
        self.len += values.len();
    }

    /// Makes room for `additional` more values (at least doubling when it grows).
    pub fn reserve(&mut self, additional: usize) {
        let needed = self.len.checked_add(additional).expect("capacity overflow");
        if needed <= self.cap {
            return;
        }
        let wanted = needed.max(self.cap * 2).max(4);
        if self.is_mapped() {
            match self.grow_mapped(wanted) {
                Ok(()) => return,
                Err(e) => {
                    tracing::warn!(
                        "scratch file: {e}; keeping this array in memory instead (the \
                         results are the same, the memory limit no longer holds for it)"
                    );
                    self.move_to_heap();
                }
            }
        }
        self.grow_heap(wanted);
    }

    fn grow_heap(&mut self, wanted: usize) {
        // SAFETY: ptr/len/cap are the raw parts of a Vec<T> (dangling with cap 0 is what
        // Vec::new holds).
        let mut v = unsafe { Vec::from_raw_parts(self.ptr.as_ptr(), self.len, self.cap) };
        v.reserve_exact(wanted - self.len);
        let mut v = ManuallyDrop::new(v);
        self.cap = v.capacity();
        self.ptr = NonNull::new(v.as_mut_ptr()).expect("a vector's pointer is not null");
    }

    /// Copies the values to the heap and unmaps the scratch file.
    fn move_to_heap(&mut self) {
        let mut v: Vec<T> = Vec::with_capacity(self.len.max(4));
        v.extend_from_slice(self);
        self.unmap();
        self.store = Store::Heap;
        let mut v = ManuallyDrop::new(v);
        self.cap = v.capacity();
        self.ptr = NonNull::new(v.as_mut_ptr()).expect("a vector's pointer is not null");
    }

    #[cfg(target_os = "linux")]
    fn grow_mapped(&mut self, wanted: usize) -> std::io::Result<()> {
        let Store::Mapped { dir, file, bytes } = &mut self.store else {
            unreachable!("grow_mapped on a heap array")
        };
        let page = page_bytes();
        let new_bytes = (wanted * size_of::<T>()).div_ceil(page) * page;
        if file.is_none() {
            *file = Some(match dir {
                Some(dir) => tempfile::tempfile_in(dir)?,
                None => tempfile::tempfile()?,
            });
        }
        let fd = file.as_ref().expect("the scratch file was just made");
        // Reserved, so that a full disk fails here and not as a SIGBUS on a later write.
        rustix::fs::fallocate(fd, rustix::fs::FallocateFlags::empty(), 0, new_bytes as u64)?;
        // SAFETY: a new shared mapping of the file's first `new_bytes` bytes (all allocated), or
        // the existing mapping of its first `bytes` moved and grown; nothing else refers to the
        // old one (the array's values are reached through `self.ptr` only).
        let mapped = unsafe {
            if *bytes == 0 {
                rustix::mm::mmap(
                    std::ptr::null_mut(),
                    new_bytes,
                    rustix::mm::ProtFlags::READ | rustix::mm::ProtFlags::WRITE,
                    rustix::mm::MapFlags::SHARED,
                    fd,
                    0,
                )?
            } else {
                rustix::mm::mremap(
                    self.ptr.as_ptr().cast(),
                    *bytes,
                    new_bytes,
                    rustix::mm::MremapFlags::MAYMOVE,
                )?
            }
        };
        // Lookups land anywhere: reading ahead around a fault would only map pages not needed.
        // SAFETY: advice on the mapping just made; an error only leaves the default read-ahead.
        let _ = unsafe { rustix::mm::madvise(mapped, new_bytes, rustix::mm::Advice::Random) };
        *bytes = new_bytes;
        self.ptr = NonNull::new(mapped.cast()).expect("a mapping is not at address 0");
        self.cap = new_bytes / size_of::<T>();
        Ok(())
    }

    #[cfg(not(target_os = "linux"))]
    fn grow_mapped(&mut self, _wanted: usize) -> std::io::Result<()> {
        Err(std::io::Error::other("scratch mappings need Linux"))
    }

    fn unmap(&mut self) {
        #[cfg(target_os = "linux")]
        if let Store::Mapped { bytes, .. } = &mut self.store
            && *bytes > 0
        {
            // SAFETY: the mapping this array made; nothing refers to it past this call.
            let _ = unsafe { rustix::mm::munmap(self.ptr.as_ptr().cast(), *bytes) };
            *bytes = 0;
            self.ptr = NonNull::dangling();
            self.cap = 0;
        }
    }

    /// Bytes it may hold in memory: its capacity on the heap, all of its mapping in a scratch
    /// file.
    pub fn memory_bytes(&self) -> usize {
        match &self.store {
            Store::Heap => self.cap * size_of::<T>(),
            Store::Mapped { bytes, .. } => *bytes,
        }
    }

    /// Hands the pages of a mapping back to the kernel: its values stay in the scratch file and
    /// fault back in when touched. Nothing for a heap array.
    pub fn release(&mut self) {
        self.hand_back(0, self.mapped_bytes());
    }

    /// Hands back one of `parts` equal parts of a mapping, each in turn: lookups land anywhere,
    /// so a part holds about its share of the pages in memory, and the rest stay mapped in for
    /// the lookups to come (handing everything back would leave, on average, half as much
    /// mapped in under the same cap). Nothing for a heap array.
    pub fn release_part(&mut self, parts: usize) {
        let bytes = self.mapped_bytes();
        if bytes == 0 {
            return;
        }
        let page = page_bytes();
        let part = (bytes / parts.max(1)).div_ceil(page).max(1) * page;
        let mut start = self.next_part * part;
        if start >= bytes {
            (self.next_part, start) = (0, 0);
        }
        self.hand_back(start, part.min(bytes - start));
        self.next_part = (self.next_part + 1) % parts.max(1);
    }

    /// Has the kernel back a large heap array's pages with writable memory now, in one call (a
    /// hint: nothing for a mapped array, whose owner bounds what it holds, nor where the
    /// kernel cannot). A table whose slots are read before they are written (a probe, then a
    /// fill) otherwise maps the shared zero page on the read and faults again on the write,
    /// and that second fault's TLB flush interrupts every core the process runs on.
    pub fn prefault(&self) {
        #[cfg(target_os = "linux")]
        if matches!(self.store, Store::Heap) {
            let page = page_bytes();
            let start = (self.ptr.as_ptr() as usize).next_multiple_of(page);
            let end = (self.ptr.as_ptr() as usize + self.cap * size_of::<T>()) / page * page;
            if end >= start + PREFAULT_MIN_BYTES {
                // SAFETY: a page-aligned range inside this array's own allocation;
                // MADV_POPULATE_WRITE only faults its pages in (their contents stay as they
                // are). An error (a kernel before 5.14) leaves them to fault in on use.
                let _ = unsafe {
                    rustix::mm::madvise(
                        start as *mut std::ffi::c_void,
                        end - start,
                        rustix::mm::Advice::LinuxPopulateWrite,
                    )
                };
            }
        }
    }

    /// Bytes of its mapping (0 on the heap, or before it has one).
    fn mapped_bytes(&self) -> usize {
        match &self.store {
            Store::Mapped { bytes, .. } => *bytes,
            Store::Heap => 0,
        }
    }

    /// Drops this process's pages of `len` bytes of the mapping from `start` (page-aligned).
    fn hand_back(&self, start: usize, len: usize) {
        #[cfg(target_os = "linux")]
        if len > 0 {
            // SAFETY: a page-aligned range of the array's own shared file mapping:
            // MADV_DONTNEED drops this process's pages of it, the file keeps the values, so
            // later reads see them unchanged.
            let _ = unsafe {
                rustix::mm::madvise(
                    self.ptr.as_ptr().cast::<u8>().add(start).cast(),
                    len,
                    rustix::mm::Advice::LinuxDontNeed,
                )
            };
        }
        #[cfg(not(target_os = "linux"))]
        let _ = (start, len);
    }
}

/// What the scratch mappings hold in memory, measured as the process's resident pages of file
/// and shared-memory mappings (`/proc/self/statm`'s third field) beyond those it had when the
/// measure started. An overestimate when other file mappings grow meanwhile (the program's own
/// code as it runs): so when handing back every part of the mappings in turn
/// ([`MappedResidency::released_part`]) never brought the measure under the cap, what is left
/// is taken as not theirs. (`mincore` would not do: it tells what the page cache holds, not
/// what this process has mapped in.)
pub struct MappedResidency {
    statm: Option<std::fs::File>,
    base: u64,
    /// Parts handed back since the measure was last under the cap.
    parts_released: usize,
}

impl Default for MappedResidency {
    /// [`MappedResidency::new`].
    fn default() -> MappedResidency {
        MappedResidency::new()
    }
}

impl MappedResidency {
    /// A measure starting now: file mappings already in memory are not the scratch mappings'.
    pub fn new() -> MappedResidency {
        let mut m = MappedResidency {
            statm: std::fs::File::open("/proc/self/statm").ok(),
            base: 0,
            parts_released: 0,
        };
        m.base = m.shared_bytes().unwrap_or(0);
        m
    }

    /// The process's resident bytes of file and shared-memory mappings; `None` when unknown.
    fn shared_bytes(&mut self) -> Option<u64> {
        use std::os::unix::fs::FileExt;
        let mut buf = [0u8; 256];
        let n = self.statm.as_ref()?.read_at(&mut buf, 0).ok()?;
        let text = std::str::from_utf8(&buf[..n]).ok()?;
        let pages: u64 = text.split_ascii_whitespace().nth(2)?.parse().ok()?;
        Some(pages * page_bytes() as u64)
    }

    /// Bytes the mappings may hold in memory now (`otherwise` when that cannot be read).
    pub fn held(&mut self, otherwise: u64) -> u64 {
        match self.shared_bytes() {
            Some(now) => now.saturating_sub(self.base),
            None => otherwise,
        }
    }

    /// Notes that the measure was found within the cap.
    pub fn within_cap(&mut self) {
        self.parts_released = 0;
    }

    /// Notes that one of `parts` parts of every mapping was just handed back; after all of them
    /// in a row, what remains is taken as other mappings'.
    pub fn released_part(&mut self, parts: usize) {
        self.parts_released += 1;
        if self.parts_released >= parts {
            self.parts_released = 0;
            self.base = self.shared_bytes().unwrap_or(self.base);
        }
    }
}

impl<T: Zeroable> ScratchVec<T> {
    /// `len` zero values. A scratch file's new blocks read as zeros, so a mapped array touches
    /// none of its pages.
    pub fn zeroed(backing: &Backing, len: usize) -> ScratchVec<T> {
        let mut v = ScratchVec::new(backing);
        if matches!(backing, Backing::Scratch { .. }) {
            v.reserve(len);
        }
        if v.is_mapped() {
            v.len = len;
            return v;
        }
        // Zeroed heap memory as the allocator gives it (fresh pages of a large array are the
        // kernel's zero pages until written, as with `vec![0; len]`).
        ScratchVec::from_vec(zeroed_vec(len))
    }
}

/// A vector of `len` zero values, allocated zeroed.
fn zeroed_vec<T: Zeroable>(len: usize) -> Vec<T> {
    let layout = std::alloc::Layout::array::<T>(len).expect("capacity overflow");
    if layout.size() == 0 {
        return Vec::new();
    }
    // SAFETY: a layout of non-zero size.
    let ptr = unsafe { std::alloc::alloc_zeroed(layout) }.cast::<T>();
    if ptr.is_null() {
        std::alloc::handle_alloc_error(layout);
    }
    // SAFETY: allocated by the global allocator with the layout of `len` values of T, which are
    // all initialised (all-zero bytes are a valid T).
    unsafe { Vec::from_raw_parts(ptr, len, len) }
}

impl<T: Plain> ScratchVec<T> {
    /// The values of `values`, on the heap (no copy).
    pub fn from_vec(values: Vec<T>) -> ScratchVec<T> {
        assert!(size_of::<T>() > 0, "no zero-sized values");
        let mut values = ManuallyDrop::new(values);
        ScratchVec {
            ptr: NonNull::new(values.as_mut_ptr()).expect("a vector's pointer is not null"),
            len: values.len(),
            cap: values.capacity(),
            store: Store::Heap,
            next_part: 0,
            _values: PhantomData,
        }
    }

    /// Hands back the pages of a mapping that lie wholly before value `end` and not before the
    /// page holding value `start`: for an owner done with a stretch of its values (they stay in
    /// the file and fault back in if touched again). Nothing for a heap array.
    pub fn release_range(&self, start: usize, end: usize) {
        let bytes = self.mapped_bytes();
        if bytes == 0 {
            return;
        }
        let page = page_bytes();
        let from = (start * size_of::<T>()).min(bytes) / page * page;
        let to = (end * size_of::<T>()).min(bytes) / page * page;
        if to > from {
            self.hand_back(from, to - from);
        }
    }
}

impl<T: Plain> Deref for ScratchVec<T> {
    type Target = [T];
    #[inline(always)]
    fn deref(&self) -> &[T] {
        // SAFETY: the first `len` values are initialised (pushed, or zeroed), `ptr` is aligned
        // (a Vec's, or page-aligned).
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl<T: Plain> DerefMut for ScratchVec<T> {
    #[inline(always)]
    fn deref_mut(&mut self) -> &mut [T] {
        // SAFETY: as in deref, and `&mut self` is exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl<T: Plain> Drop for ScratchVec<T> {
    fn drop(&mut self) {
        match self.store {
            Store::Heap => {
                // SAFETY: the raw parts of a Vec<T>.
                drop(unsafe { Vec::from_raw_parts(self.ptr.as_ptr(), self.len, self.cap) });
            }
            Store::Mapped { .. } => self.unmap(),
        }
    }
}

/// Slots of a [`ProbeTable`]: all-zero bytes are an empty slot, whose key is
/// [`KeyedSlot::EMPTY`], so no entry may have that key.
pub trait KeyedSlot: Zeroable {
    /// What the table is looked up by.
    type Key: Copy + Eq;
    /// The key of an empty (all-zero) slot.
    const EMPTY: Self::Key;
    /// The slot's key.
    fn key(&self) -> Self::Key;
    /// The key folded to 64 bits, for the start of its probe.
    fn fold(key: Self::Key) -> u64;
}

/// An open-addressing table (linear probing, at most 7/8 full) of [`KeyedSlot`]s in a
/// [`ScratchVec`]: empty slots are zeroed memory, so a new mapped table touches no page, and
/// growing into a mapped table hands pages back as it goes, so that it stays within a budget
/// too.
pub struct ProbeTable<S: KeyedSlot> {
    slots: ScratchVec<S>,
    len: usize,
    backing: Backing,
    /// While growing into a mapped table, pages are handed back after this many slots moved
    /// (each touches at most a page of the old table and one of the new).
    release_every: usize,
}

impl<S: KeyedSlot> ProbeTable<S> {
    /// An empty table kept as `backing` says, holding at most about `budget` bytes of its pages
    /// while it grows.
    pub fn new(backing: Backing, budget: u64) -> ProbeTable<S> {
        ProbeTable {
            slots: ScratchVec::zeroed(&backing, 16),
            len: 0,
            release_every: usize::try_from(budget / (2 * page_bytes() as u64))
                .unwrap_or(usize::MAX)
                .max(64),
            backing,
        }
    }

    /// Where the probe for `key` starts. Keys are hashes already, but not necessarily in their
    /// low bits (lshcurator's band keys), so they are mixed first.
    #[inline]
    fn home(&self, key: S::Key) -> usize {
        (S::fold(key).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) as usize & (self.slots.len() - 1)
    }

    /// Asks the CPU to start loading the slot where the probe for `key` starts (a hint): keys
    /// lie anywhere in a table of megabytes, and looking them up one after the other waited on
    /// each in turn.
    #[inline]
    pub fn prefetch(&self, key: S::Key) {
        prefetch_line((&self.slots[self.home(key)] as *const S).cast());
    }

    /// The slot holding `key`, or the empty slot where it would go.
    #[inline]
    pub fn slot_of(&self, key: S::Key) -> usize {
        let mask = self.slots.len() - 1;
        let mut i = self.home(key);
        loop {
            let k = self.slots[i].key();
            if k == key || k == S::EMPTY {
                return i;
            }
            i = (i + 1) & mask;
        }
    }

    /// Where `key` is held, if it is.
    #[inline]
    fn index_of(&self, key: S::Key) -> Option<usize> {
        if key == S::EMPTY {
            return None;
        }
        let i = self.slot_of(key);
        (self.slots[i].key() == key).then_some(i)
    }

    /// The slot holding `key`, if any.
    #[inline]
    pub fn find(&self, key: S::Key) -> Option<&S> {
        self.index_of(key).map(|i| &self.slots[i])
    }

    /// The slot holding `key`, if any, to change (not its key).
    pub fn find_mut(&mut self, key: S::Key) -> Option<&mut S> {
        self.index_of(key).map(|i| &mut self.slots[i])
    }

    /// The slot of `key`: `Ok` with it when `key` is held, else `Err` with the empty slot where
    /// [`ProbeTable::fill`] puts it (growing the table first when one more entry would pass
    /// 7/8 full).
    pub fn entry(&mut self, key: S::Key) -> Result<&mut S, usize> {
        assert!(key != S::EMPTY, "no entry has the empty key");
        let mut i = self.slot_of(key);
        if self.slots[i].key() == key {
            return Ok(&mut self.slots[i]);
        }
        if (self.len + 1) * 8 > self.slots.len() * 7 {
            self.grow();
            i = self.slot_of(key);
        }
        Err(i)
    }

    /// Puts `slot` in the empty slot `i` that [`ProbeTable::entry`] returned for its key.
    pub fn fill(&mut self, i: usize, slot: S) {
        debug_assert!(self.slots[i].key() == S::EMPTY && slot.key() != S::EMPTY);
        self.slots[i] = slot;
        self.len += 1;
    }

    fn grow(&mut self) {
        let capacity = self.slots.len() * 2;
        let mut old =
            std::mem::replace(&mut self.slots, ScratchVec::zeroed(&self.backing, capacity));
        // Every slot is probed before it is filled: rehashing alone touches all the pages.
        self.slots.prefault();
        let mapped = self.slots.is_mapped();
        let mut moved = 0usize;
        for i in 0..old.len() {
            let slot = old[i];
            if slot.key() == S::EMPTY {
                continue;
            }
            let j = self.slot_of(slot.key());
            self.slots[j] = slot;
            moved += 1;
            if mapped && moved.is_multiple_of(self.release_every) {
                self.slots.release();
                old.release();
            }
        }
    }

    /// Entries held.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it holds no entry.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The entries held, in slot order (not the order they came in).
    pub fn iter(&self) -> impl Iterator<Item = &S> {
        self.slots.iter().filter(|s| s.key() != S::EMPTY)
    }

    /// Slots, empty ones included.
    #[cfg(any(test, feature = "test-support"))]
    pub fn capacity(&self) -> usize {
        self.slots.len()
    }

    /// Whether its slots are in a scratch file's mapping.
    #[cfg(any(test, feature = "test-support"))]
    pub fn is_mapped(&self) -> bool {
        self.slots.is_mapped()
    }

    /// Bytes its slots may hold in memory (all of them, mapped or not).
    pub fn memory_bytes(&self) -> usize {
        self.slots.memory_bytes()
    }

    /// [`ScratchVec::release`] of its slots.
    #[cfg(any(test, feature = "test-support"))]
    pub fn release(&mut self) {
        self.slots.release();
    }

    /// [`ScratchVec::release_part`] of its slots.
    pub fn release_part(&mut self, parts: usize) {
        self.slots.release_part(parts);
    }
}

/// Both backings, the scratch files in `dir`: what tests of arrays' owners run against.
#[cfg(any(test, feature = "test-support"))]
pub fn both_backings(dir: &tempfile::TempDir) -> [Backing; 2] {
    [
        Backing::Heap,
        Backing::Scratch {
            dir: Some(dir.path().to_path_buf()),
        },
    ]
}

/// The next value of a xorshift generator (`state` not 0): test data without a dependency.
#[cfg(any(test, feature = "test-support"))]
pub fn xorshift(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_read_back_after_growing_and_after_their_pages_are_released() {
        let dir = tempfile::tempdir().unwrap();
        for backing in both_backings(&dir) {
            let mut v: ScratchVec<u64> = ScratchVec::new(&backing);
            let value = |i: u64| i.wrapping_mul(0x9E37_79B9_7F4A_7C15);
            for i in 0..3_000_000u64 {
                v.push(value(i));
                if i % 777_777 == 0 {
                    v.release();
                }
            }
            assert_eq!(v.len(), 3_000_000);
            v[12_345] = 7;
            let mut residency = MappedResidency::new();
            if v.is_mapped() {
                // 24 MB of values, all read: handing back one part of four, then the whole
                // mapping, gives their pages back.
                assert_eq!(v.iter().filter(|&&x| x == 7).count(), 1);
                let before = residency.shared_bytes().unwrap();
                v.release_part(4);
                let quarter = residency.shared_bytes().unwrap();
                assert!(
                    before >= quarter + 4_000_000
                        && before <= quarter + v.memory_bytes() as u64 / 4,
                    "a quarter of the pages leave the process: {before} -> {quarter}"
                );
                v.release();
                let after = residency.shared_bytes().unwrap();
                assert!(
                    before >= after + 20_000_000,
                    "released pages leave the process: {before} -> {after}"
                );
                residency = MappedResidency::new();
            }
            for (i, &x) in v.iter().enumerate() {
                let want = if i == 12_345 { 7 } else { value(i as u64) };
                assert_eq!(x, want, "value {i} ({backing:?})");
            }
            if v.is_mapped() {
                assert!(
                    residency.held(0) >= 20_000_000,
                    "reading every value maps the pages in again"
                );
            }
        }
    }

    #[test]
    fn zeroed_arrays_read_as_zeros_and_pairs_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        for backing in both_backings(&dir) {
            let z: ScratchVec<u32> = ScratchVec::zeroed(&backing, 100_000);
            assert_eq!(z.len(), 100_000);
            assert!(z.iter().all(|&x| x == 0));
            let mut pairs: ScratchVec<(u32, u32)> = ScratchVec::new(&backing);
            for i in 0..5000 {
                pairs.push((i, !i));
            }
            pairs.release();
            assert!(
                pairs
                    .iter()
                    .enumerate()
                    .all(|(i, &p)| p == (i as u32, !(i as u32)))
            );
        }
    }

    #[test]
    fn a_spill_dir_that_cannot_hold_a_file_leaves_the_values_on_the_heap() {
        let dir = tempfile::tempdir().unwrap();
        let missing = Backing::Scratch {
            dir: Some(dir.path().join("no such dir")),
        };
        let mut v: ScratchVec<u64> = ScratchVec::new(&missing);
        for i in 0..10_000 {
            v.push(i);
        }
        assert!(!v.is_mapped());
        assert!(v.iter().copied().eq(0..10_000));
    }
}
