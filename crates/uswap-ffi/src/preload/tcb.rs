//! Thread control blocks in SIGBUS fault mode: each program thread's TCB and static TLS stay
//! resident.
//!
//! glibc puts a thread's TCB (`struct pthread`, where `%fs` points) and its static TLS block
//! just below it at the top of the thread's stack mapping, which the scan may adopt like any
//! anonymous mapping. The SIGBUS handler reads thread-local state through `%fs` on the
//! faulting thread (errno, the library's thread-locals, a program handler's own): with that
//! page swapped out, the handler's first access would fault again inside the handler, for
//! ever, until the signal stack overflows and the kernel kills the thread with SIGSEGV (a JVM
//! thread blocked for a while lost it so). So each thread pins the pages of its TCB and static
//! TLS ([`uswap_pager::own::pin_range`]) as it starts, where its alternate stack is set. Pins
//! are kept when the thread ends: glibc caches the stack and a new thread there pins the same
//! range again, without a new slot.
//!
//! Locking: none; a per-thread flag and a value set once at the mode's start.

use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The static TLS block's size with the TCB (glibc's `dl_tls_static_size`); 0 until [`init`].
static STATIC_TLS: AtomicUsize = AtomicUsize::new(0);
/// Used when the loader does not say: larger than glibc's default surplus and a few modules'.
const STATIC_TLS_GUESS: usize = 16 << 10;
/// `struct pthread` and its alignment, above the thread pointer.
const TCB_ABOVE: usize = 4 << 10;

thread_local! {
    // Const-initialised, no destructor: safe to touch in a signal handler.
    static DONE: Cell<bool> = const { Cell::new(false) };
}

/// Read the static TLS size from the loader (`_dl_get_tls_static_info`, as sanitizers do).
/// Call once, before the filter is installed.
pub(super) fn init() {
    type Info = unsafe extern "C" fn(*mut usize, *mut usize);
    // SAFETY: dlsym with a NUL-terminated name; the symbol, where it exists, has this type.
    let f = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"_dl_get_tls_static_info".as_ptr()) };
    let mut size = 0usize;
    if !f.is_null() {
        let mut align = 0usize;
        // SAFETY: the loader's function writes two words.
        unsafe { std::mem::transmute::<*mut libc::c_void, Info>(f)(&mut size, &mut align) };
    }
    STATIC_TLS.store(if size == 0 { STATIC_TLS_GUESS } else { size }, Ordering::Relaxed);
}

/// Pin the calling thread's TCB and static TLS (once per thread; cheap afterwards). Allocates
/// nothing (called in the SIGSYS handler).
pub(super) fn pin_this_thread() {
    if DONE.with(Cell::get) {
        return;
    }
    DONE.with(|d| d.set(true));
    let Some(tp) = thread_pointer() else { return };
    let below = match STATIC_TLS.load(Ordering::Relaxed) {
        0 => STATIC_TLS_GUESS,
        n => n,
    };
    uswap_pager::own::pin_range(tp.saturating_sub(below), tp + TCB_ABOVE);
}

#[cfg(target_arch = "x86_64")]
fn thread_pointer() -> Option<usize> {
    let tp: usize;
    // SAFETY: on x86-64 `%fs:0` holds the thread pointer itself (the TCB's first word).
    unsafe { std::arch::asm!("mov {}, qword ptr fs:[0]", out(reg) tp, options(nostack, readonly, preserves_flags)) };
    Some(tp)
}

#[cfg(not(target_arch = "x86_64"))]
fn thread_pointer() -> Option<usize> {
    None
}
