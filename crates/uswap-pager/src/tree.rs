//! One limit for the whole process tree, as a memory cgroup's `memory.max`.
//!
//! `uswap run` creates a small *budget file* ([`create`]; the preload library finds it through
//! [`crate::launch::TREE_BUDGET`], in the tree's statistics directory): a header with the limit and one
//! slot per process of the tree. Every process that starts under the pager (after `exec`, and
//! every `fork` child) maps it shared and claims a slot ([`attach`], [`in_fork_child`]); every
//! [`UPDATE_MS`] it writes there its charge and how fast it uses memory, and sets its own
//! pager's limit in force ([`crate::Pager::set_limit`]) to its share of the limit ([`share`],
//! from every slot; [`update`]).
//!
//! *Coldest first across the tree.* Each pager sees only its own pages, and none sees access
//! bits, so the tree cannot pick the coldest page of all as one kernel LRU would. It picks the
//! coldest *process* instead, from what the kernel does tell: how fast a process brings pages
//! in (pages its faults mapped, per second) and how much it runs (its program threads' CPU
//! time, the pager's own threads left out: a running process touches its memory without
//! faulting once it fits). Its *use rate* `r` (bytes per second) is that inflow plus the CPU
//! fraction times its charge, averaged over [`RATE_TAU_MS`]. Read as a FIFO, which is what
//! each pager's active list is, a process charged `c` holds memory `c / r` seconds old at most,
//! and a tree-wide FIFO evicting everything older than `t` would keep `min(c, t · r)` of it.
//! So over the limit the shares are those of a tree-wide FIFO: `t` is chosen so that the young
//! memory fills the limit less a slack of 1/32, a process keeps `min(c, t · r)`, and an idle
//! process (`r` = 0: asleep, waiting for its children or for a pipe) keeps only what the busy
//! ones leave. The slack, and under the limit the free room, goes to the processes in
//! proportion to their use rate (a quarter of it split evenly, so an idle process that wakes
//! can start), so the memory moves to where it is used. With no use anywhere the shares are
//! in proportion to the charges. Either way the shares add up to the limit.
//!
//! A process's charge counts pages it shares copy-on-write with its fork parent or children
//! (a Redis BGSAVE child starts with all of its parent's resident memory) in proportion, as
//! the kernel's Pss does: its charge minus `Anonymous - Pss_Anon` from `/proc/self/smaps_rollup`
//! (read only while the tree has more than one live process, and only by a process that has
//! forked or is a fork child: an exec'd program shares no anonymous page, and the read walks
//! the page tables, 4 % of a CPU for a thrashing compiler; every 100 ms). Its pager's limit in
//! force is its share, against its charge with every resident page whole, so shared pages
//! part without taking the tree over its limit; a fork child counts its own copy of the fixed
//! overhead (the preload's scan). While a MiB or more is shared, reclaim passes over folios
//! the relative maps too (`Pager::set_cow_shared`). A process that ends through
//! `exit(3)` or `_exit(2)` frees its slot; one that is killed leaves it, and the next reaping
//! of any process ([`REAP_MS`]) finds the pid gone (`kill(pid, 0)`) and frees it; a process image replaced by `exec`
//! leaves its slot to its successor of the same pid, which takes it over.
//!
//! Locking: none. A slot is claimed by CAS of its pid from 0, figures are atomics in the
//! shared mapping, and each process writes only its own slot (and frees dead ones by CAS).

use std::sync::atomic::{AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering};

/// What `uswap run`'s watch finds in `/proc/PID/maps` of a process where the preload library
/// stands aside (`/memfd:uswap-inert:REASON (deleted)`, a one-page memfd mapping the library
/// leaves): the process maps the library but runs without a pager, so the watch counts it as
/// unmanaged instead of taking it for a managed one. REASON: [`INERT_GO`], [`INERT_NO_UFFD`].
pub const INERT_MARK: &str = "/memfd:uswap-inert:";
/// A Go program (`crate::exe::GO_REFUSED`).
pub const INERT_GO: &str = "go";
/// A process that may not open a userfaultfd with fork events
/// (`crate::uffd::Uffd::fork_events_permitted`): one that dropped root privileges.
pub const INERT_NO_UFFD: &str = "no-uffd";

/// "uswaptre".
const MAGIC: u64 = 0x7573_7761_7074_7265;
/// Processes one tree may have under the pager at once (more run with the whole limit each,
/// as before, and are counted in `tree.overflow`).
pub const SLOTS: usize = 1022;
/// Bytes of the budget file.
pub const FILE_BYTES: usize = 16 + 16 + SLOTS * 16;
/// How often a process publishes its charge and takes its limit from the tree's total.
pub const UPDATE_MS: u64 = 10;
/// How often a process looks for the slots of processes killed before they could free them
/// (one `kill(pid, 0)` per live slot).
pub const REAP_MS: u64 = 100;
/// Time constant of the use rate's moving average.
pub const RATE_TAU_MS: u64 = 500;

#[repr(C)]
struct Header {
    magic: AtomicU64,
    limit: AtomicU64,
    /// Processes that found no free slot.
    overflow: AtomicU64,
    /// Anonymous bytes of the tree's processes that run without a pager (written by `uswap
    /// run`, [`set_unmanaged`]): memory no pager can reclaim, taken off the limit first.
    unmanaged: AtomicU64,
}

#[repr(C)]
struct Slot {
    pid: AtomicU32,
    /// Use rate, KiB per second (see the module's paragraph).
    rate_kib: AtomicU32,
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
/// This process's use rate at the last update (bytes/s).
static LAST_RATE: AtomicU64 = AtomicU64::new(0);
/// Updates so far, and the shared anonymous bytes at the last reading.
static UPDATES: AtomicU64 = AtomicU64::new(0);
static SHARED: AtomicU64 = AtomicU64::new(0);
/// This process has forked, or is a fork child: it may share anonymous pages copy-on-write.
static FORKED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
/// The use rate's state (the scan thread's alone): when it was last updated (monotonic ns, 0:
/// never), the pager's inflow and the program's CPU time then, and the rate (bytes/s, f64 bits).
static RATE_AT: AtomicU64 = AtomicU64::new(0);
static RATE_INFLOW: AtomicU64 = AtomicU64::new(0);
static RATE_CPU: AtomicU64 = AtomicU64::new(0);
static RATE: AtomicU64 = AtomicU64::new(0);

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

/// The pids holding a slot in the budget file at `path` (read, not mapped: for `uswap run`,
/// which samples the tree's memory). Empty if the file cannot be read.
pub fn pids_in(path: &std::path::Path) -> Vec<u32> {
    let Ok(b) = std::fs::read(path) else { return Vec::new() };
    if b.len() != FILE_BYTES || b[..8] != MAGIC.to_ne_bytes() {
        return Vec::new();
    }
    b[std::mem::size_of::<Header>()..]
        .chunks_exact(std::mem::size_of::<Slot>())
        .filter_map(|s| Some(u32::from_ne_bytes(s[..4].try_into().ok()?)).filter(|&p| p != 0))
        .collect()
}

/// Run `f` on the budget file at `path`, mapped for the call (for `uswap run`, which is no
/// member of the tree); None if the file cannot be mapped or is not a budget file.
fn with_file<R>(path: &std::path::Path, f: impl FnOnce(&Budget) -> R) -> Option<R> {
    use std::os::fd::AsRawFd;
    let file = std::fs::OpenOptions::new().read(true).write(true).open(path).ok()?;
    if file.metadata().ok()?.len() != FILE_BYTES as u64 {
        return None;
    }
    // SAFETY: a fresh shared mapping of the whole file (FILE_BYTES long, checked above),
    // unmapped below; the runner is not under the preload, so this is the plain libc call.
    let m = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            FILE_BYTES,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            file.as_raw_fd(),
            0,
        )
    };
    if m == libc::MAP_FAILED {
        return None;
    }
    // SAFETY: the mapping is FILE_BYTES long, page-aligned, and a Budget holds only atomics
    // (any bit pattern is valid); it lives until the munmap below, after the last use of `b`.
    let b = unsafe { &*m.cast::<Budget>() };
    let r = (b.header.magic.load(Ordering::Relaxed) == MAGIC).then(|| f(b));
    // SAFETY: unmapping the mapping made above; `b` is not used after this.
    unsafe { libc::munmap(m, FILE_BYTES) };
    r
}

/// Publish the anonymous bytes of the tree's processes that run without a pager (by `uswap
/// run`, which finds them): every pager of the tree shares the limit less that.
pub fn set_unmanaged(path: &std::path::Path, bytes: u64) {
    with_file(path, |b| b.header.unmanaged.store(bytes, Ordering::Relaxed));
}

/// The unmanaged bytes last published to the budget file at `path` (0 if unreadable).
pub fn unmanaged_in(path: &std::path::Path) -> u64 {
    with_file(path, |b| b.header.unmanaged.load(Ordering::Relaxed)).unwrap_or(0)
}

/// Free the slot `pid` holds in the budget file at `path`, if any (by `uswap run`, for a
/// process whose new image runs without a pager: the slot its old image held is stale).
pub fn release(path: &std::path::Path, pid: u32) {
    with_file(path, |b| {
        for s in &b.slots {
            if s.pid.compare_exchange(pid, 0, Ordering::AcqRel, Ordering::Relaxed).is_ok() {
                s.charged.store(0, Ordering::Relaxed);
            }
        }
    });
}

/// The limit the pagers of the tree share: the tree's limit less the memory of its processes
/// that run without a pager, never under a quarter of the limit (as the memory outside one
/// pager, [`crate::Pager::set_outside`]).
fn shared_limit(b: &Budget) -> u64 {
    let limit = b.header.limit.load(Ordering::Relaxed);
    limit.saturating_sub(b.header.unmanaged.load(Ordering::Relaxed)).max(limit / 4)
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
    RATE_AT.store(0, Ordering::Relaxed);
    RATE.store(0, Ordering::Relaxed);
    claim();
}

/// This process's slot of the tree's budget. None outside a tree, and in a `vfork` child,
/// which runs in its parent's memory (and sees the parent's slot) under a pid of its own.
fn my_slot() -> Option<&'static Slot> {
    budget()?.slots.get(MY_SLOT.load(Ordering::Relaxed)).filter(|s| s.pid.load(Ordering::Relaxed) == std::process::id())
}

/// Whether this process holds a slot of the tree's budget (`my_slot`).
pub fn holds_slot() -> bool {
    my_slot().is_some()
}

/// Give the slot back (at exit, `exit(3)` or `_exit(2)`). Nothing in a `vfork` child: the
/// slot is its parent's.
pub fn detach() {
    let Some(s) = my_slot() else { return };
    MY_SLOT.store(usize::MAX, Ordering::Relaxed);
    s.charged.store(0, Ordering::Relaxed);
    let _ = s.pid.compare_exchange(std::process::id(), 0, Ordering::AcqRel, Ordering::Relaxed);
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

/// A process of the tree as its share sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Member {
    /// Bytes charged (resident, swap cache, pool, memory outside the pager).
    pub charge: u64,
    /// Use rate, bytes per second: pages brought in plus CPU fraction × charge.
    pub rate: u64,
}

/// The limit in force of `me` in a tree of `me` and `others` under `limit` (see the module's
/// paragraph): under the limit, its charge plus a part of the free room; over it, what a
/// tree-wide FIFO would keep of it, plus a part of a slack of `limit / 32`. The parts go by
/// use rate (a quarter of them evenly); with no use anywhere, in proportion to the charges.
/// The shares of all members add up to the limit (to rounding).
pub fn share<I: Iterator<Item = Member> + Clone>(me: Member, others: I, limit: u64) -> u64 {
    let all = || std::iter::once(me).chain(others.clone());
    let (mut total, mut rates, mut live, mut busy) = (0u64, 0u64, 0u64, 0u64);
    for m in all() {
        total += m.charge;
        rates += m.rate;
        live += 1;
        if m.rate > 0 {
            busy += m.charge;
        }
    }
    let part = |room: u64| {
        let w = if rates == 0 { 1.0 / live as f64 } else { 0.25 / live as f64 + 0.75 * me.rate as f64 / rates as f64 };
        (room as f64 * w) as u64
    };
    if total <= limit {
        return me.charge + part(limit - total);
    }
    if rates == 0 {
        return (me.charge as u128 * limit as u128 / total as u128) as u64;
    }
    let slack = limit / 32;
    let target = limit - slack;
    let kept = if busy <= target {
        // Every busy process keeps what it has; the idle ones share the rest by charge
        // (`total > busy`: the tree is over the limit, the busy ones are not).
        if me.rate > 0 {
            me.charge
        } else {
            ((target - busy) as u128 * me.charge as u128 / (total - busy) as u128) as u64
        }
    } else {
        // The age `t` at which the young memory of the tree fills `target`: the kept memory
        // `sum(min(c, t * r))` grows with `t` from 0 to `busy`.
        let young = |t: f64| all().map(|m| (m.charge as f64).min(t * m.rate as f64)).sum::<f64>();
        let (mut lo, mut hi) =
            (0.0f64, all().filter(|m| m.rate > 0).map(|m| m.charge as f64 / m.rate as f64).fold(0.0, f64::max));
        for _ in 0..64 {
            let mid = (lo + hi) / 2.0;
            if young(mid) < target as f64 {
                lo = mid
            } else {
                hi = mid
            }
        }
        (me.charge as f64).min(lo * me.rate as f64) as u64
    };
    kept + part(slack)
}

/// Bytes of anonymous memory this process shares with others and is counted for in full
/// ([`shared_from_rollup`] of `/proc/self/smaps_rollup`).
fn shared_anon() -> u64 {
    let mut buf = [0u8; 2048];
    let n = uswap::procfs::read_start(c"/proc/self/smaps_rollup", &mut buf).unwrap_or(0);
    std::str::from_utf8(&buf[..n]).map_or(0, shared_from_rollup)
}

/// `Anonymous - Pss_Anon` of an smaps_rollup text, in bytes: the part of the anonymous
/// resident pages that other processes map too and are counted for. (smaps_rollup names the
/// anonymous RSS `Anonymous:`; `RssAnon:` is in `/proc/PID/status`, and it has no
/// `Rss_Anon:` line.)
fn shared_from_rollup(s: &str) -> u64 {
    let kb = |key: &str| {
        s.lines()
            .find(|l| l.starts_with(key))
            .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
            .unwrap_or(0)
            * 1024
    };
    kb("Anonymous:").saturating_sub(kb("Pss_Anon:"))
}

/// This process's use rate, bytes per second (from the scan thread: the caller's own CPU time
/// is left out with the pager's threads').
fn use_rate(p: &crate::Pager, charge: u64) -> u64 {
    let now = crate::stats::now_ns();
    let inflow = p.inflow_pages() * crate::PAGE_SIZE as u64;
    let process = crate::sys::cpu_ns(libc::CLOCK_PROCESS_CPUTIME_ID).unwrap_or(0);
    let ours = p.threads_cpu_ns() + crate::sys::cpu_ns(libc::CLOCK_THREAD_CPUTIME_ID).unwrap_or(0);
    let cpu = process.saturating_sub(ours);
    let then = RATE_AT.swap(now, Ordering::Relaxed);
    let (inflow0, cpu0) = (RATE_INFLOW.swap(inflow, Ordering::Relaxed), RATE_CPU.swap(cpu, Ordering::Relaxed));
    let mut rate = f64::from_bits(RATE.load(Ordering::Relaxed));
    if then != 0 && now > then {
        let dt = (now - then) as f64 / 1e9;
        let busy = (cpu.saturating_sub(cpu0) as f64 / 1e9 / dt).min(1.0);
        let now_rate = inflow.saturating_sub(inflow0) as f64 / dt + busy * charge as f64;
        let a = 1.0 - (-dt * 1000.0 / RATE_TAU_MS as f64).exp();
        rate += a * (now_rate - rate);
        RATE.store(rate.to_bits(), Ordering::Relaxed);
    }
    rate as u64
}

/// Shared copy-on-write memory (`Anonymous - Pss_Anon`) from which reclaim passes over
/// folios a fork relative maps too (`Pager::set_cow_shared`).
const COW_SHARED_MIN: u64 = 1 << 20;

/// Publish this process's charge and use rate and take its share of the tree's limit (from
/// the scan thread, every [`UPDATE_MS`]).
pub fn update(p: &crate::Pager) {
    let Some(b) = budget() else { return };
    let Some(mine) = b.slots.get(MY_SLOT.load(Ordering::Relaxed)) else { return };
    let others = b.slots.iter().filter(|s| !std::ptr::eq(*s, mine) && s.pid.load(Ordering::Relaxed) != 0);
    let live = 1 + others.clone().count() as u64;
    // Shared pages are re-read every tenth update (smaps_rollup walks the page tables).
    let n = UPDATES.fetch_add(1, Ordering::Relaxed);
    if live > 1 && FORKED.load(Ordering::Relaxed) && n.is_multiple_of(10) {
        SHARED.store(shared_anon(), Ordering::Relaxed);
    }
    // The memory outside the pager is the process's too (as a cgroup charges it): the tree
    // sees it, and the pager's limit in force is its share less it (`Pager::set_outside`).
    let charged = p.charged_bytes() + p.outside_bytes();
    let own = if live > 1 { charged.saturating_sub(SHARED.load(Ordering::Relaxed)) } else { charged };
    // Reclaim prefers folios no relative maps while a good part is shared.
    p.set_cow_shared(live > 1 && SHARED.load(Ordering::Relaxed) >= COW_SHARED_MIN);
    let rate = use_rate(p, own);
    mine.charged.store(own, Ordering::Relaxed);
    mine.rate_kib.store(u32::try_from(rate / 1024).unwrap_or(u32::MAX), Ordering::Relaxed);
    let members = others.map(|s| Member {
        charge: s.charged.load(Ordering::Relaxed),
        rate: u64::from(s.rate_kib.load(Ordering::Relaxed)) * 1024,
    });
    let me = Member { charge: own, rate: rate / 1024 * 1024 };
    // With a relative live, the pager pins no thread beside its event thread (the `cpu`
    // module: two processes pinned to one CPU could not be parted by the scheduler).
    p.place.set_relatives_busy(live > 1);
    LAST_TOTAL.store(own + members.clone().map(|m| m.charge).sum::<u64>(), Ordering::Relaxed);
    LAST_LIVE.store(live, Ordering::Relaxed);
    LAST_RATE.store(me.rate, Ordering::Relaxed);
    // The limit in force is the share itself, which the pager's charge (every resident page
    // counted whole, shared or not) must fit: the tree's memory stays within its limit even
    // while pages shared after a fork part, which no pager sees (a write to a shared page
    // copies it in the kernel without a fault). Counting the relatives' part of the shared
    // pages as room too (the kernel's Pss) made a Redis BGSAVE 22 % faster, but four
    // Python multiprocessing workers, which write what they share (reference counts), took
    // the tree 30-40 MB over its limit (docs/design.md, "Pages shared after a fork").
    p.set_limit(share(me, members, shared_limit(b)));
}

/// Look for dead processes' slots (from the scan thread, every [`REAP_MS`]).
pub fn reap() {
    if let Some(b) = budget() {
        free_dead(b);
    }
}

/// The tree's shared limit as one process last saw it: the `tree` section of the statistics
/// record (`crate::record`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct TreeShare {
    /// The tree's limit.
    pub limit_bytes: u64,
    /// Anonymous memory of the tree's processes that run without a pager, taken off the limit
    /// before it is shared.
    pub unmanaged_bytes: u64,
    /// The tree's total charge at this process's last look.
    pub charged_bytes: u64,
    /// Processes holding a slot then.
    pub processes: u64,
    /// This process's use rate (bytes its faults brought in per second plus its CPU fraction
    /// times its charge).
    pub use_rate_bytes_per_s: u64,
    /// Processes that found no slot.
    pub overflow: u64,
    /// This process's slot (`u64::MAX`: none).
    pub slot: u64,
}

/// The tree's figures for the statistics (None outside a tree).
pub fn stats() -> Option<TreeShare> {
    let b = budget()?;
    Some(TreeShare {
        limit_bytes: b.header.limit.load(Ordering::Relaxed),
        unmanaged_bytes: b.header.unmanaged.load(Ordering::Relaxed),
        charged_bytes: LAST_TOTAL.load(Ordering::Relaxed),
        processes: LAST_LIVE.load(Ordering::Relaxed),
        use_rate_bytes_per_s: LAST_RATE.load(Ordering::Relaxed),
        overflow: b.header.overflow.load(Ordering::Relaxed),
        slot: MY_SLOT.load(Ordering::Relaxed) as u64,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_anon_is_anonymous_less_its_pss() {
        // A fork child's rollup (kernel 6.18): 48 MiB anonymous, 30 MiB of it by Pss.
        let rollup = "5600-7ffe ---p 00000000 00:00 0 [rollup]\nRss:  60000 kB\nPss:  40000 kB\n\
                      Pss_Dirty: 100 kB\nPss_Anon:  30720 kB\nPss_File: 9000 kB\nPss_Shmem: 0 kB\n\
                      Shared_Clean: 1 kB\nAnonymous:  49152 kB\nKSM: 0 kB\n";
        assert_eq!(shared_from_rollup(rollup), (49152 - 30720) * 1024);
        assert_eq!(shared_from_rollup("Pss_Anon: 5 kB\n"), 0);
        // The real file of this test process: nothing shared beyond what a fork would leave.
        let real = std::fs::read_to_string("/proc/self/smaps_rollup").expect("smaps_rollup");
        assert!(real.lines().any(|l| l.starts_with("Anonymous:")), "{real}");
        assert!(real.lines().any(|l| l.starts_with("Pss_Anon:")), "{real}");
    }

    fn m(charge: u64, rate: u64) -> Member {
        Member { charge, rate }
    }

    /// Every member's share in a tree of `ms`.
    fn shares(ms: &[Member], limit: u64) -> Vec<u64> {
        (0..ms.len())
            .map(|i| {
                let others = ms.iter().enumerate().filter(move |(j, _)| *j != i).map(|(_, m)| *m);
                share(ms[i], others, limit)
            })
            .collect()
    }

    #[test]
    fn with_no_use_anywhere_the_free_room_is_split_and_the_excess_taken_in_proportion() {
        assert_eq!(shares(&[m(10, 0)], 100), [100], "alone under the limit: all of it");
        assert_eq!(shares(&[m(10, 0), m(20, 0)], 100), [45, 55], "two: the free room split evenly");
        assert_eq!(shares(&[m(60, 0), m(60, 0)], 100), [50, 50], "over it: in proportion");
        assert_eq!(shares(&[m(30, 0), m(90, 0)], 100), [25, 75]);
    }

    #[test]
    fn the_free_room_goes_to_the_processes_that_use_memory() {
        // One busy, one idle: the busy one gets 3/4 + 1/8 of the room, the idle one 1/8.
        assert_eq!(
            shares(&[m(10 << 20, 1 << 20), m(10 << 20, 0)], 90 << 20),
            [(10 << 20) + (70 << 20) * 7 / 8, (10 << 20) + (70 << 20) / 8]
        );
    }

    #[test]
    fn over_the_limit_an_idle_process_gives_way_to_a_busy_one() {
        let lim = 64u64 << 20;
        // The holder (idle, 40 MiB) and the cycler (busy, 30 MiB): the cycler keeps all it has
        // and gets most of the slack, the holder the rest.
        let s = shares(&[m(40 << 20, 0), m(30 << 20, 100 << 20)], lim);
        let slack = lim / 32;
        assert_eq!(s[1], (30 << 20) + (slack as f64 * (0.125 + 0.75)) as u64);
        assert_eq!(s[0], lim - slack - (30 << 20) + (slack as f64 * 0.125) as u64);
        // Proportional would have given the cycler 30/70 of the limit, under its charge.
        assert!(s[1] > (30u64 << 20) * lim / (70 << 20));
    }

    #[test]
    fn busy_processes_over_the_limit_keep_their_young_memory() {
        // Two busy processes of 64 MiB: one brings 64 MiB/s in (its memory is 1 s old), the
        // other 16 MiB/s (4 s old); under 64 MiB a tree-wide FIFO keeps the young one whole.
        let lim = 64u64 << 20;
        let s = shares(&[m(64 << 20, 64 << 20), m(64 << 20, 16 << 20)], lim);
        let young = lim - lim / 32;
        // kept: min(64, t*64) + min(64, t*16) = young -> t < 1, so 80 t = young.
        let t = young as f64 / (80 << 20) as f64;
        let close = |a: u64, b: f64| (a as f64 - b).abs() < 4096.0;
        assert!(close(s[0], t * (64 << 20) as f64 + (lim / 32) as f64 * (0.125 + 0.75 * 0.8)), "{s:?}");
        assert!(close(s[1], t * (16 << 20) as f64 + (lim / 32) as f64 * (0.125 + 0.75 * 0.2)), "{s:?}");
    }

    proptest::proptest! {
        #[test]
        fn shares_add_up_to_the_limit_and_idle_ones_never_gain(
            ms in proptest::collection::vec((0u64..1 << 32, proptest::prop_oneof![proptest::strategy::Just(0u64), 1u64..1 << 30]), 1..12),
            limit in 1u64 << 20..1 << 33,
        ) {
            let ms: Vec<Member> = ms.into_iter().map(|(c, r)| m(c, r)).collect();
            let s = shares(&ms, limit);
            let sum: u64 = s.iter().sum();
            let n = ms.len() as u64;
            // Rounding: a few bytes per member.
            proptest::prop_assert!(sum.abs_diff(limit) <= 16 * n, "sum {sum} limit {limit} {ms:?} {s:?}");
            let total: u64 = ms.iter().map(|m| m.charge).sum();
            if total > limit {
                for (m, s) in ms.iter().zip(&s) {
                    if m.rate == 0 {
                        // An idle process shrinks at least as fast as in proportion.
                        let prop = (m.charge as u128 * limit as u128 / total as u128) as u64;
                        proptest::prop_assert!(*s <= prop + limit / 32 / n + 1, "{m:?}: {s} > {prop}");
                    }
                }
            }
        }
    }
}
