//! One limit for the whole process tree, as a memory cgroup's `memory.max` (issue 12, item 1).
//!
//! `uswap run` creates a small *budget file* ([`create`]; the preload library finds it through
//! `USWAP_TREE_BUDGET`, in the tree's statistics directory): a header with the limit and one
//! slot per process of the tree. Every process that starts under the pager (after `exec`, and
//! every `fork` child) maps it shared and claims a slot ([`attach`], [`in_fork_child`]); every
//! [`UPDATE_MS`] it writes its charge there and sets its own pager's limit in force
//! ([`crate::Pager::set_limit`]) from the tree's total ([`update`]):
//! - under the limit, a process may grow into its part of what the tree leaves free: its
//!   charge plus the free part divided by the number of processes (so the limits in force add
//!   up to the limit, and two processes growing at once cannot both take all of it);
//! - over it, every process shrinks in proportion to its charge (`charge × limit / total`),
//!   so the tree comes back under the limit within a reclaim pass of each process. An idle
//!   process shrinks with the others while an active one faults its pages back: the memory
//!   moves to where it is used, though not coldest-page-first across the tree (each pager
//!   sees only its own pages; a shared LRU is the shared swap space's work).
//!
//! A process's charge counts pages it shares copy-on-write with its fork parent or children
//! (a Redis BGSAVE child starts with all of its parent's resident memory) in proportion, as
//! the kernel's Pss does: its charge minus `Rss_Anon - Pss_Anon` from `/proc/self/smaps_rollup`
//! (read only while the tree has more than one live process, and only by a process that has
//! forked or is a fork child: an exec'd program shares no anonymous page, and the read walks
//! the page tables, 4 % of a CPU for a thrashing compiler). A process that ends through
//! `exit(3)` frees its slot; one that is killed leaves it, and the next update of any process
//! finds the pid gone (`kill(pid, 0)`) and frees it; a process image replaced by `exec`
//! leaves its slot to its successor of the same pid, which takes it over.
//!
//! Locking: none. A slot is claimed by CAS of its pid from 0, figures are atomics in the
//! shared mapping, and each process writes only its own slot (and frees dead ones by CAS).

use std::sync::atomic::{AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering};

/// "uswaptre".
const MAGIC: u64 = 0x7573_7761_7074_7265;
/// Processes one tree may have under the pager at once (more run with the whole limit each,
/// as before, and are counted in `tree.overflow`).
pub const SLOTS: usize = 1022;
/// Bytes of the budget file.
pub const FILE_BYTES: usize = 16 + 16 + SLOTS * 16;
/// How often a process publishes its charge and takes its limit from the tree's total.
pub const UPDATE_MS: u64 = 10;

#[repr(C)]
struct Header {
    magic: AtomicU64,
    limit: AtomicU64,
    /// Processes that found no free slot.
    overflow: AtomicU64,
    _reserved: AtomicU64,
}

#[repr(C)]
struct Slot {
    pid: AtomicU32,
    _pad: AtomicU32,
    /// Bytes charged, shared copy-on-write pages counted in proportion.
    charged: AtomicU64,
}

#[repr(C)]
struct Budget {
    header: Header,
    slots: [Slot; SLOTS],
}

const _: () = assert!(std::mem::size_of::<Budget>() == FILE_BYTES);

static MAP: AtomicPtr<Budget> = AtomicPtr::new(std::ptr::null_mut());
static MY_SLOT: AtomicUsize = AtomicUsize::new(usize::MAX);
/// The tree's total charge and the processes in it at the last update (for the statistics).
static LAST_TOTAL: AtomicU64 = AtomicU64::new(0);
static LAST_LIVE: AtomicU64 = AtomicU64::new(0);
/// Updates so far, and the shared anonymous bytes at the last reading.
static UPDATES: AtomicU64 = AtomicU64::new(0);
static SHARED: AtomicU64 = AtomicU64::new(0);
/// This process has forked, or is a fork child: it may share anonymous pages copy-on-write.
static FORKED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// This process has forked, or is a fork child (from the fork handlers): from now on its
/// charge discounts the pages it shares copy-on-write.
pub fn note_fork() {
    FORKED.store(true, Ordering::Relaxed);
}

/// Write a new budget file at `path` for a tree limited to `limit` bytes (by `uswap run`).
pub fn create(path: &std::path::Path, limit: u64) -> std::io::Result<()> {
    let mut b = vec![0u8; FILE_BYTES];
    b[..8].copy_from_slice(&MAGIC.to_ne_bytes());
    b[8..16].copy_from_slice(&limit.to_ne_bytes());
    std::fs::write(path, b)
}

fn budget() -> Option<&'static Budget> {
    let p = MAP.load(Ordering::Acquire);
    // SAFETY: MAP is null or the shared mapping made by `attach`, which is never unmapped,
    // sized for a Budget, and holds only atomics (any bit pattern is valid).
    (!p.is_null()).then(|| unsafe { &*p })
}

/// Map the tree's budget file at `path` and claim a slot for this process (called when the
/// pager starts). With an unusable file the process keeps the whole limit to itself, as a
/// process alone would. Returns whether it joined the tree.
pub fn attach(path: &std::ffi::CStr) -> bool {
    if budget().is_none() {
        let _making = crate::own::making();
        // SAFETY: open/mmap/close of the budget file; the mapping is shared, read-write, sized
        // for a Budget, and kept for the life of the process (and its fork children).
        let m = unsafe {
            let fd = libc::open(path.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC);
            if fd < 0 {
                return false;
            }
            let mut st: libc::stat = std::mem::zeroed();
            let ok = libc::fstat(fd, &mut st) == 0 && st.st_size as usize == FILE_BYTES;
            // The system call itself: in the LD_PRELOAD library `mmap` is the interposer.
            let m = if ok {
                // Every argument as a full register (a variadic i32 leaves the upper half
                // undefined, and the kernel reads all 64 bits).
                libc::syscall(
                    libc::SYS_mmap,
                    0 as libc::c_long,
                    FILE_BYTES as libc::c_long,
                    libc::c_long::from(libc::PROT_READ | libc::PROT_WRITE),
                    libc::c_long::from(libc::MAP_SHARED),
                    libc::c_long::from(fd),
                    0 as libc::c_long,
                ) as *mut libc::c_void
            } else {
                libc::MAP_FAILED
            };
            libc::close(fd);
            m
        };
        if m == libc::MAP_FAILED {
            return false;
        }
        crate::own::add(m as usize, FILE_BYTES);
        let b = m.cast::<Budget>();
        // SAFETY: just mapped, FILE_BYTES long (checked with fstat), atomics only.
        if unsafe { &*b }.header.magic.load(Ordering::Relaxed) != MAGIC {
            return false;
        }
        MAP.store(b, Ordering::Release);
    }
    claim();
    MY_SLOT.load(Ordering::Relaxed) != usize::MAX
}

/// Claim a slot for this process (at start, and in a fork child, which shares the parent's
/// mapping but not its slot).
fn claim() {
    let Some(b) = budget() else { return };
    let me = std::process::id();
    MY_SLOT.store(usize::MAX, Ordering::Relaxed);
    // The image this one replaced by exec (same pid) left its slot: take it over.
    for (i, s) in b.slots.iter().enumerate() {
        if s.pid.load(Ordering::Acquire) == me {
            s.charged.store(0, Ordering::Relaxed);
            MY_SLOT.store(i, Ordering::Relaxed);
            return;
        }
    }
    for pass in 0..2 {
        for (i, s) in b.slots.iter().enumerate() {
            if s.pid.compare_exchange(0, me, Ordering::AcqRel, Ordering::Relaxed).is_ok() {
                s.charged.store(0, Ordering::Relaxed);
                MY_SLOT.store(i, Ordering::Relaxed);
                return;
            }
        }
        if pass == 0 {
            free_dead(b);
        }
    }
    b.header.overflow.fetch_add(1, Ordering::Relaxed);
}

/// In a fork child: a slot of its own (the parent keeps its slot).
pub fn in_fork_child() {
    UPDATES.store(0, Ordering::Relaxed);
    claim();
}

/// Give the slot back (at exit).
pub fn detach() {
    let (Some(b), i) = (budget(), MY_SLOT.swap(usize::MAX, Ordering::Relaxed)) else { return };
    if let Some(s) = b.slots.get(i) {
        s.charged.store(0, Ordering::Relaxed);
        let _ = s.pid.compare_exchange(std::process::id(), 0, Ordering::AcqRel, Ordering::Relaxed);
    }
}

/// Free the slots of processes that no longer exist (killed before `exit(3)`).
fn free_dead(b: &Budget) {
    for s in &b.slots {
        let pid = s.pid.load(Ordering::Acquire);
        // kill with signal 0 only checks that the process exists.
        if pid != 0
            // SAFETY: signal 0 sends nothing.
            && unsafe { libc::kill(pid as i32, 0) } != 0
            && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH)
        {
            s.charged.store(0, Ordering::Relaxed);
            let _ = s.pid.compare_exchange(pid, 0, Ordering::AcqRel, Ordering::Relaxed);
        }
    }
}

/// The limit in force for a process charged `own` bytes in a tree of `live` processes
/// charged `total` bytes under `limit`: its charge plus its part of the free room, or, over the
/// limit, its charge in proportion. Either way the shares add up to the limit.
pub fn share(own: u64, total: u64, live: u64, limit: u64) -> u64 {
    if total <= limit {
        own + (limit - total) / live.max(1)
    } else {
        (own as u128 * limit as u128 / total.max(1) as u128) as u64
    }
}

/// Bytes of anonymous memory this process shares with others and is counted for in full
/// (`Rss_Anon - Pss_Anon` of `/proc/self/smaps_rollup`).
fn shared_anon() -> u64 {
    let mut buf = [0u8; 2048];
    // SAFETY: open/read/close of a procfs file into a stack buffer.
    let n = unsafe {
        let fd = libc::open(c"/proc/self/smaps_rollup".as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return 0;
        }
        let n = libc::read(fd, buf.as_mut_ptr().cast(), buf.len());
        libc::close(fd);
        n
    };
    let Ok(s) = std::str::from_utf8(&buf[..n.max(0) as usize]) else { return 0 };
    let kb = |key: &str| {
        s.lines()
            .find(|l| l.starts_with(key))
            .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
            .unwrap_or(0)
            * 1024
    };
    kb("Rss_Anon:").saturating_sub(kb("Pss_Anon:"))
}

/// Publish this process's charge and take its limit from the tree (from the scan thread,
/// every [`UPDATE_MS`]).
pub fn update(p: &crate::Pager) {
    let Some(b) = budget() else { return };
    let Some(mine) = b.slots.get(MY_SLOT.load(Ordering::Relaxed)) else { return };
    // The other processes: one pass over the slots.
    let (mut others, mut live) = (0u64, 1u64);
    for s in b.slots.iter().filter(|s| !std::ptr::eq(*s, mine) && s.pid.load(Ordering::Relaxed) != 0) {
        others += s.charged.load(Ordering::Relaxed);
        live += 1;
    }
    // Shared pages are re-read every tenth update (smaps_rollup walks the page tables).
    let n = UPDATES.fetch_add(1, Ordering::Relaxed);
    if live > 1 && FORKED.load(Ordering::Relaxed) && n.is_multiple_of(10) {
        SHARED.store(shared_anon(), Ordering::Relaxed);
    }
    // The memory outside the pager is the process's too (as a cgroup charges it): the tree
    // sees it, and the pager's limit in force is its share less it (`Pager::set_outside`).
    let charged = p.charged_bytes() + p.outside_bytes();
    let own = if live > 1 { charged.saturating_sub(SHARED.load(Ordering::Relaxed)) } else { charged };
    mine.charged.store(own, Ordering::Relaxed);
    let total = others + own;
    LAST_TOTAL.store(total, Ordering::Relaxed);
    LAST_LIVE.store(live, Ordering::Relaxed);
    let limit = b.header.limit.load(Ordering::Relaxed);
    p.set_limit(share(own, total, live, limit));
}

/// Look for dead processes' slots (from the scan thread, about once a second).
pub fn reap() {
    if let Some(b) = budget() {
        free_dead(b);
    }
}

/// The tree's figures for the statistics (None outside a tree).
pub fn stats_json() -> Option<serde_json::Value> {
    let b = budget()?;
    Some(serde_json::json!({
        "limit_bytes": b.header.limit.load(Ordering::Relaxed),
        "charged_bytes": LAST_TOTAL.load(Ordering::Relaxed),
        "processes": LAST_LIVE.load(Ordering::Relaxed),
        "overflow": b.header.overflow.load(Ordering::Relaxed),
        "slot": MY_SLOT.load(Ordering::Relaxed),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_grow_into_free_room_and_shrink_in_proportion() {
        assert_eq!(share(10, 30, 1, 100), 80, "alone under the limit: own + what is free");
        assert_eq!(share(10, 30, 2, 100) + share(20, 30, 2, 100), 100, "two: the free room split");
        assert_eq!(share(0, 100, 3, 100), 0);
        assert_eq!(share(60, 120, 2, 100), 50, "over it: in proportion");
        assert_eq!(share(30, 120, 2, 100) + share(90, 120, 2, 100), 100, "the shares add up to the limit");
    }
}
