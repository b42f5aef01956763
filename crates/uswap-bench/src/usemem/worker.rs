//! One measured run in a child process (`uswap bench usemem --worker KIND ...`, hidden): the
//! child joins a cgroup and pins itself if asked, maps its region (uswap pager or plain
//! memory), runs the workload and reports on stdout, one line per message:
//! `progress N`, then `result {json}` (or `error MSG`). It then waits for stdin to close so the
//! parent can sample kernel statistics (zram mm_stat, memcg) while the region is still alive.
//! The parent side (`spawn`) turns those lines into progress-bar steps and a [`Report`].
//! No shared state besides the pipe; the signal handler may SIGKILL the child at any time.

use super::mem::Backing;
use super::workload::{self, WorkloadCfg, WorkloadResult};
use serde::{Deserialize, Serialize};
use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};

/// What a worker reports.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Report {
    /// The backing, for people.
    pub backing: String,
    /// The CPU the worker pinned itself to.
    pub pinned_cpu: Option<usize>,
    /// The workload's measurements.
    pub workload: WorkloadResult,
    /// The backing's statistics (uswap pager stats; empty for plain memory).
    pub stats: serde_json::Value,
    /// Statistics the parent sampled from the kernel before the worker exited.
    #[serde(default)]
    pub kernel: serde_json::Value,
}

/// Where to run the worker.
pub struct Placement<'a> {
    /// Pin to this CPU.
    pub pin: Option<usize>,
    /// Join this cgroup (absolute path of its `cgroup.procs`).
    pub cgroup_procs: Option<&'a Path>,
}

/// Pin the calling thread (and threads it creates later) to `cpu`.
pub fn pin_to(cpu: usize) -> Result<(), String> {
    let mut set = rustix::thread::CpuSet::new();
    set.set(cpu);
    rustix::thread::sched_setaffinity(None, &set).map_err(|e| format!("sched_setaffinity(cpu {cpu}): {e}"))
}

/// The child's side: join, pin, map, run, report, wait for stdin to close.
pub fn child_main(
    size: usize,
    cfg: &WorkloadCfg,
    place: &Placement<'_>,
    make_backing: impl FnOnce() -> Result<Box<dyn Backing>, String>,
) -> Result<(), String> {
    if let Some(p) = place.cgroup_procs {
        std::fs::write(p, std::process::id().to_string())
            .map_err(|e| format!("joining cgroup {}: {e}", p.display()))?;
    }
    if let Some(cpu) = place.pin {
        pin_to(cpu)?;
    }
    let backing = make_backing()?;
    let mut region = backing.map(size)?;
    let out = std::io::stdout();
    let mut progress = |n: u64| {
        let mut o = out.lock();
        let _ = writeln!(o, "progress {n}");
        let _ = o.flush();
    };
    let (ptr, len) = (region.as_mut_ptr(), region.len());
    // SAFETY: the mapping is page-aligned, `len` bytes long and owned by `region`, which lives
    // until the end of this function; nothing else touches it during the run.
    let res = unsafe { workload::run(ptr, len, cfg, &mut progress) }.map_err(|e| e.to_string())?;
    let rep = Report {
        backing: backing.describe(),
        pinned_cpu: place.pin,
        workload: res,
        stats: serde_json::to_value(backing.stats()).unwrap_or_default(),
        kernel: serde_json::Value::Null,
    };
    let line = serde_json::to_string(&rep).map_err(|e| e.to_string())?;
    {
        let mut o = out.lock();
        writeln!(o, "result {line}").and_then(|_| o.flush()).map_err(|e| e.to_string())?;
    }
    // Keep the region alive until the parent has sampled the kernel's counters, then tear it
    // down normally.
    let mut sink = Vec::new();
    let _ = std::io::stdin().read_to_end(&mut sink);
    drop(region);
    drop(backing);
    Ok(())
}

/// The parent's side: run `uswap bench usemem --worker ...` with `args`, feed `progress`,
/// call `sample` once the result is in (the child still holds its memory), and return the
/// report with `sample`'s value in `kernel`.
pub fn spawn(
    args: &[String],
    progress: &mut dyn FnMut(u64),
    sample: &mut dyn FnMut() -> serde_json::Value,
) -> Result<Report, String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find my own executable: {e}"))?;
    let mut child = Command::new(exe)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| format!("spawning the worker: {e}"))?;
    crate::kernel::set_child(child.id() as i32);
    struct Reap(std::process::Child);
    impl Drop for Reap {
        fn drop(&mut self) {
            crate::kernel::set_child(0);
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let stdin = child.stdin.take();
    let stdout = child.stdout.take().ok_or("worker has no stdout")?;
    let mut reap = Reap(child);
    let mut report: Option<Report> = None;
    let mut error: Option<String> = None;
    let mut stdin = stdin;
    for line in BufReader::new(stdout).lines() {
        let Ok(line) = line else { break };
        if let Some(n) = line.strip_prefix("progress ") {
            progress(n.trim().parse().unwrap_or(0));
        } else if let Some(j) = line.strip_prefix("result ") {
            let mut r: Report = serde_json::from_str(j).map_err(|e| format!("bad worker report: {e}"))?;
            r.kernel = sample();
            report = Some(r);
            stdin = None; // closing stdin lets the worker exit
        } else if let Some(m) = line.strip_prefix("error ") {
            error = Some(m.to_string());
        }
    }
    drop(stdin);
    let status = reap.0.wait().map_err(|e| e.to_string())?;
    if crate::kernel::interrupted() {
        return Err("interrupted".into());
    }
    if let Some(e) = error {
        return Err(e);
    }
    match report {
        Some(r) if status.success() => Ok(r),
        _ => {
            use std::os::unix::process::ExitStatusExt;
            Err(match status.signal() {
                Some(9) => "worker was killed by SIGKILL (out of memory in its cgroup?)".to_string(),
                Some(s) => format!("worker died from signal {s}"),
                None => format!("worker failed ({status})"),
            })
        }
    }
}
