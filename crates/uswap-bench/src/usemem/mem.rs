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
    fn stats(&self) -> uswap_pager::PagerStats;
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
    fn stats(&self) -> uswap_pager::PagerStats {
        uswap_pager::PagerStats::default()
    }
}

/// The uswap pager as a backing: regions under `limit` bytes with `folio`-sized folios and
/// the given tiers (`default` = the pager's default); `keep_clean` as in `PagerConfig`.
pub fn uswap(limit: u64, folio: u64, tiers: &str, keep_clean: bool) -> Result<Box<dyn Backing>, String> {
    let mut cfg =
        uswap_pager::PagerConfig { limit_bytes: limit, folio_size: folio as usize, keep_clean, ..Default::default() };
    if tiers != "default" {
        cfg.tiers = tiers.to_string();
    }
    let desc = format!("uswap pager, limit {}, folio {}, tiers {}", fmt_size(limit), fmt_size(folio), cfg.tiers);
    let pager = uswap_pager::Pager::new(cfg).map_err(|e| format!("uswap pager: {e}"))?;
    Ok(Box::new(UswapMem { pager, desc }))
}

/// Regions of a uswap pager.
struct UswapMem {
    pager: std::sync::Arc<uswap_pager::Pager>,
    desc: String,
}

struct UswapMapping(uswap_pager::Region);

impl Mapping for UswapMapping {
    fn as_mut_ptr(&mut self) -> *mut u8 {
        self.0.as_ptr()
    }
    fn len(&self) -> usize {
        self.0.len()
    }
}

impl Backing for UswapMem {
    fn describe(&self) -> String {
        self.desc.clone()
    }
    fn map(&self, len: usize) -> Result<Box<dyn Mapping>, String> {
        let r = self.pager.map(len).map_err(|e| format!("uswap pager: map {}: {e}", fmt_size(len as u64)))?;
        Ok(Box::new(UswapMapping(r)))
    }
    fn stats(&self) -> uswap_pager::PagerStats {
        uswap_pager::PagerStats { charged_bytes: self.pager.charged_bytes(), ..self.pager.stats() }
    }
}
