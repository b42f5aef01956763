//! [`SharedMap`]: an owned `MAP_SHARED` mapping of a memfd, the memory a process shares with
//! its `fork` descendants (the cipher's nonce counter, the file tier's cluster holds).
//!
//! A private mapping would be copied at `fork`; this one stays the same memory in every
//! process that inherits it. It is mapped and unmapped with raw system calls, so no
//! interposed `mmap` (the LD_PRELOAD library's) is involved, and it is reached only as atomics,
//! which makes it sound to share between threads and processes whatever the others write.
//!
//! Locking: none; the users' atomics.

use crate::error::TierError;
use std::sync::atomic::{AtomicU32, AtomicU64};

/// How uswap's own shared memory shows in `/proc/PID/maps` (`/memfd:uswap-shared (deleted)`).
pub const SHARED_NAME: &str = "/memfd:uswap-shared";

/// A shared mapping of whole pages of a memfd (see [`SHARED_NAME`]), unmapped on drop (in this process only: the
/// others keep their views).
pub struct SharedMap {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the mapping is only reached as atomics (`u32_at`, `u64_at`), which are Sync.
unsafe impl Send for SharedMap {}
// SAFETY: as above.
unsafe impl Sync for SharedMap {}

impl SharedMap {
    /// Map `len` bytes (rounded up to whole pages), zeroed; pages get memory when first
    /// touched. The memory is a memfd named [`SHARED_NAME`], so that `/proc/PID/maps` tells
    /// uswap's own shared memory from a program's (`uswap run` counts the program's against
    /// the limit, and must not count this).
    pub fn new(len: usize) -> Result<SharedMap, TierError> {
        SharedMap::named(c"uswap-shared", len)
    }

    /// [`SharedMap::new`] with a memfd named `name` (`/memfd:NAME (deleted)` in the maps:
    /// the preload library's mark where it stands aside is one, never touched).
    pub fn named(name: &std::ffi::CStr, len: usize) -> Result<SharedMap, TierError> {
        let len = len.max(1).next_multiple_of(4096);
        // SAFETY: no address given: the kernel picks one, no memory of ours is affected.
        let ptr = unsafe { map_memfd(name, len, std::ptr::null_mut()) }?;
        Ok(SharedMap { ptr, len })
    }

    /// Give this process a view of its own: a fresh zeroed memfd (named as by
    /// [`SharedMap::new`]) mapped over the same addresses (`MAP_FIXED`), no longer shared with
    /// the processes it was shared with. For a fork child whose copy must stop being the
    /// parent's (its own children share the new one).
    pub fn renew(&self) -> Result<(), TierError> {
        // SAFETY: our own mapping's exact range, which stays mapped throughout (MAP_FIXED
        // replaces it atomically) and is only reached through atomics.
        unsafe { map_memfd(c"uswap-shared", self.len, self.ptr) }.map(|_| ())
    }

    /// Bytes of the mapping that have memory (`mincore`): the pages touched so far.
    #[cfg(test)]
    pub(crate) fn resident_bytes(&self) -> u64 {
        let pages = self.len / 4096;
        let mut v = vec![0u8; pages];
        // SAFETY: mincore of our own mapping into a vector of one byte per page.
        let r = unsafe { libc::mincore(self.ptr.cast(), self.len, v.as_mut_ptr()) };
        if r != 0 {
            return 0;
        }
        v.iter().filter(|&&b| b & 1 != 0).count() as u64 * 4096
    }

    /// The 4-byte atomic at byte offset `off` (a multiple of 4, inside the mapping).
    pub(crate) fn u32_at(&self, off: usize) -> &AtomicU32 {
        assert!(off.is_multiple_of(4) && off + 4 <= self.len, "u32 at {off} of {}", self.len);
        // SAFETY: aligned and in bounds (checked), inside a live mapping owned by self that is
        // only ever used through atomics.
        unsafe { AtomicU32::from_ptr(self.ptr.add(off).cast()) }
    }

    /// The 8-byte atomic at byte offset `off` (a multiple of 8, inside the mapping).
    pub fn u64_at(&self, off: usize) -> &AtomicU64 {
        assert!(off.is_multiple_of(8) && off + 8 <= self.len, "u64 at {off} of {}", self.len);
        // SAFETY: as in `u32_at`.
        unsafe { AtomicU64::from_ptr(self.ptr.add(off).cast()) }
    }
}

/// A new memfd named `name`, `len` bytes, mapped shared read-write at `at` (`MAP_FIXED`) or,
/// if `at` is null, where the kernel picks; the descriptor is closed (the mapping keeps the
/// memory). Raw system calls: no interposed `mmap` is involved.
///
/// # Safety
/// - A non-null `at` is the start of `len` bytes of mapping that the caller owns and that
///   nothing reaches except as atomics (their content is replaced by zeros).
unsafe fn map_memfd(name: &std::ffi::CStr, len: usize, at: *mut u8) -> Result<*mut u8, TierError> {
    let io = |op, e: std::io::Error| TierError::io(op, &e);
    // SAFETY: memfd_create with a NUL-terminated name and valid flags returns a new descriptor
    // or -1.
    let fd = unsafe { libc::syscall(libc::SYS_memfd_create, name.as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(io("memfd_create", std::io::Error::last_os_error()));
    }
    let fixed = if at.is_null() { 0 } else { libc::MAP_FIXED };
    // SAFETY: ftruncate and a shared mapping of the descriptor just made, at `at` only as the
    // caller allows (this function's contract); then the descriptor is closed.
    unsafe {
        let r = if libc::syscall(libc::SYS_ftruncate, fd, len as libc::c_long) < 0 {
            -1
        } else {
            libc::syscall(
                libc::SYS_mmap,
                at,
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_NORESERVE | fixed,
                fd,
                0 as libc::c_long,
            )
        };
        let e = std::io::Error::last_os_error();
        libc::syscall(libc::SYS_close, fd);
        if r < 0 {
            return Err(io("mmap shared", e));
        }
        Ok(r as *mut u8)
    }
}

impl Drop for SharedMap {
    fn drop(&mut self) {
        // SAFETY: our own mapping, unmapped once.
        unsafe { libc::syscall(libc::SYS_munmap, self.ptr, self.len) };
    }
}
