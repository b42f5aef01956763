//! The SIGBUS gate in front of the pager's handler, and the program's own SIGBUS action.
//!
//! In SIGBUS fault mode (the C API's pagers) the pager resolves faults in a SIGBUS handler. The
//! gate is installed in front of it once the first pager exists ([`install_gate`]): a fault
//! outside the pager's regions goes to the handler the program set (recorded by the interposed
//! `sigaction`, [`PROGRAM`]), a fault inside them to the pager's handler. A thread that forks
//! closes the gate ([`close_for_fork`]): every other thread that takes a SIGBUS waits before it
//! enters the pager, and the forker waits until no fault is in progress, so no page is `BUSY`
//! in the child's snapshot. In a fork child the gate stays closed until its pager is rebuilt;
//! a fault there is served by the parent's event thread, which still holds the child's
//! registrations ([`uswap_pager::fault_from_fork_parent`]). A leaf module below `fork` and the
//! preload library's `signals`.
//!
//! Locking: the gate is an atomic (tid of the forking thread) plus an in-flight counter, with
//! SeqCst on both sides (a thread increments, then re-checks the gate; the forker closes, then
//! waits for zero). The program's action is behind its own tiny [`crate::lock::RawLock`].

use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicUsize, Ordering};

extern "C" {
    fn __sigaction(sig: libc::c_int, act: *const libc::sigaction, old: *mut libc::sigaction) -> libc::c_int;
}

/// libc's real `sigaction` (installs glibc's signal restorer).
///
/// # Safety
/// - As for `sigaction(2)`.
pub unsafe fn real_sigaction(sig: libc::c_int, act: *const libc::sigaction, old: *mut libc::sigaction) -> libc::c_int {
    // SAFETY: forwarded.
    unsafe { __sigaction(sig, act, old) }
}

/// The tid of a thread that is forking (0: open).
static GATE: AtomicI32 = AtomicI32::new(0);
/// The process that closed the gate: a fork child finds another pid here until it opens the
/// gate again ([`reset_in_child`]).
static GATE_PID: AtomicI32 = AtomicI32::new(0);
static INFLIGHT: AtomicI32 = AtomicI32::new(0);
static PAGER_ACTION: AtomicUsize = AtomicUsize::new(0);
static PAGER_SIGINFO: AtomicBool = AtomicBool::new(true);
/// True once the gate is installed (interposed `sigaction` then guards SIGBUS).
pub static GATE_ON: AtomicBool = AtomicBool::new(false);

/// The program's own SIGBUS disposition (what it set through `sigaction`/`signal`).
pub struct ProgramAction {
    lock: crate::lock::RawLock,
    act: UnsafeCell<Option<libc::sigaction>>,
}
// SAFETY: `act` is only accessed under `lock` (and read in the handler, which copies it).
unsafe impl Sync for ProgramAction {}
/// The program's SIGBUS action.
pub static PROGRAM: ProgramAction = ProgramAction { lock: crate::lock::RawLock::new(), act: UnsafeCell::new(None) };

impl ProgramAction {
    /// Swap the program's action: returns the old one (None = default).
    pub fn exchange(&self, new: Option<Option<libc::sigaction>>) -> Option<libc::sigaction> {
        self.lock.lock();
        // SAFETY: under the lock.
        let slot = unsafe { &mut *self.act.get() };
        let old = *slot;
        if let Some(n) = new {
            *slot = n;
        }
        self.lock.unlock();
        old
    }
    fn get(&self) -> Option<libc::sigaction> {
        // SAFETY: a racy read of a Copy value in a signal handler would be torn only if the
        // program changed its SIGBUS handler concurrently with a fault outside our regions.
        unsafe { *self.act.get() }
    }
}

/// The calling thread's id.
pub(crate) fn gettid() -> i32 {
    // SAFETY: gettid has no arguments and cannot fail.
    unsafe { libc::syscall(libc::SYS_gettid) as i32 }
}

/// Put the gate in front of the pager's SIGBUS handler (once; after the first pager exists).
pub fn install_gate() -> Result<(), String> {
    if GATE_ON.load(Ordering::Acquire) {
        return Ok(());
    }
    // SAFETY: reading and replacing the SIGBUS action with valid sigaction structs; the real
    // sigaction (`__sigaction`) so the kernel gets glibc's restorer.
    unsafe {
        let mut old: libc::sigaction = std::mem::zeroed();
        if real_sigaction(libc::SIGBUS, std::ptr::null(), &mut old) != 0 {
            return Err("sigaction(SIGBUS) failed".into());
        }
        if old.sa_sigaction == libc::SIG_DFL || old.sa_sigaction == libc::SIG_IGN {
            // Thread fault mode: no SIGBUS handler, nothing to guard.
            return Ok(());
        }
        PAGER_ACTION.store(old.sa_sigaction, Ordering::Release);
        PAGER_SIGINFO.store(old.sa_flags & libc::SA_SIGINFO != 0, Ordering::Release);
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = gate_sigbus as *const () as usize;
        // ONSTACK: on the thread's alternate stack (`preload::altstack`), as a fault on the
        // thread's own stack leaves no room there for the signal frame.
        sa.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART | libc::SA_NODEFER | libc::SA_ONSTACK;
        // Block asynchronous signals while a fault is resolved (the pager's own handler does
        // the same, see `docs/design.md`, "Deadlock freedom"): a program handler run on top of
        // the fault path could fault while this thread holds an engine lock.
        libc::sigfillset(&mut sa.sa_mask);
        for sig in [libc::SIGBUS, libc::SIGSEGV, libc::SIGILL, libc::SIGFPE, libc::SIGTRAP, libc::SIGSYS, 32, 33] {
            libc::sigdelset(&mut sa.sa_mask, sig);
        }
        if real_sigaction(libc::SIGBUS, &sa, std::ptr::null_mut()) != 0 {
            return Err("sigaction(SIGBUS) failed".into());
        }
    }
    GATE_ON.store(true, Ordering::Release);
    Ok(())
}

extern "C" fn gate_sigbus(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo.
    let (code, addr) = unsafe { ((*info).si_code, (*info).si_addr() as usize) };
    // A region holds the page when its word is live: a region the program unmapped and that is
    // not reaped yet still overlaps the address, and a `mremap` can grow a neighbour over it.
    // While a fork has closed the gate an overlap is enough: a fork child asks its parent.
    let closed = GATE.load(Ordering::SeqCst) != 0;
    let mut ours =
        code > 0 && uswap_pager::overlaps_region(addr, addr + 1) && (closed || uswap_pager::manages_page(addr));
    // Registered memory no region holds yet (a `mremap` moved or grew a region), unless a fork
    // has closed the gate: that is served below (a fork child asks its parent).
    if code > 0 && !ours && GATE.load(Ordering::SeqCst) == 0 {
        match uswap_pager::sigbus_outside_regions(addr) {
            uswap_pager::Outside::InRegion => ours = true,
            uswap_pager::Outside::Served => return,
            uswap_pager::Outside::NotOurs => {}
        }
    }
    if !ours {
        if let Some(pa) = PROGRAM.get() {
            let h = pa.sa_sigaction;
            if h != libc::SIG_DFL && h != libc::SIG_IGN {
                if pa.sa_flags & libc::SA_SIGINFO != 0 {
                    // SAFETY: the program installed this as an SA_SIGINFO handler.
                    let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
                        unsafe { std::mem::transmute(h) };
                    f(sig, info, ctx);
                } else {
                    // SAFETY: a plain handler.
                    let f: extern "C" fn(libc::c_int) = unsafe { std::mem::transmute(h) };
                    f(sig);
                }
                return;
            }
        }
        // Not ours and no program handler: the pager's handler restores the default action.
    }
    let me = gettid();
    loop {
        let g = GATE.load(Ordering::SeqCst);
        if g != 0 && g != me {
            if ours && getpid() != GATE_PID.load(Ordering::SeqCst) && in_fork_child(addr) {
                return; // served: the access runs again
            }
            std::thread::yield_now();
            continue;
        }
        INFLIGHT.fetch_add(1, Ordering::SeqCst);
        let g = GATE.load(Ordering::SeqCst);
        if g != 0 && g != me {
            INFLIGHT.fetch_sub(1, Ordering::SeqCst);
            continue;
        }
        break;
    }
    crate::reentry::DEPTH.with(|d| d.set(d.get() + 1));
    let h = PAGER_ACTION.load(Ordering::Acquire);
    if PAGER_SIGINFO.load(Ordering::Relaxed) {
        // SAFETY: the pager installed this SA_SIGINFO handler (read back in install_gate).
        let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) = unsafe { std::mem::transmute(h) };
        f(sig, info, ctx);
    } else {
        // SAFETY: a plain handler.
        let f: extern "C" fn(libc::c_int) = unsafe { std::mem::transmute(h) };
        f(sig);
    }
    crate::reentry::DEPTH.with(|d| d.set(d.get() - 1));
    INFLIGHT.fetch_sub(1, Ordering::SeqCst);
}

fn getpid() -> i32 {
    // SAFETY: getpid has no arguments and cannot fail.
    unsafe { libc::syscall(libc::SYS_getpid) as i32 }
}

/// A fault at `addr` in a fork child whose pager is not rebuilt yet: true once the parent
/// served it; false when the child has released its parent (its own pager serves the fault
/// once the gate opens: wait for that). A parent that does not answer ends the child.
fn in_fork_child(addr: usize) -> bool {
    use uswap_pager::ForkChildFault as F;
    match uswap_pager::fault_from_fork_parent(addr) {
        F::Served => true,
        F::Released | F::NotOurs => false,
        F::NoAnswer => {
            let msg =
                b"uswap: fork: the child faulted on a page before its pager ran, and the parent did not serve it\n";
            // SAFETY: write(2) of a static buffer and _exit(2), both async-signal-safe.
            unsafe {
                libc::write(2, msg.as_ptr().cast(), msg.len());
                libc::_exit(125)
            }
        }
    }
}

/// Close the gate for a fork by the calling thread and wait until no other thread is inside
/// the pager's SIGBUS handler.
pub fn close_for_fork() {
    GATE_PID.store(getpid(), Ordering::SeqCst);
    GATE.store(gettid(), Ordering::SeqCst);
    while INFLIGHT.load(Ordering::SeqCst) != 0 {
        std::thread::yield_now();
    }
}

/// Open the gate again after a fork (parent side).
pub fn open_after_fork() {
    GATE.store(0, Ordering::SeqCst);
}

/// Open the gate in a fork child, where the threads counted in flight do not exist.
pub fn reset_in_child() {
    GATE.store(0, Ordering::SeqCst);
    INFLIGHT.store(0, Ordering::SeqCst);
}
