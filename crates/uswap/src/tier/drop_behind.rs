//! Bounded page cache for a swap file written with buffered I/O: [`DropBehind`].
//!
//! A swap file read and written through the page cache keeps every page it touched in RAM
//! until the kernel needs the memory: outside a memory cgroup that is unbounded, and inside
//! one it is charged to the cgroup. Either way the RAM is not under the limit `uswap run`
//! promises. Unless `direct=on` opens the file `O_DIRECT`, this keeps the file's page cache to
//! a window:
//!
//! - a written range has its writeback started at once (`sync_file_range(WRITE)`) and is
//!   remembered; once more than [`WINDOW_BYTES`] are remembered, the oldest ranges are waited
//!   for and dropped (`sync_file_range(WAIT_BEFORE|WRITE|WAIT_AFTER)`, then
//!   `posix_fadvise(DONTNEED)`, which drops clean pages only);
//! - a range read is dropped as soon as it has been copied out (the data lives on in the
//!   caller's page; the pager maps it);
//! - readahead is off (`POSIX_FADV_RANDOM`): a swap-in reads what it asks for, and the
//!   engine decides what else to read.
//!
//! On a file system whose page cache is the storage (tmpfs) none of this frees anything: the
//! file is RAM there whatever is done.
//!
//! Locking: one mutex of class `FileDropBehind` around the ring of remembered ranges, held to
//! push or pop a range, never across a system call.

use crate::sync::{lock, LockClass, Mutex};
use std::fs::File;
use std::os::fd::AsRawFd;
use std::sync::Arc;

/// Bytes of written data whose page cache may be kept before the oldest is dropped.
pub const WINDOW_BYTES: u64 = 4 << 20;
/// Ranges remembered at most (a full ring drops its oldest whatever the bytes).
const RING: usize = 256;

struct Ring {
    ranges: [(u64, u64); RING],
    head: usize,
    len: usize,
    bytes: u64,
}

impl Ring {
    fn push(&mut self, r: (u64, u64)) {
        debug_assert!(self.len < RING);
        self.ranges[(self.head + self.len) % RING] = r;
        self.len += 1;
        self.bytes += r.1;
    }
    /// The oldest range, if the window is over its bound.
    fn pop_over(&mut self) -> Option<(u64, u64)> {
        if self.len == 0 || (self.bytes <= WINDOW_BYTES && self.len < RING) {
            return None;
        }
        let r = self.ranges[self.head];
        self.head = (self.head + 1) % RING;
        self.len -= 1;
        self.bytes -= r.1;
        Some(r)
    }
}

/// The drop-behind state of one buffered swap file.
pub(crate) struct DropBehind {
    file: Arc<File>,
    ring: Mutex<Ring>,
}

impl DropBehind {
    /// Drop-behind for `file`; turns its readahead off.
    pub(crate) fn new(file: Arc<File>) -> Self {
        // SAFETY: posix_fadvise on a valid open fd with integer arguments.
        unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_RANDOM) };
        DropBehind {
            file,
            ring: Mutex::new(LockClass::FileDropBehind, Ring { ranges: [(0, 0); RING], head: 0, len: 0, bytes: 0 }),
        }
    }

    fn sync_range(&self, off: u64, len: u64, flags: libc::c_uint) {
        // SAFETY: sync_file_range on a valid open fd with integer arguments; it touches no
        // memory of ours.
        unsafe { libc::sync_file_range(self.file.as_raw_fd(), off as i64, len as i64, flags) };
    }

    fn drop_range(&self, off: u64, len: u64) {
        // SAFETY: as above.
        unsafe { libc::posix_fadvise(self.file.as_raw_fd(), off as i64, len as i64, libc::POSIX_FADV_DONTNEED) };
    }

    /// `[off, off + len)` was just written: start its writeback, and drop what the window no
    /// longer holds. Errors are ignored: this only ever frees page cache, and a failed write
    /// back is the next read's error (the data is still in the page cache until then).
    pub(crate) fn written(&self, off: u64, len: u64) {
        self.sync_range(off, len, libc::SYNC_FILE_RANGE_WRITE);
        // Remember this range and take what the window no longer holds, a few ranges per lock
        // round (usually the only round), dropped with the lock released.
        let mut new = Some((off, len));
        loop {
            let mut out = [(0u64, 0u64); 4];
            let n = {
                let mut ring = lock(&self.ring);
                if let Some(r) = new.take() {
                    ring.push(r);
                }
                out.iter_mut().map_while(|o| ring.pop_over().map(|r| *o = r)).count()
            };
            for &(o, l) in &out[..n] {
                self.sync_range(
                    o,
                    l,
                    libc::SYNC_FILE_RANGE_WAIT_BEFORE | libc::SYNC_FILE_RANGE_WRITE | libc::SYNC_FILE_RANGE_WAIT_AFTER,
                );
                self.drop_range(o, l);
            }
            if n < out.len() {
                return;
            }
        }
    }

    /// `[off, off + len)` was just read and copied out: drop its pages (dirty ones, still
    /// waiting in the window, stay).
    pub(crate) fn read(&self, off: u64, len: u64) {
        self.drop_range(off, len);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ring_keeps_a_window_of_bytes_and_ranges() {
        let mut r = Ring { ranges: [(0, 0); RING], head: 0, len: 0, bytes: 0 };
        r.push((0, WINDOW_BYTES));
        assert_eq!(r.pop_over(), None, "a full window is kept");
        r.push((WINDOW_BYTES, 4096));
        assert_eq!(r.pop_over(), Some((0, WINDOW_BYTES)), "the oldest goes first");
        assert_eq!(r.pop_over(), None);
        for i in 0..RING as u64 - 1 {
            r.push((i << 12, 1));
        }
        assert_eq!(r.len, RING);
        assert_eq!(r.pop_over(), Some((WINDOW_BYTES, 4096)), "a full ring drops its oldest");
        assert_eq!(r.pop_over(), None);
    }
}
