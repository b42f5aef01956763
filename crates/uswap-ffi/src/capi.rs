//! The C ABI: a region API mirroring `uswap_pager::{Pager, Region}`.
//!
//! Conventions: functions returning a pointer return NULL on error; functions returning `int`
//! return `USWAP_OK` (0) or a negative [`UswapStatus`]; in both cases `uswap_last_error()` then
//! describes the error (per thread). Every entry point catches panics (reported as
//! `USWAP_ERR_PANIC`), so no unwind crosses into C. Regions hold a reference on their pager:
//! `uswap_pager_free` may be called before the regions are unmapped.
//!
//! Fork: regions created here are re-registered in fork children (see [`crate::fork`]).
//!
//! Locking: region creation and removal run under [`crate::BIG`]; access to region memory takes
//! no lock.

use crate::fork;
use crate::reentry::internal;
use crate::BIG;
use std::cell::RefCell;
use std::ffi::{c_char, c_void, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use uswap_pager::{Pager, PagerConfig, PagerError, Region};

/// Status codes.
#[repr(C)]
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum UswapStatus {
    /// Success.
    UswapOk = 0,
    /// Bad argument or configuration.
    UswapErrInvalid = -1,
    /// userfaultfd is not available or not permitted (the message says how to permit it).
    UswapErrUnavailable = -2,
    /// A system call failed.
    UswapErrOs = -3,
    /// A bug inside uswap (a caught panic).
    UswapErrPanic = -4,
    /// The output buffer is too small.
    UswapErrRange = -5,
}

/// Pager configuration. Initialise with `uswap_config_default`, then change fields.
#[repr(C)]
#[derive(Copy, Clone, Debug)]
pub struct UswapConfig {
    /// Resident limit in bytes (resident pages + swap cache + compressed pool).
    pub limit_bytes: u64,
    /// Folio size: 4096, 65536 or 2097152.
    pub folio_size: u64,
    /// Tiers, e.g. "zero,lz4" or "zero,lz4,file:/var/tmp"; NULL = "zero,lz4".
    pub tiers: *const c_char,
    /// Non-zero: record fault latencies (p50/p99 in the statistics).
    pub record_latency: u32,
}

/// Counters of a pager (a subset of `uswap_stats_json`).
#[repr(C)]
#[derive(Copy, Clone, Debug, Default)]
pub struct UswapStats {
    /// Page faults served.
    pub faults: u64,
    /// Faults that swapped data in.
    pub faults_swapin: u64,
    /// Pages evicted (swapped out).
    pub evicted_pages: u64,
    /// Pages swapped in.
    pub swapped_in_pages: u64,
    /// Bytes of resident pages.
    pub resident_bytes: u64,
    /// Bytes of the uncompressed swap cache.
    pub cache_bytes: u64,
    /// Bytes of the compressed pool.
    pub pool_bytes: u64,
    /// Bytes charged against the limit.
    pub charged_bytes: u64,
    /// The limit.
    pub limit_bytes: u64,
}

/// A pager (opaque).
pub struct UswapPager {
    pager: Arc<Pager>,
    idx: usize,
}

/// A region (opaque).
pub struct UswapRegion {
    region: Option<Region>,
    start: usize,
    /// The pager's reference and fork-table index: whoever drops the last reference untracks it.
    owner: UswapPager,
}

impl UswapPager {
    /// Drop this reference; the last one also removes the pager from the fork table.
    ///
    /// # Safety
    /// - The caller holds `BIG`.
    unsafe fn release(self) {
        if Arc::strong_count(&self.pager) == 1 {
            // SAFETY: BIG held (caller); no other reference is left, so no region either.
            unsafe { fork::untrack_pager(self.idx) };
        }
    }
}

thread_local! {
    static LAST: RefCell<CString> = RefCell::new(CString::default());
    static LAST_STATUS: std::cell::Cell<i32> = const { std::cell::Cell::new(0) };
}

/// Record this thread's last error: its status and message.
fn set_status(st: UswapStatus, msg: &str) {
    let c = CString::new(msg.replace('\0', " ")).unwrap_or_default();
    LAST.with(|l| *l.borrow_mut() = c);
    LAST_STATUS.with(|l| l.set(st as i32));
}

/// Record a bad-argument error.
fn set_err(msg: &str) {
    set_status(UswapStatus::UswapErrInvalid, msg);
}

fn status_of(e: &PagerError) -> UswapStatus {
    match e {
        PagerError::Unavailable(_) => UswapStatus::UswapErrUnavailable,
        PagerError::Config(_) => UswapStatus::UswapErrInvalid,
        PagerError::Os(_) | PagerError::Busy(_) => UswapStatus::UswapErrOs,
    }
}

fn guard<R>(on_panic: R, f: impl FnOnce() -> R) -> R {
    match catch_unwind(AssertUnwindSafe(|| internal(f))) {
        Ok(r) => r,
        Err(_) => {
            set_status(UswapStatus::UswapErrPanic, "internal error (panic) in uswap");
            on_panic
        }
    }
}

/// The library version (static string).
#[no_mangle]
pub extern "C" fn uswap_version() -> *const c_char {
    concat!(env!("CARGO_PKG_VERSION"), "\0").as_ptr().cast()
}

/// The last error of this thread (empty string if none). Valid until the next failing call on
/// this thread.
#[no_mangle]
pub extern "C" fn uswap_last_error() -> *const c_char {
    LAST.with(|l| l.borrow().as_ptr())
}

/// The status of this thread's last error (`USWAP_OK` if none): after a function that returns
/// NULL it tells why, e.g. `USWAP_ERR_UNAVAILABLE` when this process may not use userfaultfd.
/// Valid until the next failing call on this thread.
#[no_mangle]
pub extern "C" fn uswap_last_status() -> i32 {
    LAST_STATUS.with(|l| l.get())
}

/// Fill `*cfg` with the defaults (256 MiB limit, 64 KiB folios, "zero,lz4").
///
/// # Safety
/// - `cfg` must be NULL or point to writable memory for one `UswapConfig`.
#[no_mangle]
pub unsafe extern "C" fn uswap_config_default(cfg: *mut UswapConfig) -> i32 {
    if cfg.is_null() {
        set_err("uswap_config_default: cfg is NULL");
        return UswapStatus::UswapErrInvalid as i32;
    }
    let d = PagerConfig::default();
    // SAFETY: cfg is writable (caller's contract).
    unsafe {
        cfg.write(UswapConfig {
            limit_bytes: d.limit_bytes,
            folio_size: d.folio_size as u64,
            tiers: std::ptr::null(),
            record_latency: 0,
        })
    };
    UswapStatus::UswapOk as i32
}

/// Create a pager. Returns NULL on error (`uswap_last_status()` and `uswap_last_error()` say why:
/// `USWAP_ERR_UNAVAILABLE` with the ways to permit userfaultfd when it is not permitted).
///
/// # Safety
/// - `cfg` must be NULL or point to a valid `UswapConfig` whose `tiers` is NULL or a
///   NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn uswap_pager_new(cfg: *const UswapConfig) -> *mut UswapPager {
    guard(std::ptr::null_mut(), || {
        if cfg.is_null() {
            set_err("uswap_pager_new: cfg is NULL");
            return std::ptr::null_mut();
        }
        // SAFETY: valid config (caller's contract).
        let c = unsafe { *cfg };
        let tiers = if c.tiers.is_null() {
            "zero,lz4".to_string()
        } else {
            // SAFETY: NUL-terminated (caller's contract).
            match unsafe { CStr::from_ptr(c.tiers) }.to_str() {
                Ok(s) => s.to_string(),
                Err(_) => {
                    set_err("tiers is not UTF-8");
                    return std::ptr::null_mut();
                }
            }
        };
        let Ok(folio_size) = usize::try_from(c.folio_size) else {
            set_err("folio_size out of range");
            return std::ptr::null_mut();
        };
        let pc = PagerConfig {
            limit_bytes: c.limit_bytes,
            folio_size,
            tiers,
            record_latency: c.record_latency != 0,
            ..Default::default()
        };
        BIG.lock();
        let before = fork::fd_snapshot();
        let os = |e: String| (UswapStatus::UswapErrOs, e);
        let r = Pager::new(pc.clone()).map_err(|e| (status_of(&e), e.to_string())).and_then(|p| {
            // SAFETY: BIG held.
            let idx = unsafe { fork::track_pager(&p, &before) }.map_err(os)?;
            if let Err(e) = crate::gate::install_gate() {
                // SAFETY: BIG held.
                unsafe { fork::untrack_pager(idx) };
                return Err(os(e));
            }
            Ok(UswapPager { pager: p, idx })
        });
        BIG.unlock();
        match r {
            Ok(p) => Box::into_raw(Box::new(p)),
            Err((st, e)) => {
                set_status(st, &e);
                std::ptr::null_mut()
            }
        }
    })
}

/// Release the caller's reference on a pager (its regions keep it alive). NULL is ignored.
///
/// # Safety
/// - `p` must be NULL or a pager from `uswap_pager_new` not yet freed.
#[no_mangle]
pub unsafe extern "C" fn uswap_pager_free(p: *mut UswapPager) {
    if p.is_null() {
        return;
    }
    guard((), || {
        // SAFETY: p came from Box::into_raw in uswap_pager_new (caller's contract).
        let b = *unsafe { Box::from_raw(p) };
        BIG.lock();
        // SAFETY: BIG held.
        unsafe { b.release() };
        BIG.unlock();
    })
}

/// Map a region of `len` bytes (rounded up to the folio size) under the pager's limit. NULL on
/// error.
///
/// # Safety
/// - `p` must be a live pager.
#[no_mangle]
pub unsafe extern "C" fn uswap_map(p: *mut UswapPager, len: usize) -> *mut UswapRegion {
    guard(std::ptr::null_mut(), || {
        if p.is_null() || len == 0 {
            set_err("uswap_map: NULL pager or zero length");
            return std::ptr::null_mut();
        }
        // SAFETY: live pager (caller's contract).
        let up = unsafe { &*p };
        BIG.lock();
        let r = up.pager.map(len).map_err(|e| (status_of(&e), e.to_string())).and_then(|r| {
            let start = r.as_ptr() as usize;
            // SAFETY: BIG held.
            if unsafe { fork::track_region(up.idx, start, r.len()) } {
                Ok(UswapRegion { region: Some(r), start, owner: UswapPager { pager: up.pager.clone(), idx: up.idx } })
            } else {
                Err((UswapStatus::UswapErrInvalid, "too many regions".to_string()))
            }
        });
        BIG.unlock();
        match r {
            Ok(r) => Box::into_raw(Box::new(r)),
            Err((st, e)) => {
                set_status(st, &e);
                std::ptr::null_mut()
            }
        }
    })
}

/// First byte of a region.
///
/// # Safety
/// - `r` must be a live region.
#[no_mangle]
pub unsafe extern "C" fn uswap_region_ptr(r: *const UswapRegion) -> *mut c_void {
    // SAFETY: live region (caller's contract).
    match unsafe { r.as_ref() }.and_then(|r| r.region.as_ref()) {
        Some(x) => x.as_ptr().cast(),
        None => std::ptr::null_mut(),
    }
}

/// Length of a region in bytes.
///
/// # Safety
/// - `r` must be a live region.
#[no_mangle]
pub unsafe extern "C" fn uswap_region_len(r: *const UswapRegion) -> usize {
    // SAFETY: live region (caller's contract).
    unsafe { r.as_ref() }.and_then(|r| r.region.as_ref()).map_or(0, |x| x.len())
}

/// Unmap a region and free its swap entries. NULL is ignored.
///
/// # Safety
/// - `r` must be NULL or a live region; its memory must not be used afterwards.
#[no_mangle]
pub unsafe extern "C" fn uswap_unmap(r: *mut UswapRegion) -> i32 {
    if r.is_null() {
        return UswapStatus::UswapOk as i32;
    }
    guard(UswapStatus::UswapErrPanic as i32, || {
        // SAFETY: from Box::into_raw in uswap_map (caller's contract).
        let mut b = *unsafe { Box::from_raw(r) };
        BIG.lock();
        // SAFETY: BIG held.
        unsafe { fork::untrack_region(b.start) };
        drop(b.region.take());
        // SAFETY: BIG held.
        unsafe { b.owner.release() };
        BIG.unlock();
        UswapStatus::UswapOk as i32
    })
}

/// Release `[offset, offset+len)` of a region (as `madvise(MADV_DONTNEED)`: it reads as zeros
/// afterwards and its swap entries are freed).
///
/// # Safety
/// - `r` must be a live region.
#[no_mangle]
pub unsafe extern "C" fn uswap_discard(r: *mut UswapRegion, offset: usize, len: usize) -> i32 {
    guard(UswapStatus::UswapErrPanic as i32, || {
        // SAFETY: live region (caller's contract).
        match unsafe { r.as_ref() }.and_then(|r| r.region.as_ref()) {
            Some(x) => {
                BIG.lock();
                x.discard(offset, len);
                BIG.unlock();
                UswapStatus::UswapOk as i32
            }
            None => {
                set_err("uswap_discard: NULL region");
                UswapStatus::UswapErrInvalid as i32
            }
        }
    })
}

/// Evict every resident page of a region now. Returns the pages evicted, or a negative status.
///
/// # Safety
/// - `r` must be a live region.
#[no_mangle]
pub unsafe extern "C" fn uswap_evict(r: *mut UswapRegion) -> i64 {
    guard(UswapStatus::UswapErrPanic as i64, || {
        // SAFETY: live region (caller's contract).
        match unsafe { r.as_ref() }.and_then(|r| r.region.as_ref()) {
            Some(x) => x.evict_all() as i64,
            None => {
                set_err("uswap_evict: NULL region");
                UswapStatus::UswapErrInvalid as i64
            }
        }
    })
}

/// Fill `*out` with the pager's counters.
///
/// # Safety
/// - `p` must be a live pager and `out` writable for one `UswapStats`.
#[no_mangle]
pub unsafe extern "C" fn uswap_stats(p: *const UswapPager, out: *mut UswapStats) -> i32 {
    guard(UswapStatus::UswapErrPanic as i32, || {
        if p.is_null() || out.is_null() {
            set_err("uswap_stats: NULL argument");
            return UswapStatus::UswapErrInvalid as i32;
        }
        // SAFETY: live pager (caller's contract).
        let s = unsafe { &*p }.pager.stats();
        let st = UswapStats {
            faults: s.faults,
            faults_swapin: s.fault_swapin,
            evicted_pages: s.evicted_pages,
            swapped_in_pages: s.swpin.iter().enumerate().map(|(o, n)| n << o).sum(),
            resident_bytes: s.resident_bytes,
            cache_bytes: s.cache_bytes,
            pool_bytes: s.pool_bytes,
            charged_bytes: s.charged_bytes,
            limit_bytes: s.limit_bytes,
        };
        // SAFETY: writable (caller's contract).
        unsafe { out.write(st) };
        UswapStatus::UswapOk as i32
    })
}

/// Write the pager's statistics as JSON (NUL-terminated) into `buf` of `cap` bytes. Returns the
/// JSON length without the NUL; if that is `>= cap` nothing useful was written (call again with a
/// larger buffer). Negative on error. `buf` may be NULL when `cap` is 0.
///
/// # Safety
/// - `p` must be a live pager; `buf` writable for `cap` bytes.
#[no_mangle]
pub unsafe extern "C" fn uswap_stats_json(p: *const UswapPager, buf: *mut c_char, cap: usize) -> i64 {
    guard(UswapStatus::UswapErrPanic as i64, || {
        if p.is_null() || (buf.is_null() && cap != 0) {
            set_err("uswap_stats_json: NULL argument");
            return UswapStatus::UswapErrInvalid as i64;
        }
        // SAFETY: live pager (caller's contract).
        let s = serde_json::to_string(&unsafe { &*p }.pager.stats()).unwrap_or_default();
        if s.len() < cap {
            // SAFETY: buf has cap > len bytes.
            unsafe {
                std::ptr::copy_nonoverlapping(s.as_ptr(), buf.cast(), s.len());
                *buf.add(s.len()) = 0;
            }
        } else if cap > 0 {
            // SAFETY: at least one byte.
            unsafe { *buf = 0 };
        }
        s.len() as i64
    })
}
