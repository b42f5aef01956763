//! The per-process statistics record: what the preload library writes for each process under
//! `uswap run` (`<pid>.json` snapshots and `<pid>.final.json` at exit, in `USWAP_STATS_DIR`)
//! and what the runner, `uswap status` and `uswap top` read back. One type on both sides, so
//! that a key renamed by the writer fails to build the reader instead of reading as zero.
//! `docs/stats.md` ("Process record files") lists its keys; a test of the CLI checks that
//! list against this type.
//!
//! Every struct is `#[serde(default)]`: a record written by a library of another version, or a
//! section a process did not write (a dormant process has no `pager`), reads as zeros, false
//! and `None`.
//!
//! Locking: none (plain data, built and read by one thread).

use crate::stats::PagerStats;
use crate::tree::TreeShare;

/// One process's statistics record.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct ProcRecord {
    /// The process.
    pub pid: i32,
    /// Its parent.
    pub ppid: i32,
    /// Its command line.
    pub argv: Vec<String>,
    /// Its peak resident set (`VmHWM`).
    pub vm_hwm_bytes: u64,
    /// Its resident set when the record was written (`VmRSS`).
    pub vm_rss_bytes: u64,
    /// Written by `exit(3)` (true), or a snapshot (false: the last one stands when the process
    /// ends another way).
    #[serde(rename = "final")]
    pub is_final: bool,
    /// When the record was written, milliseconds since the Unix epoch.
    pub written_unix_ms: u64,
    /// The limit the process was started with.
    pub limit_bytes: u64,
    /// Its resident set when the pager had started (binary, libraries, the library's tables).
    pub rss_at_start_bytes: u64,
    /// What the limit does not cover: `rss_at_start_bytes` + `internal_heap_growth_bytes` +
    /// `engine_meta_peak_bytes` + `file_rss_growth_bytes`.
    pub fixed_overhead_bytes: u64,
    /// The largest part of the engine's page heap that was not the compressed pool.
    pub engine_meta_peak_bytes: u64,
    /// The largest growth of file-backed resident pages since the start.
    pub file_rss_growth_bytes: u64,
    /// The largest growth of shared-memory resident pages since the start (not swappable).
    pub shmem_rss_growth_bytes: u64,
    /// The library's own heap, mapped.
    pub internal_heap_bytes: u64,
    /// What that heap grew by since the pager started.
    pub internal_heap_growth_bytes: u64,
    /// Mappings put under the pager when the program made them.
    pub adopt_calls: u64,
    /// Bytes of those mappings.
    pub adopt_bytes: u64,
    /// Adoptions that failed.
    pub adopt_errors: u64,
    /// Adoptions put off (the scanner adopts what is left).
    pub adopt_deferred: u64,
    /// Anonymous mappings too small to adopt when they were made.
    pub mmap_small: u64,
    /// `PROT_NONE` reservations remembered.
    pub reservations: u64,
    /// `fork`s the process made.
    pub forks: u64,
    /// Of those, children that shared the swap file.
    pub forks_file_shared: u64,
    /// Of those, children that got a copy of it.
    pub forks_file_copied: u64,
    /// The process never grew to its start threshold and ran with no pager (then `pager`,
    /// `unmanaged`, `thrash`, `tree` and `said` are absent).
    pub dormant: bool,
    /// A dormant process's start threshold.
    pub start_bytes: u64,
    /// The most anonymous memory a dormant process was seen with.
    pub anon_peak_bytes: u64,
    /// Anonymous memory the pager does not manage, as the library's scanner measured it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unmanaged: Option<Unmanaged>,
    /// The thrashing check.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub thrash: Option<Thrash>,
    /// The tree's shared limit as the process last saw it (None outside a tree).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tree: Option<TreeShare>,
    /// What the library said on stderr about the limit.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub said: Option<Said>,
    /// The pager's statistics.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pager: Option<PagerStats>,
}

impl Default for ProcRecord {
    fn default() -> Self {
        ProcRecord {
            pid: 0,
            ppid: 0,
            argv: Vec::new(),
            vm_hwm_bytes: 0,
            vm_rss_bytes: 0,
            // A record without the key predates snapshots: only final records were written.
            is_final: true,
            written_unix_ms: 0,
            limit_bytes: 0,
            rss_at_start_bytes: 0,
            fixed_overhead_bytes: 0,
            engine_meta_peak_bytes: 0,
            file_rss_growth_bytes: 0,
            shmem_rss_growth_bytes: 0,
            internal_heap_bytes: 0,
            internal_heap_growth_bytes: 0,
            adopt_calls: 0,
            adopt_bytes: 0,
            adopt_errors: 0,
            adopt_deferred: 0,
            mmap_small: 0,
            reservations: 0,
            forks: 0,
            forks_file_shared: 0,
            forks_file_copied: 0,
            dormant: false,
            start_bytes: 0,
            anon_peak_bytes: 0,
            unmanaged: None,
            thrash: None,
            tree: None,
            said: None,
            pager: None,
        }
    }
}

/// Anonymous memory the pager does not manage (`preload/scan` in the library).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct Unmanaged {
    /// Unmanaged anonymous memory at the last scan.
    pub anon_bytes_now: u64,
    /// Its peak.
    pub anon_bytes_peak: u64,
    /// Anonymous resident memory when the pager had started.
    pub anon_at_start_bytes: u64,
    /// Thread stacks.
    pub thread_stack_bytes: u64,
    /// Mappings too small or executable, left alone.
    pub small_or_exec_bytes: u64,
    /// Scan passes.
    pub scan_passes: u64,
    /// Passes a program thread ran itself for a new large block its allocator returned.
    pub scan_sync_passes: u64,
    /// Mappings found merged out of program memory and one of the pager's own (adopted around
    /// it).
    pub scan_merged_with_own: u64,
    /// Passes that adopted nothing because the pager was making mappings of its own while the
    /// maps were read.
    pub scan_unstable_passes: u64,
    /// Bytes the scanner adopted.
    pub scan_adopted_bytes: u64,
    /// The dynamic loader's start-up data (never adopted).
    pub loader_bytes: u64,
    /// Own-mapping records that did not fit the table (`crate::own`).
    pub own_overflow: u64,
    /// The most own-mapping records held at once.
    pub own_entries_high: u64,
    /// Adoptions put off to the next pass because the pager's own mappings were in flight.
    pub scan_busy_retries: u64,
    /// A warning about unmanaged memory was printed.
    pub warned: bool,
}

/// The thrashing check (`preload/thrash` in the library).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct Thrash {
    /// A warning was printed.
    pub warned: bool,
    /// The most swap-ins in one window.
    pub peak_window_swapins: u64,
    /// The window, seconds.
    pub window_s: u64,
}

/// What the library said on stderr about the limit not holding (`preload/failures`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct Said {
    /// A tier's stores failed.
    pub tier_failures: bool,
    /// Pages no tier took.
    pub rejected: bool,
    /// The limit was broken (faults mapped over it while the store failed).
    pub limit_broken: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_reads_back_as_written_and_missing_keys_read_as_defaults() {
        let mut r = ProcRecord { pid: 7, argv: vec!["a".into()], is_final: false, ..Default::default() };
        r.pager = Some(PagerStats { faults: 3, ..Default::default() });
        r.said = Some(Said { rejected: true, ..Default::default() });
        let text = serde_json::to_string(&r).unwrap();
        assert!(text.contains("\"final\":false"), "{text}");
        assert_eq!(serde_json::from_str::<ProcRecord>(&text).unwrap(), r);
        let old: ProcRecord = serde_json::from_str(r#"{"pid": 9, "pager": {"faults": 1}, "unknown": 5}"#).unwrap();
        assert_eq!((old.pid, old.is_final, old.pager.unwrap().faults, old.tree), (9, true, 1, None));
    }
}
