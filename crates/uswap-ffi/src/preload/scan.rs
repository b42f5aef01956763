//! Reconciling with the process's mappings: adopting the anonymous memory that no interposed
//! call saw, and counting what stays outside the pager.
//!
//! glibc's brk heap, the blocks and thread arenas glibc maps with its internal `mmap`, and
//! whatever a runtime maps through a raw system call never pass through this library. The
//! `uswap-scan` thread watches the resident set size (`/proc/self/statm`, every
//! `USWAP_SCAN_MS` while it moves, backing off to 5 ms while it stays put: [`Poll`]) and,
//! when it has grown by 1/128 of the limit since the last pass (or every 500 ms), reads
//! `/proc/self/maps` and adopts every anonymous private writable mapping that is not the
//! pager's own, not a thread stack (a small `PROT_NONE` guard right below it) and not a
//! loaded object's `.bss` (anonymous memory right after one of its file mappings: libc's malloc
//! state lives there, and the pager's threads use it). Each pass also retires regions the
//! program has unmapped, and measures the anonymous memory outside the pager. The stack rule is
//! a heuristic: a stack mapped with no guard below it is adopted like a heap (a JVM maps its
//! Java thread stacks read-write and makes their guard zones later, so a pass in between adopts
//! them; seen in the JVM tests, which pass). The preload runs its pager in
//! thread fault mode, where a fault on an adopted stack is served like any other (a SIGBUS-mode
//! handler would run on the stack that faulted, so that mode could not adopt stacks). What
//! stays outside is measured:
//! `RssAnon - (resident + swap cache + pool) - RssAnon at start`. The program's part of that
//! (less the library's own heap growth and the engine's page heap beyond the pool) is charged
//! against the limit ([`uswap_pager::Pager::set_outside`]): the pager's limit in force shrinks
//! by it, so a heap grown since the last pass, thread stacks or locked memory push managed
//! pages out instead of running the program over its limit. When the unmanaged memory
//! exceeds a quarter of the limit (and 32 MiB), it warns once on stderr: past a quarter the
//! pager cannot make room for it.
//!
//! A program thread that gets a block of [`NEW_MEMORY_MIN`] bytes or more from its allocator
//! which no region covers ([`note_block`], from the interposed malloc family) runs a pass
//! itself, before the program writes the block, unless a pass read the maps after the block
//! was mapped, or the block is under [`ALWAYS_PASS_MIN`] and a pass began less than
//! [`SYNC_GAP_MS`] ago (then the next pass takes it). It waits for a pass in progress rather
//! than skip it:
//! the scan thread alone is not enough, and four threads filling new memory on two CPUs left
//! it 3 passes in a 0.5 s run, holding the lock off the CPU, and the program 40-80 MiB over
//! its limit one run in ten (1 run in 50 after this, 2026-11-25).
//!
//! Locking: a pass runs under [`crate::BIG`] (so a fork never copies a half-adopted mapping);
//! the counters are atomics. The thread allocates from the library's internal heap.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use uswap_pager::{now_ns, Pager};

static UNMANAGED_NOW: AtomicU64 = AtomicU64::new(0);
/// This process is a fork child of a process under the pager ([`restart_in_child`]): its
/// memory outside the pager is counted whole ([`measure`]).
static FORK_CHILD: AtomicBool = AtomicBool::new(false);
static UNMANAGED_PEAK: AtomicU64 = AtomicU64::new(0);
static ANON_AT_START: AtomicU64 = AtomicU64::new(0);
static STACK_BYTES: AtomicU64 = AtomicU64::new(0);
static SKIPPED_BYTES: AtomicU64 = AtomicU64::new(0);
/// Passes that adopted nothing because pager mappings kept being made while the maps were read.
static UNSTABLE: AtomicU64 = AtomicU64::new(0);
static PASSES: AtomicU64 = AtomicU64::new(0);
static ADOPTED_BYTES: AtomicU64 = AtomicU64::new(0);
static WARNED: AtomicBool = AtomicBool::new(false);
static SCAN_MS: AtomicU64 = AtomicU64::new(20);
/// `USWAP_STATS_INTERVAL_MS` (0: off), read by [`start_thread`] on the thread that starts the
/// library: the scan thread never calls `getenv`, since a program may have moved its
/// environment into its heap (Redis does), memory under the pager.
static STATS_EVERY_MS: AtomicU64 = AtomicU64::new(0);
/// Passes run by program threads for a new block ([`note_block`]), and when the last began
/// (monotonic ms).
static SYNC_PASSES: AtomicU64 = AtomicU64::new(0);
static LAST_SYNC_MS: AtomicU64 = AtomicU64::new(0);
/// Smallest block that makes a program thread run a pass (glibc maps blocks of 128 KiB or more
/// by itself, and grows its heaps by at least 128 KiB).
pub const NEW_MEMORY_MIN: usize = 64 << 10;
/// Least time between two passes run by program threads (a program that maps and frees large
/// blocks in a loop must not spend its time reading the maps).
pub const SYNC_GAP_MS: u64 = 1;

/// When the last pass began reading the maps (monotonic ns): a block mapped before that is in
/// its reading.
static READ_AT_NS: AtomicU64 = AtomicU64::new(0);
/// Blocks at least this large always get a pass of their own, however recent the last one
/// (unless a pass read the maps after the block was mapped): skipping one left churn's
/// 32 MiB `malloc` to the scan thread, which came after the program had filled it, 14 MiB
/// over its bound one run in ten. Smaller ones in a burst wait for the next pass.
pub const ALWAYS_PASS_MIN: usize = 1 << 20;

/// A block `[a, a + n)` the program's allocator returned (no allocator lock held): if no
/// region covers its first or last page, run a pass now on this thread (see the module's
/// paragraph), unless one read the maps after the block was mapped, or the block is smaller
/// than [`ALWAYS_PASS_MIN`] and a pass began less than [`SYNC_GAP_MS`] ago. Waits for [`crate::BIG`] with
/// the asynchronous signals blocked, so a handler cannot allocate on top of a pass its own
/// thread runs; the holder (the scan thread, another program thread's pass, a `fork`'s
/// prepare handler until the fork returns) never waits for a program thread.
pub fn note_block(a: usize, n: usize) {
    if !super::ready() {
        return;
    }
    let Some(p) = super::pager() else { return };
    let end = a.saturating_add(n);
    if covered(a, end) {
        // Maybe by a block freed at these addresses whose unmap is read but not applied yet
        // (glibc gives a freed block's addresses to the next `malloc` of its size): apply
        // it, look again.
        p.sync_events();
        if covered(a, end) {
            return;
        }
    }
    let mapped_by = now_ns();
    let now = mapped_by / 1_000_000;
    if n < ALWAYS_PASS_MIN && now < LAST_SYNC_MS.load(Ordering::Relaxed) + SYNC_GAP_MS {
        return;
    }
    // Asynchronous signals blocked from before the lock to after the unlock: a handler that
    // allocated a large block would otherwise wait for the lock its own thread holds.
    let _signals = uswap_pager::SignalsBlocked::new();
    // Waiting is what makes this work: a scan pass in progress may hold the lock with its
    // thread off the CPU (four writers on two CPUs), and this thread's block must not be
    // filled before the pass that adopts it.
    crate::BIG.lock();
    // A pass that ran while this thread waited may have read the maps with the block in them.
    if READ_AT_NS.load(Ordering::Acquire) <= mapped_by {
        LAST_SYNC_MS.store(now, Ordering::Relaxed);
        SYNC_PASSES.fetch_add(1, Ordering::Relaxed);
        pass_locked(p, false);
    }
    crate::BIG.unlock();
}

/// Mappings found merged out of program memory and an own mapping (adopted around it).
static MERGED_WITH_OWN: AtomicU64 = AtomicU64::new(0);

/// One line of `/proc/self/maps`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Map {
    /// First byte.
    pub start: usize,
    /// End (exclusive).
    pub end: usize,
    /// `rwxp` / `rw-s` ...
    pub perms: [u8; 4],
    /// Inode (0 for anonymous memory).
    pub inode: u64,
    /// Path or pseudo-name (`[heap]`, `[stack]`), empty for anonymous memory.
    pub path: String,
}

/// Parse `/proc/self/maps` text.
pub fn parse_maps(text: &str) -> Vec<Map> {
    let mut v = Vec::new();
    for line in text.lines() {
        let mut it = line.split_ascii_whitespace();
        let (Some(range), Some(perms), Some(_off), Some(_dev), Some(inode)) =
            (it.next(), it.next(), it.next(), it.next(), it.next())
        else {
            continue;
        };
        let Some((a, b)) = range.split_once('-') else { continue };
        let (Ok(start), Ok(end)) = (usize::from_str_radix(a, 16), usize::from_str_radix(b, 16)) else { continue };
        let p = perms.as_bytes();
        if p.len() < 4 {
            continue;
        }
        let path = it.collect::<Vec<_>>().join(" ");
        v.push(Map { start, end, perms: [p[0], p[1], p[2], p[3]], inode: inode.parse().unwrap_or(0), path });
    }
    v
}

/// Why a mapping is not adopted (None = adopt it).
pub fn skip_reason(maps: &[Map], i: usize, min_len: usize) -> Option<&'static str> {
    let m = &maps[i];
    // A large PROT_NONE reservation (a glibc thread arena's unused part, a runtime's heap
    // reserve) is adopted as it is: the registration survives the `mprotect` that commits it,
    // so its pages are managed from their first touch. Small ones are guard pages.
    let reserve = &m.perms == b"---p" && m.inode == 0 && m.path.is_empty() && m.end - m.start >= 1 << 20;
    if reserve {
        return if own_whole(m) { Some("pager's own") } else { None };
    }
    if m.perms[0] != b'r' || m.perms[1] != b'w' || m.perms[3] != b'p' {
        return Some("not private writable");
    }
    if m.perms[2] == b'x' {
        return Some("executable");
    }
    if m.inode != 0 || (!m.path.is_empty() && m.path != "[heap]") {
        return Some("file or special");
    }
    if own_whole(m) {
        return Some("pager's own");
    }
    if m.path == "[heap]" {
        return None;
    }
    if let Some(prev) = i.checked_sub(1).map(|j| &maps[j]) {
        if prev.end == m.start {
            // A private file mapping's neighbour: an object's bss. (A shared mapping, such as
            // the engine's `/dev/zero` pages shared with fork children, is no object's.)
            if prev.inode != 0 && prev.perms[3] == b'p' {
                return Some("bss of a loaded object");
            }
            if &prev.perms[..3] == b"---" && prev.path.is_empty() && prev.end - prev.start <= 1 << 20 {
                return Some("thread stack");
            }
        }
    }
    if m.end - m.start < min_len {
        return Some("small");
    }
    None
}

/// No part of `m` can be adopted: all of it is the pager's own, or a pager thread's stack is in
/// it. (A mapping only partly the pager's is a merge; [`adopt_mapping`] takes the rest.)
fn own_whole(m: &Map) -> bool {
    uswap_pager::own::is_own(m.start, m.end) && uswap_pager::own::gaps(m.start, m.end).is_empty()
}

fn read_maps() -> Vec<Map> {
    uswap::procfs::private(|| std::fs::read_to_string("/proc/self/maps")).map(|s| parse_maps(&s)).unwrap_or_default()
}

/// Is `[a, a + len)` inside one anonymous private writable mapping?
pub fn is_anon_private_range(a: usize, len: usize) -> bool {
    crate::reentry::internal(|| {
        let maps = read_maps();
        maps.iter()
            .enumerate()
            .any(|(i, m)| m.start <= a && a + len <= m.end && skip_reason(&maps, i, 0).is_none_or(|r| r == "small"))
    })
}

/// Record this library's own image and the anonymous memory right after it (its `.bss`, where
/// the pager's registry lives) as the pager's own.
pub fn record_own_image() {
    let mut info: libc::Dl_info = unsafe_zeroed();
    // SAFETY: dladdr with the address of one of our statics and a writable Dl_info.
    if unsafe { libc::dladdr((&UNMANAGED_NOW as *const AtomicU64).cast(), &mut info) } == 0 || info.dli_fname.is_null()
    {
        return;
    }
    // SAFETY: dladdr set dli_fname to a NUL-terminated path that lives as long as the object.
    let me = unsafe { std::ffi::CStr::from_ptr(info.dli_fname) }.to_string_lossy().into_owned();
    let me = std::fs::canonicalize(&me).map(|p| p.to_string_lossy().into_owned()).unwrap_or(me);
    let maps = read_maps();
    for (i, m) in maps.iter().enumerate() {
        if m.path == me {
            uswap_pager::own::add(m.start, m.end - m.start);
            if let Some(n) = maps.get(i + 1) {
                if n.start == m.end && n.inode == 0 && n.path.is_empty() {
                    uswap_pager::own::add(n.start, n.end - n.start);
                }
            }
        }
    }
}

fn unsafe_zeroed() -> libc::Dl_info {
    // SAFETY: Dl_info is plain pointers, for which all-zero (null) is valid.
    unsafe { std::mem::zeroed() }
}

/// The previous pass's mappings (an unchanged line is not adopted again while regions still
/// hold it: see [`covered`]).
static SEEN: crate::lock::RawLock = crate::lock::RawLock::new();
struct SeenCell(std::cell::UnsafeCell<Vec<(usize, usize)>>);
// SAFETY: only touched under SEEN.
unsafe impl Sync for SeenCell {}
static SEEN_SET: SeenCell = SeenCell(std::cell::UnsafeCell::new(Vec::new()));

/// Whether live regions hold the first and last page of `[start, end)`: not merely whether a
/// region's range lies there. A freed block's region stays in the registry, its pages
/// UNMAPPED, until a pass reaps it, and a program that frees a large block and allocates
/// another of the same size gets the same addresses back (glibc's `munmap` then `mmap`), so
/// its maps line is also the one the previous pass saw. Judged by range, churn's 32 MiB
/// `malloc` waited 10 ms for the scan thread, one run in ten, and went 14 MiB over its bound.
fn covered(start: usize, end: usize) -> bool {
    uswap_pager::manages_page(start) && uswap_pager::manages_page(end - 1)
}

/// Anonymous mappings present at start and smaller than this are the dynamic loader's.
const LOADER_MAX: usize = 1 << 20;
static LOADER_BYTES: AtomicU64 = AtomicU64::new(0);
/// Adoptions put off to the next pass because own mappings were in flight.
static BUSY_RETRIES: AtomicU64 = AtomicU64::new(0);

/// Is mapping `m`, seen by the pass at start-up, the dynamic loader's data?
///
/// ld.so allocates with its own minimal `malloc` (small anonymous mappings) before any library
/// code runs: the link maps, the TLS slot-info list, the main thread's static TLS and its DTV.
/// The loader reads them on paths where no pager thread can serve a fault: a lazily bound
/// call's `_dl_fixup`, and `pthread_create` on a cached stack (`_dl_allocate_tls_init`), both
/// taken by a fork child while it starts its own pager thread (a Redis BGSAVE child hung there,
/// 1 run in 2, with the slot-info list swapped out). So they are recorded as the pager's own at
/// start: never adopted, always resident, counted in `loader_bytes`. The brk heap is the
/// program's (`[heap]`), and anything larger than [`LOADER_MAX`] is the program's too.
fn is_loader_data(m: &Map) -> bool {
    m.path.is_empty() && m.perms[..2] == *b"rw" && m.end - m.start < LOADER_MAX
}

/// Adopt mapping `m` (found adoptable in a reading of the maps, `stable` if no own mapping
/// was in flight during it). A mapping that overlaps the pager's own memory is the kernel's
/// merge of program memory with a small own mapping of the same flags (a pager thread's
/// signal stack beside a program's fresh buffer: `sort -S 100M` lost its whole 100 MiB buffer
/// to the pager this way, one run in two, and ran 50 MiB over its limit): from a stable
/// reading, its parts that are not the pager's are adopted; otherwise it is left alone, as
/// [`Pager::adopt`] does.
fn adopt_mapping(p: &Pager, m: &Map, stable: bool) -> Result<usize, uswap_pager::PagerError> {
    if !stable || !uswap_pager::own::is_own(m.start, m.end) {
        return p.adopt(m.start, m.end - m.start);
    }
    MERGED_WITH_OWN.fetch_add(1, Ordering::Relaxed);
    let mut n = 0;
    for (a, b) in uswap_pager::own::gaps(m.start, m.end) {
        n += p.adopt(a, b - a)?;
    }
    Ok(n)
}

/// One reconciliation pass (see the module docs). `first`: the pass at start-up.
pub fn scan_once(p: &Pager, first: bool) {
    crate::BIG.lock();
    pass_locked(p, first);
    crate::BIG.unlock();
}

/// The pass itself, [`crate::BIG`] held.
fn pass_locked(p: &Pager, first: bool) {
    crate::reentry::internal(|| {
        let min_len = super::MMAP_MIN.load(Ordering::Relaxed);
        // A reading of the maps in which every pager mapping is recorded as its own: no own
        // mapping in flight, and none recorded or forgotten, between the two tokens (see
        // `own::Making`). The window is a system call long; after 100 tries the pass goes on
        // with an unstable reading, in which only mappings that overlap no own memory are
        // adopted (`vma::adopt` checks again under its guard, so one that became own since is
        // refused); one that overlaps own memory may hold an own part not recorded yet, so it
        // waits for a stable reading (a later pass) instead of being taken as seen. (Passes
        // that gave up whole left a program's fresh blocks unmanaged while the pager kept
        // unmapping its own memory: the churn test 14 MiB over its bound one run in two.)
        let mut maps = Vec::new();
        let mut stable = false;
        // Unmaps read so far are applied first, so [`covered`] sees no region of a mapping
        // that is gone.
        p.sync_events();
        for _ in 0..100 {
            let g0 = uswap_pager::own::quiet_generation();
            READ_AT_NS.store(now_ns(), Ordering::Release);
            maps = read_maps();
            if g0.is_some() && g0 == uswap_pager::own::quiet_generation() {
                stable = true;
                break;
            }
            std::thread::yield_now();
        }
        if !stable {
            UNSTABLE.fetch_add(1, Ordering::Relaxed);
        }
        SEEN.lock();
        // SAFETY: under SEEN.
        let seen = unsafe { &mut *SEEN_SET.0.get() };
        let mut now = Vec::new();
        let (mut stacks, mut skipped) = (0u64, 0u64);
        for (i, m) in maps.iter().enumerate() {
            match skip_reason(&maps, i, min_len) {
                None | Some("small") if first && is_loader_data(m) => {
                    uswap_pager::own::add(m.start, m.end - m.start);
                    LOADER_BYTES.fetch_add((m.end - m.start) as u64, Ordering::Relaxed);
                }
                None => {
                    let key = (m.start, m.end);
                    let mut retry = false;
                    // From an unstable reading: overlapping own memory (before, or after
                    // adopting: an own part in flight at the reading is recorded by then).
                    let own_part = || !stable && uswap_pager::own::is_own(m.start, m.end);
                    if own_part() {
                        retry = true;
                    } else if seen.binary_search(&key).is_err() || !covered(m.start, m.end) {
                        match adopt_mapping(p, m, stable) {
                            Ok(n) => {
                                ADOPTED_BYTES.fetch_add(n as u64, Ordering::Relaxed);
                            }
                            // Not now (the pager's own mappings in flight): the next pass tries
                            // this mapping again instead of taking it as seen.
                            Err(uswap_pager::PagerError::Busy(_)) => {
                                BUSY_RETRIES.fetch_add(1, Ordering::Relaxed);
                                retry = true;
                            }
                            Err(_) => {}
                        }
                        retry |= own_part();
                    }
                    if !retry {
                        now.push(key);
                    }
                }
                Some("thread stack") => stacks += (m.end - m.start) as u64,
                Some("small") | Some("executable") => skipped += (m.end - m.start) as u64,
                Some(_) => {}
            }
        }
        now.sort_unstable();
        *seen = now;
        SEEN.unlock();
        STACK_BYTES.store(stacks, Ordering::Relaxed);
        SKIPPED_BYTES.store(skipped, Ordering::Relaxed);
        p.reap();
        PASSES.fetch_add(1, Ordering::Relaxed);
        // The background reclaimer and recompressor start once the charge reaches half the
        // limit in force (`PagerConfig::lazy_background`); under BIG, so no fork copies a
        // thread half started.
        if p.charged_bytes().saturating_mul(2) >= p.limit() {
            p.start_background();
        }
        measure(p, first);
    });
}

fn measure(p: &Pager, first: bool) {
    let anon = status_bytes("RssAnon:");
    if first {
        ANON_AT_START.store(anon, Ordering::Relaxed);
        return;
    }
    let managed = p.charged_bytes();
    let out = anon.saturating_sub(managed).saturating_sub(ANON_AT_START.load(Ordering::Relaxed));
    UNMANAGED_NOW.store(out, Ordering::Relaxed);
    UNMANAGED_PEAK.fetch_max(out, Ordering::Relaxed);
    // The program's part of it (less the library's own growth: its heap, the engine's page
    // heap beyond the pool) counts against the limit, as a cgroup would count it: the pager
    // makes room for it.
    let own = super::heap_growth() + uswap::tier::pages::heap().live_bytes().saturating_sub(p.pool_bytes());
    if FORK_CHILD.load(Ordering::Relaxed) {
        // A fork child's anonymous memory at its start and the library's memory are its
        // parent's copies: the tree's fixed overhead is allowed once, for the process that
        // started the pager, and every copy a child writes (the pager's tables, its buffers,
        // the program's own pages outside the pager) is memory of the tree. So the child
        // counts all of it, as it counts its resident pages: whole, shared or not.
        p.set_outside(anon.saturating_sub(managed));
    } else {
        p.set_outside(out.saturating_sub(own));
    }
    let limit = p.config().limit_bytes;
    if out > (limit / 4).max(32 << 20) && !WARNED.swap(true, Ordering::Relaxed) {
        let msg = format!(
            "uswap: warning: pid {}: {} MiB of anonymous memory is outside the pager (thread stacks, \
             shared, locked or executable memory, or mappings it could not adopt); the {} MiB limit does \
             not cover it\n",
            std::process::id(),
            out >> 20,
            limit >> 20
        );
        // SAFETY: write(2) of our message to stderr.
        unsafe { libc::write(2, msg.as_ptr().cast(), msg.len()) };
    }
}

/// The start of a procfs file `path`, read with raw calls into `buf` (one `read`: these files
/// are generated whole), or `None` if it cannot be read. Opened where it takes no descriptor
/// number of the program's (`uswap::procfs`).
fn read_proc<'a>(path: &std::ffi::CStr, buf: &'a mut [u8]) -> Option<&'a [u8]> {
    let n = uswap::procfs::read_start(path, buf)?;
    Some(&buf[..n])
}

/// Resident and shared (file-backed + shared memory) bytes from `/proc/self/statm`, read
/// with raw calls into a stack buffer ((0, 0) if unreadable).
pub fn statm() -> (u64, u64) {
    let mut buf = [0u8; 128];
    let Some(text) = read_proc(c"/proc/self/statm", &mut buf) else { return (0, 0) };
    let Ok(s) = std::str::from_utf8(text) else { return (0, 0) };
    let mut f = s.split_ascii_whitespace().skip(1).map(|v| v.parse::<u64>().unwrap_or(0) * 4096);
    (f.next().unwrap_or(0), f.next().unwrap_or(0))
}

/// `RssFile` and `RssShmem` of `/proc/self/status`, in bytes, read with raw calls into a stack
/// buffer ((0, 0) if unreadable). `statm`'s shared count is their sum; the split tells the
/// program's libraries and mapped files (the kernel reclaims them by itself) from its shared
/// memory (`MAP_SHARED|MAP_ANONYMOUS`, `memfd_create`, `/dev/shm`: swappable only by the
/// kernel's own swap, which uswap stands in for, so it is memory nobody limits).
pub fn file_and_shmem() -> (u64, u64) {
    let mut buf = [0u8; 4096];
    let Some(text) = read_proc(c"/proc/self/status", &mut buf) else { return (0, 0) };
    (status_field(text, "RssFile:"), status_field(text, "RssShmem:"))
}

/// One `key` (`VmRSS:`, `RssAnon:` …) of this process's `/proc/self/status`, in bytes (0 if
/// unreadable), read with raw calls into a stack buffer.
pub fn status_bytes(key: &str) -> u64 {
    let mut buf = [0u8; 4096];
    read_proc(c"/proc/self/status", &mut buf).map_or(0, |text| status_field(text, key))
}

/// The value of `key` in a `/proc/PID/status` text (`RssAnon:   1234 kB`), in bytes; 0 if
/// absent.
fn status_field(text: &[u8], key: &str) -> u64 {
    text.split(|&b| b == b'\n')
        .find_map(|l| l.strip_prefix(key.as_bytes()))
        .and_then(|v| std::str::from_utf8(v).ok())
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

/// File-backed resident bytes when the pager started.
pub static FILE_AT_START: AtomicU64 = AtomicU64::new(0);
/// Shared-memory resident bytes when the pager started.
pub static SHMEM_AT_START: AtomicU64 = AtomicU64::new(0);
/// `statm`'s shared count when [`file_and_shmem`] was last read (see [`sample_rss`]).
pub static SHARED_AT_SPLIT: AtomicU64 = AtomicU64::new(0);
/// The largest growth of file-backed resident memory since the start, sampled with the
/// resident set (a JVM's `libjvm.so` and class archive, a compiler's text): memory that is
/// not anonymous, which the pager does not manage and the kernel reclaims by itself.
static FILE_GROWTH_PEAK: AtomicU64 = AtomicU64::new(0);
/// The largest growth of the program's resident shared memory since the start (a JVM's ZGC
/// heap is a `memfd`; Python's `mmap.mmap(-1, n)` is `MAP_SHARED`): memory the pager cannot
/// swap, which the summary reports as such rather than as fixed overhead (the runner counts
/// the tree's against the limit, see `uswap-cli`'s `unmanaged`).
static SHMEM_GROWTH_PEAK: AtomicU64 = AtomicU64::new(0);

/// See [`SHMEM_GROWTH_PEAK`] (read again now: the statistics are written at the end, maybe
/// between two samples).
pub fn shmem_growth_peak() -> u64 {
    let growth = file_and_shmem().1.saturating_sub(SHMEM_AT_START.load(Ordering::Relaxed));
    SHMEM_GROWTH_PEAK.fetch_max(growth, Ordering::Relaxed).max(growth)
}

/// See [`FILE_GROWTH_PEAK`].
pub fn file_growth_peak() -> u64 {
    FILE_GROWTH_PEAK.load(Ordering::Relaxed)
}

/// The largest part of the engine's page heap that is not the compressed pool (cluster tables,
/// the file tier's I/O buffers, the pool's own metadata): the analogue of the kernel's swap
/// metadata, which a memory cgroup does not charge either, so it is fixed overhead, not charge.
static ENGINE_META_PEAK: AtomicU64 = AtomicU64::new(0);

/// See [`ENGINE_META_PEAK`].
pub fn engine_meta_peak() -> u64 {
    ENGINE_META_PEAK.load(Ordering::Relaxed)
}

fn sample_engine_meta(p: &Pager) {
    let heap = uswap::tier::pages::heap().live_bytes();
    ENGINE_META_PEAK.fetch_max(heap.saturating_sub(p.pool_bytes()), Ordering::Relaxed);
}

/// The resident set, and the peaks of file-backed and shared memory: `statm` every time (one
/// short read), `/proc/self/status` for the split only when `statm`'s shared count has moved
/// by 256 KiB since the last split (a longer file, and it rarely moves).
fn sample_rss() -> u64 {
    let (rss, shared) = statm();
    if shared.abs_diff(SHARED_AT_SPLIT.load(Ordering::Relaxed)) >= 256 << 10 {
        SHARED_AT_SPLIT.store(shared, Ordering::Relaxed);
        let (file, shmem) = file_and_shmem();
        FILE_GROWTH_PEAK.fetch_max(file.saturating_sub(FILE_AT_START.load(Ordering::Relaxed)), Ordering::Relaxed);
        SHMEM_GROWTH_PEAK.fetch_max(shmem.saturating_sub(SHMEM_AT_START.load(Ordering::Relaxed)), Ordering::Relaxed);
    }
    rss
}

/// Start the `uswap-scan` thread.
pub fn start_thread(p: Arc<Pager>, ms: u64) -> Result<(), String> {
    SCAN_MS.store(ms, Ordering::Relaxed);
    let every = uswap_pager::launch::STATS_INTERVAL_MS.read(super::env).unwrap_or(0);
    STATS_EVERY_MS.store(every, Ordering::Relaxed);
    spawn(p).map_err(|e| format!("cannot start the scan thread: {e}"))
}

fn spawn(p: Arc<Pager>) -> std::io::Result<()> {
    // Never joined: it runs as long as the program (its records stay with it).
    let _detached = uswap_pager::own::spawn("uswap-scan", Some(256 << 10), move || {
        p.join_background();
        let ms = SCAN_MS.load(Ordering::Relaxed);
        let step = (p.config().limit_bytes / 128).max(256 << 10);
        let mut last_rss = statm().0;
        let mut last = std::time::Instant::now();
        // `USWAP_STATS_INTERVAL_MS`: also write the statistics file every so often (a live
        // view of a running program).
        let every = STATS_EVERY_MS.load(Ordering::Relaxed);
        let mut last_stats = std::time::Instant::now();
        let (mut last_tree, mut last_reap) = (std::time::Instant::now(), std::time::Instant::now());
        let (mut window, mut last_second) = (super::thrash::Window::default(), std::time::Instant::now());
        let mut poll = Poll::new(ms);
        loop {
            std::thread::sleep(poll.interval());
            // This thread's thread vector stays pinned where glibc keeps it (`own`).
            uswap_pager::own::pin_thread_vector();
            let rss = sample_rss();
            poll.saw(rss);
            super::failures::check(&p);
            if last_second.elapsed() >= std::time::Duration::from_secs(1) {
                last_second = std::time::Instant::now();
                super::thrash::sample(&mut window, p.stats().fault_swapin, p.config().limit_bytes);
            }
            // The tree's shared limit (uswap_pager::tree): publish the charge, take the share.
            if last_tree.elapsed().as_millis() as u64 >= uswap_pager::tree::UPDATE_MS {
                crate::reentry::internal(|| uswap_pager::tree::update(&p));
                sample_engine_meta(&p);
                last_tree = std::time::Instant::now();
                if last_reap.elapsed().as_millis() as u64 >= uswap_pager::tree::REAP_MS {
                    uswap_pager::tree::reap();
                    last_reap = std::time::Instant::now();
                }
            }
            if every > 0 && last_stats.elapsed().as_millis() as u64 >= every {
                super::write_stats(false);
                last_stats = std::time::Instant::now();
            }
            if rss > last_rss + step || last.elapsed().as_millis() >= 500 {
                scan_once(&p, false);
                last_rss = statm().0;
                last = std::time::Instant::now();
            }
        }
    })?;
    Ok(())
}

/// How long the scan thread sleeps between two readings of the resident set: the configured
/// period (`USWAP_SCAN_MS`, 1 ms) while the resident set moves, doubling while it stays put,
/// up to [`Poll::IDLE_MS`] (5 ms). At a fixed 1 ms the thread woke 1 000 times a second
/// whatever the program did: 2 % of a CPU for a program asleep, about 3 % of both CPUs for a
/// `make -j2` of C files (two such threads). A program that starts filling new memory after
/// a quiet spell is seen at most [`Poll::IDLE_MS`] later, and at the configured period from
/// then on; blocks of [`NEW_MEMORY_MIN`] or more from its allocator do not wait for the
/// thread at all ([`note_block`]).
struct Poll {
    min_ms: u64,
    cur_ms: u64,
    last_rss: u64,
}

impl Poll {
    /// Longest sleep while the resident set stays put (half the tree's update period,
    /// [`uswap_pager::tree::UPDATE_MS`], so the shares are taken as often as before).
    const IDLE_MS: u64 = uswap_pager::tree::UPDATE_MS / 2;
    /// Resident set change that counts as moving (a few pages come and go all the time).
    const MOVED: u64 = 256 << 10;

    fn new(min_ms: u64) -> Self {
        Poll { min_ms: min_ms.max(1), cur_ms: min_ms.max(1), last_rss: 0 }
    }

    fn interval(&self) -> std::time::Duration {
        std::time::Duration::from_millis(self.cur_ms)
    }

    /// Record a reading of the resident set and choose the next sleep.
    fn saw(&mut self, rss: u64) {
        let moved = rss.abs_diff(self.last_rss) >= Self::MOVED;
        self.last_rss = rss;
        self.cur_ms = if moved { self.min_ms } else { (self.cur_ms * 2).min(Self::IDLE_MS.max(self.min_ms)) };
    }
}

/// Start the thread again in a fork child (threads do not survive `fork`).
pub fn restart_in_child(p: Arc<Pager>) {
    FORK_CHILD.store(true, Ordering::Relaxed);
    if spawn(p).is_err() {
        let msg = b"uswap: warning: fork child has no scan thread\n";
        // SAFETY: write(2) of a static message.
        unsafe { libc::write(2, msg.as_ptr().cast(), msg.len()) };
    }
}

/// The memory outside the pager, for the statistics.
pub fn unmanaged() -> serde_json::Value {
    serde_json::json!({
        "anon_bytes_now": UNMANAGED_NOW.load(Ordering::Relaxed),
        "anon_bytes_peak": UNMANAGED_PEAK.load(Ordering::Relaxed),
        "anon_at_start_bytes": ANON_AT_START.load(Ordering::Relaxed),
        "thread_stack_bytes": STACK_BYTES.load(Ordering::Relaxed),
        "small_or_exec_bytes": SKIPPED_BYTES.load(Ordering::Relaxed),
        "scan_passes": PASSES.load(Ordering::Relaxed),
        "scan_sync_passes": SYNC_PASSES.load(Ordering::Relaxed),
        "scan_merged_with_own": MERGED_WITH_OWN.load(Ordering::Relaxed),
        "scan_unstable_passes": UNSTABLE.load(Ordering::Relaxed),
        "scan_adopted_bytes": ADOPTED_BYTES.load(Ordering::Relaxed),
        "loader_bytes": LOADER_BYTES.load(Ordering::Relaxed),
        "own_overflow": uswap_pager::own::overflowed(),
        "own_entries_high": uswap_pager::own::recorded_high(),
        "scan_busy_retries": BUSY_RETRIES.load(Ordering::Relaxed),
        "warned": WARNED.load(Ordering::Relaxed),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Touched shared anonymous memory shows in `RssShmem`, not in `RssFile`.
    #[test]
    fn shared_memory_is_told_from_file_backed_memory() {
        const LEN: usize = 8 << 20;
        let (file0, shmem0) = file_and_shmem();
        // SAFETY: a new shared anonymous mapping, unmapped below; nothing else refers to it.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                LEN,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED);
        // SAFETY: p is LEN writable bytes.
        unsafe { std::ptr::write_bytes(p.cast::<u8>(), 1, LEN) };
        let (file1, shmem1) = file_and_shmem();
        // SAFETY: unmapping the mapping made above.
        unsafe { libc::munmap(p, LEN) };
        assert!(shmem1 >= shmem0 + LEN as u64, "RssShmem {shmem0} -> {shmem1}");
        assert!(file1 < file0 + LEN as u64 / 2, "RssFile {file0} -> {file1}");
    }

    #[test]
    fn the_poll_backs_off_while_the_resident_set_stays_and_not_while_it_moves() {
        let mut p = Poll::new(1);
        p.saw(100 << 20);
        assert_eq!(p.interval().as_millis(), 1, "the first reading moved from 0");
        let steps: Vec<u128> = (0..6)
            .map(|i| {
                p.saw((100 << 20) + i * 4096);
                p.interval().as_millis()
            })
            .collect();
        assert_eq!(steps, [2, 4, 5, 5, 5, 5]);
        p.saw(101 << 20);
        assert_eq!(p.interval().as_millis(), 1, "a MiB of growth brings the period back");
        p.saw(99 << 20);
        assert_eq!(p.interval().as_millis(), 1, "and so does a shrink");
        let mut slow = Poll::new(20);
        slow.saw(0);
        assert_eq!(slow.interval().as_millis(), 20, "a configured period over the idle one stays");
    }

    // Addresses above the 47-bit user address space, so that no mapping of this test process
    // (a thread stack another test recorded as the pager's own) can overlap them.
    const SAMPLE: &str = "\
fd0c00000000-fd0c00001000 r--p 00000000 fe:00 1234 /usr/bin/prog
fd0c00001000-fd0c00002000 rw-p 00001000 fe:00 1234 /usr/bin/prog
fd0c00002000-fd0c00003000 rw-p 00000000 00:00 0
fd0c01000000-fd0c02000000 rw-p 00000000 00:00 0 [heap]
fe0000000000-fe0000001000 ---p 00000000 00:00 0
fe0000001000-fe0000801000 rw-p 00000000 00:00 0
fe0001000000-fe0005000000 rw-p 00000000 00:00 0
fe0005000000-fe0009000000 ---p 00000000 00:00 0
fe0009000000-fe0009002000 rw-p 00000000 00:00 0
fe000a000000-fe000a100000 rw-s 00000000 00:05 99 /dev/zero (deleted)
fffc00000000-fffc00021000 rw-p 00000000 00:00 0 [stack]
";

    #[test]
    fn picks_heaps_and_arenas_not_stacks_bss_or_shared() {
        let maps = parse_maps(SAMPLE);
        assert_eq!(maps.len(), 11);
        let r: Vec<_> = (0..maps.len()).map(|i| skip_reason(&maps, i, 16 << 10)).collect();
        assert_eq!(r[0], Some("not private writable"));
        assert_eq!(r[1], Some("file or special"));
        assert_eq!(r[2], Some("bss of a loaded object"));
        assert_eq!(r[3], None, "[heap]");
        assert_eq!(r[5], Some("thread stack"));
        assert_eq!(r[6], None, "an arena's heap");
        assert_eq!(r[7], None, "a large reservation");
        assert_eq!(r[4], Some("not private writable"), "a guard page");
        assert_eq!(r[8], Some("small"));
        assert_eq!(r[9], Some("not private writable"));
        assert_eq!(r[10], Some("file or special"));
    }
}
