//! The LD_PRELOAD library behind `uswap run`: puts an unmodified program's anonymous memory under
//! a pager.
//!
//! Activation: the library is inert unless `USWAP_LIMIT` is set in the environment (so a program
//! that links it for the C ABI keeps glibc's malloc: every interposed allocator entry point then
//! forwards to `__libc_malloc` and friends). Configuration, set by `uswap run`:
//! `USWAP_LIMIT` (bytes), `USWAP_TIERS`, `USWAP_FOLIO` (bytes), `USWAP_STATS_DIR` (each process
//! writes `<pid>.json` there at exit), `USWAP_HEAP_VA` (bytes of address space for the managed
//! heap, default 64 GiB), `USWAP_MMAP_MIN` (smallest anonymous `mmap` that is managed, default
//! 16 KiB), `USWAP_ON_ERROR=warn` (run unmanaged, with a warning, if the pager cannot start;
//! default: print why and exit 125).
//!
//! What is managed: one pager region spans the whole managed heap's address space
//! ([`vma`] carves it). The program's `malloc` family is a dlmalloc whose segments come from that
//! space, and anonymous private read-write `mmap`s (not `MAP_FIXED`, `MAP_SHARED`, stacks or huge
//! pages) of at least `USWAP_MMAP_MIN` bytes are served from it too; `munmap`,
//! `madvise(DONTNEED/FREE/REMOVE)` and `mremap` on them release or move their swap entries.
//! Memory allocated before the pager is up (a few early allocations of libc and of this library)
//! comes from the library's own heap ([`crate::internal`]) and is not paged.
//!
//! Programs started in turn: `LD_PRELOAD` and the `USWAP_*` variables are inherited, so every
//! process exec'd below `uswap run` gets **its own pager with the same limit** (a pipeline of three
//! programs under `--limit 64M` may use 3 x 64 MiB). A forked child continues with a copy of its
//! parent's pager and its own limit (see [`crate::fork`]).
//!
//! Locking: [`crate::BIG`] serializes the managed heap (dlmalloc, the address-space allocator
//! and the region calls that discard memory); page faults taken while it is held are resolved
//! without it.

pub mod io;
pub mod signals;
pub mod vma;

use crate::fork::{self, in_internal, internal};
use crate::internal::{usable_size, HEAP};
use crate::BIG;
use dlmalloc::{Allocator, Dlmalloc};
use libc::{c_int, c_void, size_t};
use std::cell::UnsafeCell;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;
use uswap_pager::{Pager, PagerConfig, Region};

const UNKNOWN: u8 = 0;
const OFF: u8 = 1;
const BOOT: u8 = 2;
const READY: u8 = 3;
const FAILED: u8 = 4;

static STATE: AtomicU8 = AtomicU8::new(UNKNOWN);
static BASE: AtomicUsize = AtomicUsize::new(0);
static END: AtomicUsize = AtomicUsize::new(0);
static MMAP_MIN: AtomicUsize = AtomicUsize::new(16 << 10);

/// Counters of the interposition layer.
#[derive(Default)]
pub struct Counters {
    /// Anonymous mmaps served from the managed heap.
    pub mmap_managed: AtomicU64,
    /// mmaps passed to the kernel.
    pub mmap_passthrough: AtomicU64,
    /// munmaps of managed memory.
    pub munmap_managed: AtomicU64,
    /// madvise calls that released managed memory.
    pub madvise_managed: AtomicU64,
    /// mremaps of managed memory.
    pub mremap_managed: AtomicU64,
    /// Managed mremaps that had to move and copy.
    pub mremap_moved: AtomicU64,
    /// Managed allocations refused (address space exhausted).
    pub managed_oom: AtomicU64,
}
/// The counters.
pub static COUNTERS: Counters = Counters {
    mmap_managed: AtomicU64::new(0),
    mmap_passthrough: AtomicU64::new(0),
    munmap_managed: AtomicU64::new(0),
    madvise_managed: AtomicU64::new(0),
    mremap_managed: AtomicU64::new(0),
    mremap_moved: AtomicU64::new(0),
    managed_oom: AtomicU64::new(0),
};

fn env(name: &std::ffi::CStr) -> Option<&'static str> {
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
fn mode() -> u8 {
    let s = STATE.load(Ordering::Acquire);
    if s != UNKNOWN {
        return s;
    }
    let m = if env(c"USWAP_LIMIT").is_some() { BOOT } else { OFF };
    let _ = STATE.compare_exchange(UNKNOWN, m, Ordering::AcqRel, Ordering::Acquire);
    STATE.load(Ordering::Acquire)
}

/// True once the managed heap serves the program.
pub fn ready() -> bool {
    STATE.load(Ordering::Acquire) == READY
}

fn managed(p: usize) -> bool {
    p >= BASE.load(Ordering::Relaxed) && p < END.load(Ordering::Relaxed)
}

/// The managed heap: the pager, its one region, the address-space allocator and the program's
/// mmap extents.
pub struct Managed {
    /// The pager.
    pub pager: Arc<Pager>,
    region: Region,
    vma: vma::Vma,
    mmaps: BTreeMap<usize, usize>,
    /// Large malloc blocks served straight from the address space (start -> length), so that
    /// `free` returns their memory and swap entries at once (glibc uses mmap for these).
    bigs: BTreeMap<usize, usize>,
    base: usize,
    /// Resident set size when the pager had started (fixed overhead: binary, libraries, pager).
    pub rss_at_start: u64,
}

struct Cell<T>(UnsafeCell<T>);
// SAFETY: accessed only under BIG.
unsafe impl<T> Sync for Cell<T> {}
static MANAGED: Cell<Option<Managed>> = Cell(UnsafeCell::new(None));

/// # Safety
/// - The caller holds BIG and the pager is ready.
unsafe fn m() -> &'static mut Managed {
    // SAFETY: set before READY, only accessed under BIG (caller's obligation).
    unsafe { (*MANAGED.0.get()).as_mut().unwrap_unchecked() }
}

/// Run `f` with the managed heap, under BIG, as uswap code.
fn with_managed<R>(f: impl FnOnce(&mut Managed) -> R) -> R {
    BIG.lock();
    // SAFETY: BIG held; only called when ready.
    let r = internal(|| f(unsafe { m() }));
    BIG.unlock();
    r
}

/// A snapshot for statistics (None when the pager is not up).
pub fn stats_json() -> Option<serde_json::Value> {
    if !ready() {
        return None;
    }
    Some(with_managed(|mm| {
        let c = &COUNTERS;
        serde_json::json!({
            "limit_bytes": mm.pager.config().limit_bytes,
            "heap_va_bytes": mm.region.len(),
            "heap_used_va_bytes": mm.vma.used,
            "heap_free_ranges": mm.vma.free_ranges(),
            "program_mmaps_live": mm.mmaps.len(),
            "large_blocks_live": mm.bigs.len(),
            "rss_at_start_bytes": mm.rss_at_start,
            "internal_heap_bytes": crate::internal::mapped_bytes(),
            "mmap_managed": c.mmap_managed.load(Ordering::Relaxed),
            "mmap_passthrough": c.mmap_passthrough.load(Ordering::Relaxed),
            "munmap_managed": c.munmap_managed.load(Ordering::Relaxed),
            "madvise_managed": c.madvise_managed.load(Ordering::Relaxed),
            "mremap_managed": c.mremap_managed.load(Ordering::Relaxed),
            "mremap_moved": c.mremap_moved.load(Ordering::Relaxed),
            "managed_oom": c.managed_oom.load(Ordering::Relaxed),
            "forks": fork::FORKS.load(Ordering::Relaxed),
            "pager": mm.pager.stats(),
        })
    }))
}

impl Managed {
    fn alloc(&mut self, len: usize, align: usize) -> Option<usize> {
        let r = self.vma.alloc(len, align);
        if r.is_none() {
            COUNTERS.managed_oom.fetch_add(1, Ordering::Relaxed);
        }
        r
    }
    fn release(&mut self, start: usize, len: usize) {
        self.region.discard(start - self.base, len);
        self.vma.free(start, len);
    }
    fn discard(&mut self, start: usize, len: usize) {
        self.region.discard(start - self.base, len);
    }
    /// Remove `[a, b)` from the program's mmap extents; returns the pieces removed.
    fn cut_mmaps(&mut self, a: usize, b: usize) -> Vec<(usize, usize)> {
        let hits: Vec<(usize, usize)> =
            self.mmaps.range(..b).filter(|(&s, &l)| s + l > a).map(|(&s, &l)| (s, l)).collect();
        let mut cut = Vec::new();
        for (s, l) in hits {
            self.mmaps.remove(&s);
            let (cs, ce) = (s.max(a), (s + l).min(b));
            if s < cs {
                self.mmaps.insert(s, cs - s);
            }
            if ce < s + l {
                self.mmaps.insert(ce, s + l - ce);
            }
            cut.push((cs, ce - cs));
        }
        cut
    }
}

/// dlmalloc's system allocator for the program's heap: ranges of the managed region.
pub struct HeapSys;

// SAFETY: ranges come from the managed region (zero-fill, valid while allocated) and are only
// returned when dlmalloc gives them back; every call happens under BIG.
unsafe impl Allocator for HeapSys {
    fn alloc(&self, size: usize) -> (*mut u8, usize, u32) {
        let size = size.div_ceil(4096) * 4096;
        // SAFETY: dlmalloc is only called under BIG after READY.
        match unsafe { m() }.alloc(size, 64 << 10) {
            Some(p) => (p as *mut u8, size, 0),
            None => (std::ptr::null_mut(), 0, 0),
        }
    }
    fn remap(&self, _ptr: *mut u8, _old: usize, _new: usize, _can_move: bool) -> *mut u8 {
        std::ptr::null_mut()
    }
    fn free_part(&self, ptr: *mut u8, oldsize: usize, newsize: usize) -> bool {
        let a = (ptr as usize + newsize).div_ceil(4096) * 4096;
        let b = ptr as usize + oldsize;
        if a < b {
            // SAFETY: as alloc.
            unsafe { m() }.release(a, b - a);
        }
        true
    }
    fn free(&self, ptr: *mut u8, size: usize) -> bool {
        // SAFETY: as alloc.
        unsafe { m() }.release(ptr as usize, size);
        true
    }
    fn can_release_part(&self, _flags: u32) -> bool {
        true
    }
    fn allocates_zeros(&self) -> bool {
        true
    }
    fn page_size(&self) -> usize {
        4096
    }
}

static UHEAP: Cell<Dlmalloc<HeapSys>> = Cell(UnsafeCell::new(Dlmalloc::new_with_allocator(HeapSys)));

/// Requests of at least this many bytes bypass dlmalloc (glibc's `M_MMAP_THRESHOLD`).
const LARGE_MIN: usize = 128 << 10;

fn large_alloc(n: usize, align: usize) -> *mut u8 {
    let l = n.max(1).div_ceil(4096) * 4096;
    if !BIG.lock_or_bail(must_not_wait) {
        // SAFETY: the internal heap, as during start-up.
        return HEAP.with(|h| unsafe { h.c_memalign(align.max(16), n) });
    }
    BIG.unlock();
    with_managed(|mm| match mm.alloc(l, align.max(if l >= 64 << 10 { 64 << 10 } else { 4096 })) {
        Some(a) => {
            mm.bigs.insert(a, l);
            a as *mut u8
        }
        None => std::ptr::null_mut(),
    })
}

/// Size of a large block, or None if `p` is not one (caller holds BIG).
fn large_len(mm: &Managed, p: usize) -> Option<usize> {
    mm.bigs.get(&p).copied()
}

thread_local! {
    static PAGER_THREAD: std::cell::Cell<u8> = const { std::cell::Cell::new(0) };
}

/// True when this thread must not wait for [`BIG`]: a fork is in progress, or this is one of the
/// pager's own threads (its event thread resolves the faults of a thread that may hold BIG, and
/// allocates through glibc once, when it starts).
fn must_not_wait() -> bool {
    fork::FORKING.load(Ordering::Acquire) || pager_thread()
}

/// True on the pager's own threads (named `uswap-*`): they must never touch managed memory (in
/// thread fault mode the event thread would wait for itself), so their C allocations come from
/// the internal heap.
fn pager_thread() -> bool {
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

/// Like [`uheap`], but gives up (None) when a fork is in progress in another thread.
fn uheap_try<R>(f: impl FnOnce(&mut Dlmalloc<HeapSys>) -> R) -> Option<R> {
    if !BIG.lock_or_bail(must_not_wait) {
        return None;
    }
    // SAFETY: BIG held.
    let r = internal(|| f(unsafe { &mut *UHEAP.0.get() }));
    BIG.unlock();
    Some(r)
}

fn uheap<R>(f: impl FnOnce(&mut Dlmalloc<HeapSys>) -> R) -> R {
    BIG.lock();
    // SAFETY: BIG held.
    let r = internal(|| f(unsafe { &mut *UHEAP.0.get() }));
    BIG.unlock();
    r
}

// ---------------------------------------------------------------------------------------
// Start-up

#[used]
#[link_section = ".init_array"]
static INIT: extern "C" fn() = init;

extern "C" fn init() {
    fork::install_atfork();
    if mode() != BOOT {
        return;
    }
    let res = internal(start);
    match res {
        Ok(()) => {
            STATE.store(READY, Ordering::Release);
            // SAFETY: registering an extern "C" function.
            unsafe { libc::atexit(at_exit) };
        }
        Err(e) => {
            let warn = env(c"USWAP_ON_ERROR") == Some("warn");
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

fn parse_num(name: &std::ffi::CStr, default: u64) -> Result<u64, String> {
    match env(name) {
        None => Ok(default),
        Some(v) => uswap::config::parse_size(&name.to_string_lossy(), v).map_err(|e| e.to_string()),
    }
}

/// VmRSS or VmHWM of this process from /proc/self/status, in bytes.
pub fn proc_status_bytes(key: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix(key))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .map(|kb| kb * 1024)
        .unwrap_or(0)
}

fn start() -> Result<(), String> {
    let limit = parse_num(c"USWAP_LIMIT", 0)?;
    let folio = parse_num(c"USWAP_FOLIO", 65536)? as usize;
    let va = parse_num(c"USWAP_HEAP_VA", 64 << 30)? as usize;
    MMAP_MIN.store(parse_num(c"USWAP_MMAP_MIN", 16 << 10)? as usize, Ordering::Relaxed);
    let cfg = PagerConfig {
        limit_bytes: limit,
        folio_size: folio,
        tiers: env(c"USWAP_TIERS").unwrap_or("zero,lz4,file:/var/tmp").to_string(),
        fault_mode: match env(c"USWAP_FAULT_MODE") {
            Some("sigbus") => uswap_pager::FaultMode::Sigbus,
            _ => uswap_pager::FaultMode::Thread,
        },
        ..Default::default()
    };
    let before = fork::fd_snapshot();
    let pager = Pager::new(cfg.clone()).map_err(|e| e.to_string())?;
    BIG.lock();
    let r = (|| {
        // SAFETY: BIG held.
        let idx = unsafe { fork::track_pager(&pager, &before) }?;
        let region = pager.map(va).map_err(|e| e.to_string())?;
        let base = region.as_ptr() as usize;
        // SAFETY: BIG held.
        if !unsafe { fork::track_region(idx, base, region.len()) } {
            return Err("too many regions to track".to_string());
        }
        fork::install_gate()?;
        BASE.store(base, Ordering::Relaxed);
        END.store(base + region.len(), Ordering::Relaxed);
        let vma = vma::Vma::new(base, region.len());
        // SAFETY: BIG held.
        unsafe {
            *MANAGED.0.get() = Some(Managed {
                pager: pager.clone(),
                vma,
                mmaps: BTreeMap::new(),
                bigs: BTreeMap::new(),
                base,
                region,
                rss_at_start: proc_status_bytes("VmRSS:"),
            })
        };
        Ok(())
    })();
    BIG.unlock();
    r
}

extern "C" fn at_exit() {
    let Some(dir) = env(c"USWAP_STATS_DIR") else { return };
    internal(|| {
        let Some(mut v) = stats_json() else { return };
        let cmd = std::fs::read("/proc/self/cmdline").unwrap_or_default();
        let argv: Vec<String> =
            cmd.split(|&b| b == 0).filter(|s| !s.is_empty()).map(|s| String::from_utf8_lossy(s).into_owned()).collect();
        if let Some(o) = v.as_object_mut() {
            o.insert("pid".into(), std::process::id().into());
            // SAFETY: getppid cannot fail.
            o.insert("ppid".into(), unsafe { libc::getppid() }.into());
            o.insert("argv".into(), argv.into());
            o.insert("vm_hwm_bytes".into(), proc_status_bytes("VmHWM:").into());
            o.insert("vm_rss_bytes".into(), proc_status_bytes("VmRSS:").into());
        }
        let path = format!("{dir}/{}.json", std::process::id());
        let tmp = format!("{path}.tmp");
        if std::fs::write(&tmp, v.to_string()).is_ok() {
            let _ = std::fs::rename(&tmp, &path);
        }
    });
}

// ---------------------------------------------------------------------------------------
// The malloc family

extern "C" {
    fn __libc_malloc(n: size_t) -> *mut c_void;
    fn __libc_free(p: *mut c_void);
    fn __libc_calloc(n: size_t, s: size_t) -> *mut c_void;
    fn __libc_realloc(p: *mut c_void, n: size_t) -> *mut c_void;
    fn __libc_memalign(a: size_t, n: size_t) -> *mut c_void;
}

fn enomem() -> *mut c_void {
    // SAFETY: errno of this thread.
    unsafe { *libc::__errno_location() = libc::ENOMEM };
    std::ptr::null_mut()
}

/// Where an allocation request goes.
fn route() -> u8 {
    match mode() {
        OFF => OFF,
        READY if !in_internal() && !pager_thread() => READY,
        _ => BOOT,
    }
}

unsafe fn alloc_aligned(align: usize, n: usize) -> *mut c_void {
    let p: *mut u8 = match route() {
        // SAFETY: glibc's own allocator.
        OFF => return unsafe { __libc_memalign(align, n) },
        READY if n >= LARGE_MIN => large_alloc(n, align),
        // SAFETY: align is a power of two (checked by callers).
        READY => uheap_try(|h| unsafe { h.c_memalign(align, n) })
            // SAFETY: as above, from the internal heap while a fork is in progress.
            .unwrap_or_else(|| HEAP.with(|h| unsafe { h.c_memalign(align, n) })),
        // SAFETY: as above.
        _ => HEAP.with(|h| unsafe { h.c_memalign(align, n) }),
    };
    if p.is_null() {
        enomem()
    } else {
        p.cast()
    }
}

/// `malloc(3)`.
///
/// # Safety
/// - As for `malloc(3)`.
#[no_mangle]
pub unsafe extern "C" fn malloc(n: size_t) -> *mut c_void {
    let p: *mut u8 = match route() {
        // SAFETY: glibc's allocator.
        OFF => return unsafe { __libc_malloc(n) },
        READY if n >= LARGE_MIN => large_alloc(n, 4096),
        // SAFETY: dlmalloc under its lock.
        READY => uheap_try(|h| unsafe { h.c_malloc(n) })
            // SAFETY: as above, from the internal heap while a fork is in progress.
            .unwrap_or_else(|| HEAP.with(|h| unsafe { h.c_malloc(n) })),
        // SAFETY: as above.
        _ => HEAP.with(|h| unsafe { h.c_malloc(n) }),
    };
    if p.is_null() {
        enomem()
    } else {
        p.cast()
    }
}

/// `free(3)`.
///
/// # Safety
/// - As for `free(3)`.
#[no_mangle]
pub unsafe extern "C" fn free(p: *mut c_void) {
    if p.is_null() {
        return;
    }
    if managed(p as usize) {
        uheap(|h| {
            // SAFETY: BIG is held inside uheap.
            let mm = unsafe { m() };
            match large_len(mm, p as usize) {
                Some(l) => {
                    mm.bigs.remove(&(p as usize));
                    mm.release(p as usize, l);
                }
                // SAFETY: a block of the managed heap.
                None => unsafe { h.c_free(p.cast()) },
            }
        });
    } else if mode() == OFF {
        // SAFETY: glibc's block.
        unsafe { __libc_free(p) }
    } else {
        // SAFETY: a block of the internal heap.
        HEAP.with(|h| unsafe { h.c_free(p.cast()) });
    }
}

/// `calloc(3)`.
///
/// # Safety
/// - As for `calloc(3)`.
#[no_mangle]
pub unsafe extern "C" fn calloc(n: size_t, s: size_t) -> *mut c_void {
    let Some(total) = n.checked_mul(s) else { return enomem() };
    let p: *mut u8 = match route() {
        // SAFETY: glibc's allocator.
        OFF => return unsafe { __libc_calloc(n, s) },
        // Fresh address space is zero-fill.
        READY if total >= LARGE_MIN => large_alloc(total, 4096),
        // SAFETY: dlmalloc under its lock; calloc zeroes what is not known zero.
        READY => uheap_try(|h| unsafe { h.calloc(total, 16) })
            // SAFETY: as above, from the internal heap while a fork is in progress.
            .unwrap_or_else(|| HEAP.with(|h| unsafe { h.calloc(total, 16) })),
        // SAFETY: as above.
        _ => HEAP.with(|h| unsafe { h.calloc(total, 16) }),
    };
    if p.is_null() {
        enomem()
    } else {
        p.cast()
    }
}

/// `realloc(3)`.
///
/// # Safety
/// - As for `realloc(3)`.
#[no_mangle]
pub unsafe extern "C" fn realloc(p: *mut c_void, n: size_t) -> *mut c_void {
    if p.is_null() {
        // SAFETY: malloc's contract.
        return unsafe { malloc(n) };
    }
    if n == 0 {
        // SAFETY: p is a live block (caller's contract).
        unsafe { free(p) };
        return std::ptr::null_mut();
    }
    let q: *mut u8 = if managed(p as usize) {
        // SAFETY: BIG held inside with_managed.
        let large = with_managed(|mm| large_len(mm, p as usize));
        match large {
            Some(l) if n <= l && n >= LARGE_MIN / 2 => return p,
            Some(l) => {
                let grown = n > l
                    && with_managed(|mm| {
                        let extra = n.div_ceil(4096) * 4096 - l;
                        let ok = mm.vma.take(p as usize + l, extra);
                        if ok {
                            mm.bigs.insert(p as usize, l + extra);
                        }
                        ok
                    });
                if grown {
                    return p;
                }
                // SAFETY: malloc's contract.
                let q = unsafe { malloc(n) };
                if !q.is_null() {
                    // SAFETY: both blocks are live and at least min(l, n) bytes long.
                    unsafe { std::ptr::copy_nonoverlapping(p.cast::<u8>(), q.cast::<u8>(), l.min(n)) };
                    // SAFETY: p is a live large block.
                    unsafe { free(p) };
                }
                return q;
            }
            // SAFETY: a block of the managed heap.
            None => uheap(|h| unsafe { h.c_realloc(p.cast(), n) }),
        }
    } else if mode() == OFF {
        // SAFETY: glibc's block.
        return unsafe { __libc_realloc(p, n) };
    } else if route() == READY {
        // A block of the internal heap (allocated before the pager was up) moves to the managed
        // heap when the program resizes it: left there, a buffer that grows (an interpreter's
        // table, say) would stay unpaged and outside the limit for the life of the process.
        // SAFETY: p is a live block of the internal heap (caller's contract).
        let old = unsafe { usable_size(p.cast()) };
        // SAFETY: malloc's contract.
        let q = unsafe { malloc(n) };
        if !q.is_null() {
            // SAFETY: both blocks are live and at least min(old, n) bytes long.
            unsafe { std::ptr::copy_nonoverlapping(p.cast::<u8>(), q.cast::<u8>(), old.min(n)) };
            // SAFETY: p is a live block of the internal heap, no longer used.
            HEAP.with(|h| unsafe { h.c_free(p.cast()) });
        }
        q.cast()
    } else {
        // SAFETY: a block of the internal heap, resized by uswap code or during start-up.
        HEAP.with(|h| unsafe { h.c_realloc(p.cast(), n) })
    };
    if q.is_null() {
        enomem()
    } else {
        q.cast()
    }
}

/// `reallocarray(3)`.
///
/// # Safety
/// - As for `reallocarray(3)`.
#[no_mangle]
pub unsafe extern "C" fn reallocarray(p: *mut c_void, n: size_t, s: size_t) -> *mut c_void {
    match n.checked_mul(s) {
        // SAFETY: realloc's contract.
        Some(t) => unsafe { realloc(p, t) },
        None => enomem(),
    }
}

/// `posix_memalign(3)`.
///
/// # Safety
/// - As for `posix_memalign(3)`.
#[no_mangle]
pub unsafe extern "C" fn posix_memalign(out: *mut *mut c_void, align: size_t, n: size_t) -> c_int {
    if !align.is_power_of_two() || !align.is_multiple_of(std::mem::size_of::<usize>()) {
        return libc::EINVAL;
    }
    // SAFETY: valid alignment.
    let p = unsafe { alloc_aligned(align, n) };
    if p.is_null() {
        return libc::ENOMEM;
    }
    // SAFETY: out is writable (caller's contract).
    unsafe { *out = p };
    0
}

/// `aligned_alloc(3)`.
///
/// # Safety
/// - As for `aligned_alloc(3)`.
#[no_mangle]
pub unsafe extern "C" fn aligned_alloc(align: size_t, n: size_t) -> *mut c_void {
    if !align.is_power_of_two() {
        // SAFETY: errno of this thread.
        unsafe { *libc::__errno_location() = libc::EINVAL };
        return std::ptr::null_mut();
    }
    // SAFETY: valid alignment.
    unsafe { alloc_aligned(align, n) }
}

/// `memalign(3)`.
///
/// # Safety
/// - As for `memalign(3)`.
#[no_mangle]
pub unsafe extern "C" fn memalign(align: size_t, n: size_t) -> *mut c_void {
    // SAFETY: as aligned_alloc.
    unsafe { aligned_alloc(align.max(16).next_power_of_two(), n) }
}

/// `valloc(3)`.
///
/// # Safety
/// - As for `valloc(3)`.
#[no_mangle]
pub unsafe extern "C" fn valloc(n: size_t) -> *mut c_void {
    // SAFETY: page alignment is valid.
    unsafe { alloc_aligned(4096, n) }
}

/// `pvalloc(3)`.
///
/// # Safety
/// - As for `pvalloc(3)`.
#[no_mangle]
pub unsafe extern "C" fn pvalloc(n: size_t) -> *mut c_void {
    // SAFETY: page alignment is valid.
    unsafe { alloc_aligned(4096, n.max(1).div_ceil(4096) * 4096) }
}

/// `malloc_usable_size(3)`.
///
/// # Safety
/// - As for `malloc_usable_size(3)`.
#[no_mangle]
pub unsafe extern "C" fn malloc_usable_size(p: *mut c_void) -> size_t {
    if p.is_null() {
        return 0;
    }
    if mode() == OFF {
        type F = unsafe extern "C" fn(*mut c_void) -> size_t;
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let mut f = NEXT.load(Ordering::Relaxed);
        if f == 0 {
            // SAFETY: dlsym with a NUL-terminated name.
            f = unsafe { libc::dlsym(libc::RTLD_NEXT, c"malloc_usable_size".as_ptr()) } as usize;
            NEXT.store(f, Ordering::Relaxed);
        }
        if f == 0 {
            return 0;
        }
        // SAFETY: glibc's malloc_usable_size.
        return unsafe { std::mem::transmute::<usize, F>(f)(p) };
    }
    if managed(p as usize) {
        if let Some(l) = with_managed(|mm| large_len(mm, p as usize)) {
            return l;
        }
    }
    // SAFETY: a live block of one of our dlmalloc heaps.
    unsafe { usable_size(p.cast()) }
}

// ---------------------------------------------------------------------------------------
// The mmap family

fn manageable(addr: *mut c_void, len: usize, prot: c_int, flags: c_int, fd: c_int) -> bool {
    let _ = addr;
    let bad = libc::MAP_FIXED
        | libc::MAP_FIXED_NOREPLACE
        | libc::MAP_GROWSDOWN
        | libc::MAP_STACK
        | libc::MAP_HUGETLB
        | libc::MAP_32BIT;
    ready()
        && !in_internal()
        && flags & libc::MAP_ANONYMOUS != 0
        && flags & 0x03 == libc::MAP_PRIVATE
        && flags & bad == 0
        && fd == -1
        && prot == libc::PROT_READ | libc::PROT_WRITE
        && len >= MMAP_MIN.load(Ordering::Relaxed)
        && len < (1usize << 46)
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
    if manageable(addr, len, prot, flags, fd) {
        let l = len.div_ceil(4096) * 4096;
        let got = with_managed(|mm| {
            let a = mm.alloc(l, if l >= 64 << 10 { 64 << 10 } else { 4096 })?;
            mm.mmaps.insert(a, l);
            Some(a)
        });
        if let Some(a) = got {
            COUNTERS.mmap_managed.fetch_add(1, Ordering::Relaxed);
            return a as *mut c_void;
        }
    }
    if ready() && !in_internal() && flags & libc::MAP_FIXED != 0 && managed(addr as usize) {
        // MAP_FIXED over managed memory: an anonymous private read-write mapping over one of
        // the program's own extents is emulated (the range becomes zero-fill); anything else
        // takes the range out of the pager's hands for good.
        let a = addr as usize;
        let l = len.div_ceil(4096) * 4096;
        let emulate = flags & (libc::MAP_ANONYMOUS | libc::MAP_PRIVATE | libc::MAP_SHARED)
            == libc::MAP_ANONYMOUS | libc::MAP_PRIVATE
            && prot == libc::PROT_READ | libc::PROT_WRITE;
        let done = with_managed(|mm| {
            let inside = mm.mmaps.range(..=a).next_back().is_some_and(|(&s, &sl)| a + l <= s + sl);
            if emulate && inside {
                mm.discard(a, l);
                return true;
            }
            let _ = mm.cut_mmaps(a, a + l);
            mm.discard(a, l);
            false
        });
        if done {
            return addr;
        }
    }
    COUNTERS.mmap_passthrough.fetch_add(1, Ordering::Relaxed);
    // SAFETY: forwarded to the kernel.
    unsafe { crate::internal::sys_mmap(addr, len, prot, flags, fd, off) }
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

fn einval() -> c_int {
    // SAFETY: errno of this thread.
    unsafe { *libc::__errno_location() = libc::EINVAL };
    -1
}

/// `munmap(2)`.
///
/// # Safety
/// - As for `munmap(2)`.
#[no_mangle]
pub unsafe extern "C" fn munmap(addr: *mut c_void, len: size_t) -> c_int {
    let (a, b) = (addr as usize, (addr as usize).saturating_add(len));
    let (base, end) = (BASE.load(Ordering::Relaxed), END.load(Ordering::Relaxed));
    if !ready() || in_internal() || b <= base || a >= end {
        // SAFETY: forwarded.
        return unsafe { crate::internal::sys_munmap(addr, len) };
    }
    if !a.is_multiple_of(4096) || len == 0 {
        return einval();
    }
    let (ma, mb) = (a.max(base), b.min(end).div_ceil(4096) * 4096);
    with_managed(|mm| {
        for (s, l) in mm.cut_mmaps(ma, mb) {
            mm.release(s, l);
        }
    });
    COUNTERS.munmap_managed.fetch_add(1, Ordering::Relaxed);
    let mut r = 0;
    if a < ma {
        // SAFETY: the part below the managed space, forwarded.
        r |= unsafe { crate::internal::sys_munmap(addr, ma - a) };
    }
    if b > end {
        // SAFETY: the part above, forwarded.
        r |= unsafe { crate::internal::sys_munmap(end as *mut c_void, b - end) };
    }
    r
}

/// `madvise(2)`: `MADV_DONTNEED`, `MADV_FREE` and `MADV_REMOVE` on managed memory release the
/// pages and their swap entries (the range reads as zeros afterwards).
///
/// # Safety
/// - As for `madvise(2)`.
#[no_mangle]
pub unsafe extern "C" fn madvise(addr: *mut c_void, len: size_t, advice: c_int) -> c_int {
    let a = addr as usize;
    let releasing = matches!(advice, libc::MADV_DONTNEED | libc::MADV_FREE | libc::MADV_REMOVE);
    if releasing && ready() && !in_internal() && managed(a) {
        if !a.is_multiple_of(4096) {
            return einval();
        }
        let l = len.div_ceil(4096) * 4096;
        let l = l.min(END.load(Ordering::Relaxed) - a);
        with_managed(|mm| mm.discard(a, l));
        COUNTERS.madvise_managed.fetch_add(1, Ordering::Relaxed);
        return 0;
    }
    // SAFETY: forwarded.
    unsafe { libc::syscall(libc::SYS_madvise, addr, len, advice) as c_int }
}

/// `mremap(2)` (declared variadic in C; the optional fifth argument is read only with
/// `MREMAP_FIXED`, which the x86-64 and aarch64 calling conventions make safe).
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
    let a = old as usize;
    if !ready() || in_internal() || !managed(a) {
        // SAFETY: forwarded.
        return unsafe { libc::syscall(libc::SYS_mremap, old, old_len, new_len, flags, new_addr) as *mut c_void };
    }
    COUNTERS.mremap_managed.fetch_add(1, Ordering::Relaxed);
    if !a.is_multiple_of(4096)
        || new_len == 0
        || flags & !(libc::MREMAP_MAYMOVE | libc::MREMAP_FIXED) != 0
        || flags & libc::MREMAP_FIXED != 0
    {
        // SAFETY: errno of this thread.
        unsafe {
            *libc::__errno_location() = if flags & libc::MREMAP_FIXED != 0 { libc::ENOMEM } else { libc::EINVAL }
        };
        return libc::MAP_FAILED;
    }
    let (ol, nl) = (old_len.div_ceil(4096) * 4096, new_len.div_ceil(4096) * 4096);
    enum Out {
        Done(usize),
        Move(usize),
        Fail,
    }
    let out = with_managed(|mm| {
        let Some((&s, &l)) = mm.mmaps.range(..=a).next_back() else { return Out::Fail };
        if a + ol > s + l {
            return Out::Fail;
        }
        if nl <= ol {
            for (cs, cl) in mm.cut_mmaps(a + nl, a + ol) {
                mm.release(cs, cl);
            }
            return Out::Done(a);
        }
        // Grow in place when the mapping ends here and the space after it is free.
        if a + ol == s + l && mm.vma.take(a + ol, nl - ol) {
            mm.mmaps.insert(s, l + nl - ol);
            return Out::Done(a);
        }
        if flags & libc::MREMAP_MAYMOVE == 0 {
            return Out::Fail;
        }
        match mm.alloc(nl, 64 << 10) {
            Some(n) => {
                mm.mmaps.insert(n, nl);
                Out::Move(n)
            }
            None => Out::Fail,
        }
    });
    match out {
        Out::Done(p) => p as *mut c_void,
        Out::Move(n) => {
            COUNTERS.mremap_moved.fetch_add(1, Ordering::Relaxed);
            // Copy outside BIG: the copy faults pages in (and may evict) like any access.
            // SAFETY: both ranges are live managed mappings of at least ol bytes.
            unsafe { std::ptr::copy_nonoverlapping(a as *const u8, n as *mut u8, ol) };
            with_managed(|mm| {
                for (cs, cl) in mm.cut_mmaps(a, a + ol) {
                    mm.release(cs, cl);
                }
            });
            n as *mut c_void
        }
        Out::Fail => {
            // SAFETY: errno of this thread.
            unsafe { *libc::__errno_location() = libc::ENOMEM };
            libc::MAP_FAILED
        }
    }
}
