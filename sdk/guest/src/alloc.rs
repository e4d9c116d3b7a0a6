//! A memory allocator made for plugin instances; opt in per plugin.
//!
//! Rust's default allocator for `wasm32-unknown-unknown` (dlmalloc) splits,
//! merges and sorts free chunks on every call; in a plugin that decodes and
//! encodes messages, that bookkeeping can take a third of the plugin's own
//! time. A plugin instance is short-lived (the host makes a fresh one for
//! every `apply` call), so this allocator trades memory for speed: each
//! power-of-two size class from 16 B to 32 KiB keeps a list of freed
//! blocks, and a new block comes off the end of the memory it grew last.
//! Allocating and freeing are a handful of instructions. Freed blocks are
//! reused by their own class only, and never given back: an instance holds
//! at most its peak of each class, each block at most twice the size asked.
//! Larger blocks, and alignments above 16, go to the default allocator.
//!
//! ```ignore
//! #[cfg(target_arch = "wasm32")]
//! #[global_allocator]
//! static ALLOC: wasmraft_sdk::alloc::PluginAllocator = wasmraft_sdk::alloc::PluginAllocator::new();
//! ```
//!
//! (Only for `wasm32`: it grows the instance's linear memory itself.)

// Built for the host, only the tests use the size classes.
#![cfg_attr(not(any(target_arch = "wasm32", test)), allow(dead_code))]

use std::alloc::{GlobalAlloc, Layout, System};
use std::ptr::null_mut;

/// The smallest block, and the alignment of every block: 16 B.
const MIN_SHIFT: u32 = 4;
/// The largest block served from a size class: 32 KiB.
const MAX_SHIFT: u32 = 15;
const CLASSES: usize = (MAX_SHIFT - MIN_SHIFT + 1) as usize;
const ALIGN: usize = 1 << MIN_SHIFT;
/// A WebAssembly page, the unit memory grows by.
const PAGE: usize = 64 * 1024;

/// The size class of `layout`, or `None` for the default allocator
/// (`System`).
fn class(layout: Layout) -> Option<usize> {
    if layout.align() > ALIGN || layout.size() > 1 << MAX_SHIFT {
        return None;
    }
    let size = layout.size().max(ALIGN).next_power_of_two();
    Some((size.trailing_zeros() - MIN_SHIFT) as usize)
}

/// Where new memory comes from.
pub(crate) trait Pages {
    /// Adds `pages` pages and returns the address of the first, or `None`
    /// when memory cannot grow.
    fn grow(&mut self, pages: usize) -> Option<usize>;

    /// `[start, end)`: the memory the module started with that nothing
    /// uses (from the end of its data to the end of its initial pages),
    /// asked for once.
    fn unused(&mut self) -> (usize, usize);
}

/// The free lists and the block being carved, over a page source.
pub(crate) struct SizeClasses<P> {
    /// The first free block of each class; each free block holds the
    /// address of the next.
    free: [*mut u8; CLASSES],
    /// `[next, end)`: what is left of the pages grown last.
    next: usize,
    end: usize,
    /// The module's unused initial memory has been taken.
    started: bool,
    pages: P,
}

impl<P: Pages> SizeClasses<P> {
    pub(crate) const fn new(pages: P) -> Self {
        Self { free: [null_mut(); CLASSES], next: 0, end: 0, started: false, pages }
    }

    /// A block of `class`, or null when memory cannot grow.
    ///
    /// # Safety
    /// `class < CLASSES`; the free lists hold only blocks freed to them.
    unsafe fn alloc(&mut self, class: usize) -> *mut u8 {
        let head = self.free[class];
        if !head.is_null() {
            // SAFETY: a free block is at least 16 B, aligned, and holds the
            // next free block's address (written by `free`).
            self.free[class] = unsafe { head.cast::<*mut u8>().read() };
            return head;
        }
        let size = ALIGN << class;
        if self.end - self.next < size && !self.started {
            // Growing memory costs the host a system call: use what the
            // module starts with first.
            self.started = true;
            let (start, end) = self.pages.unused();
            (self.next, self.end) = (start.next_multiple_of(ALIGN).min(end), end);
        }
        if self.end - self.next < size {
            // (The last page of a 4 GiB memory would end past `usize` on
            // wasm32: left unused.)
            let Some((start, end)) = self.pages.grow(1).and_then(|s| Some((s, s.checked_add(PAGE)?))) else {
                return null_mut();
            };
            // Pages right after the last ones extend them; otherwise (the
            // default allocator grew memory in between) the tail is left.
            if start != self.end {
                self.next = start;
            }
            self.end = end;
        }
        let block = self.next;
        self.next += size;
        block as *mut u8
    }

    /// Gives `block` back to `class`.
    ///
    /// # Safety
    /// `block` came from `alloc(class)` and is not used any more.
    unsafe fn free(&mut self, block: *mut u8, class: usize) {
        // SAFETY: the block is ours again, at least 16 B and aligned.
        unsafe { block.cast::<*mut u8>().write(self.free[class]) };
        self.free[class] = block;
    }

    /// `alloc` for any layout: a size class, or `System` for the rest.
    ///
    /// # Safety
    /// As `GlobalAlloc::alloc`.
    pub(crate) unsafe fn allocate(&mut self, layout: Layout) -> *mut u8 {
        match class(layout) {
            // SAFETY: `class` returns only valid classes.
            Some(c) => unsafe { self.alloc(c) },
            // SAFETY: as the caller's.
            None => unsafe { System.alloc(layout) },
        }
    }

    /// # Safety
    /// As `GlobalAlloc::dealloc`.
    pub(crate) unsafe fn deallocate(&mut self, ptr: *mut u8, layout: Layout) {
        match class(layout) {
            // SAFETY: the same layout gave the same class at allocation.
            Some(c) => unsafe { self.free(ptr, c) },
            // SAFETY: and so it came from `System`.
            None => unsafe { System.dealloc(ptr, layout) },
        }
    }

    /// A block of `new_size` holding the first bytes of `ptr`: the same
    /// block when the size class does not change, `System`'s (which may
    /// grow in place) when neither size has a class.
    ///
    /// # Safety
    /// As `GlobalAlloc::realloc`.
    pub(crate) unsafe fn reallocate(&mut self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller guarantees `new_size` with this alignment is a
        // valid layout.
        let new = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        match (class(layout), class(new)) {
            (Some(a), Some(b)) if a == b => return ptr,
            // SAFETY: `ptr` came from `System` with `layout`.
            (None, None) => return unsafe { System.realloc(ptr, layout, new_size) },
            _ => {}
        }
        // SAFETY: as for `allocate` and `deallocate`; the blocks differ.
        unsafe {
            let moved = self.allocate(new);
            if !moved.is_null() {
                std::ptr::copy_nonoverlapping(ptr, moved, layout.size().min(new_size));
                self.deallocate(ptr, layout);
            }
            moved
        }
    }
}

#[cfg(target_arch = "wasm32")]
pub use global::PluginAllocator;

#[cfg(target_arch = "wasm32")]
mod global {
    use std::alloc::{GlobalAlloc, Layout};
    use std::cell::UnsafeCell;

    use super::{PAGE, Pages, SizeClasses};

    /// The instance's own linear memory.
    pub(crate) struct LinearMemory;

    unsafe extern "C" {
        /// Where the linker ended the module's data (and so the heap starts).
        static __heap_base: u8;
        /// The end of the module's initial memory.
        static __heap_end: u8;
    }

    impl Pages for LinearMemory {
        fn grow(&mut self, pages: usize) -> Option<usize> {
            let previous = core::arch::wasm32::memory_grow(0, pages);
            (previous != usize::MAX).then(|| previous * PAGE)
        }

        fn unused(&mut self) -> (usize, usize) {
            // The default allocator only ever grows memory: nothing else
            // allocates below the initial size. (Not `memory_size`: it may
            // have grown for the default allocator already.)
            (&raw const __heap_base as usize, &raw const __heap_end as usize)
        }
    }

    /// The allocator described in [the module](super), for
    /// `#[global_allocator]`.
    pub struct PluginAllocator(UnsafeCell<SizeClasses<LinearMemory>>);

    // SAFETY: a wasm32-unknown-unknown plugin runs on one thread.
    unsafe impl Sync for PluginAllocator {}

    impl PluginAllocator {
        /// The allocator, with nothing allocated yet.
        #[allow(clippy::new_without_default)]
        pub const fn new() -> Self {
            Self(UnsafeCell::new(SizeClasses::new(LinearMemory)))
        }
    }

    // SAFETY: blocks are aligned to 16 and at least their layout's size;
    // the rest is the default allocator's. One thread, no reentrancy.
    unsafe impl GlobalAlloc for PluginAllocator {
        unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
            unsafe { (*self.0.get()).allocate(layout) }
        }

        unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
            unsafe { (*self.0.get()).deallocate(ptr, layout) }
        }

        unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
            unsafe { (*self.0.get()).reallocate(ptr, layout, new_size) }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pages from a buffer, as many as it holds, the first `initial` of
    /// them there from the start with their first 1000 bytes in use.
    struct Buffer {
        memory: Vec<u8>,
        initial: usize,
        grown: usize,
    }

    impl Buffer {
        fn new(pages: usize) -> Self {
            Self::with_initial(0, pages)
        }

        fn with_initial(initial: usize, pages: usize) -> Self {
            Self { memory: vec![0; (initial + pages + 1) * PAGE], initial, grown: 0 }
        }

        fn base(&self) -> usize {
            (self.memory.as_ptr() as usize).next_multiple_of(PAGE)
        }
    }

    impl Pages for Buffer {
        fn grow(&mut self, pages: usize) -> Option<usize> {
            if (self.initial + self.grown + pages + 1) * PAGE > self.memory.len() {
                return None;
            }
            self.grown += pages;
            Some(self.base() + (self.initial + self.grown - pages) * PAGE)
        }

        fn unused(&mut self) -> (usize, usize) {
            let base = self.base();
            if self.initial == 0 { (base, base) } else { (base + 1000, base + self.initial * PAGE) }
        }
    }

    #[test]
    fn sizes_fall_into_power_of_two_classes_up_to_32_kib() {
        let l = |size, align| Layout::from_size_align(size, align).unwrap();
        assert_eq!(class(l(0, 1)), Some(0));
        assert_eq!(class(l(16, 16)), Some(0));
        assert_eq!(class(l(17, 1)), Some(1));
        assert_eq!(class(l(256, 8)), Some(4));
        assert_eq!(class(l(32 * 1024, 8)), Some(CLASSES - 1));
        assert_eq!(class(l(32 * 1024 + 1, 8)), None);
        assert_eq!(class(l(8, 32)), None);
    }

    #[test]
    fn a_freed_block_serves_the_next_request_of_its_class() {
        let mut a = SizeClasses::new(Buffer::new(4));
        let layout = Layout::from_size_align(100, 8).unwrap();
        unsafe {
            let first = a.allocate(layout);
            let second = a.allocate(layout);
            assert_eq!(second as usize - first as usize, 128);
            a.deallocate(first, layout);
            assert_eq!(a.allocate(Layout::from_size_align(128, 16).unwrap()), first);
            // Another class does not take it.
            a.deallocate(second, layout);
            assert_ne!(a.allocate(Layout::from_size_align(64, 8).unwrap()), second);
        }
    }

    #[test]
    fn the_initial_memory_past_the_data_serves_first_then_grown_pages_extend_it() {
        let mut a = SizeClasses::new(Buffer::with_initial(2, 1));
        let base = a.pages.base();
        let layout = Layout::from_size_align(32 * 1024, 8).unwrap();
        unsafe {
            let first = a.allocate(Layout::from_size_align(10, 1).unwrap()) as usize;
            assert_eq!(first, base + 1008, "the first aligned address past the data");
            // 2 pages less 1024 bytes hold three 32 KiB blocks; the fourth
            // starts there and runs into the grown page, right after.
            let blocks: Vec<usize> = (0..4).map(|_| a.allocate(layout) as usize).collect();
            assert_eq!(blocks[0], base + 1024);
            assert!(blocks.windows(2).all(|w| w[1] == w[0] + 32 * 1024), "{blocks:?}");
            assert!(blocks[3] + 32 * 1024 <= base + 3 * PAGE);
            assert_eq!(a.pages.grown, 1);
        }
    }

    #[test]
    fn memory_that_cannot_grow_is_a_null_block() {
        let mut a = SizeClasses::new(Buffer::new(1));
        let layout = Layout::from_size_align(32 * 1024, 8).unwrap();
        unsafe {
            assert!(!a.allocate(layout).is_null());
            assert!(!a.allocate(layout).is_null());
            assert!(a.allocate(layout).is_null());
        }
    }

    /// Random allocations, frees and reallocations: every block is
    /// aligned, holds its bytes until it is freed, and overlaps no other.
    #[test]
    fn random_use_keeps_every_live_block_intact() {
        let mut a = SizeClasses::new(Buffer::new(1024));
        let mut rng = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        // (address, layout, fill byte)
        let mut live: Vec<(*mut u8, Layout, u8)> = Vec::new();
        let check = |&(p, l, fill): &(*mut u8, Layout, u8)| {
            let bytes = unsafe { std::slice::from_raw_parts(p, l.size()) };
            assert!(bytes.iter().all(|&b| b == fill), "block at {p:?} ({l:?}) was overwritten");
        };
        for step in 0..20_000u32 {
            let fill = step as u8;
            match next() % 5 {
                0 | 1 => {
                    let size = match next() % 10 {
                        0 => 33 * 1024 + (next() % 4096) as usize, // large
                        _ => 1 + (next() % 3000) as usize,
                    };
                    let align = [1, 2, 4, 8, 16, 64][(next() % 6) as usize];
                    let layout = Layout::from_size_align(size, align).unwrap();
                    let p = unsafe { a.allocate(layout) };
                    assert!(!p.is_null());
                    assert_eq!(p as usize % align, 0, "{layout:?}");
                    unsafe { p.write_bytes(fill, size) };
                    live.push((p, layout, fill));
                }
                2 | 3 if !live.is_empty() => {
                    let (p, l, f) = live.swap_remove((next() % live.len() as u64) as usize);
                    check(&(p, l, f));
                    unsafe { a.deallocate(p, l) };
                }
                4 if !live.is_empty() => {
                    let i = (next() % live.len() as u64) as usize;
                    let (p, l, f) = live[i];
                    check(&(p, l, f));
                    let new_size = 1 + (next() % 40_000) as usize;
                    let q = unsafe { a.reallocate(p, l, new_size) };
                    assert!(!q.is_null());
                    let kept = unsafe { std::slice::from_raw_parts(q, l.size().min(new_size)) };
                    assert!(kept.iter().all(|&b| b == f), "realloc lost bytes");
                    unsafe { q.write_bytes(fill, new_size) };
                    live[i] = (q, Layout::from_size_align(new_size, l.align()).unwrap(), fill);
                }
                _ => {}
            }
            if step % 1000 == 0 {
                live.iter().for_each(check);
                let mut spans: Vec<(usize, usize)> = live.iter().map(|&(p, l, _)| (p as usize, p as usize + l.size())).collect();
                spans.sort();
                assert!(spans.windows(2).all(|w| w[0].1 <= w[1].0), "live blocks overlap");
            }
        }
        for (p, l, f) in live {
            check(&(p, l, f));
            unsafe { a.deallocate(p, l) };
        }
    }
}
