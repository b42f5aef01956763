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
#[inline(never)]
pub(super) unsafe fn raw(nr: libc::c_long, a: [u64; 6]) -> i64 {
    let ret: i64;
    // SAFETY: the caller vouches for the call; `syscall` clobbers rcx and r11 only.
    unsafe {
        std::arch::asm!(
            "syscall",
            inlateout("rax") nr => ret,
            in("rdi") a[0], in("rsi") a[1], in("rdx") a[2],
            in("r10") a[3], in("r8") a[4], in("r9") a[5],
            lateout("rcx") _, lateout("r11") _,
            options(nostack),
        )
    };
    ret
}
