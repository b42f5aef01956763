//! Alternate signal stacks of SIGBUS fault mode: each thread of the program runs the pager's
//! SIGBUS and SIGSYS handlers (`SA_ONSTACK`) on a stack of the pager's own, never adopted.
//!
//! A thread's own stack may be managed memory (the scan adopts a stack it cannot tell from a
//! heap: a JVM's, a runtime's that has no guard below it), and its pages below the stack
//! pointer are missing until first touched. A fault there raises SIGBUS, and the kernel must
//! push the signal frame onto that same stack: it cannot (the page is missing, and a kernel
//! write does not fault it in in this mode), so the thread dies of SIGSEGV. On a stack of the
//! pager's own the frame always fits, and the handler serves the page the thread faulted on.
//!
//! Every thread gets one ([`ensure`]): the thread that starts the pager when the mode is
//! installed, and each thread glibc starts (`start_thread` sets its signal mask with
//! `rt_sigprocmask`, which the filter traps, before it runs the thread's function). A stack
//! the program set itself is kept unless it lies in managed memory. The stack is unmapped when
//! the thread exits (a destructor kept by [`super::tls`]).
//!
//! Locking: none; a per-thread flag.

use super::raw::raw;
use std::cell::Cell;

/// Bytes of one stack, its lowest page a guard (`PROT_NONE`). Only the pages a handler
/// touches are resident.
const SIZE: usize = 256 << 10;
const PAGE: usize = 4096;

thread_local! {
    // Const-initialised, no destructor: safe to touch in a signal handler.
    static DONE: Cell<bool> = const { Cell::new(false) };
}

/// Give the calling thread its alternate signal stack if it has none that is safe (once per
/// thread; cheap afterwards). A thread whose stack cannot be made keeps running without one.
/// In a signal handler, `uc` is the handler's context: `sigreturn` restores the alternate
/// stack from it (`uc_stack`), so the new stack is written there too.
pub(super) fn ensure(uc: Option<&mut libc::ucontext_t>) {
    if DONE.with(Cell::get) {
        return;
    }
    DONE.with(|d| d.set(true));
    // SAFETY: zeroed stack_t is a valid out-parameter.
    let mut old: libc::stack_t = unsafe { std::mem::zeroed() };
    // SAFETY: sigaltstack reading the current stack into `old`.
    if unsafe { raw(libc::SYS_sigaltstack, [0, &raw mut old as u64, 0, 0, 0, 0]) } != 0 {
        return;
    }
    if old.ss_flags & libc::SS_DISABLE == 0
        && !uswap_pager::overlaps_region(old.ss_sp as usize, old.ss_sp as usize + old.ss_size)
    {
        return;
    }
    let Ok(map) = crate::reentry::internal(|| uswap_pager::own::Mapping::new(SIZE)) else { return };
    let base = map.as_ptr() as usize;
    // SAFETY: the mapping's first page, ours: a guard below the stack.
    unsafe { raw(libc::SYS_mprotect, [base as u64, PAGE as u64, libc::PROT_NONE as u64, 0, 0, 0]) };
    let new = libc::stack_t { ss_sp: (base + PAGE) as *mut libc::c_void, ss_flags: 0, ss_size: SIZE - PAGE };
    // SAFETY: sigaltstack with a stack we own, which lives until the thread's exit.
    if unsafe { raw(libc::SYS_sigaltstack, [&raw const new as u64, 0, 0, 0, 0, 0]) } != 0 {
        return;
    }
    if let Some(uc) = uc {
        uc.uc_stack = new;
    }
    // The mapping is released by hand at the thread's exit (no allocation here: this may run
    // in the SIGSYS handler).
    std::mem::forget(map);
    // If the thread has no room for one more destructor, the stack is kept for the process's
    // life.
    let _ = super::tls::at_thread_exit(release, base as *mut libc::c_void);
}

/// A thread's exit: stop using its stack, then unmap it (`base`: the mapping [`ensure`] made).
unsafe extern "C" fn release(base: *mut libc::c_void) {
    let off = libc::stack_t { ss_sp: std::ptr::null_mut(), ss_flags: libc::SS_DISABLE, ss_size: 0 };
    // SAFETY: disabling the alternate stack; this destructor does not run on it.
    unsafe { raw(libc::SYS_sigaltstack, [&raw const off as u64, 0, 0, 0, 0, 0]) };
    let _unmapping = uswap_pager::own::Unmapping::begin(base as usize, SIZE);
    // SAFETY: the thread's stack mapping, no longer in use, unmapped once.
    unsafe { raw(libc::SYS_munmap, [base as u64, SIZE as u64, 0, 0, 0, 0]) };
}
