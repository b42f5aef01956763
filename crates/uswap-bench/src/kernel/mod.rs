//! The kernel side of the side-by-side benchmarks: set up kernel swap (zram with lz4, zswap in
//! front of a swap file) and a memory cgroup, run a child inside it, and put the machine back
//! exactly as it was afterwards — also on error, panic and Ctrl-C.
//!
//! Every change goes through a [`SysOps`] rooted at a directory (`/` for real; a temp dir in
//! tests, so the whole setup/restore logic runs without root) and is recorded in a
//! [`restore::Restore`] guard whose `Drop` undoes it in reverse order. Signals (SIGINT,
//! SIGTERM, SIGHUP) only set a flag and SIGKILL the current child; the main thread notices the
//! flag, returns an error, and the guards unwind. Locking: single-threaded by design; the only
//! shared state is two atomics touched by the signal handler.

#[cfg(test)]
pub mod fake;
pub mod restore;
pub mod setup;

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};

/// The operations that change the machine, rooted at a directory.
pub trait SysOps {
    /// Root that the relative paths below are joined to (`/` for the real machine).
    fn root(&self) -> &Path;
    /// `swapon(path)` with priority `prio` (higher is used first).
    fn swapon(&self, rel: &Path, prio: i32) -> io::Result<()>;
    /// `swapoff(path)`.
    fn swapoff(&self, rel: &Path) -> io::Result<()>;
    /// Create a cgroup directory (the kernel fills in its control files).
    fn mkdir_cgroup(&self, rel: &Path) -> io::Result<()>;
    /// Remove an (empty) cgroup directory.
    fn rmdir_cgroup(&self, rel: &Path) -> io::Result<()>;

    /// Absolute path of `rel`.
    fn path(&self, rel: &Path) -> PathBuf {
        self.root().join(rel)
    }
    /// Read a (sysfs/procfs) file, trimmed.
    fn read(&self, rel: &Path) -> io::Result<String> {
        std::fs::read_to_string(self.path(rel)).map(|s| s.trim().to_string())
    }
    /// Write a (sysfs) file in one write.
    fn write(&self, rel: &Path, value: &str) -> io::Result<()> {
        std::fs::write(self.path(rel), value)
    }
    /// Does `rel` exist?
    fn exists(&self, rel: &Path) -> bool {
        self.path(rel).exists()
    }
}

/// The real machine.
pub struct RealOps {
    root: PathBuf,
}

impl Default for RealOps {
    fn default() -> Self {
        RealOps { root: PathBuf::from("/") }
    }
}

fn cstr(p: &Path) -> io::Result<std::ffi::CString> {
    use std::os::unix::ffi::OsStrExt;
    std::ffi::CString::new(p.as_os_str().as_bytes()).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))
}

impl SysOps for RealOps {
    fn root(&self) -> &Path {
        &self.root
    }
    fn swapon(&self, rel: &Path, prio: i32) -> io::Result<()> {
        const SWAP_FLAG_PREFER: libc::c_int = 0x8000;
        const SWAP_FLAG_PRIO_MASK: libc::c_int = 0x7fff;
        let c = cstr(&self.path(rel))?;
        // SAFETY: `c` is a valid NUL-terminated path that outlives the call.
        let r = unsafe { libc::swapon(c.as_ptr(), SWAP_FLAG_PREFER | (prio & SWAP_FLAG_PRIO_MASK)) };
        if r == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    }
    fn swapoff(&self, rel: &Path) -> io::Result<()> {
        let c = cstr(&self.path(rel))?;
        // SAFETY: `c` is a valid NUL-terminated path that outlives the call.
        let r = unsafe { libc::swapoff(c.as_ptr()) };
        if r == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    }
    fn mkdir_cgroup(&self, rel: &Path) -> io::Result<()> {
        std::fs::create_dir(self.path(rel))
    }
    fn rmdir_cgroup(&self, rel: &Path) -> io::Result<()> {
        // A child that just exited may keep the cgroup busy for a moment.
        let mut last = None;
        for _ in 0..50 {
            match std::fs::remove_dir(self.path(rel)) {
                Ok(()) => return Ok(()),
                Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {
                    last = Some(e);
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
                Err(e) => return Err(e),
            }
        }
        Err(last.unwrap_or_else(|| io::Error::from(io::ErrorKind::Other)))
    }
}

static INTERRUPTED: AtomicBool = AtomicBool::new(false);
static CHILD: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_signal(_sig: libc::c_int) {
    INTERRUPTED.store(true, Ordering::SeqCst);
    let pid = CHILD.load(Ordering::SeqCst);
    if pid != 0 {
        // SAFETY: kill(2) is async-signal-safe; `pid` is our own child, or minus the process
        // group of children we started (0 is skipped).
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
}

/// Route SIGINT, SIGTERM and SIGHUP to a handler that records the interruption and kills
/// the current child, so the main thread can restore the machine and exit.
pub fn install_signal_handlers() {
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: a zeroed sigaction is a valid starting value; the handler only touches
        // atomics and calls kill(2), both async-signal-safe; `sa` outlives the call.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_signal as *const () as usize;
            libc::sigemptyset(&mut sa.sa_mask);
            sa.sa_flags = libc::SA_RESTART;
            libc::sigaction(sig, &sa, std::ptr::null_mut());
        }
    }
}

/// Was a terminating signal received?
pub fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::SeqCst)
}

/// Set (pid > 0: a child; pid < 0: the process group -pid) or clear (0) what the signal
/// handler kills.
pub fn set_child(pid: i32) {
    CHILD.store(pid, Ordering::SeqCst);
}

/// Is the process running as root (needed for zram, cgroups, swapon)?
pub fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// Counters from `/proc/vmstat` that tell how much kernel swapping a run did.
pub fn vmstat(ops: &dyn SysOps) -> std::collections::BTreeMap<String, u64> {
    let keys = ["pswpin", "pswpout", "zswpin", "zswpout", "zswpwb", "pgmajfault", "thp_swpout", "thp_swpout_fallback"];
    let mut m = std::collections::BTreeMap::new();
    if let Ok(s) = ops.read(Path::new("proc/vmstat")) {
        for line in s.lines() {
            let mut it = line.split_whitespace();
            if let (Some(k), Some(v)) = (it.next(), it.next()) {
                if keys.contains(&k) {
                    m.insert(k.to_string(), v.parse().unwrap_or(0));
                }
            }
        }
    }
    m
}

/// `after - before` for every key of `after`.
pub fn delta(
    before: &std::collections::BTreeMap<String, u64>,
    after: &std::collections::BTreeMap<String, u64>,
) -> serde_json::Value {
    let m: serde_json::Map<String, serde_json::Value> = after
        .iter()
        .map(|(k, v)| (k.clone(), serde_json::json!(v.saturating_sub(*before.get(k).unwrap_or(&0)))))
        .collect();
    serde_json::Value::Object(m)
}

pub use uswap_run::procsum::kb_field;

/// This machine's description for [`uswap_run::report::with_header`], taken before a benchmark
/// changes anything.
pub fn machine() -> serde_json::Value {
    machine_facts(&RealOps::default())
}

/// Facts about the machine that explain the figures.
pub fn machine_facts(ops: &dyn SysOps) -> serde_json::Value {
    let read = |p: &str| ops.read(Path::new(p)).ok();
    let model = read("proc/cpuinfo").and_then(|s| {
        s.lines().find(|l| l.starts_with("model name")).map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string())
    });
    let mem_total_kb = read("proc/meminfo").and_then(|s| kb_field(&s, "MemTotal:"));
    let cgroup = if ops.exists(Path::new("sys/fs/cgroup/cgroup.controllers")) {
        "v2"
    } else if ops.exists(Path::new("sys/fs/cgroup/memory/memory.limit_in_bytes")) {
        "v1"
    } else {
        "none"
    };
    let other_swaps: Vec<String> = read("proc/swaps")
        .map(|s| s.lines().skip(1).filter_map(|l| l.split_whitespace().next().map(String::from)).collect())
        .unwrap_or_default();
    serde_json::json!({
        "cpus": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
        "cpu_model": model,
        "kernel": read("proc/sys/kernel/osrelease"),
        "mem_total_mib": mem_total_kb.map(|k| k / 1024),
        "cgroup": cgroup,
        "thp": read("sys/kernel/mm/transparent_hugepage/enabled"),
        "clocksource": read("sys/devices/system/clocksource/clocksource0/current_clocksource"),
        "swappiness": read("proc/sys/vm/swappiness"),
        "page_cluster": read("proc/sys/vm/page-cluster"),
        "swaps_active_before": other_swaps,
        "root": is_root(),
    })
}
