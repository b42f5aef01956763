//! OS primitives: futex wait/wake, a yielding lock, copying from our own memory through
//! `process_vm_readv`, opening a file by raw system call, and which pages a fork relative
//! maps too (`/proc/self/pagemap`), and which parts of a range are mapped (`PAGEMAP_SCAN`,
//! `msync`). Nothing here knows about regions (the system-call wrappers
//! that prefault region memory are in [`crate::syscall`]; batched `MADV_DONTNEED` is the
//! engine's [`uswap::tier::pages::dontneed`]).
//!
//! Locking: none; [`YieldLock`] is a spin-then-yield flag for callers' short critical
//! sections.

use std::sync::atomic::{AtomicU32, Ordering};

/// The calling thread's errno.
#[inline]
pub(crate) fn errno() -> i32 {
    // SAFETY: __errno_location returns the calling thread's errno slot, always valid.
    unsafe { *libc::__errno_location() }
}

/// Print `msg` on stderr and abort: a stored page cannot be brought back, and running on
/// would hand the program wrong data. Signal-safe (write(2), abort), nothing allocated.
pub(crate) fn fatal(msg: &str) -> ! {
    // SAFETY: write(2) of the message to stderr, then abort: both signal-safe.
    unsafe {
        libc::write(2, msg.as_ptr().cast(), msg.len());
        libc::abort()
    }
}

/// Wait on a futex word while it equals `val`, at most `timeout_ms`.
pub(crate) fn futex_wait(w: &AtomicU32, val: u32, timeout_ms: u64) {
    let ts = libc::timespec { tv_sec: (timeout_ms / 1000) as _, tv_nsec: ((timeout_ms % 1000) * 1_000_000) as _ };
    // SAFETY: FUTEX_WAIT on a valid aligned u32 with a relative timeout.
    unsafe {
        libc::syscall(libc::SYS_futex, w.as_ptr(), libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG, val, &ts);
    }
}

/// Sleep `ms` milliseconds with the raw system call (signal-safe, and no symbol an
/// LD_PRELOAD library may interpose).
pub(crate) fn sleep_ms(ms: u64) {
    let ts = libc::timespec { tv_sec: (ms / 1000) as _, tv_nsec: ((ms % 1000) * 1_000_000) as _ };
    // SAFETY: nanosleep reads one valid timespec; no remainder is asked for.
    unsafe { libc::syscall(libc::SYS_nanosleep, &ts, std::ptr::null_mut::<libc::timespec>()) };
}

/// Bump a futex word and wake its waiters (signal-safe).
pub(crate) fn futex_wake(w: &AtomicU32) {
    w.fetch_add(1, Ordering::Release);
    // SAFETY: FUTEX_WAKE on a valid aligned u32.
    unsafe {
        libc::syscall(libc::SYS_futex, w.as_ptr(), libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG, i32::MAX);
    }
}

/// How the pager's threads wait for a short condition: 64 spins, then `sched_yield` each
/// round. Allocates nothing and takes no lock.
#[derive(Default)]
pub(crate) struct Backoff {
    spins: u32,
}

impl Backoff {
    /// Wait a little before checking again.
    pub(crate) fn snooze(&mut self) {
        if self.spins < 64 {
            std::hint::spin_loop();
            self.spins += 1;
        } else {
            std::thread::yield_now();
        }
    }
}

/// A lock that yields while it waits: for rare, short critical sections that threads of any
/// kind may enter (program threads in interposed calls, the pager's threads). It allocates
/// nothing, and a fork child can take it over with [`YieldLock::force_unlock`].
pub(crate) struct YieldLock(std::sync::atomic::AtomicBool);

/// Holds a [`YieldLock`] until dropped.
pub(crate) struct YieldGuard<'a>(&'a YieldLock);

impl Default for YieldLock {
    fn default() -> Self {
        Self::new()
    }
}

impl YieldLock {
    /// A free lock.
    pub(crate) const fn new() -> YieldLock {
        YieldLock(std::sync::atomic::AtomicBool::new(false))
    }
    /// Take the lock.
    pub(crate) fn lock(&self) -> YieldGuard<'_> {
        let mut backoff = Backoff::default();
        while self.0.compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed).is_err() {
            backoff.snooze();
        }
        YieldGuard(self)
    }
    /// Take the lock if it is free, without waiting.
    pub(crate) fn try_lock(&self) -> Option<YieldGuard<'_>> {
        self.0.compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed).is_ok().then_some(YieldGuard(self))
    }
    /// Free the lock without a guard: in a fork child, where the holder no longer exists.
    pub(crate) fn force_unlock(&self) {
        self.0.store(false, Ordering::Release);
    }
}

impl Drop for YieldGuard<'_> {
    fn drop(&mut self) {
        self.0 .0.store(false, Ordering::Release);
    }
}

/// Copy `len` bytes at our own address `src` into `dst` through `process_vm_readv`, without
/// touching `src` from this thread: a range unmapped meanwhile gives false instead of a
/// SIGSEGV, and a missing page of a registered range faults through the uffd as a system
/// call's access does.
///
/// # Safety
/// - `dst` is valid for writes of `len` bytes.
pub unsafe fn copy_from_self(src: usize, dst: *mut u8, len: usize) -> bool {
    let local = libc::iovec { iov_base: dst.cast(), iov_len: len };
    let remote = libc::iovec { iov_base: src as *mut _, iov_len: len };
    loop {
        // SAFETY: one iovec each side; dst is writable (caller's obligation); the kernel checks src.
        let r = unsafe {
            libc::syscall(
                libc::SYS_process_vm_readv,
                libc::getpid() as libc::c_long,
                &local as *const libc::iovec,
                1 as libc::c_ulong,
                &remote as *const libc::iovec,
                1 as libc::c_ulong,
                0 as libc::c_ulong,
            )
        };
        if r == len as i64 {
            return true;
        }
        if r < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
            continue;
        }
        return false;
    }
}

/// The signal mask of a handler that resolves faults (the SIGBUS handler): every signal but
/// the synchronous ones (a fault inside the handler's own reclaim must still be delivered; a
/// system call trapped by the preload's seccomp filter raises SIGSYS, fatal while blocked) and
/// glibc's two internal ones (32, 33, which it never lets a program block either). Blocked
/// while the handler runs, an asynchronous signal cannot run a program handler on top of the
/// fault path, where it could fault on managed memory while this thread holds an engine lock
/// or a claimed page (`docs/design.md`, "Deadlock freedom").
pub(crate) fn fault_handler_mask(set: &mut libc::sigset_t) {
    // SAFETY: sigfillset/sigdelset on a sigset we own.
    unsafe {
        libc::sigfillset(set);
        for sig in [libc::SIGBUS, libc::SIGSEGV, libc::SIGILL, libc::SIGFPE, libc::SIGTRAP, libc::SIGSYS, 32, 33] {
            libc::sigdelset(set, sig);
        }
    }
}

/// Asynchronous signals blocked on this thread (the `fault_handler_mask`) until dropped,
/// which restores the mask as it was. Taken by a program thread for a pager operation that
/// claims pages or calls the store (`discard_range`, `adopt`, a region's discard, eviction or
/// retirement): a signal handler run in the middle could fault on memory the operation holds
/// (a `BUSY` page, a locked cluster), and the fault path would wait for this very thread.
/// Public for the LD_PRELOAD library's own such sections (a reconciliation pass on a program
/// thread).
pub struct SignalsBlocked {
    old: libc::sigset_t,
}

impl SignalsBlocked {
    /// Block the asynchronous signals.
    #[expect(clippy::new_without_default, reason = "blocking signals is an action, not a default value")]
    pub fn new() -> SignalsBlocked {
        // SAFETY: a zeroed sigset is valid storage; rt_sigprocmask with valid pointers and the
        // kernel's sigset size (a raw call: the LD_PRELOAD library's interposer is for the
        // program's masks).
        unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            fault_handler_mask(&mut set);
            let mut old: libc::sigset_t = std::mem::zeroed();
            libc::syscall(libc::SYS_rt_sigprocmask, libc::SIG_BLOCK, &set, &mut old, 8usize);
            SignalsBlocked { old }
        }
    }
}

impl Drop for SignalsBlocked {
    fn drop(&mut self) {
        // SAFETY: restoring the mask saved in new() (callers keep the guard on the stack of the
        // thread that made it).
        unsafe {
            libc::syscall(
                libc::SYS_rt_sigprocmask,
                libc::SIG_SETMASK,
                &self.old,
                std::ptr::null_mut::<libc::sigset_t>(),
                8usize,
            )
        };
    }
}

/// Block the asynchronous signals on this thread for good: the pager's own threads (event
/// thread, background reclaimer) never run a program's signal handler, which could fault on
/// managed memory that only they would serve, or while they hold an engine lock.
pub(crate) fn block_async_signals_forever() {
    std::mem::forget(SignalsBlocked::new());
}

/// Nanoseconds of CPU time on `clock` (`CLOCK_PROCESS_CPUTIME_ID`, `CLOCK_THREAD_CPUTIME_ID` or
/// a thread's CPU clock), or None when the clock is gone (its thread exited). (Wall time is
/// `stats::now_ns`.)
pub(crate) fn cpu_ns(clock: libc::clockid_t) -> Option<u64> {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes one timespec we own.
    (unsafe { libc::clock_gettime(clock, &mut ts) } == 0).then(|| ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64)
}

/// Nanoseconds of CPU time this process's thread `tid` has used (None once it exited).
pub(crate) fn thread_cpu_ns(tid: i32) -> Option<u64> {
    // The kernel's per-thread CPU clock id of `tid` (`MAKE_THREAD_CPUCLOCK(tid, CPUCLOCK_SCHED)`
    // in include/linux/posix-timers.h, what glibc's pthread_getcpuclockid computes): the kernel
    // resolves it in this thread group only, and a thread that has exited gives EINVAL (None),
    // so no handle has to be kept alive.
    const CPUCLOCK_PERTHREAD_SCHED: libc::clockid_t = 4 | 2;
    cpu_ns((!tid << 3) | CPUCLOCK_PERTHREAD_SCHED)
}

/// Open `path` read-only and close-on-exec by a raw system call: the preload library
/// interposes `open`, and the pager's threads must not call a symbol it interposes. None if it
/// cannot be opened.
pub(crate) fn open_raw(path: &std::ffi::CStr) -> Option<i32> {
    // SAFETY: openat of a NUL-terminated path; no memory is written.
    let fd =
        unsafe { libc::syscall(libc::SYS_openat, libc::AT_FDCWD, path.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
    i32::try_from(fd).ok().filter(|&fd| fd >= 0)
}

/// Pages [`all_shared`] reads at most (the first ones of a larger folio stand for it).
pub(crate) const SHARED_PROBE_PAGES: usize = 16;

/// pagemap entry bits (Documentation/admin-guide/mm/pagemap.rst).
const PM_PRESENT: u64 = 1 << 63;
const PM_MMAP_EXCLUSIVE: u64 = 1 << 56;

/// Whether the pages from `addr` (page-aligned; the first [`SHARED_PROBE_PAGES`] of `pages`)
/// are all present and mapped by another process too, as a fork relative's copy-on-write
/// pages are (pagemap: present, not exclusively mapped). `fd` is `/proc/self/pagemap` of this
/// process ([`open_raw`]). False when a page is not present or exclusive, or the read fails.
pub(crate) fn all_shared(fd: i32, addr: usize, pages: usize) -> bool {
    let n = pages.clamp(1, SHARED_PROBE_PAGES);
    let mut ent = [0u64; SHARED_PROBE_PAGES];
    let off = (addr / crate::PAGE_SIZE * 8) as i64;
    // SAFETY: pread into our own array of `n` u64s (n * 8 bytes).
    let got = unsafe { libc::syscall(libc::SYS_pread64, fd, ent.as_mut_ptr(), n * 8, off) };
    got == (n * 8) as i64 && ent[..n].iter().all(|&e| e & PM_PRESENT != 0 && e & PM_MMAP_EXCLUSIVE == 0)
}

/// `PAGEMAP_SCAN` (Linux 6.7; `include/uapi/linux/fs.h`): `_IOWR('f', 16, struct pm_scan_arg)`.
const PAGEMAP_SCAN: u64 = 0xC060_6610;

/// `struct page_region`: one run of pages the scan reports.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct PageRegion {
    start: u64,
    end: u64,
    categories: u64,
}

/// `struct pm_scan_arg`.
#[repr(C)]
#[derive(Default)]
struct PmScanArg {
    size: u64,
    flags: u64,
    start: u64,
    end: u64,
    walk_end: u64,
    vec: u64,
    vec_len: u64,
    max_pages: u64,
    category_inverted: u64,
    category_mask: u64,
    category_anyof_mask: u64,
    return_mask: u64,
}

/// Runs reported per call (the scan resumes from where it stopped).
const SCAN_RUNS: usize = 32;

/// Call `f(a, b)` for every run `[a, b)` of `[start, end)` (page aligned) that is mapped, in
/// address order, adjacent mappings merged; holes are skipped. `fd` is `/proc/self/pagemap`
/// of this process. `PAGEMAP_SCAN` with no category asked for reports every page of every
/// mapping, and its runs break only at holes (and at `VM_PFNMAP` mappings, which it skips as
/// holes). No allocation, no lock: callable where the pager holds off its own mappings.
/// `Err(errno)` when the scan failed: `ENOTTY` or `EINVAL` before Linux 6.7.
pub(crate) fn mapped_runs(fd: i32, start: usize, end: usize, mut f: impl FnMut(usize, usize)) -> Result<(), i32> {
    let mut runs = [PageRegion::default(); SCAN_RUNS];
    let mut open: Option<(usize, usize)> = None;
    let mut at = start;
    while at < end {
        let mut arg = PmScanArg {
            size: std::mem::size_of::<PmScanArg>() as u64,
            start: at as u64,
            end: end as u64,
            vec: runs.as_mut_ptr() as u64,
            vec_len: SCAN_RUNS as u64,
            ..PmScanArg::default()
        };
        // SAFETY: PAGEMAP_SCAN reads `arg` and writes `walk_end` and at most `vec_len` runs
        // into our array.
        let n = unsafe { libc::ioctl(fd, PAGEMAP_SCAN as _, &mut arg) };
        if n < 0 {
            return Err(errno());
        }
        for r in &runs[..(n as usize).min(SCAN_RUNS)] {
            let (a, b) = (r.start as usize, r.end as usize);
            match &mut open {
                Some((_, e)) if *e == a => *e = b,
                _ => {
                    if let Some((oa, ob)) = open.take() {
                        f(oa, ob);
                    }
                    open = Some((a, b));
                }
            }
        }
        let next = arg.walk_end as usize;
        if next <= at {
            break;
        }
        at = next;
    }
    if let Some((a, b)) = open {
        f(a, b);
    }
    Ok(())
}

/// Whether all of `[start, end)` (page aligned) is mapped: `msync(MS_ASYNC)` does nothing
/// since Linux 2.6.19 but answer `ENOMEM` when part of its range is not mapped. The check for
/// kernels without `PAGEMAP_SCAN`.
pub(crate) fn all_mapped(start: usize, end: usize) -> bool {
    // SAFETY: msync with MS_ASYNC touches no memory; a page-aligned start.
    let rc = unsafe { libc::syscall(libc::SYS_msync, start, end - start, libc::MS_ASYNC) };
    rc == 0 || errno() != libc::ENOMEM
}
