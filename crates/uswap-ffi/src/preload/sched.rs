//! CPU masks, and the calls that start threads and processes, interposed so that the pager's
//! pin of the thread whose faults it serves (uswap-pager's `cpu` module) stays out of the
//! program's sight and out of what it starts:
//! - `sched_getaffinity` and `pthread_getaffinity_np` of the pinned thread for itself report
//!   the program's mask ([`uswap_pager::Pager::reported_cpu_mask`]);
//! - `sched_setaffinity` and `pthread_setaffinity_np`: the program sets masks itself, so the
//!   pager gives its pin up and pins nothing again ([`uswap_pager::Pager::program_sets_cpu_masks`]);
//! - `pthread_create` (also run as uswap code, for the new thread's TLS vector), `posix_spawn`, `posix_spawnp`, `system`, `popen` and the non-variadic
//!   `exec` functions run with the pin lifted ([`uswap_pager::Pager::without_cpu_pin`]), so the
//!   new thread or program gets the program's mask (a `fork` child takes it back in the atfork
//!   handler);
//! - `vfork` (CPython's `subprocess`) and the variadic `execl`, `execlp` and `execle` cannot be
//!   wrapped by a Rust function (a `vfork` child returns through its caller's frame; Rust
//!   defines no C-variadic functions): on x86-64 each is a small assembly trampoline that
//!   saves the argument registers, gives the program's mask back (`uswap_unpin_and_next`)
//!   and jumps to the next definition, which then returns straight to the caller. The pin is
//!   not put back after them (the event thread may pin the thread again at a later check).
//!
//! Each wrapper calls the next definition (`dlsym(RTLD_NEXT)`, looked up once, the
//! trampolines' at start-up: a `vfork` child must not allocate); with no pager (the library
//! inert, or before it started) it only forwards.
//!
//! Locking: none.

use super::dl::{next, next_fn};
use super::pager;
use crate::gate::gettid;
use libc::{
    c_char, c_int, c_void, cpu_set_t, pid_t, posix_spawn_file_actions_t, posix_spawnattr_t, pthread_attr_t, pthread_t,
    size_t, FILE,
};
use std::sync::atomic::AtomicUsize;

/// Run `f` with the calling thread's pin lifted (when there is a pager).
fn unpinned<R>(f: impl FnOnce() -> R) -> R {
    match pager() {
        Some(p) => p.without_cpu_pin(f),
        None => f(),
    }
}

/// Put the program's mask in the caller's `set` of `size` bytes if the pager pinned the
/// calling thread (the kernel wrote its answer there already).
///
/// # Safety
/// - `set` is valid for writes of `size` bytes.
unsafe fn report_own_mask(size: size_t, set: *mut cpu_set_t) {
    let Some(mask) = pager().and_then(|p| p.reported_cpu_mask(gettid())) else { return };
    let n = size.min(std::mem::size_of::<cpu_set_t>());
    // SAFETY: `set` holds `size` bytes (caller) and `mask` is a cpu_set_t of at least `n`;
    // the rest of the caller's set is zeroed, as glibc does past the kernel's answer.
    unsafe {
        std::ptr::copy_nonoverlapping((&mask as *const cpu_set_t).cast::<u8>(), set.cast::<u8>(), n);
        std::ptr::write_bytes(set.cast::<u8>().add(n), 0, size - n);
    }
}

/// `sched_getaffinity(2)`.
///
/// # Safety
/// - As for `sched_getaffinity(2)`.
#[no_mangle]
pub unsafe extern "C" fn sched_getaffinity(pid: pid_t, size: size_t, set: *mut cpu_set_t) -> c_int {
    let f = next_fn!(c"sched_getaffinity", unsafe extern "C" fn(pid_t, size_t, *mut cpu_set_t) -> c_int, -1);
    // SAFETY: the caller's arguments, as sched_getaffinity(2) takes them.
    let r = unsafe { f(pid, size, set) };
    if r == 0 && (pid == 0 || pid == gettid()) {
        // SAFETY: the call succeeded, so `set` holds `size` writable bytes.
        unsafe { report_own_mask(size, set) };
    }
    r
}

/// `pthread_getaffinity_np(3)`.
///
/// # Safety
/// - As for `pthread_getaffinity_np(3)`.
#[no_mangle]
pub unsafe extern "C" fn pthread_getaffinity_np(th: pthread_t, size: size_t, set: *mut cpu_set_t) -> c_int {
    let f = next_fn!(
        c"pthread_getaffinity_np",
        unsafe extern "C" fn(pthread_t, size_t, *mut cpu_set_t) -> c_int,
        libc::ENOSYS
    );
    // SAFETY: the caller's arguments.
    let r = unsafe { f(th, size, set) };
    // SAFETY: pthread_self has no preconditions.
    if r == 0 && th == unsafe { libc::pthread_self() } {
        // SAFETY: the call succeeded, so `set` holds `size` writable bytes.
        unsafe { report_own_mask(size, set) };
    }
    r
}

/// `sched_setaffinity(2)`.
///
/// # Safety
/// - As for `sched_setaffinity(2)`.
#[no_mangle]
pub unsafe extern "C" fn sched_setaffinity(pid: pid_t, size: size_t, set: *const cpu_set_t) -> c_int {
    let f = next_fn!(c"sched_setaffinity", unsafe extern "C" fn(pid_t, size_t, *const cpu_set_t) -> c_int, -1);
    if let Some(p) = pager() {
        p.program_sets_cpu_masks();
    }
    // SAFETY: the caller's arguments.
    unsafe { f(pid, size, set) }
}

/// `pthread_setaffinity_np(3)`.
///
/// # Safety
/// - As for `pthread_setaffinity_np(3)`.
#[no_mangle]
pub unsafe extern "C" fn pthread_setaffinity_np(th: pthread_t, size: size_t, set: *const cpu_set_t) -> c_int {
    let f = next_fn!(
        c"pthread_setaffinity_np",
        unsafe extern "C" fn(pthread_t, size_t, *const cpu_set_t) -> c_int,
        libc::ENOSYS
    );
    if let Some(p) = pager() {
        p.program_sets_cpu_masks();
    }
    // SAFETY: the caller's arguments.
    unsafe { f(th, size, set) }
}

type StartFn = extern "C" fn(*mut c_void) -> *mut c_void;

/// A wrapper `$name(args) -> ret` that calls the next definition of `$c` with the calling
/// thread's pin lifted ([`unpinned`]), or returns `$fail` if there is none.
macro_rules! unpinned_wrapper {
    ($(#[$doc:meta])* $name:ident, $c:literal, ($($arg:ident: $ty:ty),*) -> $ret:ty, $fail:expr) => {
        $(#[$doc])*
        ///
        /// # Safety
        #[doc = concat!("- As for `", stringify!($name), "`.")]
        #[no_mangle]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> $ret {
            let f = next_fn!($c, unsafe extern "C" fn($($ty),*) -> $ret, $fail);
            // SAFETY: the caller's arguments, as the next definition takes them.
            unpinned(|| unsafe { f($($arg),*) })
        }
    };
}

/// `pthread_create(3)`: the new thread gets the program's mask, not a pin; and the call runs
/// as uswap code ([`crate::reentry::internal`]), so the new thread's TLS vector (DTV), which
/// the loader allocates with the global `calloc` inside this call, comes from the internal
/// heap (`free` and `realloc` follow a block by address, so a later resize stays there).
/// Every thread-local access of uswap code reads the DTV (`__tls_get_addr`); in the program's
/// heap it could be swapped out, and a fault handler running on that thread (SIGBUS mode)
/// would fault on it again before it could serve anything.
///
/// # Safety
/// - As for `pthread_create(3)`.
#[no_mangle]
pub unsafe extern "C" fn pthread_create(
    th: *mut pthread_t,
    attr: *const pthread_attr_t,
    start: StartFn,
    arg: *mut c_void,
) -> c_int {
    let f = next_fn!(
        c"pthread_create",
        unsafe extern "C" fn(*mut pthread_t, *const pthread_attr_t, StartFn, *mut c_void) -> c_int,
        libc::EAGAIN
    );
    // SAFETY: the caller's arguments, as the next definition takes them.
    let call = || unsafe { f(th, attr, start, arg) };
    unpinned(|| match pager() {
        Some(_) => crate::reentry::internal(call),
        None => call(),
    })
}
unpinned_wrapper!(
    /// `posix_spawn(3)`.
    posix_spawn, c"posix_spawn",
    (pid: *mut pid_t, path: *const c_char, actions: *const posix_spawn_file_actions_t,
     attr: *const posix_spawnattr_t, argv: *const *mut c_char, envp: *const *mut c_char) -> c_int,
    libc::ENOSYS
);
unpinned_wrapper!(
    /// `posix_spawnp(3)`: `posix_spawn` of a file name looked up in `PATH`.
    posix_spawnp, c"posix_spawnp",
    (pid: *mut pid_t, file: *const c_char, actions: *const posix_spawn_file_actions_t,
     attr: *const posix_spawnattr_t, argv: *const *mut c_char, envp: *const *mut c_char) -> c_int,
    libc::ENOSYS
);
unpinned_wrapper!(
    /// `system(3)`.
    system, c"system", (cmd: *const c_char) -> c_int, -1
);
unpinned_wrapper!(
    /// `popen(3)`.
    popen, c"popen", (cmd: *const c_char, mode: *const c_char) -> *mut FILE, std::ptr::null_mut()
);
unpinned_wrapper!(
    /// `execve(2)`: the new program starts with the program's mask (pinned again if it fails).
    execve, c"execve", (path: *const c_char, argv: *const *const c_char, envp: *const *const c_char) -> c_int, -1
);
unpinned_wrapper!(
    /// `execv(3)`.
    execv, c"execv", (path: *const c_char, argv: *const *const c_char) -> c_int, -1
);
unpinned_wrapper!(
    /// `execvp(3)`.
    execvp, c"execvp", (file: *const c_char, argv: *const *const c_char) -> c_int, -1
);
unpinned_wrapper!(
    /// `execvpe(3)`.
    execvpe, c"execvpe", (file: *const c_char, argv: *const *const c_char, envp: *const *const c_char) -> c_int, -1
);
unpinned_wrapper!(
    /// `fexecve(3)`.
    fexecve, c"fexecve", (fd: c_int, argv: *const *const c_char, envp: *const *const c_char) -> c_int, -1
);

/// The next definitions of the trampolines' symbols, looked up at start-up ([`resolve`]).
static NEXT_VFORK: AtomicUsize = AtomicUsize::new(0);
static NEXT_EXECL: AtomicUsize = AtomicUsize::new(0);
static NEXT_EXECLP: AtomicUsize = AtomicUsize::new(0);
static NEXT_EXECLE: AtomicUsize = AtomicUsize::new(0);

/// Look the trampolines' next definitions up now, while allocating is allowed (the preload's
/// start-up): a `vfork` child that calls `execl` must not enter `dlsym`.
pub(super) fn resolve() {
    for (slot, name) in
        [(&NEXT_VFORK, c"vfork"), (&NEXT_EXECL, c"execl"), (&NEXT_EXECLP, c"execlp"), (&NEXT_EXECLE, c"execle")]
    {
        next(slot, name);
    }
}

/// What a trampoline jumps to when the next definition is missing: fail with `ENOSYS`.
extern "C" fn missing() -> c_int {
    // SAFETY: __errno_location returns the calling thread's errno.
    unsafe { *libc::__errno_location() = libc::ENOSYS };
    -1
}

/// Called by a trampoline ([`vfork`] and the `execl` family) before it jumps: lift the calling
/// thread's pin (not put back: see the module documentation) and return the address to jump
/// to, the next definition of the symbol whose slot is `slot`.
///
/// # Safety
/// - `slot` is one of this module's `NEXT_*` statics.
#[no_mangle]
unsafe extern "C" fn uswap_unpin_and_next(slot: *const AtomicUsize) -> usize {
    if let Some(p) = pager() {
        p.leave_cpu_pin();
    }
    // SAFETY: the caller passes one of our statics.
    let f = unsafe { &*slot }.load(std::sync::atomic::Ordering::Acquire);
    if f == 0 {
        missing as *const () as usize
    } else {
        f
    }
}

/// A trampoline `$name` (a naked function: exported like the other wrappers, and free to take
/// the caller's registers as they are): save the integer argument registers and `rax` (the
/// count of vector registers a variadic call passes), call [`uswap_unpin_and_next`] with the
/// symbol's slot, restore them, jump to what it returned. Seven pushes leave the stack 16-byte
/// aligned at the call (it is 8 off at entry). The next definition returns straight to the
/// caller; a `vfork` child returns there too, on a stack this code left as it found it.
#[cfg(target_arch = "x86_64")]
macro_rules! trampoline {
    ($(#[$doc:meta])* $name:ident, $ret:ty, $slot:ident) => {
        $(#[$doc])*
        ///
        /// # Safety
        /// - As for the C function of the same name.
        #[unsafe(naked)]
        #[no_mangle]
        pub unsafe extern "C" fn $name() -> $ret {
            std::arch::naked_asm!(
                "push rdi",
                "push rsi",
                "push rdx",
                "push rcx",
                "push r8",
                "push r9",
                "push rax",
                "lea rdi, [rip + {slot}]",
                "call {helper}",
                "mov r11, rax",
                "pop rax",
                "pop r9",
                "pop r8",
                "pop rcx",
                "pop rdx",
                "pop rsi",
                "pop rdi",
                "jmp r11",
                slot = sym $slot,
                helper = sym uswap_unpin_and_next,
            )
        }
    };
}

#[cfg(target_arch = "x86_64")]
trampoline!(
    /// `vfork(2)`: lifts the pin, then libc's `vfork`.
    vfork, pid_t, NEXT_VFORK
);
#[cfg(target_arch = "x86_64")]
trampoline!(
    /// `execl(3)` (variadic): lifts the pin, then libc's `execl`.
    execl, c_int, NEXT_EXECL
);
#[cfg(target_arch = "x86_64")]
trampoline!(
    /// `execlp(3)` (variadic): lifts the pin, then libc's `execlp`.
    execlp, c_int, NEXT_EXECLP
);
#[cfg(target_arch = "x86_64")]
trampoline!(
    /// `execle(3)` (variadic): lifts the pin, then libc's `execle`.
    execle, c_int, NEXT_EXECLE
);
