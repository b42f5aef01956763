//! File work of uswap's own threads, done in a descriptor table of its own.
//!
//! A descriptor a thread opens takes the lowest number free in the process's table, and
//! programs count on which number that is. A shell runs `echo … >> file` as `open(file)`,
//! `close(1)`, `dup2(fd, 1)`, `write(1, …)`: a library thread that opens `/proc/self/statm`
//! between the `close` and the `dup2` is given number 1, `dup2` replaces it with the file, and
//! the library thread's `close` then closes the program's standard output (the shell's
//! `echo` failed with `EBADF`). So the threads that run beside the program (the preload's scan,
//! the reclaimer, the event thread) do their file work through [`private`]: the work runs on
//! one helper thread, `uswap-procfs`, whose table was unshared from the process's and emptied
//! (`close_range(0, ~0, CLOSE_RANGE_UNSHARE)`), where no number is the program's. The helper
//! holds no copy of any program descriptor (a copy would keep a pipe open after the program
//! closed its end), so the work must not use descriptors of the process's table, standard
//! error included.
//!
//! The helper runs from [`start`] (the pager starts it where it starts its own threads: when
//! it is made, and in a fork child before the child's threads run) until the process exits; a
//! fork child has none until its [`start`]. Without a helper in this process (not started, or
//! the kernel refused a table of its own) the work runs inline on the caller.
//!
//! Locking: callers are served one at a time, in the order they take `CALL` (a futex word:
//! 0 free, 1 taken, 2 taken with waiters). The caller holding it posts its work in `WORK` and
//! sets `TURN` to `POSTED`; the helper claims it (`RUNNING`), runs it and sets `DONE`;
//! each side waits on the value it last read, so neither spins. The caller takes `TURN`
//! back to `IDLE` before it lets `CALL` go. The helper takes no lock, and the work may block
//! only in the kernel (a `/proc` read waits for the address-space lock at most), never on a
//! uswap thread. [`try_private`] does not wait for `CALL`: the event thread uses it. A fork
//! copies these words as they were; [`start`] in the child sets them afresh while the child
//! has one thread.

use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicI32, AtomicU32, Ordering};

const IDLE: u32 = 0;
const POSTED: u32 = 1;
const DONE: u32 = 2;
/// The helper took the posted work (by CAS from `POSTED`) and runs it.
const RUNNING: u32 = 3;

static CALL: AtomicU32 = AtomicU32::new(0);
/// Held by [`start`] (0 free, else the pid of the process starting): one helper per process
/// even when pagers are made on several threads at once.
static STARTING: AtomicU32 = AtomicU32::new(0);
static TURN: AtomicU32 = AtomicU32::new(IDLE);
/// The process whose helper is running (0: none). A fork child inherits its parent's pid here
/// and so sees no helper until it starts its own.
static HELPER_PID: AtomicI32 = AtomicI32::new(0);

/// The posted work: a pointer to the caller's closure, valid until `TURN` is `DONE`.
struct Work(UnsafeCell<Option<*mut (dyn FnMut() + 'static)>>);
// SAFETY: written by the caller holding `CALL` before it publishes `POSTED` (Release), read by
// the helper after it observes `POSTED` (Acquire), and not touched again until `DONE`.
unsafe impl Sync for Work {}
static WORK: Work = Work(UnsafeCell::new(None));

fn pid() -> i32 {
    // SAFETY: getpid has no preconditions.
    unsafe { libc::syscall(libc::SYS_getpid) as i32 }
}

fn futex_wait(word: &AtomicU32, expected: u32) {
    // SAFETY: FUTEX_WAIT on a live atomic word; returns at once if it no longer holds
    // `expected`, and a spurious wake is handled by the callers' loops.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
            expected,
            std::ptr::null::<libc::timespec>(),
        )
    };
}

fn futex_wake(word: &AtomicU32) {
    // SAFETY: FUTEX_WAKE on a live atomic word.
    unsafe { libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG, i32::MAX) };
}

fn lock() {
    if CALL.compare_exchange(0, 1, Ordering::Acquire, Ordering::Relaxed).is_ok() {
        return;
    }
    while CALL.swap(2, Ordering::Acquire) != 0 {
        futex_wait(&CALL, 2);
    }
}

fn unlock() {
    if CALL.swap(0, Ordering::Release) == 2 {
        futex_wake(&CALL);
    }
}

/// Whether this process has a running helper.
pub fn running() -> bool {
    HELPER_PID.load(Ordering::Acquire) == pid()
}

/// Run `f` on the helper (the caller holds `CALL`) and return its result (`None`: it panicked).
fn on_helper<R>(f: impl FnOnce() -> R) -> Option<R> {
    let mut f = Some(f);
    let mut out: Option<R> = None;
    let mut call = || out = f.take().map(|f| f());
    let dyn_call: &mut dyn FnMut() = &mut call;
    // SAFETY: only the lifetime is erased; the caller waits below until the helper has run it
    // and said DONE, so the closure and what it borrows outlive every use.
    let ptr: *mut (dyn FnMut() + 'static) = unsafe { std::mem::transmute(dyn_call as *mut dyn FnMut()) };
    // SAFETY: the caller holds CALL and TURN is IDLE: the helper does not read WORK now.
    unsafe { *WORK.0.get() = Some(ptr) };
    TURN.store(POSTED, Ordering::Release);
    futex_wake(&TURN);
    loop {
        let t = TURN.load(Ordering::Acquire);
        if t == DONE {
            break;
        }
        futex_wait(&TURN, t);
    }
    TURN.store(IDLE, Ordering::Relaxed);
    out
}

/// Run `f` where the descriptors it opens do not take numbers of the process's table (on the
/// helper, or inline when this process has none). `f` must not use descriptors of the process's
/// table, and must not wait for a uswap thread.
pub fn private<R: Send>(f: impl FnOnce() -> R + Send) -> R {
    if !running() {
        return f();
    }
    lock();
    let r = on_helper(f);
    unlock();
    r.expect("the work given to the uswap-procfs thread panicked")
}

/// [`private`] for a caller that must not wait for others' work, and must not panic (the
/// event thread): `None` when another caller is being served (`f` is not run then), or `f`
/// panicked.
pub fn try_private<R: Send>(f: impl FnOnce() -> R + Send) -> Option<R> {
    if !running() {
        return Some(f());
    }
    if CALL.compare_exchange(0, 1, Ordering::Acquire, Ordering::Relaxed).is_err() {
        return None;
    }
    let r = on_helper(f);
    unlock();
    r
}

/// The start of procfs file `path`, read into `buf` with raw system calls (one `read`: these
/// files are generated whole; raw, as uswap's threads must not call what the preload
/// interposes), through [`private`]. The bytes read; `None` if it cannot be read.
pub fn read_start(path: &std::ffi::CStr, buf: &mut [u8]) -> Option<usize> {
    usize::try_from(private(|| read_raw(path, buf))).ok().filter(|&n| n > 0)
}

/// [`read_start`] through [`try_private`]: `None` also while another caller is being served.
pub fn try_read_start(path: &std::ffi::CStr, buf: &mut [u8]) -> Option<usize> {
    usize::try_from(try_private(|| read_raw(path, buf))?).ok().filter(|&n| n > 0)
}

/// Open, read once into `buf`, close: the bytes read, or -1.
fn read_raw(path: &std::ffi::CStr, buf: &mut [u8]) -> i64 {
    // SAFETY: openat of a NUL-terminated path, a read into `buf` of its length, and the close
    // of the descriptor opened here.
    unsafe {
        let fd = libc::syscall(libc::SYS_openat, libc::AT_FDCWD, path.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return -1;
        }
        let n = libc::syscall(libc::SYS_read, fd, buf.as_mut_ptr(), buf.len());
        libc::syscall(libc::SYS_close, fd);
        n
    }
}

/// The helper's loop: a table of its own, then each posted work in turn.
fn serve() {
    loop {
        let t = TURN.load(Ordering::Acquire);
        if t != POSTED {
            futex_wait(&TURN, t);
            continue;
        }
        if TURN.compare_exchange(POSTED, RUNNING, Ordering::Acquire, Ordering::Relaxed).is_err() {
            continue;
        }
        // SAFETY: POSTED was published after WORK was written; the caller waits for DONE.
        if let Some(w) = unsafe { (*WORK.0.get()).take() } {
            // SAFETY: the caller keeps the closure alive until DONE (see `on_helper`).
            let w = unsafe { &mut *w };
            // A panic leaves the caller's result empty, and the caller says so.
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(w));
        }
        TURN.store(DONE, Ordering::Release);
        futex_wake(&TURN);
    }
}

/// Give the calling thread a table of its own with nothing in it.
fn empty_own_table() -> std::io::Result<()> {
    const CLOSE_RANGE_UNSHARE: libc::c_uint = 1 << 1;
    // SAFETY: close_range over every number, unsharing first: affects this thread's table only.
    if unsafe { libc::syscall(libc::SYS_close_range, 0u32, u32::MAX, CLOSE_RANGE_UNSHARE) } == 0 {
        return Ok(());
    }
    // Before Linux 5.9: unshare, then close what the copy holds.
    // SAFETY: unshare(CLONE_FILES) affects this thread only.
    if unsafe { libc::unshare(libc::CLONE_FILES) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let mut rl = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit into a local.
    unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut rl) };
    for fd in 0..rl.rlim_cur.min(1 << 20) as i32 {
        // SAFETY: closing numbers of this thread's own copy of the table.
        unsafe { libc::syscall(libc::SYS_close, fd) };
    }
    Ok(())
}

/// Start this process's helper if it has none, with `spawn` (which runs its argument on a new
/// thread: the pager's, so that the thread's memory is its own). Waits until the helper
/// serves. Call it where the process has no other uswap thread using [`private`] (a fork child
/// before its threads start), or where the helper already runs (then it does nothing).
pub fn start(spawn: impl FnOnce(Box<dyn FnOnce() + Send>) -> std::io::Result<()>) -> std::io::Result<()> {
    let me = pid();
    if HELPER_PID.load(Ordering::Acquire) == me {
        return Ok(());
    }
    // Threads of one process wait for each other; a word that names another process was
    // copied by a fork from a parent thread inside `start`, and is free here.
    let me_word = me as u32;
    loop {
        match STARTING.compare_exchange(0, me_word, Ordering::Acquire, Ordering::Relaxed) {
            Ok(_) => break,
            Err(v) if v != me_word => {
                let _ = STARTING.compare_exchange(v, 0, Ordering::Relaxed, Ordering::Relaxed);
            }
            Err(_) => std::thread::yield_now(),
        }
    }
    let r = start_locked(me, spawn);
    STARTING.store(0, Ordering::Release);
    r
}

fn start_locked(me: i32, spawn: impl FnOnce(Box<dyn FnOnce() + Send>) -> std::io::Result<()>) -> std::io::Result<()> {
    if HELPER_PID.load(Ordering::Acquire) == me {
        return Ok(());
    }
    // A fork child: the words are as a parent thread left them at the fork.
    CALL.store(0, Ordering::Relaxed);
    TURN.store(IDLE, Ordering::Relaxed);
    // SAFETY: no helper runs in this process, so nothing reads WORK.
    unsafe { *WORK.0.get() = None };
    let (tx, rx) = std::sync::mpsc::sync_channel::<std::io::Result<()>>(1);
    spawn(Box::new(move || {
        let r = empty_own_table();
        let ok = r.is_ok();
        let _ = tx.send(r);
        if ok {
            serve();
        }
    }))?;
    let r = rx.recv().unwrap_or_else(|_| Err(std::io::Error::other("the uswap-procfs thread died at its start")));
    if r.is_ok() {
        HELPER_PID.store(me, Ordering::Release);
    }
    r
}
