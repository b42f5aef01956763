//! `dlopen`/`dlclose`, run as uswap code, so the dynamic loader's allocations for a library
//! loaded at run time (its link map, scope arrays, the TLS slot-info list) come from the
//! library's internal heap, not the program's.
//!
//! The pager's threads read those tables: a thread-local access after a library with TLS was
//! loaded takes `__tls_get_addr`'s slow path, which walks the slot-info list. Left in the
//! program's heap, they could be swapped out, and the pager's thread would fault on memory only
//! it can bring back (a JVM, which loads its libraries with `dlopen`, hung that way).
//!
//! Locking: none here (the loader's own).

use crate::reentry::internal;
use libc::{c_char, c_int, c_void};
use std::sync::atomic::{AtomicUsize, Ordering};

/// Resolve the next definition of `$name` as a function of type `$ty` (looked up once, in a
/// static of the call site), or return `$fail` from the caller.
macro_rules! next_fn {
    ($name:literal, $ty:ty, $fail:expr) => {{
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let f = $crate::preload::dl::next(&NEXT, $name);
        if f == 0 {
            return $fail;
        }
        // SAFETY: the next definition of the symbol, which has this C signature.
        unsafe { std::mem::transmute::<usize, $ty>(f) }
    }};
}
pub(super) use next_fn;

/// The next definition of `name` (`dlsym(RTLD_NEXT)`), cached in `slot`; 0 if there is none.
pub(super) fn next(slot: &AtomicUsize, name: &std::ffi::CStr) -> usize {
    let f = slot.load(Ordering::Acquire);
    if f != 0 {
        return f;
    }
    // SAFETY: dlsym with a NUL-terminated name; RTLD_NEXT finds the definition after ours.
    let f = internal(|| unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) } as usize);
    slot.store(f, Ordering::Release);
    f
}

/// `dlopen(3)`.
///
/// # Safety
/// - As for `dlopen(3)`.
#[no_mangle]
pub unsafe extern "C" fn dlopen(file: *const c_char, flags: c_int) -> *mut c_void {
    let f = next_fn!(c"dlopen", unsafe extern "C" fn(*const c_char, c_int) -> *mut c_void, std::ptr::null_mut());
    // SAFETY: the loader's dlopen, with the caller's arguments; run as uswap code so that what
    // it allocates comes from the internal heap (its constructors' allocations too: they are
    // few, and freed through the routing by address).
    internal(|| unsafe { f(file, flags) })
}

/// `dlclose(3)`.
///
/// # Safety
/// - As for `dlclose(3)`.
#[no_mangle]
pub unsafe extern "C" fn dlclose(handle: *mut c_void) -> c_int {
    let f = next_fn!(c"dlclose", unsafe extern "C" fn(*mut c_void) -> c_int, -1);
    // SAFETY: the loader's dlclose, with the caller's handle.
    internal(|| unsafe { f(handle) })
}
