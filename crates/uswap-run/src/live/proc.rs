//! What `/proc` says about one process: whether it runs ([`alive`]), which process a pid names
//! ([`start_ticks`], which tells a reused pid from the process that had it), and whether it
//! belongs to a given tree ([`of_tree`], by the `USWAP_STATS_DIR` in its environment).
//!
//! Locking: none (each call reads its own `/proc` files).

use std::path::Path;

/// A process's start time in clock ticks since boot (`/proc/PID/stat` field 22): with the pid,
/// it names a process even after its pid is reused.
pub(crate) fn start_ticks(pid: i32) -> Option<u64> {
    u32::try_from(pid).ok().and_then(uswap::tier::holds::start_time)
}

/// `/proc/PID/stat` from its third field (the state) on: the command name before it may hold
/// spaces and parentheses, so fields count from the last ')'.
fn stat_fields(pid: i64) -> Option<String> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    Some(s[s.rfind(')')? + 2..].to_string())
}

/// Is the process `pid` alive (and not a zombie)?
pub(super) fn alive(pid: u64) -> bool {
    stat_fields(pid as i64).and_then(|f| f.chars().next()).is_some_and(|c| c != 'Z' && c != 'X')
}

/// Whether the live process `pid` belongs to the tree whose directory is `dir` (canonical): its
/// environment names that directory in `USWAP_STATS_DIR`. Asked of the processes of a stale
/// tree, whose pids may have been reused since its runner last looked.
pub(super) fn of_tree(pid: u64, dir: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let Ok(env) = std::fs::read(format!("/proc/{pid}/environ")) else { return false };
    env.split(|&b| b == 0)
        .filter_map(|v| v.strip_prefix(uswap_pager::launch::STATS_DIR.name.to_bytes())?.strip_prefix(b"="))
        .any(|v| std::fs::canonicalize(std::ffi::OsStr::from_bytes(v)).is_ok_and(|d| d == dir))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn start_ticks_name_this_process() {
        let me = std::process::id() as i32;
        assert!(start_ticks(me).is_some());
        assert_eq!(start_ticks(me), start_ticks(me));
        assert_eq!(start_ticks(i32::MAX), None);
    }
}
