//! `_exit(2)` and `_Exit(3)`, interposed: a process that ends without `exit(3)` (a fork child's
//! usual end, Python's `os._exit`) runs none of `atexit`'s handlers, so without this its
//! statistics would be missing from the run's summary and its slot of the tree's budget would
//! count its charge until another process finds it dead (`uswap_pager::tree::reap`).
//!
//! Locking: none here (the statistics writer takes what `exit(3)`'s handler takes).

use libc::c_int;

/// End the process as the kernel's `exit_group(2)`, as glibc's `_exit` does.
fn exit_group(status: c_int) -> ! {
    loop {
        // SAFETY: exit_group takes no pointer and does not return.
        unsafe { libc::syscall(libc::SYS_exit_group, status) };
    }
}

/// `_exit(2)`.
///
/// # Safety
/// - As for `_exit(2)`; in a `vfork` child nothing of the library's runs (the memory is the
///   parent's).
#[no_mangle]
pub unsafe extern "C" fn _exit(status: c_int) -> ! {
    super::at_underscore_exit();
    exit_group(status)
}

/// `_Exit(3)` (the same as `_exit(2)`).
///
/// # Safety
/// - As for `_exit`.
#[no_mangle]
pub unsafe extern "C" fn _Exit(status: c_int) -> ! {
    super::at_underscore_exit();
    exit_group(status)
}
