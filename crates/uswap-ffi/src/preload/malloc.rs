//! The malloc family, routed: the program's calls go to the program's own allocator (the next
//! definition after this library: glibc's, or a jemalloc/tcmalloc/mimalloc the program links),
//! unchanged; uswap's own calls go to the library's internal heap ([`crate::internal`]).
//!
//! The program keeps its allocator. These forwarders exist for the calls that are *not* the
//! program's but reach `malloc` anyway: the dynamic loader allocates a new thread's TLS vector
//! (DTV) with the global `calloc`, and resizes it from the thread itself, and glibc functions
//! the pager's threads call may allocate. Memory from glibc's heap may be adopted by the pager
//! and swapped out; a pager thread that touched it (its own DTV, on every thread-local access)
//! would wait for itself. So a call made by uswap code ([`crate::reentry::in_internal`]) or on a
//! pager thread (named `uswap-*`) is served from the internal heap, which is never adopted;
//! `free` and `realloc` go wherever the block came from ([`crate::internal::owns`] is a range
//! check). When the library is inert (`USWAP_LIMIT` unset) every call goes to the next allocator.
//! The next allocator's symbols are looked up once with `dlsym(RTLD_NEXT)`, as uswap code (so
//! an allocation inside `dlsym` is served from the internal heap).
//!
//! A large block the program's allocator returns that no region covers yet (glibc maps it, or
//! grows a heap for it, with its internal `mmap`, `mprotect` or `mremap`) is adopted before the
//! program gets it: a reconciliation pass on the calling thread (`scan::note_block`), not a
//! scan period later.
//!
//! While the pager's charge is over the limit, a call of the program's waits for the reclaimer
//! as its allocator returns ([`keep_to_limit`]): a block from a heap glibc grew with `brk` is
//! resident before the next reconciliation pass adopts it, and takes no fault that would wait.
//!
//! Locking: none here; glibc's and the internal heap's own locks (and [`crate::BIG`] for a
//! pass started by a large block, after the allocator returned, signals blocked). The internal heap's lock is
//! never held across a fault on managed memory (its memory is never managed).

use super::{mode, ours, OFF};
use crate::internal::{owns, usable_size, HEAP};
use libc::{c_int, c_void, size_t};
use std::sync::atomic::{AtomicUsize, Ordering};

unsafe extern "C" {
    /// glibc's `dladdr1` (`<dlfcn.h>`): `dladdr` plus, with [`RTLD_DL_SYMENT`], the matching
    /// symbol-table entry.
    fn dladdr1(addr: *const c_void, info: *mut libc::Dl_info, extra: *mut *mut c_void, flags: c_int) -> c_int;
}
/// `RTLD_DL_SYMENT` of `<dlfcn.h>`.
const RTLD_DL_SYMENT: c_int = 1;

/// The next allocator's entry points (resolved once).
struct Next {
    malloc: AtomicUsize,
    free: AtomicUsize,
    calloc: AtomicUsize,
    realloc: AtomicUsize,
    memalign: AtomicUsize,
    usable: AtomicUsize,
}
static NEXT: Next = Next {
    malloc: AtomicUsize::new(0),
    free: AtomicUsize::new(0),
    calloc: AtomicUsize::new(0),
    realloc: AtomicUsize::new(0),
    memalign: AtomicUsize::new(0),
    usable: AtomicUsize::new(0),
};

/// A block of [`super::scan::NEW_MEMORY_MIN`] bytes or more from the program's allocator
/// (returned as is): if no region covers it, its allocator just mapped or grew memory through
/// calls no symbol sees, and it is adopted now ([`super::scan::note_block`]).
#[inline]
fn seen(r: *mut c_void, n: usize) -> *mut c_void {
    keep_to_limit();
    if n >= super::scan::NEW_MEMORY_MIN && !r.is_null() {
        // The allocation succeeded: errno stays what it was (`KeepErrno`).
        let keep = crate::reentry::KeepErrno::new();
        super::dormant::note_growth(n);
        super::scan::note_block(r as usize, n);
        return keep.ok(r);
    }
    r
}

/// The program's allocator returned (holding none of its locks): while the pager's charge is
/// over the limit, wait for the reclaimer ([`uswap_pager::Pager::wait_for_room`], at most
/// 20 ms; errno stays; under half the limit a few loads). Not while a fork is being prepared:
/// the reclaimer is paused then.
#[inline]
fn keep_to_limit() {
    if let Some(p) = super::pager() {
        if super::ready() && !crate::fork::FORKING.load(Ordering::Relaxed) {
            p.wait_for_room();
        }
    }
}

#[cold]
fn resolve() {
    crate::reentry::internal(|| {
        // The program's allocator is the first definition in the global scope: the
        // executable's own when it defines one (it comes before this library), else the one
        // after ours. Only this library's own calls reach us in the first case (it binds its
        // references to its own definitions, see build.rs), and a block libc allocated for
        // them came from the executable's allocator. The lookup starts from the main
        // program's handle: `RTLD_DEFAULT` would search this library first (`-Bsymbolic`).
        // SAFETY: dlopen(NULL) returns the main program's handle (loaded: nothing is loaded).
        let main = unsafe { libc::dlopen(std::ptr::null(), libc::RTLD_LAZY | libc::RTLD_NOLOAD) };
        let get = |name: &std::ffi::CStr, ours: usize| {
            // SAFETY: dlsym on the main handle (or RTLD_DEFAULT if there was none) with a
            // NUL-terminated name.
            let first =
                unsafe { libc::dlsym(if main.is_null() { libc::RTLD_DEFAULT } else { main }, name.as_ptr()) as usize };
            // A definition, not the executable's PLT entry for it (a non-PIE executable that
            // takes the function's address has an undefined symbol whose value is that entry,
            // and dlsym returns it: node does, and its entry leads back here).
            // SAFETY: dladdr1 fills `info` and points `sym` at the matching symbol-table entry
            // (or fails) for any address; the entry lives as long as its object.
            let defined = first != 0
                && first != ours
                && unsafe {
                    let mut info: libc::Dl_info = std::mem::zeroed();
                    let mut sym: *const libc::Elf64_Sym = std::ptr::null();
                    dladdr1(
                        first as *const libc::c_void,
                        &mut info,
                        (&mut sym as *mut *const libc::Elf64_Sym).cast(),
                        RTLD_DL_SYMENT,
                    ) != 0
                        && !sym.is_null()
                        && (*sym).st_shndx != 0
                        && info.dli_saddr as usize == first
                };
            if defined {
                return first;
            }
            // SAFETY: as above; RTLD_NEXT finds the definition after ours.
            unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) as usize }
        };
        NEXT.free.store(get(c"free", free as *const () as usize), Ordering::Release);
        NEXT.calloc.store(get(c"calloc", calloc as *const () as usize), Ordering::Release);
        NEXT.realloc.store(get(c"realloc", realloc as *const () as usize), Ordering::Release);
        NEXT.memalign.store(get(c"memalign", memalign as *const () as usize), Ordering::Release);
        NEXT.usable.store(get(c"malloc_usable_size", malloc_usable_size as *const () as usize), Ordering::Release);
        NEXT.malloc.store(get(c"malloc", malloc as *const () as usize), Ordering::Release);
    });
}

#[inline]
fn next(slot: &AtomicUsize) -> usize {
    let f = slot.load(Ordering::Acquire);
    if f != 0 {
        return f;
    }
    resolve();
    slot.load(Ordering::Acquire)
}

/// Serve this call from the internal heap?
#[inline]
fn internal() -> bool {
    (mode() != OFF && ours()) || in_resolve()
}

/// True while the next allocator is being looked up (calls from inside `dlsym`).
#[inline]
fn in_resolve() -> bool {
    NEXT.malloc.load(Ordering::Relaxed) == 0 && crate::reentry::in_internal()
}

fn enomem() -> *mut c_void {
    // SAFETY: errno of this thread.
    unsafe { *libc::__errno_location() = libc::ENOMEM };
    std::ptr::null_mut()
}

fn nonnull(p: *mut u8) -> *mut c_void {
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
    if internal() {
        // SAFETY: dlmalloc under its lock.
        return nonnull(HEAP.with(|h| unsafe { h.c_malloc(n) }));
    }
    if in_resolve() {
        // SAFETY: dlmalloc under its lock (a call from inside dlsym while resolving).
        return nonnull(HEAP.with(|h| unsafe { h.c_malloc(n) }));
    }
    type F = unsafe extern "C" fn(size_t) -> *mut c_void;
    // SAFETY: the next allocator's malloc, as the program asked.
    seen(unsafe { std::mem::transmute::<usize, F>(next(&NEXT.malloc))(n) }, n)
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
    if owns(p) {
        // SAFETY: a live block of the internal heap (caller's contract).
        HEAP.with(|h| unsafe { h.c_free(p.cast()) });
    } else {
        type F = unsafe extern "C" fn(*mut c_void);
        // SAFETY: a block of the next allocator.
        unsafe { std::mem::transmute::<usize, F>(next(&NEXT.free))(p) }
    }
}

/// `calloc(3)`.
///
/// # Safety
/// - As for `calloc(3)`.
#[no_mangle]
pub unsafe extern "C" fn calloc(n: size_t, s: size_t) -> *mut c_void {
    if internal() {
        let Some(total) = n.checked_mul(s) else { return enomem() };
        // SAFETY: dlmalloc under its lock.
        return nonnull(HEAP.with(|h| unsafe { h.calloc(total, 16) }));
    }
    type F = unsafe extern "C" fn(size_t, size_t) -> *mut c_void;
    // SAFETY: the next allocator.
    seen(unsafe { std::mem::transmute::<usize, F>(next(&NEXT.calloc))(n, s) }, n.saturating_mul(s))
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
    if owns(p) {
        if n == 0 {
            // SAFETY: a live internal block.
            unsafe { free(p) };
            return std::ptr::null_mut();
        }
        // SAFETY: a live block of the internal heap.
        return nonnull(HEAP.with(|h| unsafe { h.c_realloc(p.cast(), n) }));
    }
    type F = unsafe extern "C" fn(*mut c_void, size_t) -> *mut c_void;
    // SAFETY: a block of the next allocator.
    seen(unsafe { std::mem::transmute::<usize, F>(next(&NEXT.realloc))(p, n) }, n)
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

unsafe fn alloc_aligned(align: usize, n: usize) -> *mut c_void {
    if internal() {
        // SAFETY: align is a power of two (callers check).
        return nonnull(HEAP.with(|h| unsafe { h.c_memalign(align, n) }));
    }
    type F = unsafe extern "C" fn(size_t, size_t) -> *mut c_void;
    // SAFETY: the next allocator.
    seen(unsafe { std::mem::transmute::<usize, F>(next(&NEXT.memalign))(align, n) }, n)
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
    if owns(p) {
        // SAFETY: a live block of the internal heap.
        return unsafe { usable_size(p.cast()) };
    }
    type F = unsafe extern "C" fn(*mut c_void) -> size_t;
    let f = next(&NEXT.usable);
    if f == 0 {
        return 0;
    }
    // SAFETY: the next allocator's malloc_usable_size, for one of its blocks.
    unsafe { std::mem::transmute::<usize, F>(f)(p) }
}
