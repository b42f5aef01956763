//! The LD_PRELOAD library behind `uswap run`: pages an unmodified program's anonymous memory
//! where it lies.
//!
//! Activation: the library is inert unless `USWAP_LIMIT` is set in the environment (a program that
//! links it for the C ABI is not touched). Configuration: the `USWAP_*` variables declared in
//! [`uswap_pager::launch`] (names, defaults, parsers), read once at start through `env` —
//! those `uswap run` sets (the limit, folio, tiers, statistics directory, the tree's budget
//! file) and the knobs a user may set (`uswap run --help` lists them).
//!
//! The program keeps its own allocator (glibc malloc, jemalloc, pymalloc, a JVM's or V8's
//! heap): nothing is replaced. Its anonymous private memory is found and adopted by the pager
//! ([`uswap_pager::Pager::adopt`]) wherever it comes from:
//! - mappings made through the interposed `mmap`, `mremap` and `mprotect` (a reserve-then-commit
//!   heap: a `PROT_NONE` reservation is remembered and adopted when made writable, or when
//!   `MAP_FIXED` commits part of it);
//! - what libc or a runtime maps where no symbol can be interposed (glibc's brk heap, its
//!   internal `mmap` for large blocks and thread arenas): the [`scan`] thread reconciles with
//!   `/proc/self/maps` whenever the resident set grows, and every 500 ms.
//!
//! `munmap` and `mremap` need no interposition: the kernel reports them as uffd events (UNMAP,
//! REMAP) and the pager follows. `madvise(MADV_DONTNEED/FREE/REMOVE)` is interposed (it frees
//! the pages' swap entries first); glibc's internal trims are turned off with a trim threshold
//! above any heap (see `start`), since no symbol sees them. What is not adopted (stacks, shared or file mappings, the libraries' data, small mappings) is counted
//! and shown in the statistics; when a large share of the program's memory is outside the
//! pager, [`scan`] says so on stderr.
//!
//! Faults are resolved by the pager's event thread (thread fault mode: a `read(2)` into
//! swapped-out memory works in an unmodified program) and reclaim runs in its background
//! reclaimer. With `USWAP_FAULT_MODE=sigbus` each fault is resolved in the thread that takes
//! it (SIGBUS fault mode); the system calls libc makes with user buffers are then trapped by a
//! seccomp filter (`seccomp`) and re-issued once their buffers are resident (`sigsys`).
//!
//! Deadlock freedom: no code here holds a lock that a thread may hold while touching managed
//! memory. The interposed calls take no lock of their own; the pager's adoption lock is never
//! held across program memory or anything that waits for the event thread; pager threads
//! (named `uswap-*`) and code run through [`crate::reentry::internal`] never adopt, and the
//! mappings they make are recorded as the pager's own ([`uswap_pager::own`]) so nothing ever
//! adopts them. Rust allocations inside the library come from its own heap
//! ([`crate::internal`]), never from the program's allocator.
//!
//! Programs started in turn: `LD_PRELOAD` and the `USWAP_*` variables are inherited, so every
//! process exec'd below `uswap run` gets **its own pager with the same limit**. A forked child
//! continues with a copy of its parent's pager and its own limit (see [`crate::fork`]).
//!
//! Locking: [`RESERVED`] (the program's `PROT_NONE` reservations) is behind a [`RawLock`] held
//! only for map updates; everything else is atomics or the pager's own locks.

mod altstack;
pub mod dl;
mod dormant;
pub mod exit;
pub mod failures;
pub mod io;
pub mod malloc;
mod raw;
pub mod scan;
pub mod sched;
mod seccomp;
pub mod signals;
mod sigsys;
mod tcb;
pub mod thrash;
pub mod tls;

use crate::fork;
use crate::lock::RawLock;
use crate::reentry::{in_internal, internal, KeepErrno};
use libc::{c_int, c_void, size_t};
use std::cell::UnsafeCell;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use uswap_pager::record::ProcRecord;
use uswap_pager::{launch, Pager, PagerConfig};

const UNKNOWN: u8 = 0;
pub(crate) const OFF: u8 = 1;
const BOOT: u8 = 2;
const READY: u8 = 3;
const FAILED: u8 = 4;
/// Running with no pager until the process grows ([`dormant`]).
const DORMANT: u8 = 5;
/// Leaving [`DORMANT`]: the pager is being started.
const STARTING: u8 = 6;

static STATE: AtomicU8 = AtomicU8::new(UNKNOWN);
static MMAP_MIN: AtomicUsize = AtomicUsize::new(16 << 10);
static PAGER: OnceLock<Arc<Pager>> = OnceLock::new();
/// Resident set size when the pager had started (fixed overhead: binary, libraries, pager).
pub static RSS_AT_START: AtomicU64 = AtomicU64::new(0);
/// The internal heap's size when the pager had started.
static HEAP_AT_START: AtomicU64 = AtomicU64::new(0);

/// Counters of the interposition layer.
pub struct Counters {
    /// Mappings adopted when the program made them (`mmap`, `mremap`, `mprotect`).
    pub adopt_calls: AtomicU64,
    /// Bytes adopted at those calls.
    pub adopt_bytes: AtomicU64,
    /// Adoptions that failed (not registrable, no region slot).
    pub adopt_errors: AtomicU64,
    /// Adoptions put off (the pager's own mappings were being made, or the range changed
    /// meanwhile): left to the scanner, which adopts what is still there in its next round.
    pub adopt_deferred: AtomicU64,
    /// Anonymous mappings too small to adopt at `mmap` time (left to the scanner).
    pub mmap_small: AtomicU64,
    /// `PROT_NONE` reservations remembered.
    pub reservations: AtomicU64,
}
/// The counters.
pub static COUNTERS: Counters = Counters {
    adopt_calls: AtomicU64::new(0),
    adopt_bytes: AtomicU64::new(0),
    adopt_errors: AtomicU64::new(0),
    adopt_deferred: AtomicU64::new(0),
    mmap_small: AtomicU64::new(0),
    reservations: AtomicU64::new(0),
};

pub(crate) fn env(name: &std::ffi::CStr) -> Option<&'static str> {
    // SAFETY: getenv returns null or a NUL-terminated string in the environment, which lives
    // for the process (we never call setenv/putenv).
    unsafe {
        let p = libc::getenv(name.as_ptr());
        if p.is_null() {
            None
        } else {
            std::ffi::CStr::from_ptr(p).to_str().ok()
        }
    }
}

/// The library's mode, decided on first use from the environment.
pub(crate) fn mode() -> u8 {
    let s = STATE.load(Ordering::Acquire);
    if s != UNKNOWN {
        return s;
    }
    let m = if env(launch::LIMIT.name).is_some() { BOOT } else { OFF };
    let _ = STATE.compare_exchange(UNKNOWN, m, Ordering::AcqRel, Ordering::Acquire);
    STATE.load(Ordering::Acquire)
}

/// True once the pager serves the program.
pub fn ready() -> bool {
    STATE.load(Ordering::Acquire) == READY
}

/// The pager (once ready).
pub fn pager() -> Option<&'static Arc<Pager>> {
    PAGER.get()
}

thread_local! {
    static PAGER_THREAD: std::cell::Cell<u8> = const { std::cell::Cell::new(0) };
}

/// True on the pager's own threads (named `uswap-*`): they never adopt, and what they map is
/// the pager's own.
pub fn pager_thread() -> bool {
    PAGER_THREAD.with(|c| {
        if c.get() == 0 {
            let mut name = [0u8; 16];
            // SAFETY: PR_GET_NAME writes at most 16 bytes.
            unsafe { libc::prctl(libc::PR_GET_NAME, name.as_mut_ptr()) };
            c.set(if name.starts_with(b"uswap-") { 2 } else { 1 });
        }
        c.get() == 2
    })
}

/// True when the calling code is uswap's, not the program's.
pub(crate) fn ours() -> bool {
    in_internal() || pager_thread()
}

// ---------------------------------------------------------------------------------------
// Start-up

#[used]
#[link_section = ".init_array"]
static INIT: extern "C" fn() = init;

extern "C" fn init() {
    tls::init();
    fork::install_atfork();
    // The `vfork` and `execl` trampolines jump to the next definitions, looked up now (a
    // `vfork` child must not enter `dlsym`), whether or not a pager starts: looked up only in
    // `start`, they failed every `vfork` with ENOSYS in a process where the library stands
    // aside (dash's pipelines under `runuser -u USER`: "Cannot fork").
    internal(sched::resolve);
    if mode() != BOOT {
        return;
    }
    // A Go program is left alone, without a pager (`uswap_pager::exe::GO_REFUSED`: the Go
    // runtime's own madvise calls would go unseen); `uswap run` refuses one as the program it
    // runs, and counts one found deeper in the tree against the limit.
    let exe = internal(|| uswap_pager::exe::exe_kind(std::path::Path::new("/proc/self/exe")));
    if matches!(exe, Ok(uswap_pager::exe::ExeKind::Go)) {
        stand_aside(INERT_GO);
        return;
    }
    // A process that stays small starts no pager ([`dormant`]); its figures at start are
    // the fixed overhead, as an eager start's.
    let limit = launch::LIMIT.read(env).unwrap_or(0);
    if let Some(t) = dormant::threshold(limit) {
        let (rss, shared) = scan::statm();
        RSS_AT_START.store(rss, Ordering::Relaxed);
        // Its shared count is file-backed pages (no shared memory yet).
        scan::FILE_AT_START.store(shared.max(1), Ordering::Relaxed);
        scan::ANON_AT_INIT.store(rss.saturating_sub(shared).max(1), Ordering::Relaxed);
        HEAP_AT_START.store(crate::internal::mapped_bytes(), Ordering::Relaxed);
        // SAFETY: registering an extern "C" function.
        unsafe { libc::atexit(at_exit) };
        dormant::enter(t);
        return;
    }
    // SAFETY: registering an extern "C" function.
    unsafe { libc::atexit(at_exit) };
    boot();
}

/// Start the pager (at start-up, or when a dormant process grows): on failure, say so and
/// exit 125, or run on without it when `USWAP_ON_ERROR=warn`.
fn boot() {
    // A process that dropped root privileges (`runuser`, `gosu`, a server's `setuid`) may get
    // no fork events, and only a user-mode userfaultfd if any: it runs without a pager and is
    // counted (`uswap_pager::uffd::Uffd::fork_events_permitted`).
    if !internal(uswap_pager::uffd::Uffd::fork_events_permitted) {
        stand_aside(INERT_NO_UFFD);
        return;
    }
    let res = internal(start);
    match res {
        Ok(()) => {}
        Err(e) => {
            let warn = launch::ON_ERROR.read(env).unwrap_or(false);
            let msg = if warn {
                format!(
                    "uswap: warning: pid {} runs WITHOUT the pager (unprotected, no limit): {e}\n",
                    std::process::id()
                )
            } else {
                format!("uswap: cannot put pid {} under the pager: {e}\n", std::process::id())
            };
            // SAFETY: write(2) of our message.
            unsafe { libc::write(2, msg.as_ptr().cast(), msg.len()) };
            if !warn {
                // SAFETY: _exit is always safe.
                unsafe { libc::_exit(125) };
            }
            STATE.store(FAILED, Ordering::Release);
        }
    }
}

/// The marks left where the library stands aside (`uswap_pager::tree::INERT_MARK`): a Go
/// program (`uswap_pager::exe::GO_REFUSED`).
const INERT_GO: &std::ffi::CStr = c"uswap-inert:go";
/// ... and a process that may not open a full userfaultfd (it dropped privileges).
const INERT_NO_UFFD: &std::ffi::CStr = c"uswap-inert:no-uffd";

/// Run without a pager (the library passes every call through) and leave `mark` in the maps
/// (see `uswap_pager::tree::INERT_MARK`): a page of a memfd of that name, never touched and
/// never unmapped.
fn stand_aside(mark: &std::ffi::CStr) {
    STATE.store(FAILED, Ordering::Release);
    if let Ok(m) = uswap::tier::shared::SharedMap::named(mark, 4096) {
        std::mem::forget(m);
    }
}

/// Fork child: our pager runs again; its reconciler thread must too.
fn restart_scan_in_child(p: *const Pager) {
    if let Some(ours) = pager() {
        if std::ptr::eq(Arc::as_ptr(ours), p) {
            // A slot of its own in the tree's budget, before its first update.
            uswap_pager::tree::in_fork_child();
            scan::restart_in_child(ours.clone());
        }
    }
}

fn start() -> Result<(), String> {
    let limit = launch::LIMIT.read(env)?;
    let folio = launch::FOLIO.read(env)? as usize;
    MMAP_MIN.store(launch::MMAP_MIN.read(env)? as usize, Ordering::Relaxed);
    let scan_ms = launch::SCAN_MS.read(env)?;
    let fault_mode = launch::FAULT_MODE.read(env)?;
    let cfg = PagerConfig {
        limit_bytes: limit,
        folio_size: folio,
        tiers: launch::TIERS.read(env).unwrap_or_default().to_string(),
        fault_mode,
        // No REMOVE events: reclaim's own madvise would then wait for the event thread, which
        // must hold off reading while reclaim drops (see the pager's read gate). The program's
        // madvise goes through the interposed `madvise` below instead.
        event_remove: false,
        // A program's resident set must hold its working set: small inactive list and pool
        // (`launch::RUN_POOL_PERCENT` says why).
        inactive_percent: launch::INACTIVE_PERCENT.read(env)? as u8,
        pool_percent: launch::POOL_PERCENT.read(env)? as u8,
        pool_adapt: launch::POOL_ADAPT.read(env)?,
        replacement: launch::REPLACEMENT.read(env)?,
        // Background recompression (when a pool tier has `recomp=`): period and CPU budget.
        recompress_ms: launch::RECOMP_MS.read(env)?,
        recompress_cpu_percent: launch::RECOMP_CPU_PERCENT.read(env)? as u8,
        // Tiers both ways (same thread and period): writeback of pool objects unused this long
        // (0 = off), promotion of refaulted file objects (`USWAP_PROMOTE=0` turns it off).
        writeback_age_ms: launch::WRITEBACK_AGE_MS.read(env)?,
        promote: launch::PROMOTE.read(env)?,
        // The event thread follows the faulting thread's CPU (`USWAP_FOLLOW_CPU=0` turns it
        // off): see uswap-pager's `cpu` module.
        follow_cpu: launch::FOLLOW_CPU.read(env)?,
        // ... and pins the thread it follows there (`USWAP_PIN_THREAD=0`: it does not).
        pin_thread: launch::PIN_THREAD.read(env)?,
        // The reclaimer and recompressor start when the scanner sees the charge at half the
        // limit: a shell's or a build's many small processes never start them.
        lazy_background: true,
        // While the store fails, faults over the limit wait this long for room (0: for ever).
        full_wait_ms: launch::FULL_WAIT_MS.read(env)?,
        ..Default::default()
    };
    failures::set_wait_ms(cfg.full_wait_ms);
    // glibc trims its heaps with its internal madvise(MADV_DONTNEED), which no interposed symbol
    // sees: a page swapped out before such a trim would come back with its old bytes where
    // glibc expects zeros (calloc from a regrown thread heap trusts that). A trim threshold
    // above any heap turns those trims off (the free memory stays, and is swapped out like any
    // cold memory); heaps and blocks given back with munmap are still released.
    // SAFETY: mallopt is safe to call at any time.
    unsafe { libc::mallopt(libc::M_TRIM_THRESHOLD, i32::MAX) };
    // The library's own data (its .bss holds the pager's registry) is never adopted.
    scan::record_own_image();
    let before = fork::fd_snapshot();
    let pager = Pager::new(cfg).map_err(|e| e.to_string())?;
    crate::BIG.lock();
    // SAFETY: BIG held; the pager lives for the process (kept in PAGER).
    let r = unsafe { fork::track_pager(&pager, &before) };
    crate::BIG.unlock();
    r?;
    crate::gate::install_gate()?;
    if fault_mode == uswap_pager::FaultMode::Sigbus {
        // The system calls libc makes with user buffers, made resident first (`sigsys`).
        altstack::ensure(None);
        tcb::init();
        tcb::pin_this_thread();
        sigsys::install()?;
        seccomp::install(&seccomp::libc_and_loader_text())?;
        sigsys::ON.store(true, Ordering::Release);
    }
    let _ = PAGER.set(pager.clone());
    // Published before the first adoption: from here the program's `madvise` frees the swap
    // entries of what it drops (a dormant process's threads run on meanwhile).
    STATE.store(READY, Ordering::SeqCst);
    fork::on_child_rebuilt(restart_scan_in_child);
    // One limit for the tree `uswap run` started (its budget file): from now on this process's
    // limit in force is its share (the scan thread updates it).
    if let Some(path) = launch::TREE_BUDGET.read(env).and_then(|p| std::ffi::CString::new(p).ok()) {
        uswap_pager::tree::attach(&path);
    }
    let (rss, shared) = scan::statm();
    let (file, shmem) = scan::file_and_shmem();
    // A dormant process measured its RSS, file-backed pages and heap when it began (what it
    // mapped since is the program's, adopted below; the files it loaded since are counted as
    // loaded after the start): its first sample splits the shared count again.
    let _ = RSS_AT_START.compare_exchange(0, rss, Ordering::Relaxed, Ordering::Relaxed);
    let dormant_start = scan::FILE_AT_START.compare_exchange(0, file, Ordering::Relaxed, Ordering::Relaxed).is_err();
    scan::SHMEM_AT_START.store(shmem, Ordering::Relaxed);
    scan::SHARED_AT_SPLIT.store(if dormant_start { 0 } else { shared }, Ordering::Relaxed);
    let _ = HEAP_AT_START.compare_exchange(0, crate::internal::mapped_bytes(), Ordering::Relaxed, Ordering::Relaxed);
    // Whatever the program has mapped so far (its brk heap, what the loader allocated), then
    // the reconciler keeps up with what it maps where no call of ours sees it.
    scan::scan_once(&pager, true);
    scan::start_thread(pager, scan_ms.max(1))
}

extern "C" fn at_exit() {
    if ready() || dormant::active() {
        write_stats(true);
    }
    if ready() {
        uswap_pager::tree::detach();
    }
}

/// `_exit(2)` without `exit(3)`'s handlers (a fork child's usual end): what [`at_exit`] does,
/// in a process that holds its own slot of the tree (not a `vfork` child, which runs in its
/// parent's memory), so that its statistics are counted and its share goes back at once.
pub(crate) fn at_underscore_exit() {
    if (ready() && uswap_pager::tree::holds_slot()) || dormant::writes_at_underscore_exit() {
        at_exit();
    }
}

/// Write this process's statistics to `USWAP_STATS_DIR`: `<pid>.final.json` at exit
/// (`final_`), `<pid>.json` for a snapshot (every `USWAP_STATS_INTERVAL_MS`, from the scan
/// thread). Two names, so a snapshot written while the process exits never replaces the final
/// figures, and a process that ends without `exit(3)` (`_exit`, a signal, SIGKILL) still leaves
/// its last snapshot. Each file is written to a temporary name and renamed, so a reader (the
/// runner, `uswap status`) never sees half a file.
pub fn write_stats(final_: bool) {
    // A failure the scan thread had no time to say before the exit is said now.
    if let (true, true, Some(p)) = (final_, ready(), pager()) {
        failures::check(p);
    }
    let Some(dir) = launch::STATS_DIR.read(env) else { return };
    internal(|| {
        let Some(mut r) = stats_record() else { return };
        let cmd = uswap::procfs::private(|| std::fs::read("/proc/self/cmdline")).unwrap_or_default();
        r.argv =
            cmd.split(|&b| b == 0).filter(|s| !s.is_empty()).map(|s| String::from_utf8_lossy(s).into_owned()).collect();
        r.pid = std::process::id() as i32;
        // SAFETY: getppid cannot fail.
        r.ppid = unsafe { libc::getppid() };
        r.vm_hwm_bytes = scan::status_bytes("VmHWM:");
        r.vm_rss_bytes = scan::status_bytes("VmRSS:");
        r.is_final = final_;
        r.written_unix_ms =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64);
        let path = format!("{dir}/{}{}.json", std::process::id(), if final_ { ".final" } else { "" });
        let tmp = format!("{path}.tmp");
        let Ok(text) = serde_json::to_string(&r) else { return };
        uswap::procfs::private(|| {
            if std::fs::write(&tmp, text).is_ok() {
                let _ = std::fs::rename(&tmp, &path);
            }
        });
    });
}

/// Growth of the library's internal heap since the pager started.
pub(crate) fn heap_growth() -> u64 {
    crate::internal::mapped_bytes().saturating_sub(HEAP_AT_START.load(Ordering::Relaxed))
}

/// This process's statistics record, but for who and when (filled by [`write_stats`]); None
/// when the pager is not up and the process is not dormant.
pub fn stats_record() -> Option<ProcRecord> {
    let rss_at_start = RSS_AT_START.load(Ordering::Relaxed);
    if !ready() {
        return dormant::stats_record().map(|r| ProcRecord {
            limit_bytes: launch::LIMIT.read(env).unwrap_or(0),
            rss_at_start_bytes: rss_at_start,
            fixed_overhead_bytes: rss_at_start,
            ..r
        });
    }
    let p = pager()?;
    let c = &COUNTERS;
    let heap_growth = heap_growth();
    Some(ProcRecord {
        limit_bytes: p.config().limit_bytes,
        rss_at_start_bytes: rss_at_start,
        // What the limit does not cover: the RSS at start, the growth of the library's own
        // heap (the engine's tables, the pager's bookkeeping: the analogue of the kernel's
        // swap metadata, which a memory cgroup does not charge either), and file-backed pages
        // loaded since (libraries opened later, mapped files), which are not anonymous memory.
        fixed_overhead_bytes: rss_at_start + heap_growth + scan::file_growth_peak() + scan::engine_meta_peak(),
        engine_meta_peak_bytes: scan::engine_meta_peak(),
        file_rss_growth_bytes: scan::file_growth_peak(),
        // Not in the fixed overhead: shared memory the pager cannot swap (see
        // `scan::file_and_shmem`); the summary names it when the peak goes over.
        shmem_rss_growth_bytes: scan::shmem_growth_peak(),
        internal_heap_bytes: crate::internal::mapped_bytes(),
        internal_heap_growth_bytes: heap_growth,
        adopt_calls: c.adopt_calls.load(Ordering::Relaxed),
        adopt_bytes: c.adopt_bytes.load(Ordering::Relaxed),
        adopt_errors: c.adopt_errors.load(Ordering::Relaxed),
        adopt_deferred: c.adopt_deferred.load(Ordering::Relaxed),
        mmap_small: c.mmap_small.load(Ordering::Relaxed),
        reservations: c.reservations.load(Ordering::Relaxed),
        unmanaged: Some(scan::unmanaged()),
        thrash: Some(thrash::stats()),
        tree: uswap_pager::tree::stats(),
        forks: fork::FORKS.load(Ordering::Relaxed),
        forks_file_shared: fork::FORKS_FILE_SHARED.load(Ordering::Relaxed),
        forks_file_copied: fork::FORKS_FILE_COPIED.load(Ordering::Relaxed),
        // What `failures` said on stderr about the store.
        said: Some(failures::said()),
        pager: Some(p.stats()),
        ..ProcRecord::default()
    })
}

// ---------------------------------------------------------------------------------------
// The mmap family: forwarded to the kernel, then the program's anonymous memory is adopted.

/// The program's `PROT_NONE` anonymous private reservations (start -> end): made writable
/// later by `mprotect`, they are adopted then.
pub static RESERVED: Reserved = Reserved { lock: RawLock::new(), map: UnsafeCell::new(BTreeMap::new()) };

/// See [`RESERVED`].
pub struct Reserved {
    lock: RawLock,
    map: UnsafeCell<BTreeMap<usize, usize>>,
}
// SAFETY: the map is only touched with `lock` held.
unsafe impl Sync for Reserved {}

impl Reserved {
    fn with<R>(&self, f: impl FnOnce(&mut BTreeMap<usize, usize>) -> R) -> R {
        self.lock.lock();
        // SAFETY: exclusive under the lock; allocations inside come from the internal heap
        // (the caller runs as uswap code), which never waits for a page fault.
        let r = internal(|| f(unsafe { &mut *self.map.get() }));
        self.lock.unlock();
        r
    }
    /// Is `[a, b)` inside a recorded reservation?
    fn contains(&self, a: usize, b: usize) -> bool {
        self.with(|m| m.range(..=a).next_back().is_some_and(|(_, &e)| b <= e))
    }
    /// Forget `[a, b)` (unmapped), keeping the parts of reservations around it.
    fn cut(&self, a: usize, b: usize) {
        self.with(|m| {
            let hits: Vec<(usize, usize)> = m.range(..b).filter(|(_, &e)| e > a).map(|(&s, &e)| (s, e)).collect();
            for (s, e) in hits {
                m.remove(&s);
                if s < a {
                    m.insert(s, a);
                }
                if e > b {
                    m.insert(b, e);
                }
            }
        })
    }
}

fn is_anon_private(flags: c_int, fd: c_int) -> bool {
    let bad = libc::MAP_GROWSDOWN | libc::MAP_STACK | libc::MAP_HUGETLB;
    flags & libc::MAP_ANONYMOUS != 0 && flags & 0x03 == libc::MAP_PRIVATE && flags & bad == 0 && fd == -1
}

/// Adopt `[a, a + len)` for the program (never fails the program's call).
fn adopt(a: usize, len: usize) {
    let Some(p) = pager() else { return };
    COUNTERS.adopt_calls.fetch_add(1, Ordering::Relaxed);
    match internal(|| p.adopt(a, len)) {
        Ok(n) => {
            COUNTERS.adopt_bytes.fetch_add(n as u64, Ordering::Relaxed);
        }
        Err(uswap_pager::PagerError::Busy(_)) => {
            COUNTERS.adopt_deferred.fetch_add(1, Ordering::Relaxed);
        }
        Err(_) => {
            COUNTERS.adopt_errors.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// `mmap(2)`.
///
/// # Safety
/// - As for `mmap(2)`.
#[no_mangle]
pub unsafe extern "C" fn mmap(
    addr: *mut c_void,
    len: size_t,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    off: i64,
) -> *mut c_void {
    if ours() {
        // The pager's own memory: recorded before the reconciler may read the maps again.
        let _making = uswap_pager::own::making();
        // SAFETY: forwarded to the kernel.
        let r = unsafe { crate::internal::sys_mmap(addr, len, prot, flags, fd, off) };
        if r != libc::MAP_FAILED && flags & libc::MAP_ANONYMOUS != 0 {
            uswap_pager::own::add(r as usize, len);
        }
        return r;
    }
    let keep = KeepErrno::new();
    // SAFETY: forwarded to the kernel.
    let r = unsafe { crate::internal::sys_mmap(addr, len, prot, flags, fd, off) };
    if r == libc::MAP_FAILED || mode() == OFF {
        return r;
    }
    let a = r as usize;
    if !is_anon_private(flags, fd) {
        return keep.ok(r);
    }
    if prot & libc::PROT_WRITE != 0 {
        dormant::note_growth(len);
    }
    if !ready() && !dormant::active() {
        return keep.ok(r);
    }
    if prot & libc::PROT_WRITE == 0 {
        if prot == libc::PROT_NONE {
            COUNTERS.reservations.fetch_add(1, Ordering::Relaxed);
            RESERVED.with(|m| {
                m.insert(a, a + len.div_ceil(4096) * 4096);
            });
        }
        return keep.ok(r);
    }
    if !ready() {
        return keep.ok(r);
    }
    if len < MMAP_MIN.load(Ordering::Relaxed) {
        COUNTERS.mmap_small.fetch_add(1, Ordering::Relaxed);
        return keep.ok(r);
    }
    adopt(a, len);
    keep.ok(r)
}

/// `mmap64(2)`.
///
/// # Safety
/// - As for `mmap(2)`.
#[no_mangle]
pub unsafe extern "C" fn mmap64(
    addr: *mut c_void,
    len: size_t,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    off: i64,
) -> *mut c_void {
    // SAFETY: same function on 64-bit.
    unsafe { mmap(addr, len, prot, flags, fd, off) }
}

/// `munmap(2)`: the kernel tells the pager (UNMAP event); only bookkeeping here.
///
/// # Safety
/// - As for `munmap(2)`.
#[no_mangle]
pub unsafe extern "C" fn munmap(addr: *mut c_void, len: size_t) -> c_int {
    if ours() && mode() != OFF {
        // The pager's own memory: forgotten before the unmap (`own::Unmapping` says why).
        let unmapping = uswap_pager::own::Unmapping::begin(addr as usize, len);
        // SAFETY: forwarded.
        let r = unsafe { crate::internal::sys_munmap(addr, len) };
        if r != 0 {
            unmapping.failed();
        }
        return r;
    }
    let keep = KeepErrno::new();
    // SAFETY: forwarded.
    let r = unsafe { crate::internal::sys_munmap(addr, len) };
    if r == 0 && mode() != OFF && (ready() || dormant::active()) {
        RESERVED.cut(addr as usize, (addr as usize).saturating_add(len));
    }
    if r == 0 {
        keep.ok(r)
    } else {
        r
    }
}

/// `madvise(2)`: `MADV_DONTNEED`, `MADV_FREE` and `MADV_REMOVE` on managed memory free the
/// pages' swap entries first (the range reads as zeros afterwards, as the kernel promises).
///
/// # Safety
/// - As for `madvise(2)`.
#[no_mangle]
pub unsafe extern "C" fn madvise(addr: *mut c_void, len: size_t, advice: c_int) -> c_int {
    let keep = KeepErrno::new();
    let releasing = matches!(advice, libc::MADV_DONTNEED | libc::MADV_FREE | libc::MADV_REMOVE);
    if releasing && mode() != OFF && !ready() && !ours() && dormant::madvise_begin() {
        // Dormant: straight to the kernel, and a start waits until this call is done.
        // SAFETY: forwarded.
        let r = unsafe { libc::syscall(libc::SYS_madvise, addr, len, advice) as c_int };
        dormant::madvise_done();
        return if r == 0 { keep.ok(r) } else { r };
    }
    if releasing && ready() && !ours() && (addr as usize).is_multiple_of(4096) {
        let (a, b) = (addr as usize, (addr as usize).saturating_add(len));
        if uswap_pager::overlaps_region(a, b) {
            if let Some(p) = pager() {
                internal(|| p.discard_range(a, len));
            }
        }
    }
    // SAFETY: forwarded.
    let r = unsafe { libc::syscall(libc::SYS_madvise, addr, len, advice) as c_int };
    if r == 0 {
        keep.ok(r)
    } else {
        r
    }
}

/// `mprotect(2)`: a reservation made writable is adopted.
///
/// # Safety
/// - As for `mprotect(2)`.
#[no_mangle]
pub unsafe extern "C" fn mprotect(addr: *mut c_void, len: size_t, prot: c_int) -> c_int {
    let keep = KeepErrno::new();
    // SAFETY: forwarded.
    let r = unsafe { libc::syscall(libc::SYS_mprotect, addr, len, prot) } as c_int;
    if r != 0 {
        return r;
    }
    if prot & libc::PROT_WRITE != 0 && mode() != OFF && !ours() {
        dormant::note_growth(len);
    }
    if prot & libc::PROT_WRITE != 0 && ready() && !ours() {
        let a = addr as usize;
        let b = a.saturating_add(len);
        if RESERVED.contains(a, b) {
            adopt(a, len);
        }
    }
    keep.ok(r)
}

/// `mremap(2)` (declared variadic in C; the optional fifth argument is read only with
/// `MREMAP_FIXED`, which the x86-64 and aarch64 calling conventions make safe). The kernel
/// moves managed pages and tells the pager (REMAP event); what the mapping grew by is adopted
/// here.
///
/// # Safety
/// - As for `mremap(2)`.
#[no_mangle]
pub unsafe extern "C" fn mremap(
    old: *mut c_void,
    old_len: size_t,
    new_len: size_t,
    flags: c_int,
    new_addr: *mut c_void,
) -> *mut c_void {
    if ours() {
        // As for munmap: the old range is forgotten before it may be freed, and the new one
        // recorded before adopters may look again.
        let unmapping = uswap_pager::own::Unmapping::begin(old as usize, old_len);
        // SAFETY: forwarded.
        let r = unsafe { libc::syscall(libc::SYS_mremap, old, old_len, new_len, flags, new_addr) } as *mut c_void;
        if r == libc::MAP_FAILED {
            unmapping.failed();
        } else {
            uswap_pager::own::add(r as usize, new_len);
        }
        return r;
    }
    let keep = KeepErrno::new();
    // SAFETY: forwarded.
    let r = unsafe { libc::syscall(libc::SYS_mremap, old, old_len, new_len, flags, new_addr) } as *mut c_void;
    if r == libc::MAP_FAILED || mode() == OFF {
        return r;
    }
    dormant::note_growth(new_len.saturating_sub(old_len));
    if ready() {
        let (a, b) = (old as usize, (old as usize).saturating_add(old_len));
        let was = uswap_pager::overlaps_region(a, b) || new_len >= MMAP_MIN.load(Ordering::Relaxed);
        if was && scan::is_anon_private_range(r as usize, new_len) {
            adopt(r as usize, new_len);
        }
    }
    keep.ok(r)
}
