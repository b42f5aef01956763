//! The SIGBUS handler: how a fault in SIGBUS mode reaches [`handle_fault`].
//!
//! With `UFFD_FEATURE_SIGBUS` a missing (or write-protected) page of a region raises SIGBUS in
//! the thread that touched it. [`install_sigbus_handler`] installs `on_sigbus` once per
//! process; the handler reads `si_addr` and the access kind and serves the page in that thread
//! ([`handle_fault`]); returning retries the instruction. A SIGBUS for an address outside
//! every region (or one sent by `kill`) is passed on to the handler installed before ours, or
//! to the default action, which kills the process as it would have. The handler keeps the
//! interrupted code's `errno`. On x86-64 bit 1 of the page-fault error code (`REG_ERR` in the
//! ucontext) says whether the access was a write.
//!
//! Locking: none here; what [`handle_fault`] takes (see the module overview). The handler runs
//! with asynchronous signals blocked (its mask, [`crate::sys::fault_handler_mask`]).

use super::{handle_fault, Handled};
use crate::reclaim;
use crate::region;
use crate::stats::inc;
use crate::uffd::Filled;
use std::sync::OnceLock;

static PREV: OnceLock<libc::sigaction> = OnceLock::new();

/// Install the process-wide SIGBUS handler (once). The previous handler is kept and called
/// for addresses outside every region.
pub(crate) fn install_sigbus_handler() -> Result<(), String> {
    static DONE: OnceLock<Result<(), String>> = OnceLock::new();
    DONE.get_or_init(|| {
        // Warm up everything the handler touches lazily (TLS shard index, size classes).
        let _ = crate::arena::class_of(0);
        let _ = reclaim::IN_RECLAIM.with(|c| c.get());
        // SAFETY: building a sigaction with our handler; sigaction(2) with valid pointers.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_sigbus as *const () as usize;
            sa.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART | libc::SA_NODEFER;
            crate::sys::fault_handler_mask(&mut sa.sa_mask);
            let mut old: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(libc::SIGBUS, &sa, &mut old) != 0 {
                return Err(format!("sigaction(SIGBUS): {}", std::io::Error::last_os_error()));
            }
            let _ = PREV.set(old);
        }
        Ok(())
    })
    .clone()
}

/// The SIGBUS handler.
extern "C" fn on_sigbus(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    // SAFETY: errno slot of this thread; the kernel passes valid info and ucontext pointers.
    unsafe {
        let errno = *libc::__errno_location();
        let addr = (*info).si_addr() as usize;
        let write = fault_is_write(ctx);
        if (*info).si_code > 0 && serve(addr, write) {
            *libc::__errno_location() = errno;
            return;
        }
        chain(sig, info, ctx);
        *libc::__errno_location() = errno;
    }
}

/// Serve a kernel-raised SIGBUS at `addr`: in its region, or as registered memory no region
/// holds ([`sigbus_outside_regions`]). False: not the pager's fault.
fn serve(addr: usize, write: bool) -> bool {
    if handle_fault(addr, write, false) == Handled::Yes {
        return true;
    }
    match sigbus_outside_regions(addr) {
        Outside::Served => true,
        Outside::InRegion => handle_fault(addr, write, false) == Handled::Yes,
        Outside::NotOurs => false,
    }
}

/// What [`sigbus_outside_regions`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outside {
    /// The address is in a region now (an event that put it there was applied meanwhile):
    /// serve it as any fault.
    InRegion,
    /// A registered page no region holds was zero-filled (or its stale protection lifted):
    /// return and let the access run again.
    Served,
    /// No pager's registration covers it: not the pager's fault.
    NotOurs,
}

/// A SIGBUS (SIGBUS mode) at `addr`, which no region held when the handler looked. The range a
/// `mremap` just moved is in no region until its event is applied, so first every event read
/// so far is applied; and a registration the pager has no region for (a `mremap` that grew a
/// registered mapping in place sends no event) is served as the event thread serves such a
/// fault in thread mode: nothing there was ever evicted, so a missing page reads as zeros.
/// "Held" means a live word ([`region::manages`]): a region whose range the program unmapped
/// and that is not reaped yet still overlaps the address, and an in-place growth can extend a
/// neighbour over that range. Allocates nothing.
pub fn sigbus_outside_regions(addr: usize) -> Outside {
    let mut pagers = [std::ptr::null::<crate::Pager>(); 8];
    let n = region::live_pagers(&mut pagers);
    // Outside enter(): applying an event may retire a region, which waits for every thread
    // inside enter().
    for &p in &pagers[..n] {
        // SAFETY: `live_pagers`' pagers outlive their regions; this process's live for it.
        unsafe { &*p }.sync_events();
    }
    if region::manages(addr) {
        return Outside::InRegion;
    }
    let page = addr & !(crate::PAGE_SIZE - 1);
    for &p in &pagers[..n] {
        // SAFETY: as above.
        let p = unsafe { &*p };
        let served = match p.uffd.zeropage(page, crate::PAGE_SIZE, false) {
            Ok(Filled::Done) => true,
            Ok(Filled::Exists) => p.uffd.writeprotect(page, crate::PAGE_SIZE, false, false).is_ok(),
            Err(_) => false,
        };
        if served {
            inc(&p.counters.fault_unowned, 1);
            return Outside::Served;
        }
    }
    Outside::NotOurs
}

#[cfg(target_arch = "x86_64")]
fn fault_is_write(ctx: *mut libc::c_void) -> bool {
    if ctx.is_null() {
        return true;
    }
    // SAFETY: for SA_SIGINFO handlers the third argument is the ucontext_t.
    let uc = unsafe { &*(ctx as *const libc::ucontext_t) };
    uc.uc_mcontext.gregs[libc::REG_ERR as usize] & 2 != 0
}

#[cfg(not(target_arch = "x86_64"))]
fn fault_is_write(_ctx: *mut libc::c_void) -> bool {
    // Unknown: treat as a write (a zero page is then never mapped for it).
    true
}

/// Pass a SIGBUS that is not ours to the previous handler, or restore the default action.
///
/// # Safety
/// - Must be called from the SIGBUS handler with the kernel's arguments.
unsafe fn chain(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    let Some(prev) = PREV.get() else { return };
    let h = prev.sa_sigaction;
    if h == libc::SIG_DFL || h == libc::SIG_IGN {
        // SAFETY: restoring the default disposition; returning re-runs the faulting access,
        // which then terminates the process as it would have without us. A SIGBUS sent by
        // kill() is re-raised.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = libc::SIG_DFL;
            libc::sigaction(libc::SIGBUS, &sa, std::ptr::null_mut());
            if (*info).si_code <= 0 {
                libc::raise(libc::SIGBUS);
            }
        }
        return;
    }
    if prev.sa_flags & libc::SA_SIGINFO != 0 {
        // SAFETY: the previous handler was installed as an SA_SIGINFO handler.
        let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) = unsafe { std::mem::transmute(h) };
        f(sig, info, ctx);
    } else {
        // SAFETY: a plain handler.
        let f: extern "C" fn(libc::c_int) = unsafe { std::mem::transmute(h) };
        f(sig);
    }
}
