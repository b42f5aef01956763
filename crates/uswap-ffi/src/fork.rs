//! fork(2) under the pager.
//!
//! A pager's state (page words, rings, the engine's tables and compressed pool) is ordinary
//! process memory, so `fork` gives the child a copy-on-write snapshot of it that agrees with the
//! child's copy of the pages: a page swapped out in the parent is swapped out in the child under
//! the same entry of the child's own copy of the store. What `fork` does not copy correctly are
//! the kernel objects, and each would lose or corrupt data if left alone:
//! - **the userfaultfd**: the child's fd still names the *parent's* uffd (ioctls on it would
//!   fill pages of the parent). The kernel's copy of the child's registrations is the
//!   `UFFD_EVENT_FORK` descriptor the parent's event thread reads; until this child handler
//!   runs, that thread serves the child's faults from the parent's state (glibc's fork code
//!   touches other threads' descriptors and heap blocks before any handler:
//!   `uswap_pager`'s `forkserve`). The child handler first tells it to let go
//!   ([`uswap_pager::Pager::fork_child_release`]), opens a new uffd with the same features,
//!   `dup3`s it onto the old fd number (the pager keeps using that number) and registers every
//!   tracked region again, retrying on `EBUSY` until the parent's event thread has closed the
//!   fork descriptor. The parent's handler waits for the child's byte on a pipe (or end of
//!   file) before it lets its pagers work again.
//! - **the pidfd** the pager uses for batched `process_madvise`: it names the parent; the child
//!   gets a pidfd of its own on the same number (else its evictions would drop the *parent's*
//!   pages).
//! - **swap files**: both processes would allocate the same free slots of one file. They share
//!   it through the engine's cluster holds (`uswap::tier::holds`): the prepare handler takes
//!   the child's share once the pagers are quiet ([`uswap_pager::Pager::fork_share`]),
//!   the child takes it over first thing and writes a byte on a pipe, and the parent's handler
//!   confirms or gives the share up by what it reads (a byte, or end of file when the fork
//!   failed or the child died). Only when sharing is impossible (the pagers did not go quiet,
//!   no holds row free) does the child copy the file's data extents into a new unlinked file in
//!   the same directory and `dup3` it onto the old number (close-on-exec, like every fd of
//!   the pager's), the parent waiting meanwhile.
//! - **threads**: the child has none of the pager's threads;
//!   `Pager::restart_in_fork_child` starts the child's event thread on its new uffd (it serves
//!   the child's faults in thread fault mode, and fork and unmap events, which would otherwise
//!   block the child forever).
//!
//! In-flight work must not be cut in half: the prepare handler takes [`crate::BIG`] (no region
//! is being created, discarded or unmapped, no allocation is in the heap), closes the **gate**
//! (every other thread that takes a SIGBUS now waits before entering the pager), and waits until
//! no fault is in progress, so no page is `BUSY` or write-protected in the snapshot. Its last
//! step puts each pager's event thread on its fork hold
//! ([`uswap_pager::Pager::hold_for_fork`]): until the copy is made, it serves faults only
//! while the forking thread waits for one of its own, so no fault resolution of the event
//! thread is in flight in the copy either; the parent handler ends the hold. It does
//! *not* hold the internal heap's lock across the fork: the pager's event thread must run during
//! the fork (the kernel blocks `fork` until it has read `UFFD_EVENT_FORK`) and may allocate
//! (thread start-up). The child force-unlocks it; the residual risk is a Rust allocation by one
//! of the library's own threads racing the fork. The parent handler opens everything again; the child handler
//! rebuilds the kernel objects first, then opens. Our handlers are registered before the
//! program's, so the child's runs first and the prepare runs last.
//!
//! The gate itself is [`crate::gate`]. It also keeps SIGBUS ours: `sigaction(SIGBUS)` by the program is recorded and called for
//! faults outside the regions, and SIGBUS cannot be blocked (a blocked synchronous SIGBUS kills
//! the process), see [`crate::preload::signals`].
//!
//! Locking: tracked pagers and regions change only under [`crate::BIG`]; the gate's own
//! protocol is described in [`crate::gate`].

use crate::reentry::internal;
use crate::BIG;
use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};
use uswap::backend::ShareStep;
use uswap_pager::uffd;

const MAX_PAGERS: usize = 16;
const MAX_TRACKED: usize = 4096;
const MAX_FDS: usize = 8;

#[derive(Copy, Clone)]
struct Tracked {
    used: bool,
    /// The pager (kept alive by its owner until `untrack_pager`).
    pager: *const uswap_pager::Pager,
    uffd: i32,
    features: u64,
    pidfds: [i32; MAX_FDS],
    files: [i32; MAX_FDS],
}

const NO_FDS: [i32; MAX_FDS] = [-1; MAX_FDS];
const EMPTY: Tracked =
    Tracked { used: false, pager: std::ptr::null(), uffd: -1, features: 0, pidfds: NO_FDS, files: NO_FDS };

struct Table {
    pagers: [Tracked; MAX_PAGERS],
    /// (start, len, pager index); len 0 = free.
    regions: [(usize, usize, usize); MAX_TRACKED],
}

struct TableCell(UnsafeCell<Table>);
// SAFETY: only accessed under BIG (or in a fork child, single-threaded).
unsafe impl Sync for TableCell {}
static TABLE: TableCell =
    TableCell(UnsafeCell::new(Table { pagers: [EMPTY; MAX_PAGERS], regions: [(0, 0, 0); MAX_TRACKED] }));

/// # Safety
/// - The caller holds `BIG` (or is a fork child before it started threads).
unsafe fn table() -> &'static mut Table {
    // SAFETY: exclusive under BIG (caller's obligation).
    unsafe { &mut *TABLE.0.get() }
}

/// The fds of this process and what they are (`readlink` of /proc/self/fd/N).
pub fn fd_snapshot() -> Vec<(i32, String)> {
    let mut v = Vec::new();
    if let Ok(rd) = std::fs::read_dir("/proc/self/fd") {
        for e in rd.flatten() {
            if let Some(n) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) {
                if let Ok(t) = std::fs::read_link(e.path()) {
                    v.push((n, t.to_string_lossy().into_owned()));
                }
            }
        }
    }
    v
}

fn is_regular(fd: i32) -> bool {
    // SAFETY: fstat into a zeroed stat buffer.
    unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        libc::fstat(fd, &mut st) == 0 && st.st_mode & libc::S_IFMT == libc::S_IFREG
    }
}

/// The uffd features a pager with `cfg` negotiates (mirrors `Pager::with_store`).
pub fn pager_features(cfg: &uswap_pager::PagerConfig) -> u64 {
    let mut f = uffd::feature::PAGEFAULT_FLAG_WP
        | uffd::feature::EVENT_UNMAP
        | uffd::feature::EVENT_REMAP
        | uffd::feature::EVENT_FORK;
    if cfg.fault_mode == uswap_pager::FaultMode::Sigbus {
        f |= uffd::feature::SIGBUS;
    }
    if cfg.event_remove {
        f |= uffd::feature::EVENT_REMOVE;
    }
    f
}

/// Record a pager created between the two fd snapshots. Returns its index, or an error when
/// its kernel objects cannot be identified (fork would then be unsafe).
///
/// # Safety
/// - The caller holds `BIG`.
/// - `pager` stays alive until [`untrack_pager`] is called with the returned index.
pub unsafe fn track_pager(pager: &uswap_pager::Pager, before: &[(i32, String)]) -> Result<usize, String> {
    let after = fd_snapshot();
    let mut t = Tracked { used: true, pager, features: pager_features(pager.config()), ..EMPTY };
    let (mut np, mut nf) = (0, 0);
    for (fd, what) in &after {
        if before.iter().any(|(b, w)| b == fd && w == what) {
            continue;
        }
        if what.contains("[userfaultfd]") {
            t.uffd = *fd;
        } else if what.contains("[pidfd]") && np < MAX_FDS {
            t.pidfds[np] = *fd;
            np += 1;
        } else if what.starts_with('/') && nf < MAX_FDS && is_regular(*fd) {
            t.files[nf] = *fd;
            nf += 1;
        }
    }
    if t.uffd < 0 {
        return Err("cannot find the pager's userfaultfd among this process's fds".into());
    }
    // SAFETY: under BIG (caller).
    let tab = unsafe { table() };
    let i = tab.pagers.iter().position(|p| !p.used).ok_or("too many pagers in one process")?;
    tab.pagers[i] = t;
    Ok(i)
}

/// Forget a pager (after its last region is gone and it is dropped).
///
/// # Safety
/// - The caller holds `BIG`.
pub unsafe fn untrack_pager(i: usize) {
    // SAFETY: under BIG.
    unsafe { table() }.pagers[i] = EMPTY;
}

/// Record a region of pager `i` (re-registered in fork children).
///
/// # Safety
/// - The caller holds `BIG`.
pub unsafe fn track_region(i: usize, start: usize, len: usize) -> bool {
    // SAFETY: under BIG.
    let tab = unsafe { table() };
    match tab.regions.iter().position(|r| r.1 == 0) {
        Some(s) => {
            tab.regions[s] = (start, len, i);
            true
        }
        None => false,
    }
}

/// Forget the region starting at `start`.
///
/// # Safety
/// - The caller holds `BIG`.
pub unsafe fn untrack_region(start: usize) {
    // SAFETY: under BIG.
    for r in unsafe { table() }.regions.iter_mut() {
        if r.1 != 0 && r.0 == start {
            *r = (0, 0, 0);
        }
    }
}

// ---------------------------------------------------------------------------------------
// Fork state

/// True from the start of the prepare handler to the end of the parent/child handler: a
/// `malloc` that would wait for [`BIG`] then takes memory from the internal heap instead (the
/// pager's event thread must be able to run, and allocate at its start-up, while `fork` waits
/// for it to read the fork event).
pub static FORKING: AtomicBool = AtomicBool::new(false);
/// Children this process forked with pagers to carry over, for statistics (a child starts
/// again from zero).
pub static FORKS: AtomicU64 = AtomicU64::new(0);
/// Of those, per pager with a swap file: children that share the file (nothing copied) and
/// children that got a copy of it (the parent could not share: no holds row, or its threads
/// did not go quiet).
pub static FORKS_FILE_SHARED: AtomicU64 = AtomicU64::new(0);
/// See [`FORKS_FILE_SHARED`].
pub static FORKS_FILE_COPIED: AtomicU64 = AtomicU64::new(0);
/// Called in a fork child with each tracked pager once its threads run again (the preload
/// library restarts its reconciler thread for its own pager).
static CHILD_HOOK: std::sync::OnceLock<fn(*const uswap_pager::Pager)> = std::sync::OnceLock::new();

/// Register `hook` (once; later calls are ignored), called in a fork child with every tracked
/// pager after its rebuild.
pub fn on_child_rebuilt(hook: fn(*const uswap_pager::Pager)) {
    let _ = CHILD_HOOK.set(hook);
}

// ---------------------------------------------------------------------------------------
// atfork

static PIPE: [AtomicI32; 2] = [AtomicI32::new(-1), AtomicI32::new(-1)];
/// Per tracked pager: whether the fork in progress shares its swap files with the child
/// (set in the prepare handler, read by the child's).
static SHARED: [AtomicBool; MAX_PAGERS] = [const { AtomicBool::new(false) }; MAX_PAGERS];

/// Register the atfork handlers (once). Call as early as possible (library constructor), so our
/// child handler runs before the program's and our prepare handler after theirs.
pub fn install_atfork() {
    static ONCE: AtomicBool = AtomicBool::new(false);
    if ONCE.swap(true, Ordering::AcqRel) {
        return;
    }
    // SAFETY: registering three extern "C" functions with no arguments.
    unsafe { libc::pthread_atfork(Some(prepare), Some(parent), Some(child)) };
}

fn any_pager() -> bool {
    // SAFETY: a racy read of `used` flags: only decides whether to do the fork work at all.
    unsafe { (*TABLE.0.get()).pagers.iter().any(|p| p.used) }
}

extern "C" fn prepare() {
    FORKING.store(true, Ordering::SeqCst);
    BIG.lock();
    if any_pager() {
        crate::gate::close_for_fork();
        // The pagers' own threads hold no page across the fork (the child will not have them),
        // and what the child's handler touches before its uffd is registered (this thread's TLS
        // and its DTV, which may live in the program's heap) is resident.
        // SAFETY: under BIG; tracked pagers are alive.
        for (i, t) in unsafe { table() }.pagers.iter().enumerate().filter(|(_, t)| t.used) {
            // SAFETY: as above.
            let p = unsafe { &*t.pager };
            let quiet = quiesce_with_tls_resident(p);
            // The child shares the swap files (no store is in flight once quiet); if it cannot,
            // it copies them.
            SHARED[i].store(quiet && internal(|| p.fork_share(ShareStep::Prepare)), Ordering::Relaxed);
        }
        // The child says on this pipe when it runs on its own pager (the parent's pagers serve
        // its faults until then, and wait), and whether it took its share of the swap files.
        let mut fds = [-1i32; 2];
        // SAFETY: pipe2 writes two fds into the array.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } == 0 {
            PIPE[0].store(fds[0], Ordering::Relaxed);
            PIPE[1].store(fds[1], Ordering::Relaxed);
        }
        // Last: the event threads hold until the copy is made (`uswap_pager::forkhold`), so
        // none has an operation in flight that the child would inherit half-done.
        // SAFETY: under BIG; tracked pagers are alive.
        for t in unsafe { table() }.pagers.iter().filter(|t| t.used) {
            // SAFETY: as above.
            if !unsafe { &*t.pager }.hold_for_fork() {
                let msg =
                    b"uswap: warning: fork while the pager's event thread stayed busy for 10 s; the child may hang\n";
                // SAFETY: write(2) of a static buffer to stderr.
                unsafe { libc::write(2, msg.as_ptr().cast(), msg.len()) };
            }
        }
    }
}

/// This thread's thread-control data: its TCB with the static TLS blocks below it, and its DTV.
fn tls_ranges() -> [(usize, usize); 2] {
    #[cfg(target_arch = "x86_64")]
    {
        let tcb: usize;
        // SAFETY: on x86-64 glibc, %fs:0 is the thread's TCB (self pointer).
        unsafe { std::arch::asm!("mov {}, fs:0", out(reg) tcb, options(nostack, readonly)) };
        let dtv = uswap_pager::own::thread_vector_at().unwrap_or(0);
        // The DTV's length is in the slot before it (glibc's dtv[-1].counter); bound it.
        let mut len = [0u8; 8];
        // SAFETY: len is 8 writable bytes.
        let ok = dtv >= 16 && unsafe { uswap_pager::copy_from_self(dtv - 16, len.as_mut_ptr(), 8) };
        let n = if ok { (u64::from_ne_bytes(len) as usize).min(4096) } else { 0 };
        [(tcb.saturating_sub(64 << 10), tcb + 4096), (dtv.saturating_sub(16), dtv + (n + 2) * 16)]
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        [(0, 0), (0, 0)]
    }
}

/// Make the pager's threads idle with this thread's TLS and DTV resident: touch them (faults
/// are served), quiesce, and check with `mincore` that nothing was evicted meanwhile (retry a
/// few times if it was). False if the pager's threads did not go quiet.
fn quiesce_with_tls_resident(p: &uswap_pager::Pager) -> bool {
    let ranges = tls_ranges();
    let mut page = [0u8; 4096];
    for _ in 0..8 {
        for &(a, b) in &ranges {
            let mut x = a & !4095;
            while x < b {
                // SAFETY: page is 4096 writable bytes; the source is checked by the kernel.
                let _ = unsafe { uswap_pager::copy_from_self(x, page.as_mut_ptr(), 4096) };
                x += 4096;
            }
        }
        if !quiesce_or_warn(p) {
            return false;
        }
        let resident = ranges.iter().all(|&(a, b)| {
            let mut x = a & !4095;
            while x < b {
                let mut v = 0u8;
                // SAFETY: mincore of one page into one byte; unmapped pages report ENOMEM.
                let rc = unsafe { libc::mincore(x as *mut _, 4096, &mut v) };
                if rc == 0 && v & 1 == 0 && uswap_pager::overlaps_region(x, x + 4096) {
                    return false;
                }
                x += 4096;
            }
            true
        });
        if resident {
            return true;
        }
        p.resume();
    }
    quiesce_or_warn(p)
}

/// [`uswap_pager::Pager::quiesce`], saying on stderr when it gave up (the child may then find a
/// lock the parent's background threads held: a hang to be reported, not hidden). A static
/// message through write(2): nothing here may allocate.
fn quiesce_or_warn(p: &uswap_pager::Pager) -> bool {
    let quiet = p.quiesce();
    if !quiet {
        let msg =
            b"uswap: warning: fork while the pager's background threads stayed busy for 10 s; the child may hang\n";
        // SAFETY: write(2) of a static buffer to stderr.
        unsafe { libc::write(2, msg.as_ptr().cast(), msg.len()) };
    }
    quiet
}

extern "C" fn parent() {
    let (r, w) = (PIPE[0].swap(-1, Ordering::Relaxed), PIPE[1].swap(-1, Ordering::Relaxed));
    // Whether a child took its share of the swap files (it writes one byte once it has; the
    // read sees end of file if the fork failed or the child died first).
    let mut child_took = false;
    if r >= 0 {
        // SAFETY: our pipe fds; the read returns when the child wrote or closed its end.
        unsafe {
            libc::close(w);
            let mut b = 0u8;
            let n = loop {
                let n = libc::read(r, (&mut b as *mut u8).cast(), 1);
                if n >= 0 || *libc::__errno_location() != libc::EINTR {
                    break n;
                }
            };
            child_took = n == 1;
            libc::close(r);
        }
        FORKS.fetch_add(1, Ordering::Relaxed);
        uswap_pager::tree::note_fork();
    }
    // SAFETY: under BIG (taken in prepare); tracked pagers are alive.
    for (i, t) in unsafe { table() }.pagers.iter().enumerate().filter(|(_, t)| t.used) {
        // SAFETY: as above.
        let p = unsafe { &*t.pager };
        p.end_fork_hold();
        p.fork_share(ShareStep::Parent { child_took });
        if r >= 0 && t.files[0] >= 0 && child_took {
            let c = if SHARED[i].load(Ordering::Relaxed) { &FORKS_FILE_SHARED } else { &FORKS_FILE_COPIED };
            c.fetch_add(1, Ordering::Relaxed);
        }
        p.resume();
    }
    crate::gate::open_after_fork();
    FORKING.store(false, Ordering::SeqCst);
    BIG.unlock();
}

fn die(msg: &str) -> ! {
    // SAFETY: write(2) and _exit(2) are async-signal-safe.
    unsafe {
        libc::write(2, msg.as_ptr().cast(), msg.len());
        libc::_exit(125)
    }
}

extern "C" fn child() {
    crate::internal::HEAP.lock.force_unlock();
    if any_pager() {
        FORKS.store(0, Ordering::Relaxed);
        FORKS_FILE_SHARED.store(0, Ordering::Relaxed);
        FORKS_FILE_COPIED.store(0, Ordering::Relaxed);
        uswap_pager::tree::note_fork();
        internal(|| {
            // SAFETY: single-threaded child, BIG is held by us (the forking thread).
            let tab = unsafe { table() };
            // First, while the parents' event threads still serve this child's faults (glibc's
            // fork code runs before this handler): every pager's threads, which wait until
            // their pager is rebuilt (starting a thread touches program memory).
            let mut started: [Option<uswap_pager::ForkChildThreads>; MAX_PAGERS] = [const { None }; MAX_PAGERS];
            for (i, t) in tab.pagers.iter().enumerate().filter(|(_, t)| t.used) {
                // SAFETY: tracked pagers are alive while tracked (track_pager's contract).
                match unsafe { &*t.pager }.start_threads_in_fork_child() {
                    Ok(s) => started[i] = Some(s),
                    Err(e) => die(&format!("uswap: fork: cannot start the pager's threads in the child: {e}\n")),
                }
            }
            // Then the parents' event threads let go of the child's registrations.
            for t in tab.pagers.iter().filter(|t| t.used) {
                // SAFETY: as above.
                unsafe { &*t.pager }.fork_child_release();
            }
            for (i, t) in tab.pagers.iter().enumerate() {
                let Some(s) = started[i].take() else { continue };
                if let Err(e) = rebuild_child(i, t, s) {
                    die(&format!("uswap: fork: cannot rebuild the pager in the child: {e}\n"));
                }
            }
        });
        let (r, w) = (PIPE[0].swap(-1, Ordering::Relaxed), PIPE[1].swap(-1, Ordering::Relaxed));
        if w >= 0 {
            // SAFETY: our pipe fds.
            unsafe {
                libc::close(r);
                libc::write(w, b"k".as_ptr().cast(), 1);
                libc::close(w);
            }
        }
        crate::gate::reset_in_child();
    }
    FORKING.store(false, Ordering::SeqCst);
    BIG.force_unlock();
}

fn rebuild_child(idx: usize, t: &Tracked, started: uswap_pager::ForkChildThreads) -> Result<(), String> {
    // 1. Swap files: shared with the parent through the store's cluster holds, or, if the
    // parent could not share them, private copies (the parent waits for us either way).
    // SAFETY: tracked pagers are alive while tracked (track_pager's contract).
    let pager = unsafe { &*t.pager };
    let shared = SHARED[idx].load(Ordering::Relaxed);
    if !shared {
        for &fd in t.files.iter().filter(|&&f| f >= 0) {
            clone_file_onto(fd)?;
        }
    }
    if !pager.fork_share(ShareStep::Child { shared }) {
        return Err("cannot take the child's share of the swap file (its holds were released)".into());
    }
    // 2. pidfds: name ourselves.
    for &fd in t.pidfds.iter().filter(|&&f| f >= 0) {
        // SAFETY: pidfd_open(getpid(), 0) returns a new fd; dup3 replaces our old number.
        unsafe {
            let n = libc::syscall(libc::SYS_pidfd_open, libc::getpid(), 0) as i32;
            if n < 0 {
                return Err(format!("pidfd_open: {}", std::io::Error::last_os_error()));
            }
            libc::dup3(n, fd, libc::O_CLOEXEC);
            libc::close(n);
        }
    }
    // 3. A uffd of our own on the old number, every region registered again.
    let u = uffd::Uffd::open(t.features, uffd::feature::THREAD_ID, true)?;
    // SAFETY: replacing the inherited fd number (the parent's uffd) with ours. Close-on-exec
    // as every descriptor of the pager's: `dup2` cleared it, and a program the child then
    // exec'd inherited this uffd (and the pidfds and swap file copies below: a deleted file's
    // blocks held while the program ran).
    if unsafe { libc::dup3(u.raw(), t.uffd, libc::O_CLOEXEC) } < 0 {
        return Err(format!("dup3: {}", std::io::Error::last_os_error()));
    }
    let t0 = std::time::Instant::now();
    let mut err = None;
    let mut register = |start: usize, len: usize| {
        if err.is_some() {
            return;
        }
        loop {
            match u.register(start, len, uffd::mode::MISSING | uffd::mode::WP) {
                Ok(_) => break,
                // The kernel's fork context still holds the range until the parent's event
                // thread closes it.
                Err(e) if e.errno == libc::EBUSY && t0.elapsed().as_secs() < 30 => std::thread::yield_now(),
                // Unmapped in the parent while we forked (its event not applied yet): gone here too.
                Err(e) if e.errno == libc::ENOMEM || e.errno == libc::EINVAL => break,
                Err(e) => {
                    err = Some(format!("re-registering {start:#x}+{len:#x} of pager {idx}: {e}"));
                    break;
                }
            }
        }
    };
    // Never the pager's own memory (this child's pager threads' stacks, page words): a range
    // counted as registered over a hole the kernel never registered once held such memory,
    // and the child hung faulting on its own page words (`vma::register_mapped` in the pager
    // keeps the words true; this keeps a stale word from hanging the child).
    pager.registered_ranges(|start, len| {
        if uswap_pager::own::is_own(start, start + len) {
            for (a, b) in uswap_pager::own::gaps(start, start + len) {
                register(a, b - a);
            }
        } else {
            register(start, len);
        }
    });
    if let Some(e) = err {
        return Err(e);
    }
    // The pager keeps using the number; our temporary one goes.
    drop(u);
    // 4. The pager's own threads (started before the release) run: its event thread serves our
    // faults (thread fault mode) and events (fork and unmap events block their thread until read).
    pager.restart_in_fork_child(started).map_err(|e| e.to_string())?;
    // Threads of the pager's owner (the preload library's reconciler).
    if let Some(hook) = CHILD_HOOK.get() {
        hook(t.pager);
    }
    Ok(())
}

/// Copy the data extents of the file open on `fd` into a new unlinked file in the same
/// directory, and put the copy on `fd`'s number.
fn clone_file_onto(fd: i32) -> Result<(), String> {
    let target = std::fs::read_link(format!("/proc/self/fd/{fd}")).map_err(|e| e.to_string())?;
    let dir = target.parent().ok_or("swap file has no directory")?.to_path_buf();
    let cdir = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()).map_err(|e| e.to_string())?;
    // SAFETY: fcntl/open/lseek/copy_file_range/ftruncate/dup3 on fds we own, with valid pointers.
    unsafe {
        let fl = libc::fcntl(fd, libc::F_GETFL);
        let direct = if fl >= 0 { fl & libc::O_DIRECT } else { 0 };
        let nfd = libc::open(cdir.as_ptr(), libc::O_TMPFILE | libc::O_RDWR | libc::O_CLOEXEC | direct, 0o600);
        if nfd < 0 {
            return Err(format!("cannot create a swap file in {}: {}", dir.display(), std::io::Error::last_os_error()));
        }
        let size = libc::lseek(fd, 0, libc::SEEK_END);
        if size > 0 && libc::ftruncate(nfd, size) != 0 {
            let e = std::io::Error::last_os_error();
            libc::close(nfd);
            return Err(format!("ftruncate: {e}"));
        }
        let mut off: i64 = 0;
        while off < size {
            let data = libc::lseek(fd, off, libc::SEEK_DATA);
            if data < 0 {
                break; // no more data
            }
            let mut hole = libc::lseek(fd, data, libc::SEEK_HOLE);
            if hole < 0 {
                hole = size;
            }
            let (mut i, mut o) = (data, data);
            while i < hole {
                let n = libc::copy_file_range(fd, &mut i, nfd, &mut o, (hole - i) as usize, 0);
                if n <= 0 {
                    let e = std::io::Error::last_os_error();
                    libc::close(nfd);
                    return Err(format!("copying the swap file: {e}"));
                }
            }
            off = hole;
        }
        if libc::dup3(nfd, fd, libc::O_CLOEXEC) < 0 {
            let e = std::io::Error::last_os_error();
            libc::close(nfd);
            return Err(format!("dup3: {e}"));
        }
        libc::close(nfd);
    }
    Ok(())
}
