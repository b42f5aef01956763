//! System calls on region memory: faults taken inside system calls.
//!
//! In SIGBUS mode a system call that touches a missing page of a region (a `read()` into a
//! swapped-out buffer) does not fault into our handler: it fails with `EFAULT`. The wrappers
//! here ([`read()`](fn@read), [`pread`], [`write()`](fn@write), [`readv_raw`], [`recvfrom_raw`], ...) touch the buffer from user
//! space first ([`prefault`]), which runs the normal fault path, and retry the call when it
//! still fails with `EFAULT` (an eviction raced the call). The LD_PRELOAD library exports its
//! own interposed `read`, `write`, ... symbols (`uswap-ffi`'s `preload/io.rs`) over these.
//!
//! Locking: none of its own. Region lookups go through the registry between
//! `region::enter` and `region::leave`; the faults taken serve themselves as usual.

use crate::region;

/// Make `[ptr, ptr+len)` resident where it lies in a managed region, by touching one byte per
/// page from user space (a locked add of 0 for `write`, which keeps concurrent writers' data;
/// a read otherwise). Faults are served as usual. Memory outside regions is not touched.
///
/// # Safety
/// - `[ptr, ptr+len)` must be mapped memory of this process (as for the system call that will
///   use it); pages outside managed regions are left alone.
pub unsafe fn prefault(ptr: *const u8, len: usize, write: bool) {
    if len == 0 {
        return;
    }
    let start = ptr as usize & !(crate::PAGE_SIZE - 1);
    let end = (ptr as usize).saturating_add(len);
    let mut a = start;
    while a < end {
        region::enter();
        // SAFETY: between enter and leave; only the bounds are kept.
        let r = unsafe { region::lookup(a) }.map(|r| (r.start, r.start + r.len));
        region::leave();
        match r {
            Some((_, rend)) => {
                let stop = rend.min(end);
                while a < stop {
                    let p = a.max(ptr as usize);
                    if write {
                        // SAFETY: p is inside a live region (caller keeps it alive for the call).
                        unsafe { touch_for_write(p as *mut u8) };
                    } else {
                        // SAFETY: as above, a read.
                        unsafe { std::ptr::read_volatile(p as *const u8) };
                    }
                    a += crate::PAGE_SIZE;
                }
            }
            None => a += crate::PAGE_SIZE,
        }
    }
}

/// Take a write fault on the page of `p` without changing its byte, even if another thread
/// writes it meanwhile: an atomic add of 0. Written so the compiler cannot turn it into a load
/// (LLVM folds an idempotent relaxed `fetch_add(0)` into a plain atomic load, which takes a read
/// fault and leaves the page write-protected: the system call that follows then gets EFAULT).
///
/// # Safety
/// - `p` is valid for reads and writes of one byte.
unsafe fn touch_for_write(p: *mut u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a locked add of 0 to a byte the caller vouches for; no other state is touched.
    unsafe {
        std::arch::asm!("lock add byte ptr [{0}], 0", in(reg) p, options(nostack))
    };
    #[cfg(not(target_arch = "x86_64"))]
    // SAFETY: as above; SeqCst and black_box keep the read-modify-write.
    unsafe {
        std::sync::atomic::AtomicU8::from_ptr(std::hint::black_box(p))
            .fetch_add(std::hint::black_box(0), std::sync::atomic::Ordering::SeqCst)
    };
}

fn in_any_region(ptr: usize, len: usize) -> bool {
    region::overlaps(ptr, ptr.saturating_add(len))
}

const MAX_RETRIES: u32 = 1000;

/// Run `call` (a raw system call returning -1/errno on failure) over user buffers `bufs`,
/// prefaulting those in managed regions and retrying on `EFAULT`.
fn retry_efault(bufs: &[(usize, usize)], write: bool, mut call: impl FnMut() -> isize) -> isize {
    // A call that succeeds after an EFAULT retry leaves errno as it found it, as libc's do.
    // SAFETY: reading this thread's errno.
    let errno_at_entry = unsafe { *libc::__errno_location() };
    let mine = bufs.iter().any(|&(p, l)| in_any_region(p, l));
    if mine {
        for &(p, l) in bufs {
            // SAFETY: the caller passes buffers valid for the system call.
            unsafe { prefault(p as *const u8, l, write) };
        }
    }
    let mut tries = 0;
    loop {
        let r = call();
        if r >= 0 && tries > 0 {
            // SAFETY: writing this thread's errno.
            unsafe { *libc::__errno_location() = errno_at_entry };
        }
        if r >= 0 || !mine || tries >= MAX_RETRIES {
            return r;
        }
        // SAFETY: reading this thread's errno.
        let e = unsafe { *libc::__errno_location() };
        if e != libc::EFAULT {
            return r;
        }
        tries += 1;
        region::enter();
        // SAFETY: between enter and leave; r is not used after it.
        if let Some(r) = bufs.iter().find_map(|&(p, _)| unsafe { region::lookup(p) }) {
            crate::stats::inc(&r.pager().counters.efault_retries, 1);
        }
        region::leave();
        for &(p, l) in bufs {
            // SAFETY: as above.
            unsafe { prefault(p as *const u8, l, write) };
        }
    }
}

fn sys_ret(r: libc::c_long) -> isize {
    r as isize
}

/// `read(2)` into `buf`, serving faults on managed regions. Returns bytes read or the error.
pub fn read(fd: i32, buf: &mut [u8]) -> std::io::Result<usize> {
    // SAFETY: buf is valid for writes of its length.
    let r = unsafe { read_raw(fd, buf.as_mut_ptr(), buf.len()) };
    if r < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(r as usize)
    }
}

/// `pread(2)` into `buf` at `off`, serving faults on managed regions.
pub fn pread(fd: i32, buf: &mut [u8], off: i64) -> std::io::Result<usize> {
    // SAFETY: buf is valid for writes of its length.
    let r = unsafe { pread_raw(fd, buf.as_mut_ptr(), buf.len(), off) };
    if r < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(r as usize)
    }
}

/// `write(2)` from `buf`, serving faults on managed regions.
pub fn write(fd: i32, buf: &[u8]) -> std::io::Result<usize> {
    // SAFETY: buf is valid for reads of its length.
    let r = unsafe { write_raw(fd, buf.as_ptr(), buf.len()) };
    if r < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(r as usize)
    }
}

/// Raw `read` with fault service (the body of the interposed symbol).
///
/// # Safety
/// - `buf` must be valid for writes of `n` bytes, as for `read(2)`.
pub unsafe fn read_raw(fd: i32, buf: *mut u8, n: usize) -> isize {
    // SAFETY: forwarding the caller's arguments to the system call.
    retry_efault(&[(buf as usize, n)], true, || sys_ret(unsafe { libc::syscall(libc::SYS_read, fd, buf, n) }))
}

/// Raw `pread64` with fault service.
///
/// # Safety
/// - `buf` must be valid for writes of `n` bytes.
pub unsafe fn pread_raw(fd: i32, buf: *mut u8, n: usize, off: i64) -> isize {
    // SAFETY: forwarding the caller's arguments.
    retry_efault(&[(buf as usize, n)], true, || sys_ret(unsafe { libc::syscall(libc::SYS_pread64, fd, buf, n, off) }))
}

/// Raw `write` with fault service.
///
/// # Safety
/// - `buf` must be valid for reads of `n` bytes.
pub unsafe fn write_raw(fd: i32, buf: *const u8, n: usize) -> isize {
    // SAFETY: forwarding the caller's arguments.
    retry_efault(&[(buf as usize, n)], false, || sys_ret(unsafe { libc::syscall(libc::SYS_write, fd, buf, n) }))
}

/// Raw `pwrite64` with fault service.
///
/// # Safety
/// - `buf` must be valid for reads of `n` bytes.
pub unsafe fn pwrite_raw(fd: i32, buf: *const u8, n: usize, off: i64) -> isize {
    // SAFETY: forwarding the caller's arguments.
    retry_efault(&[(buf as usize, n)], false, || sys_ret(unsafe { libc::syscall(libc::SYS_pwrite64, fd, buf, n, off) }))
}

fn iov_bufs(iov: *const libc::iovec, cnt: i32, out: &mut [(usize, usize); 64]) -> usize {
    let n = (cnt.max(0) as usize).min(64);
    for (i, o) in out.iter_mut().enumerate().take(n) {
        // SAFETY: the caller passes cnt valid iovecs.
        let v = unsafe { *iov.add(i) };
        *o = (v.iov_base as usize, v.iov_len);
    }
    n
}

/// Raw `readv` with fault service (the first 64 iovecs are prefaulted).
///
/// # Safety
/// - `iov` must point to `cnt` iovecs describing writable buffers.
pub unsafe fn readv_raw(fd: i32, iov: *const libc::iovec, cnt: i32) -> isize {
    let mut b = [(0usize, 0usize); 64];
    let n = iov_bufs(iov, cnt, &mut b);
    // SAFETY: forwarding the caller's arguments.
    retry_efault(&b[..n], true, || sys_ret(unsafe { libc::syscall(libc::SYS_readv, fd, iov, cnt) }))
}

/// Raw `writev` with fault service.
///
/// # Safety
/// - `iov` must point to `cnt` iovecs describing readable buffers.
pub unsafe fn writev_raw(fd: i32, iov: *const libc::iovec, cnt: i32) -> isize {
    let mut b = [(0usize, 0usize); 64];
    let n = iov_bufs(iov, cnt, &mut b);
    // SAFETY: forwarding the caller's arguments.
    retry_efault(&b[..n], false, || sys_ret(unsafe { libc::syscall(libc::SYS_writev, fd, iov, cnt) }))
}

/// Raw `recvfrom` with fault service (`recv` is `recvfrom` with no address).
///
/// # Safety
/// - `buf` must be valid for writes of `n` bytes; `addr`/`alen` as for `recvfrom(2)`.
pub unsafe fn recvfrom_raw(
    fd: i32,
    buf: *mut u8,
    n: usize,
    flags: i32,
    addr: *mut libc::sockaddr,
    alen: *mut libc::socklen_t,
) -> isize {
    // SAFETY: forwarding the caller's arguments.
    retry_efault(&[(buf as usize, n)], true, || {
        // SAFETY: forwarding the caller's arguments.
        sys_ret(unsafe { libc::syscall(libc::SYS_recvfrom, fd, buf, n, flags, addr, alen) })
    })
}

/// Raw `sendto` with fault service (`send` is `sendto` with no address).
///
/// # Safety
/// - `buf` must be valid for reads of `n` bytes; `addr`/`alen` as for `sendto(2)`.
pub unsafe fn sendto_raw(
    fd: i32,
    buf: *const u8,
    n: usize,
    flags: i32,
    addr: *const libc::sockaddr,
    alen: libc::socklen_t,
) -> isize {
    // SAFETY: forwarding the caller's arguments.
    retry_efault(&[(buf as usize, n)], false, || {
        // SAFETY: forwarding the caller's arguments.
        sys_ret(unsafe { libc::syscall(libc::SYS_sendto, fd, buf, n, flags, addr, alen) })
    })
}
