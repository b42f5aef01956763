//! System calls issued from this library's text: the seccomp filter of SIGBUS fault mode
//! (`seccomp`) traps only calls made from libc's and the loader's text, so these pass. A
//! leaf module.
//!
//! Locking: none.

/// Issue system call `nr` from this library's text (not trapped). Returns the kernel's result
/// (`-errno` on failure).
///
/// # Safety
/// - As for the system call `nr` with `args`.
pub(super) unsafe fn raw(nr: libc::c_long, a: [u64; 6]) -> i64 {
    // SAFETY: the caller's obligations.
    unsafe { uswap_pager::syscall::raw_syscall(nr, a) }
}
