//! Reading back the statistics records the preload library writes into a tree directory
//! (`<pid>.json` snapshots and `<pid>.final.json` at exit, `uswap_pager::record`):
//! [`read_procs`]; and [`u`], the one reading of a counter from a document of the printed
//! schema (`docs/stats.md`).
//!
//! Locking: none (every reader works on its own copy).

use serde_json::Value;
use std::path::Path;
use uswap_pager::record::ProcRecord;

/// The unsigned counter at JSON pointer `p` in `v`, a document of the printed schema (a
/// section it does not have reads as 0).
pub fn u(v: &Value, p: &str) -> u64 {
    v.pointer(p).and_then(Value::as_u64).unwrap_or(0)
}

/// The per-process statistics in a tree directory, one per pid: its final file if it wrote
/// one, else its last snapshot.
pub(crate) fn read_procs(dir: &Path) -> Vec<ProcRecord> {
    let mut by_pid: std::collections::BTreeMap<u64, ProcRecord> = std::collections::BTreeMap::new();
    let Ok(rd) = std::fs::read_dir(dir) else { return Vec::new() };
    for e in rd.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(stem) = name.strip_suffix(".json") else { continue };
        let (pid, is_final) = match stem.strip_suffix(".final") {
            Some(p) => (p, true),
            None => (stem, false),
        };
        let Ok(pid) = pid.parse::<u64>() else { continue };
        let Some(v) = std::fs::read(e.path()).ok().and_then(|b| serde_json::from_slice::<ProcRecord>(&b).ok()) else {
            continue;
        };
        if is_final || !by_pid.contains_key(&pid) {
            by_pid.insert(pid, v);
        }
    }
    by_pid.into_values().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn final_files_win_over_snapshots_and_bad_files_are_skipped() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("10.json"), r#"{"pid":10,"final":false,"written_unix_ms":1}"#).unwrap();
        std::fs::write(d.path().join("10.final.json"), r#"{"pid":10,"final":true,"written_unix_ms":2}"#).unwrap();
        std::fs::write(d.path().join("11.json"), r#"{"pid":11,"final":false}"#).unwrap();
        std::fs::write(d.path().join("12.json"), "{half a fi").unwrap();
        std::fs::write(d.path().join("run.json"), "{}").unwrap();
        let v = read_procs(d.path());
        assert_eq!(v.len(), 2, "{v:?}");
        assert!(v[0].is_final);
        assert_eq!(v[0].written_unix_ms, 2);
        assert_eq!(v[1].pid, 11);
    }
}
