//! Bounded page cache for a swap file written with buffered I/O: [`DropBehind`].
//!
//! A swap file read and written through the page cache keeps every page it touched in RAM
//! until the kernel needs the memory: outside a memory cgroup that is unbounded, and inside
//! one it is charged to the cgroup. Either way the RAM is not under the limit `uswap run`
//! promises. Unless `direct=on` opens the file `O_DIRECT`, this keeps the file's page cache to
//! a window, in few system calls (one per store and one per load cost as much CPU as the
//! I/O: stores of 4 KiB each started a 4 KiB write-back):
//!
//! - a written range joins one of the [`OPEN`] newest spans when it lies at most [`GAP`]
//!   past its end and within [`SPAN_BYTES`] of its start (the cluster allocator hands out
//!   slots forward through a cluster, one stream per folio size, skipping the slots in use);
//!   a span's write-back is started (`sync_file_range(WRITE)`, which writes the dirty pages of
//!   the span: what was written into it) once [`MERGE_BYTES`] were written into it, it
//!   reached [`SPAN_BYTES`], or it is no longer among the newest. Once more than
//!   [`WINDOW_BYTES`] written are remembered, the oldest spans are waited for and dropped
//!   (`sync_file_range(WAIT_BEFORE|WRITE|WAIT_AFTER)`, then `posix_fadvise(DONTNEED)`, which
//!   drops clean pages only);
//! - what loads read is dropped once [`READ_BATCH_BYTES`] were read since the last drop, by one
//!   `posix_fadvise(DONTNEED)` over the whole file (its cost is the pages cached, which this
//!   bounds; it starts the write-back of dirty ones and leaves them);
//! - readahead is off (`POSIX_FADV_RANDOM`): a swap-in reads what it asks for, and the
//!   engine decides what else to read.
//!
//! So the file's page cache holds at most the window, the open ranges and the last batch of
//! reads. On a file system whose page cache is the storage (tmpfs) none of this frees
//! anything: the file is RAM there whatever is done.
//!
//! Locking: one mutex of class `FileDropBehind` around the ring of remembered ranges, held to
//! push, extend or pop a range, never across a system call; the read count is an atomic.

use crate::sync::{lock, LockClass, Mutex};
use std::fs::File;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Bytes of written data whose page cache may be kept before the oldest is dropped.
pub const WINDOW_BYTES: u64 = 4 << 20;
/// Ranges remembered at most (a full ring drops its oldest whatever the bytes).
const RING: usize = 256;
/// The newest spans a write may join; older ones have their write-back started.
pub(crate) const OPEN: usize = 8;
/// Bytes written into a span that start its write-back.
pub(crate) const MERGE_BYTES: u64 = 256 << 10;
/// The largest span (from its start to the end of its last write).
pub(crate) const SPAN_BYTES: u64 = 1 << 20;
/// How far past a span's end a write may start and still join it.
pub(crate) const GAP: u64 = 64 << 10;
/// Bytes loaded between two drops of what loads read.
pub(crate) const READ_BATCH_BYTES: u64 = 256 << 10;

/// A span of the file `[off, end)` that writes of `bytes` in all went into, and whether its
/// write-back was started.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Range {
    off: u64,
    end: u64,
    bytes: u64,
    started: bool,
}

/// The remembered spans, oldest first; `bytes` is what was written into them. Invariant:
/// only the [`OPEN`] newest may be unstarted.
struct Ring {
    ranges: [Range; RING],
    head: usize,
    len: usize,
    bytes: u64,
}

impl Ring {
    fn at(&mut self, i: usize) -> &mut Range {
        &mut self.ranges[(self.head + i) % RING]
    }

    /// Remember `[off, off + len)`: let it join an open span it follows, else add a span.
    /// Returns the spans `(off, len)` whose write-back is to be started now (at most two: the
    /// one joined or added when full, and the one that left the open spans).
    fn write(&mut self, off: u64, len: u64) -> [Option<(u64, u64)>; 2] {
        let mut start = [None, None];
        self.bytes += len;
        let end = off + len;
        let open = self.len.saturating_sub(OPEN)..self.len;
        if let Some(i) = open.rev().find(|&i| {
            let r = self.ranges[(self.head + i) % RING];
            !r.started && off >= r.off && off <= r.end + GAP && end <= r.off + SPAN_BYTES
        }) {
            let r = self.at(i);
            r.end = r.end.max(end);
            r.bytes += len;
            if r.bytes >= MERGE_BYTES || r.end - r.off == SPAN_BYTES {
                r.started = true;
                start[0] = Some((r.off, r.end - r.off));
            }
            return start;
        }
        debug_assert!(self.len < RING);
        let full = len >= MERGE_BYTES;
        self.ranges[(self.head + self.len) % RING] = Range { off, end, bytes: len, started: full };
        self.len += 1;
        if full {
            start[0] = Some((off, len));
        }
        if self.len > OPEN {
            let r = self.at(self.len - 1 - OPEN);
            if !r.started {
                r.started = true;
                start[1] = Some((r.off, r.end - r.off));
            }
        }
        start
    }

    /// The oldest range, if the window is over its bound (or the ring full: the next
    /// [`Ring::write`] must find room).
    fn pop_over(&mut self) -> Option<Range> {
        if self.len == 0 || (self.bytes <= WINDOW_BYTES && self.len < RING) {
            return None;
        }
        let r = self.ranges[self.head];
        self.head = (self.head + 1) % RING;
        self.len -= 1;
        self.bytes -= r.bytes;
        Some(r)
    }
}

/// The drop-behind state of one buffered swap file.
pub(crate) struct DropBehind {
    file: Arc<File>,
    ring: Mutex<Ring>,
    /// Bytes loaded since the last drop of what loads read.
    read_bytes: AtomicU64,
}

impl DropBehind {
    /// Drop-behind for `file`; turns its readahead off.
    pub(crate) fn new(file: Arc<File>) -> Self {
        // SAFETY: posix_fadvise on a valid open fd with integer arguments.
        unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_RANDOM) };
        DropBehind {
            file,
            ring: Mutex::new(
                LockClass::FileDropBehind,
                Ring { ranges: [Range::default(); RING], head: 0, len: 0, bytes: 0 },
            ),
            read_bytes: AtomicU64::new(0),
        }
    }

    fn sync_range(&self, off: u64, len: u64, flags: libc::c_uint) {
        // SAFETY: sync_file_range on a valid open fd with integer arguments; it touches no
        // memory of ours.
        unsafe { libc::sync_file_range(self.file.as_raw_fd(), off as i64, len as i64, flags) };
    }

    /// Drop the clean cached pages of `[off, off + len)` (`len` 0: to the end of the file).
    fn drop_range(&self, off: u64, len: u64) {
        // SAFETY: as above.
        unsafe { libc::posix_fadvise(self.file.as_raw_fd(), off as i64, len as i64, libc::POSIX_FADV_DONTNEED) };
    }

    /// `[off, off + len)` was just written: remember it, start the write-back of what is
    /// complete, and drop what the window no longer holds. Errors are ignored: this only ever
    /// frees page cache, and a failed write back is the next read's error (the data is still
    /// in the page cache until then).
    pub(crate) fn written(&self, off: u64, len: u64) {
        // A few ranges per lock round (usually the only round), synced and dropped with the
        // lock released.
        let mut new = Some((off, len));
        loop {
            let mut out = [Range::default(); 4];
            let (start, n) = {
                let mut ring = lock(&self.ring);
                // A full ring takes the new range once its oldest went (next round).
                let start = match new {
                    Some((o, l)) if ring.len < RING => {
                        new = None;
                        ring.write(o, l)
                    }
                    _ => [None, None],
                };
                let n = out.iter_mut().map_while(|o| ring.pop_over().map(|r| *o = r)).count();
                (start, n)
            };
            for (o, l) in start.into_iter().flatten() {
                self.sync_range(o, l, libc::SYNC_FILE_RANGE_WRITE);
            }
            for r in &out[..n] {
                let len = r.end - r.off;
                self.sync_range(
                    r.off,
                    len,
                    libc::SYNC_FILE_RANGE_WAIT_BEFORE | libc::SYNC_FILE_RANGE_WRITE | libc::SYNC_FILE_RANGE_WAIT_AFTER,
                );
                self.drop_range(r.off, len);
            }
            if n < out.len() && new.is_none() {
                return;
            }
        }
    }

    /// `len` bytes were just read and copied out: once a batch was read, drop the clean
    /// cached pages of the file (dirty ones, still waiting in the window, stay).
    pub(crate) fn read(&self, len: u64) {
        if self.read_bytes.fetch_add(len, Ordering::Relaxed) + len >= READ_BATCH_BYTES {
            self.read_bytes.store(0, Ordering::Relaxed);
            self.drop_range(0, 0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ring() -> Ring {
        Ring { ranges: [Range::default(); RING], head: 0, len: 0, bytes: 0 }
    }

    #[test]
    fn the_ring_keeps_a_window_of_bytes_and_ranges() {
        let mut r = ring();
        assert_eq!(r.write(0, WINDOW_BYTES), [Some((0, WINDOW_BYTES)), None], "a full range starts at once");
        assert_eq!(r.pop_over(), None, "a full window is kept");
        r.write(WINDOW_BYTES, 4096);
        assert_eq!(r.pop_over().map(|x| (x.off, x.end)), Some((0, WINDOW_BYTES)), "the oldest goes first");
        assert_eq!(r.pop_over(), None);
        // Spans that join none: a full ring drops its oldest whatever the bytes.
        for i in 0..RING as u64 - 1 {
            r.write((i + 8) << 21, 1);
        }
        assert_eq!(r.len, RING);
        assert_eq!(
            r.pop_over().map(|x| (x.off, x.end)),
            Some((WINDOW_BYTES, WINDOW_BYTES + 4096)),
            "a full ring drops its oldest"
        );
        assert_eq!(r.pop_over(), None);
    }

    #[test]
    fn streams_join_spans_that_start_when_full_or_no_longer_open() {
        let mut r = ring();
        // Two interleaved streams of 4 KiB stores, each skipping every other slot: each joins
        // its own span, which starts once MERGE_BYTES were written into it.
        let mut started = Vec::new();
        for i in 0..(MERGE_BYTES / 4096) {
            for base in [0u64, 1 << 30] {
                started.extend(r.write(base + i * 8192, 4096).into_iter().flatten());
            }
        }
        assert_eq!(r.len, 2, "one span per stream");
        let span = 2 * MERGE_BYTES - 4096;
        assert_eq!(started, [(0, span), (1 << 30, span)], "each started once, when full");
        assert_eq!(r.bytes, 2 * MERGE_BYTES, "the window counts what was written, not the spans");
        // A started span is joined no more; a write too far past an open span's end, or
        // before its start, opens a new one.
        assert_eq!(r.write(span, 4096), [None, None]);
        assert_eq!(r.write(span + 4096 + GAP + 4096, 4096), [None, None]);
        assert_eq!(r.write(span - 8192, 4096), [None, None]);
        assert_eq!(r.len, 5);
        // More streams than open spans: the unstarted ones start as OPEN newer ones come.
        let mut left = Vec::new();
        for k in 1..=OPEN as u64 {
            left.extend(r.write((k + 8) << 20, 4096)[1]);
        }
        assert_eq!(left, [(span, 4096), (span + 4096 + GAP + 4096, 4096), (span - 8192, 4096)]);
        let unstarted: Vec<usize> = (0..r.len).filter(|&i| !r.ranges[(r.head + i) % RING].started).collect();
        assert!(unstarted.iter().all(|&i| i + OPEN >= r.len), "{unstarted:?} of {}", r.len);
        // A span does not grow past SPAN_BYTES.
        let mut r = ring();
        let mut s = Vec::new();
        for i in 0..(SPAN_BYTES / GAP) {
            s.extend(r.write(i * GAP, 4096).into_iter().flatten());
        }
        assert!(s.is_empty(), "{s:?}");
        assert_eq!(r.len, 1);
        assert_eq!(r.write(SPAN_BYTES, 4096), [None, None], "past the span: a new one");
        assert_eq!(r.len, 2);
    }
}
