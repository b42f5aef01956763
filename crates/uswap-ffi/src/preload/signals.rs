//! Signal interposition that keeps the pager's SIGBUS working in programs that manage signals.
//!
//! - `sigaction(SIGBUS, ...)` and `signal(SIGBUS, ...)` by the program are recorded instead of
//!   installed: the gate ([`crate::gate`]) calls the program's handler for faults outside the
//!   regions and resolves faults inside them. Other signals go to libc's `__sigaction`.
//! - In SIGBUS fault mode, the program's `sigaction(SIGSYS, ...)` is reported done and not
//!   made (the trap handler of `sigsys` stays), and no handler's mask holds SIGBUS or
//!   SIGSYS.
//! - `sigprocmask`/`pthread_sigmask` never block SIGBUS: a synchronous SIGBUS raised while it is
//!   blocked kills the process (the kernel forces the default action), and worker threads that
//!   block "all signals" are common. Like glibc, the internal signals 32 and 33 are not blocked.
//!
//! Locking: the program's SIGBUS action is behind its own tiny lock ([`crate::gate::PROGRAM`]).

use crate::gate::{real_sigaction, GATE_ON, PROGRAM};
use crate::reentry::in_internal;
use std::sync::atomic::Ordering;

fn guarding(sig: libc::c_int) -> bool {
    sig == libc::SIGBUS && GATE_ON.load(Ordering::Acquire) && !in_internal()
}

/// SIGBUS fault mode's trap handler is installed: the program may not replace it, and no
/// handler's mask may hold SIGBUS or SIGSYS (a fault or a trapped call in a handler that
/// blocks them would kill the process).
fn trapping() -> bool {
    super::sigsys::ON.load(Ordering::Acquire) && !in_internal()
}

/// `sigaction(2)`.
///
/// # Safety
/// - As for `sigaction(2)`.
#[no_mangle]
pub unsafe extern "C" fn sigaction(
    sig: libc::c_int,
    act: *const libc::sigaction,
    old: *mut libc::sigaction,
) -> libc::c_int {
    if trapping() && sig == libc::SIGSYS && !act.is_null() {
        // Reported done, not made (the program keeps SIGSYS's default action in its view).
        if !old.is_null() {
            // SAFETY: old points to writable storage (caller's contract).
            unsafe {
                *old = std::mem::zeroed();
                (*old).sa_sigaction = libc::SIG_DFL;
            }
        }
        return 0;
    }
    if !guarding(sig) {
        if trapping() && !act.is_null() {
            // SAFETY: act is non-null and valid (caller's contract).
            let mut a = unsafe { *act };
            unblocked(&mut a.sa_mask, libc::SIGBUS);
            unblocked(&mut a.sa_mask, libc::SIGSYS);
            // SAFETY: forwarded with the mask filtered.
            return unsafe { real_sigaction(sig, &a, old) };
        }
        // SAFETY: forwarded.
        return unsafe { real_sigaction(sig, act, old) };
    }
    let new = if act.is_null() {
        None
    } else {
        // SAFETY: act is non-null and points to a valid sigaction (caller's contract).
        let a = unsafe { *act };
        Some(Some(a).filter(|a| a.sa_sigaction != libc::SIG_DFL))
    };
    let prev = PROGRAM.exchange(new);
    if !old.is_null() {
        // SAFETY: old points to writable storage (caller's contract).
        unsafe {
            *old = prev.unwrap_or_else(|| {
                let mut d: libc::sigaction = std::mem::zeroed();
                d.sa_sigaction = libc::SIG_DFL;
                d
            })
        };
    }
    0
}

/// `signal(2)` (glibc's calls `__sigaction` internally, so it is interposed too).
///
/// # Safety
/// - As for `signal(2)`.
#[no_mangle]
pub unsafe extern "C" fn signal(sig: libc::c_int, handler: libc::sighandler_t) -> libc::sighandler_t {
    // SAFETY: building a plain sigaction and installing it through ours.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = handler;
        sa.sa_flags = libc::SA_RESTART;
        libc::sigemptyset(&mut sa.sa_mask);
        libc::sigaddset(&mut sa.sa_mask, sig);
        let mut old: libc::sigaction = std::mem::zeroed();
        if sigaction(sig, &sa, &mut old) != 0 {
            return libc::SIG_ERR;
        }
        old.sa_sigaction
    }
}

fn filtered(how: libc::c_int, set: *const libc::sigset_t, out: &mut libc::sigset_t) -> *const libc::sigset_t {
    if set.is_null() || how == libc::SIG_UNBLOCK {
        return set;
    }
    // SAFETY: set points to a valid sigset (caller's contract); out is ours.
    unsafe { *out = *set };
    if GATE_ON.load(Ordering::Acquire) {
        unblocked(out, libc::SIGBUS);
    }
    if super::sigsys::ON.load(Ordering::Acquire) {
        unblocked(out, libc::SIGSYS);
    }
    unblocked(out, 32);
    unblocked(out, 33);
    out
}

/// Take signal `sig` (1-64) out of `set`, as the kernel reads it: bit `sig - 1` of its first
/// word. Not `sigdelset`: glibc's refuses its internal signals 32 and 33 with EINVAL, setting
/// `errno` under a call that then succeeds (see `crate::reentry::KeepErrno`).
fn unblocked(set: &mut libc::sigset_t, sig: libc::c_int) {
    // SAFETY: a sigset_t is at least 8 bytes, suitably aligned for u64 on Linux; the kernel
    // reads its first 64 bits as the mask of signals 1-64.
    let word = unsafe { &mut *(set as *mut libc::sigset_t).cast::<u64>() };
    *word &= !(1u64 << (sig - 1));
}

/// `pthread_sigmask(3)`: returns an error number.
///
/// # Safety
/// - As for `pthread_sigmask(3)`.
#[no_mangle]
pub unsafe extern "C" fn pthread_sigmask(
    how: libc::c_int,
    set: *const libc::sigset_t,
    old: *mut libc::sigset_t,
) -> libc::c_int {
    // pthread_sigmask returns its error and leaves errno alone.
    let keep = crate::reentry::KeepErrno::new();
    // SAFETY: zeroed sigset is valid storage.
    let mut tmp: libc::sigset_t = unsafe { std::mem::zeroed() };
    let s = filtered(how, set, &mut tmp);
    // SAFETY: rt_sigprocmask with valid (or null) pointers and the kernel's sigset size.
    // (Issued from this library, not libc: SIGBUS mode's filter would trap libc's.)
    let r = unsafe { super::raw::raw(libc::SYS_rt_sigprocmask, [how as u64, s as u64, old as u64, 8, 0, 0]) };
    let e = if r < 0 { -r as i32 } else { 0 };
    keep.ok(e)
}

/// `sigprocmask(2)`: returns -1 and sets errno on error.
///
/// # Safety
/// - As for `sigprocmask(2)`.
#[no_mangle]
pub unsafe extern "C" fn sigprocmask(
    how: libc::c_int,
    set: *const libc::sigset_t,
    old: *mut libc::sigset_t,
) -> libc::c_int {
    // SAFETY: as pthread_sigmask.
    let mut tmp: libc::sigset_t = unsafe { std::mem::zeroed() };
    let s = filtered(how, set, &mut tmp);
    // SAFETY: as above. (`filtered` sets no errno: a success leaves it alone.)
    let r = unsafe { super::raw::raw(libc::SYS_rt_sigprocmask, [how as u64, s as u64, old as u64, 8, 0, 0]) };
    if r < 0 {
        // SAFETY: errno of this thread.
        unsafe { *libc::__errno_location() = -r as i32 };
        return -1;
    }
    0
}
