//! Where the workload's memory comes from: a thin adapter over "give me a region of N bytes"
//! so the same workload runs on plain anonymous memory (the kernel side, limited by a memory
//! cgroup) and on a uswap pager region. No locking here: a backing is used by one thread.

use super::size::fmt_size;

/// A region the workload can run over.
pub trait Mapping {
    /// Base address (page-aligned).
    fn as_mut_ptr(&mut self) -> *mut u8;
    /// Length in bytes.
    fn len(&self) -> usize;
}

/// A source of regions plus its statistics.
pub trait Backing {
    /// One line for people: what this backing is.
    fn describe(&self) -> String;
    /// Map a region of `len` bytes, zero-filled.
    fn map(&self, len: usize) -> Result<Box<dyn Mapping>, String>;
    /// Statistics after the run, as JSON (swap counters, compression, ...).
    fn stats(&self) -> serde_json::Value;
}

/// Plain private anonymous memory (the kernel pages it; a memory cgroup may limit it).
pub struct PlainMem;

struct PlainMapping {
    ptr: *mut u8,
    len: usize,
}

impl Mapping for PlainMapping {
    fn as_mut_ptr(&mut self) -> *mut u8 {
        self.ptr
    }
    fn len(&self) -> usize {
        self.len
    }
}

impl Drop for PlainMapping {
    fn drop(&mut self) {
        // SAFETY: `ptr`/`len` describe a mapping this object created with mmap and nothing
        // else unmaps; no reference into it outlives the workload, which ended before drop.
        let _ = unsafe { rustix::mm::munmap(self.ptr.cast(), self.len) };
    }
}

impl Backing for PlainMem {
    fn describe(&self) -> String {
        "plain anonymous memory".into()
    }
    fn map(&self, len: usize) -> Result<Box<dyn Mapping>, String> {
        use rustix::mm::{MapFlags, ProtFlags};
        // SAFETY: a fresh anonymous private mapping at an address the kernel chooses; it
        // aliases nothing and is owned by the returned PlainMapping, which unmaps it on drop.
        let ptr = unsafe {
            rustix::mm::mmap_anonymous(
                std::ptr::null_mut(),
                len,
                ProtFlags::READ | ProtFlags::WRITE,
                MapFlags::PRIVATE | MapFlags::NORESERVE,
            )
        }
        .map_err(|e| format!("mmap of {} failed: {e}", fmt_size(len as u64)))?;
        Ok(Box::new(PlainMapping { ptr: ptr.cast(), len }))
    }
    fn stats(&self) -> serde_json::Value {
        serde_json::json!({})
    }
}

/// The uswap pager as a backing: regions under `limit` bytes with `folio`-sized folios and
/// the given tiers (`default` = the pager's default).
pub fn uswap(limit: u64, folio: u64, tiers: &str) -> Result<Box<dyn Backing>, String> {
    // The pager (branch `pager`) is not merged yet: stand in with plain memory so the rest of
    // the harness runs; the description says so in every report.
    let _ = (limit, folio, tiers);
    Ok(Box::new(Unpaged))
}

/// Stand-in until the pager lands: plain memory, labelled as such.
struct Unpaged;

impl Backing for Unpaged {
    fn describe(&self) -> String {
        "PLAIN MEMORY STAND-IN (uswap pager not available in this build)".into()
    }
    fn map(&self, len: usize) -> Result<Box<dyn Mapping>, String> {
        PlainMem.map(len)
    }
    fn stats(&self) -> serde_json::Value {
        serde_json::json!({})
    }
}
