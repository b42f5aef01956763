//! Thread-local destructors registered by uswap's own code (`__cxa_thread_atexit_impl`).
//!
//! Rust's `thread_local!` values that need dropping (the standard library's spawn hooks and
//! channel contexts, crossbeam's epoch handle, the pool's scratch buffers) register their
//! destructor with glibc's `__cxa_thread_atexit_impl` the first time a thread touches them.
//! glibc allocates the list node with the global `calloc`, and that is the *program's*
//! allocator whenever the executable defines `calloc` itself (rustc and Rust programs built
//! with an unprefixed jemalloc, programs linked with tcmalloc): the routing of [`super::malloc`]
//! never sees the call. Two hangs followed from it:
//! - **fork**: a jemalloc locks all its mutexes in its `pthread_atfork` prepare handler and
//!   unlocks them in its child handler, which runs after ours ([`crate::fork`]: our child
//!   handler runs first, to rebuild the pager before any program code touches memory). The
//!   child's new pager threads registered their first destructor inside our handler, waited in
//!   jemalloc's `calloc` for a mutex nobody would release, and the parent waited for the child
//!   (`uswap run -- cargo build`: every `rustc` that forked its linker hung).
//! - **faults on its own memory**: a program thread inside uswap code (an interposed
//!   `madvise` freeing swap entries) that first pinned the epoch there registered crossbeam's
//!   handle, and glibc's `calloc` faulted on the program's heap while the thread held a
//!   cluster lock the event thread needed (the same build, in a parent). A node in the
//!   program's heap is managed memory, and a pager thread that touched it could wait for
//!   itself the same way.
//!
//! So a registration made by uswap code (a pager thread, or [`crate::reentry::internal`]) is
//! kept here: in a fixed array per thread ([`MAX_PER_THREAD`] entries, no allocation), run in
//! reverse order when the thread exits by the destructor of one `pthread` key whose value the
//! first registration sets (a key below 32 has its value in glibc's thread descriptor, so
//! setting it allocates nothing either; the key is made when the library starts, [`init`]).
//! Without such a key, or with the array full, the registration is dropped: the value is
//! uswap's own (buffers in the internal heap, an epoch participant) and is kept until the
//! process ends ([`kept`] counts them). Every other registration (the program's C++
//! `thread_local`s) goes to glibc unchanged.
//!
//! Locking: none; per-thread cells and two atomics.

use super::dl::next_fn;
use libc::{c_int, c_void};
use std::cell::Cell;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// Destructors one thread can keep here.
pub const MAX_PER_THREAD: usize = 16;

/// Registrations dropped (their destructors will not run).
static KEPT: AtomicU64 = AtomicU64::new(0);
/// The key whose destructor runs a thread's kept destructors (`u32::MAX`: none).
static KEY: AtomicU32 = AtomicU32::new(u32::MAX);

pub(super) type Dtor = unsafe extern "C" fn(*mut c_void);

thread_local! {
    // Const-initialised, no destructor: touching them registers nothing.
    static COUNT: Cell<usize> = const { Cell::new(0) };
    static LIST: [Cell<(usize, usize)>; MAX_PER_THREAD] = const { [const { Cell::new((0, 0)) }; MAX_PER_THREAD] };
}

/// Make the key (once, when the library starts). Keeps it only if its value lives in the
/// thread descriptor (index below 32): setting a higher one allocates.
pub fn init() {
    if KEY.load(Ordering::Acquire) != u32::MAX {
        return;
    }
    let mut k: libc::pthread_key_t = 0;
    // SAFETY: pthread_key_create writes the key; `run_kept` is an extern "C" destructor.
    if unsafe { libc::pthread_key_create(&mut k, Some(run_kept)) } == 0 && k < 32 {
        KEY.store(k, Ordering::Release);
    }
}

/// Thread-local destructors registered by uswap code that were dropped.
pub fn kept() -> u64 {
    KEPT.load(Ordering::Relaxed)
}

/// Run `dtor(obj)` when the calling thread exits (uswap code's destructors); false if it
/// cannot be kept.
pub(super) fn at_thread_exit(dtor: Dtor, obj: *mut c_void) -> bool {
    keep(dtor, obj)
}

/// Keep `dtor(obj)` for this thread's exit; false if it cannot be kept.
fn keep(dtor: Dtor, obj: *mut c_void) -> bool {
    let key = KEY.load(Ordering::Acquire);
    let n = COUNT.with(Cell::get);
    if key == u32::MAX || n >= MAX_PER_THREAD {
        return false;
    }
    LIST.with(|l| l[n].set((dtor as usize, obj as usize)));
    COUNT.with(|c| c.set(n + 1));
    if n == 0 {
        // SAFETY: a key of ours below 32 (no allocation); any non-null value makes glibc call
        // its destructor when the thread exits.
        unsafe { libc::pthread_setspecific(key, std::ptr::dangling::<c_void>()) };
    }
    true
}

/// The key's destructor: run the thread's kept destructors, newest first (one may keep more).
extern "C" fn run_kept(_: *mut c_void) {
    loop {
        let n = COUNT.with(Cell::get);
        if n == 0 {
            return;
        }
        COUNT.with(|c| c.set(n - 1));
        let (f, o) = LIST.with(|l| l[n - 1].get());
        // SAFETY: a destructor and its object as registered through `__cxa_thread_atexit_impl`,
        // called once, on the registering thread, as it exits.
        unsafe { std::mem::transmute::<usize, Dtor>(f)(o as *mut c_void) };
    }
}

/// `__cxa_thread_atexit_impl`: register `dtor(obj)` to run when the calling thread exits.
///
/// # Safety
/// - As for glibc's `__cxa_thread_atexit_impl`: `dtor` may be called with `obj` when the
///   thread exits, and `dso` is the registering object's `__dso_handle`.
#[no_mangle]
pub unsafe extern "C" fn __cxa_thread_atexit_impl(dtor: Dtor, obj: *mut c_void, dso: *mut c_void) -> c_int {
    if super::ours() {
        if !keep(dtor, obj) {
            KEPT.fetch_add(1, Ordering::Relaxed);
        }
        return 0;
    }
    let f = next_fn!(c"__cxa_thread_atexit_impl", unsafe extern "C" fn(Dtor, *mut c_void, *mut c_void) -> c_int, {
        // No next definition (a libc without it): the value is kept, as above.
        KEPT.fetch_add(1, Ordering::Relaxed);
        0
    });
    // SAFETY: glibc's implementation with the caller's arguments (caller's contract).
    unsafe { f(dtor, obj, dso) }
}
