//! [`SharedMap`]: an owned anonymous `MAP_SHARED` mapping, the memory a process shares with
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

/// An anonymous shared mapping of whole pages, unmapped on drop (in this process only: the
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
    /// touched (`MAP_NORESERVE`).
    pub fn new(len: usize) -> Result<SharedMap, TierError> {
        let len = len.max(1).next_multiple_of(4096);
        // SAFETY: an anonymous shared mapping at an address the kernel picks; no memory of ours
        // is affected.
        let r = unsafe {
            libc::syscall(
                libc::SYS_mmap,
                std::ptr::null_mut::<libc::c_void>(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1 as libc::c_long,
                0 as libc::c_long,
            )
        };
        if r < 0 {
            return Err(TierError::Io { op: "mmap shared", msg: std::io::Error::last_os_error().to_string() });
        }
        Ok(SharedMap { ptr: r as *mut u8, len })
    }

    /// The 4-byte atomic at byte offset `off` (a multiple of 4, inside the mapping).
    pub fn u32_at(&self, off: usize) -> &AtomicU32 {
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

impl Drop for SharedMap {
    fn drop(&mut self) {
        // SAFETY: our own mapping, unmapped once.
        unsafe { libc::syscall(libc::SYS_munmap, self.ptr, self.len) };
    }
}
