//! `read`/`write` and friends, interposed so that a system call whose buffer lies in swapped-out
//! memory works: in SIGBUS mode the kernel would fail it with `EFAULT` instead of faulting into
//! our handler. Each wrapper is the pager's prefault-and-retry wrapper ([`uswap_pager::syscall`]),
//! which issues the raw system call (no recursion, no allocation).
//!
//! Locking: none.

use libc::{c_int, c_void, iovec, size_t, sockaddr, socklen_t, ssize_t};
use uswap_pager::syscall;

/// `read(2)`.
///
/// # Safety
/// - As for `read(2)`.
#[no_mangle]
pub unsafe extern "C" fn read(fd: c_int, buf: *mut c_void, n: size_t) -> ssize_t {
    // SAFETY: the caller's contract is read(2)'s.
    unsafe { syscall::read_raw(fd, buf.cast(), n) }
}
/// `pread(2)`.
///
/// # Safety
/// - As for `pread(2)`.
#[no_mangle]
pub unsafe extern "C" fn pread(fd: c_int, buf: *mut c_void, n: size_t, off: i64) -> ssize_t {
    // SAFETY: as above.
    unsafe { syscall::pread_raw(fd, buf.cast(), n, off) }
}
/// `pread64(2)`.
///
/// # Safety
/// - As for `pread(2)`.
#[no_mangle]
pub unsafe extern "C" fn pread64(fd: c_int, buf: *mut c_void, n: size_t, off: i64) -> ssize_t {
    // SAFETY: as above.
    unsafe { syscall::pread_raw(fd, buf.cast(), n, off) }
}
/// `write(2)`.
///
/// # Safety
/// - As for `write(2)`.
#[no_mangle]
pub unsafe extern "C" fn write(fd: c_int, buf: *const c_void, n: size_t) -> ssize_t {
    // SAFETY: as above.
    unsafe { syscall::write_raw(fd, buf.cast(), n) }
}
/// `pwrite(2)`.
///
/// # Safety
/// - As for `pwrite(2)`.
#[no_mangle]
pub unsafe extern "C" fn pwrite(fd: c_int, buf: *const c_void, n: size_t, off: i64) -> ssize_t {
    // SAFETY: as above.
    unsafe { syscall::pwrite_raw(fd, buf.cast(), n, off) }
}
/// `pwrite64(2)`.
///
/// # Safety
/// - As for `pwrite(2)`.
#[no_mangle]
pub unsafe extern "C" fn pwrite64(fd: c_int, buf: *const c_void, n: size_t, off: i64) -> ssize_t {
    // SAFETY: as above.
    unsafe { syscall::pwrite_raw(fd, buf.cast(), n, off) }
}
/// `readv(2)`.
///
/// # Safety
/// - As for `readv(2)`.
#[no_mangle]
pub unsafe extern "C" fn readv(fd: c_int, iov: *const iovec, cnt: c_int) -> ssize_t {
    // SAFETY: as above.
    unsafe { syscall::readv_raw(fd, iov, cnt) }
}
/// `writev(2)`.
///
/// # Safety
/// - As for `writev(2)`.
#[no_mangle]
pub unsafe extern "C" fn writev(fd: c_int, iov: *const iovec, cnt: c_int) -> ssize_t {
    // SAFETY: as above.
    unsafe { syscall::writev_raw(fd, iov, cnt) }
}
/// `recv(2)`.
///
/// # Safety
/// - As for `recv(2)`.
#[no_mangle]
pub unsafe extern "C" fn recv(fd: c_int, buf: *mut c_void, n: size_t, flags: c_int) -> ssize_t {
    // SAFETY: as above.
    unsafe { syscall::recvfrom_raw(fd, buf.cast(), n, flags, std::ptr::null_mut(), std::ptr::null_mut()) }
}
/// `recvfrom(2)`.
///
/// # Safety
/// - As for `recvfrom(2)`.
#[no_mangle]
pub unsafe extern "C" fn recvfrom(
    fd: c_int,
    buf: *mut c_void,
    n: size_t,
    flags: c_int,
    a: *mut sockaddr,
    al: *mut socklen_t,
) -> ssize_t {
    // SAFETY: as above.
    unsafe { syscall::recvfrom_raw(fd, buf.cast(), n, flags, a, al) }
}
/// `send(2)`.
///
/// # Safety
/// - As for `send(2)`.
#[no_mangle]
pub unsafe extern "C" fn send(fd: c_int, buf: *const c_void, n: size_t, flags: c_int) -> ssize_t {
    // SAFETY: as above.
    unsafe { syscall::sendto_raw(fd, buf.cast(), n, flags, std::ptr::null(), 0) }
}
/// `sendto(2)`.
///
/// # Safety
/// - As for `sendto(2)`.
#[no_mangle]
pub unsafe extern "C" fn sendto(
    fd: c_int,
    buf: *const c_void,
    n: size_t,
    flags: c_int,
    a: *const sockaddr,
    al: socklen_t,
) -> ssize_t {
    // SAFETY: as above.
    unsafe { syscall::sendto_raw(fd, buf.cast(), n, flags, a, al) }
}
