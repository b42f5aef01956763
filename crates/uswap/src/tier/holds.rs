//! Holds on the clusters of a swap file that the processes of a tree share across `fork`
//! ([`FileHolds`], the [`ClusterHolds`] of a file tier; the allocator's side is
//! `cluster/share.rs`).
//!
//! The holds live in an anonymous `MAP_SHARED` mapping made with the file tier, so every
//! `fork` descendant that still has the tier sees the same memory: per cluster a count of
//! holders, and a table of rows, one per process, each with a state word, the process's start
//! time and a bitmap of the clusters it holds. The rows' headers lie together, apart from their
//! bitmaps: counting or reaping the rows reads 64 KiB, not a page of every row (with a 64 GiB
//! file's 32 768 clusters a row is 4 KiB, and reading every row would fault in, and allocate,
//! a page of shared memory per row at every exit of a short-lived process that writes its
//! statistics). A process holds a cluster while its copy of the
//! tables may name a slot in it (the allocator claims a free cluster with one CAS of its count
//! from 0 to 1, and releases it when its last slot here is freed). The count is the number of
//! rows whose bit is set, plus at most one claim in flight per process (a process killed
//! between the CAS and setting its bit leaks that cluster: the rows cannot tell).
//!
//! `fork` (`FileHolds::share_for_fork` in the parent's prepare handler, then
//! `FileHolds::forked_child` / `FileHolds::forked_parent`): the parent takes a free row for
//! the child (state `PENDING`, its own pid), copies its own bitmap into it and counts every
//! hold once more; the child turns the row `LIVE` under its own pid; the parent, told by the
//! child (the preload library's pipe) whether it did, gives the row up if not (the fork failed
//! or the child died first). So the child's holds exist before the fork returns, and the
//! parent cannot empty and reuse a cluster the child still reads.
//!
//! Killed processes (`FileHolds::reap`): a row whose process is gone (no such pid, another
//! start time) or no longer has the file open on the tier's descriptor (it called `exec`,
//! which closes it) is released by whichever process finds it, after a CAS of its state to
//! `REAPING`, so exactly once; a `PENDING` row whose parent is gone is released after 30 s.
//! Nothing here is a lock: a process killed at any instant leaves counts that are at worst too
//! high (space kept, never data lost).
//!
//! A child that could not share (no free row) gets a private copy of the file from the
//! preload library and switches its holds off (`FileHolds::go_private`): every cluster is
//! then its own.
//!
//! Locking: none; atomics in the shared mapping, read and written with acquire/release.

use super::shared::SharedMap;
use crate::cluster::ClusterHolds;
use crate::error::TierError;
use crate::stats::now_ns;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};

/// Rows: processes sharing one file at a time (a row is reused once its process is reaped).
pub(crate) const NR_ROWS: usize = 1024;
const TAG_SHIFT: u32 = 62;
const LIVE: u64 = 1 << TAG_SHIFT;
const PENDING: u64 = 2 << TAG_SHIFT;
const REAPING: u64 = 3 << TAG_SHIFT;
const PID_MASK: u64 = (1 << 32) - 1;
const NONE: usize = usize::MAX;
/// A `PENDING` row whose parent is gone is reaped after this long (its child, if any, would
/// have taken it within milliseconds).
const PENDING_GRACE_NS: u64 = 30_000_000_000;
/// Byte offset of the rows' high-water mark: rows `0..mark` are all ever taken, so counting and
/// reaping read that many headers, not all [`NR_ROWS`] (16 pages, faulted in at every exit of
/// a short-lived process that writes its statistics).
const ROWS_USED: usize = 0;
/// Bytes of a row's header (state, start time, stamp), one cache line.
const ROW_HEAD: usize = 64;
/// The words of a row's header.
const STATE: usize = 0;
const START: usize = 1;
const STAMP: usize = 2;

/// Holds of this process on the clusters of a swap file shared with its `fork` relatives.
pub struct FileHolds {
    map: SharedMap,
    nr_clusters: usize,
    /// Bitmap words per row.
    words: usize,
    /// Byte offset of row 0's header (the headers follow one another, `ROW_HEAD` bytes each).
    heads_at: usize,
    /// Byte offset of row 0's bitmap.
    rows_at: usize,
    /// Bytes per row's bitmap.
    row_len: usize,
    /// This process's row (a fork child's copy names the parent's until `forked_child`).
    me: AtomicUsize,
    /// The row prepared for a fork child, or `NONE`.
    pending: AtomicUsize,
    /// No sharing any more (this process has a private copy of the file).
    private: AtomicBool,
    /// The file's descriptor number and identity (a live sharer has it open there).
    fd: i32,
    dev: u64,
    ino: u64,
}

/// The start time of process `pid` (field 22 of `/proc/PID/stat`, clock ticks since boot), or
/// `None` if there is no such process.
pub fn start_time(pid: u32) -> Option<u64> {
    let path = format!("/proc/{pid}/stat");
    // Read where it takes no descriptor number of the program's (the reclaimer reads it).
    let s = crate::procfs::private(|| std::fs::read_to_string(path)).ok()?;
    // Fields after the command name (which may hold spaces and parentheses) start at field 3.
    let rest = &s[s.rfind(')')? + 1..];
    rest.split_ascii_whitespace().nth(19)?.parse().ok()
}

impl FileHolds {
    /// Holds for `nr_clusters` clusters of `file` (open on the descriptor the tier keeps), with
    /// this process holding none yet.
    pub(crate) fn new(nr_clusters: usize, file: &File) -> Result<Self, TierError> {
        use std::os::unix::fs::MetadataExt;
        let md = file.metadata().map_err(|e| TierError::io("stat swap file", &e))?;
        let words = nr_clusters.div_ceil(64);
        let heads_at = (64 + nr_clusters * 4).next_multiple_of(64);
        let rows_at = heads_at + NR_ROWS * ROW_HEAD;
        let row_len = (words * 8).next_multiple_of(64);
        let h = FileHolds {
            map: SharedMap::new(rows_at + NR_ROWS * row_len)?,
            nr_clusters,
            words,
            heads_at,
            rows_at,
            row_len,
            me: AtomicUsize::new(0),
            pending: AtomicUsize::new(NONE),
            private: AtomicBool::new(false),
            fd: file.as_raw_fd(),
            dev: md.dev(),
            ino: md.ino(),
        };
        let pid = std::process::id();
        h.head(0, START).store(start_time(pid).unwrap_or(0), Ordering::Relaxed);
        h.head(0, STATE).store(LIVE | u64::from(pid), Ordering::Release);
        h.map.u64_at(ROWS_USED).store(1, Ordering::Release);
        Ok(h)
    }

    fn count(&self, ci: usize) -> &AtomicU32 {
        assert!(ci < self.nr_clusters);
        self.map.u32_at(64 + ci * 4)
    }
    /// Word `i` of row `row`'s header (`STATE`, `START`, `STAMP`).
    fn head(&self, row: usize, i: usize) -> &AtomicU64 {
        assert!(row < NR_ROWS && i < ROW_HEAD / 8);
        self.map.u64_at(self.heads_at + row * ROW_HEAD + i * 8)
    }
    fn state(&self, row: usize) -> &AtomicU64 {
        self.head(row, STATE)
    }
    fn bits(&self, row: usize, w: usize) -> &AtomicU64 {
        assert!(row < NR_ROWS && w < self.words);
        self.map.u64_at(self.rows_at + row * self.row_len + w * 8)
    }
    fn has(&self, row: usize, ci: usize) -> bool {
        self.bits(row, ci / 64).load(Ordering::Acquire) >> (ci % 64) & 1 != 0
    }

    /// Clear every bit of `row` and drop its counts; then free the row.
    fn release_row(&self, row: usize) {
        for w in 0..self.words {
            let b = self.bits(row, w).swap(0, Ordering::AcqRel);
            for i in 0..64 {
                if b >> i & 1 != 0 {
                    self.count(w * 64 + i).fetch_sub(1, Ordering::AcqRel);
                }
            }
        }
        self.head(row, START).store(0, Ordering::Relaxed);
        self.state(row).store(0, Ordering::Release);
    }

    /// Release `row` if its state is still `seen` (one CAS to `REAPING` first: exactly one
    /// process releases a row). True if this call released it.
    fn retire(&self, row: usize, seen: u64) -> bool {
        let won = self.state(row).compare_exchange(seen, REAPING, Ordering::AcqRel, Ordering::Relaxed).is_ok();
        if won {
            self.release_row(row);
        }
        won
    }

    /// The tag (`LIVE`, `PENDING`, `REAPING`) of a state word.
    fn tag(state: u64) -> u64 {
        state >> TAG_SHIFT << TAG_SHIFT
    }

    /// The number of processes holding cluster `ci`.
    pub fn holders(&self, ci: usize) -> u32 {
        self.count(ci).load(Ordering::Acquire)
    }

    /// Rows in use (processes sharing the file, fork children not yet taken included).
    pub fn sharers(&self) -> usize {
        (0..self.rows_used()).filter(|&r| self.state(r).load(Ordering::Acquire) != 0).count()
    }

    /// Rows ever taken: every row at or past it is free. A row being taken as this is read may
    /// be missed, which neither counting (a statistic) nor reaping (a row just taken is not
    /// reaped) minds.
    fn rows_used(&self) -> usize {
        (self.map.u64_at(ROWS_USED).load(Ordering::Acquire) as usize).min(NR_ROWS)
    }

    /// Whether this process has switched sharing off.
    pub(crate) fn is_private(&self) -> bool {
        self.private.load(Ordering::Acquire)
    }

    /// Parent, before `fork` (no allocation or freeing of clusters in flight in this process):
    /// take a row for the child holding what this process holds. False if no row is free even
    /// after reaping (the child must then get a copy of the file) or this process is private.
    pub(crate) fn share_for_fork(&self) -> bool {
        if self.is_private() {
            return false;
        }
        let pid = u64::from(std::process::id());
        let take = || {
            let row = (0..NR_ROWS).find(|&r| {
                self.state(r).compare_exchange(0, PENDING | pid, Ordering::AcqRel, Ordering::Relaxed).is_ok()
            })?;
            self.map.u64_at(ROWS_USED).fetch_max(row as u64 + 1, Ordering::AcqRel);
            Some(row)
        };
        let Some(row) = take().or_else(|| {
            self.reap();
            take()
        }) else {
            return false;
        };
        self.head(row, STAMP).store(now_ns(), Ordering::Relaxed);
        let me = self.me.load(Ordering::Relaxed);
        for w in 0..self.words {
            let b = self.bits(me, w).load(Ordering::Acquire);
            // Counts first, then the bits: a reaper of this row (only after the grace period)
            // never drops a count that was not added.
            for i in 0..64 {
                if b >> i & 1 != 0 {
                    self.count(w * 64 + i).fetch_add(1, Ordering::AcqRel);
                }
            }
            self.bits(row, w).store(b, Ordering::Release);
        }
        self.pending.store(row, Ordering::Release);
        true
    }

    /// Child, right after `fork`: take the row the parent prepared. False if there was none or
    /// it was reaped meanwhile (the child must not use the shared file then).
    pub(crate) fn forked_child(&self) -> bool {
        let row = self.pending.swap(NONE, Ordering::AcqRel);
        if row == NONE {
            return false;
        }
        let pid = std::process::id();
        let cur = self.state(row).load(Ordering::Acquire);
        if Self::tag(cur) != PENDING {
            return false;
        }
        self.head(row, START).store(start_time(pid).unwrap_or(0), Ordering::Relaxed);
        if self.state(row).compare_exchange(cur, LIVE | u64::from(pid), Ordering::AcqRel, Ordering::Relaxed).is_err() {
            return false;
        }
        self.me.store(row, Ordering::Release);
        true
    }

    /// Parent, after `fork`: `child_took` says whether the child took its row; if not, the row
    /// is given up.
    pub(crate) fn forked_parent(&self, child_took: bool) {
        let row = self.pending.swap(NONE, Ordering::AcqRel);
        if row != NONE && !child_took {
            let cur = self.state(row).load(Ordering::Acquire);
            if Self::tag(cur) == PENDING {
                self.retire(row, cur);
            }
        }
    }

    /// This process now has a file of its own (a copy): every cluster is its own from now on.
    pub(crate) fn go_private(&self) {
        self.pending.store(NONE, Ordering::Release);
        self.private.store(true, Ordering::Release);
    }

    /// Whether process `pid`, started at `start`, still shares the file.
    fn alive(&self, pid: u32, start: u64) -> bool {
        use std::os::unix::fs::MetadataExt;
        if start_time(pid) != Some(start) {
            return false;
        }
        match std::fs::metadata(format!("/proc/{pid}/fd/{}", self.fd)) {
            Ok(m) => m.dev() == self.dev && m.ino() == self.ino,
            // A process we may not inspect is kept (its holds only cost space).
            Err(e) => e.kind() == std::io::ErrorKind::PermissionDenied,
        }
    }

    /// Release the rows of processes gone (exited, killed, or replaced by `exec`). Returns the
    /// number released. Reads `/proc`: not on the fault path.
    pub(crate) fn reap(&self) -> usize {
        if self.is_private() {
            return 0;
        }
        let me = self.me.load(Ordering::Relaxed);
        let mut n = 0;
        for row in 0..self.rows_used() {
            let s = self.state(row).load(Ordering::Acquire);
            if row == me || s == 0 || Self::tag(s) == REAPING {
                continue;
            }
            let pid = (s & PID_MASK) as u32;
            let gone = if Self::tag(s) == LIVE {
                !self.alive(pid, self.head(row, START).load(Ordering::Relaxed))
            } else {
                // PENDING: its parent is forking; reaped only if the parent is gone for long.
                start_time(pid).is_none()
                    && now_ns().saturating_sub(self.head(row, STAMP).load(Ordering::Relaxed)) > PENDING_GRACE_NS
            };
            if gone && self.retire(row, s) {
                n += 1;
            }
        }
        n
    }
}

impl ClusterHolds for FileHolds {
    fn claim(&self, ci: usize) -> bool {
        if self.is_private() {
            return true;
        }
        let me = self.me.load(Ordering::Relaxed);
        if self.has(me, ci) {
            return true;
        }
        if self.count(ci).compare_exchange(0, 1, Ordering::AcqRel, Ordering::Relaxed).is_err() {
            return false;
        }
        self.bits(me, ci / 64).fetch_or(1 << (ci % 64), Ordering::AcqRel);
        true
    }

    fn sole(&self, ci: usize) -> bool {
        self.is_private()
            || (self.count(ci).load(Ordering::Acquire) == 1 && self.has(self.me.load(Ordering::Relaxed), ci))
    }

    fn free(&self, ci: usize) -> bool {
        self.is_private() || self.count(ci).load(Ordering::Acquire) == 0
    }

    fn release(&self, ci: usize) {
        if self.is_private() {
            return;
        }
        let me = self.me.load(Ordering::Relaxed);
        let mask = 1u64 << (ci % 64);
        if self.bits(me, ci / 64).fetch_and(!mask, Ordering::AcqRel) & mask != 0 {
            self.count(ci).fetch_sub(1, Ordering::AcqRel);
        }
    }
}

impl Drop for FileHolds {
    fn drop(&mut self) {
        // This process references no slot of the file any more.
        if !self.is_private() {
            let me = self.me.load(Ordering::Relaxed);
            let s = self.state(me).load(Ordering::Acquire);
            if Self::tag(s) == LIVE {
                self.retire(me, s);
            }
            self.forked_parent(false);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Counting the sharers (every statistics snapshot does) and reaping read the rows'
    /// headers, not a page of every row (with a 64 GiB file: 32 768 clusters, 4 KiB bitmaps,
    /// 1024 pages of shared memory), and only the headers of rows ever taken (all 1024 headers
    /// are 16 pages). Rows taken for fork children are counted.
    #[test]
    fn counting_rows_reads_only_their_headers() {
        let file = tempfile::tempfile().unwrap();
        let h = FileHolds::new(32_768, &file).unwrap();
        assert_eq!(h.sharers(), 1);
        h.reap();
        assert_eq!(h.sharers(), 1);
        let touched = h.map.resident_bytes();
        assert!(touched <= 8 << 10, "{touched} bytes of the holds touched to count and reap the rows");
        // Rows taken for children (this process's own pid, alive: not reaped) count.
        for n in 2..=70 {
            assert!(h.share_for_fork());
            h.pending.store(NONE, Ordering::Release);
            assert_eq!(h.sharers(), n);
        }
        h.reap();
        assert_eq!(h.sharers(), 70);
    }
}
