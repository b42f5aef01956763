//! Running one process tree of the suite with a deadline: spawn in a process group of its own,
//! reap with `wait4` (its rusage gives the tree's peak RSS: the largest of the process and the
//! descendants it waited for), and on timeout print the stacks of every thread of every process
//! in the tree (gdb, falling back to `/proc/PID/task/*/stack` and `wchan`), then SIGKILL the
//! whole tree. The Ctrl-C handler of [`crate::kernel`] kills the registered group.
//!
//! Locking: one waiter thread per process hands its `wait4` result to the caller over a
//! channel; nothing else is shared (the signal handler reads one atomic).

use std::ffi::CString;
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// How long gdb may take to attach and print one process's stacks before it is killed (a
/// debugger reading memory that a stuck pager should supply can hang too).
const GDB_TIMEOUT: Duration = Duration::from_secs(30);
/// At most this many lines of gdb output per process.
const GDB_MAX_LINES: usize = 3000;

/// How a process ended.
#[derive(Debug, Clone)]
pub struct Waited {
    /// Raw wait status (None when it timed out before ending on its own).
    pub status: Option<i32>,
    /// Peak RSS of the process and the descendants it waited for (`ru_maxrss`), bytes.
    pub peak_rss: u64,
    /// Wall time from spawn to exit (or to the timeout).
    pub secs: f64,
    /// On timeout: the stacks printed before the tree was killed.
    pub stacks: Option<String>,
    /// The pid it had (0 when unknown).
    pub pid: i32,
}

impl Waited {
    /// Exit code when it exited.
    pub fn code(&self) -> Option<i32> {
        self.status.filter(|s| libc::WIFEXITED(*s)).map(|s| libc::WEXITSTATUS(s))
    }
    /// Signal that killed it.
    pub fn signal(&self) -> Option<i32> {
        self.status.filter(|s| libc::WIFSIGNALED(*s)).map(|s| libc::WTERMSIG(s))
    }
    /// Exit 0.
    pub fn success(&self) -> bool {
        self.code() == Some(0)
    }
    /// "exit N" / "killed by signal N" / "timeout".
    pub fn describe(&self) -> String {
        match (self.code(), self.signal()) {
            _ if self.stacks.is_some() => format!("timeout after {:.0} s", self.secs),
            (Some(c), _) => format!("exit status {c}"),
            (_, Some(s)) => format!("killed by signal {s}"),
            _ => "ended oddly".into(),
        }
    }
}

type WaitMsg = (i32, u64, Instant);

/// A running process tree (the process is the leader of its group, or a member of `pgid`).
pub struct Proc {
    /// Its pid.
    pub pid: i32,
    /// Its process group.
    pub pgid: i32,
    start: Instant,
    rx: Option<mpsc::Receiver<WaitMsg>>,
    done: Option<Waited>,
}

/// Make `cmd` join the memory cgroup whose `cgroup.procs` is `procs` between fork and exec, so
/// that every page the program touches is charged there (writing 0 moves the writer itself).
pub fn join_cgroup_on_exec(cmd: &mut Command, procs: &Path) -> Result<(), String> {
    let path = CString::new(procs.as_os_str().as_bytes()).map_err(|_| format!("{}: NUL in path", procs.display()))?;
    // SAFETY: the closure runs in the forked child before exec and only makes async-signal-safe
    // system calls (open, write, close) on memory allocated before the fork (`path`); building
    // the error from errno does not allocate.
    unsafe {
        cmd.pre_exec(move || {
            let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
            if fd < 0 {
                return Err(std::io::Error::last_os_error());
            }
            let r = libc::write(fd, b"0".as_ptr().cast(), 1);
            let err = std::io::Error::last_os_error();
            libc::close(fd);
            if r != 1 {
                return Err(err);
            }
            Ok(())
        });
    }
    Ok(())
}

/// Spawn `cmd` as the leader of a new process group (`pgid` None) or into group `pgid`, and
/// register the group with the Ctrl-C handler.
pub fn spawn(cmd: &mut Command, pgid: Option<i32>) -> Result<Proc, String> {
    cmd.process_group(pgid.unwrap_or(0));
    let start = Instant::now();
    // Every side starts from this process's high-water mark (see shed_before_spawn).
    uswap_run::preload::shed_before_spawn();
    let child = cmd.spawn().map_err(|e| format!("cannot start {:?}: {e}", cmd.get_program()))?;
    let pid = child.id() as i32;
    // The waiter thread reaps it; `Child` itself never waits, so dropping it is harmless.
    drop(child);
    let pgid = pgid.unwrap_or(pid);
    crate::kernel::set_child(-pgid);
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut status = 0;
        // SAFETY: a zeroed rusage is valid storage for wait4 to fill.
        let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
        loop {
            // SAFETY: waiting for our own child with valid pointers.
            let r = unsafe { libc::wait4(pid, &mut status, 0, &mut ru) };
            if r == pid {
                break;
            }
            if r < 0 && std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
                status = -1;
                break;
            }
        }
        let _ = tx.send((status, ru.ru_maxrss.max(0) as u64 * 1024, Instant::now()));
    });
    Ok(Proc { pid, pgid, start, rx: Some(rx), done: None })
}

impl Proc {
    /// A process that was already reaped: `wait` returns `w`.
    pub fn reaped(w: Waited) -> Proc {
        Proc { pid: 0, pgid: 0, start: Instant::now(), rx: None, done: Some(w) }
    }

    /// Has it ended (without reaping it)?
    pub fn try_wait(&mut self) -> Option<Waited> {
        if let Some(w) = &self.done {
            return Some(w.clone());
        }
        let rx = self.rx.as_ref()?;
        match rx.try_recv() {
            Ok((status, peak, at)) => {
                self.rx = None;
                let w = self.finish(status, peak, at, None);
                self.done = Some(w.clone());
                Some(w)
            }
            Err(_) => None,
        }
    }

    fn finish(&self, status: i32, peak: u64, at: Instant, stacks: Option<String>) -> Waited {
        Waited {
            status: (status != -1 && stacks.is_none()).then_some(status),
            peak_rss: peak,
            secs: at.duration_since(self.start).as_secs_f64(),
            stacks,
            pid: self.pid,
        }
    }

    /// Wait until it ends or until `deadline`; at the deadline print the stacks of the whole
    /// tree (through `print`), kill it, and report a timeout.
    pub fn wait(&mut self, deadline: Instant, print: &mut dyn FnMut(&str)) -> Waited {
        if let Some(w) = self.done.take() {
            return w;
        }
        let Some(rx) = self.rx.take() else {
            return Waited { status: None, peak_rss: 0, secs: 0.0, stacks: None, pid: self.pid };
        };
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok((status, peak, at)) => self.finish(status, peak, at, None),
            Err(_) => {
                let at = Instant::now();
                let secs = at.duration_since(self.start).as_secs_f64();
                let pids = tree(self.pgid, self.pid);
                print(&format!(
                    "TIMEOUT after {secs:.0} s: stacks of every thread of the {} process(es) of group {} before killing them",
                    pids.len(),
                    self.pgid
                ));
                let stacks = dump_stacks(&pids, print);
                kill_tree(self.pgid, self.pid);
                let (_, peak, _) = rx.recv().unwrap_or((-1, 0, at));
                self.finish(-1, peak, at, Some(stacks))
            }
        }
    }

    /// Kill the whole tree now and reap the process.
    pub fn kill(&mut self) {
        if let Some(rx) = self.rx.take() {
            kill_tree(self.pgid, self.pid);
            let _ = rx.recv();
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
    }
}

/// (pid, ppid, pgrp, state) of every process in /proc.
fn procs() -> Vec<(i32, i32, i32, char)> {
    let mut v = Vec::new();
    let Ok(rd) = std::fs::read_dir("/proc") else { return v };
    for e in rd.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else { continue };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { continue };
        // "pid (comm) S ppid pgrp ...": comm may contain anything, so split after the last ')'.
        let Some(rest) = stat.rfind(')').map(|i| &stat[i + 1..]) else { continue };
        let f: Vec<&str> = rest.split_whitespace().collect();
        if f.len() < 3 {
            continue;
        }
        let state = f[0].chars().next().unwrap_or('?');
        if let (Ok(ppid), Ok(pgrp)) = (f[1].parse(), f[2].parse()) {
            v.push((pid, ppid, pgrp, state));
        }
    }
    v
}

/// Every process of group `pgid` and every descendant of `root` (which may have left the group).
pub fn tree(pgid: i32, root: i32) -> Vec<i32> {
    let all = procs();
    let mut set: Vec<i32> = all.iter().filter(|p| p.2 == pgid || p.0 == root).map(|p| p.0).collect();
    loop {
        let more: Vec<i32> = all.iter().filter(|p| set.contains(&p.1) && !set.contains(&p.0)).map(|p| p.0).collect();
        if more.is_empty() {
            break;
        }
        set.extend(more);
    }
    set.sort_unstable();
    set
}

/// SIGKILL the group and every descendant of `root`, a few times (a process may fork meanwhile).
pub fn kill_tree(pgid: i32, root: i32) {
    for _ in 0..5 {
        let pids = tree(pgid, root);
        // SAFETY: kill(2) on processes of a tree we started; no memory is involved.
        unsafe {
            libc::kill(-pgid, libc::SIGKILL);
            for &p in &pids {
                libc::kill(p, libc::SIGKILL);
            }
        }
        if pids.is_empty() {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn read_trim(p: &str) -> String {
    std::fs::read_to_string(p).map(|s| s.trim().to_string()).unwrap_or_else(|e| format!("({e})"))
}

/// The kernel's view of each thread of `pid`: state, wchan and kernel stack.
fn kernel_stacks(pid: i32) -> String {
    let mut out = String::new();
    let mut tids: Vec<i32> = std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|rd| rd.flatten().filter_map(|e| e.file_name().to_str()?.parse().ok()).collect())
        .unwrap_or_default();
    tids.sort_unstable();
    for tid in tids {
        let base = format!("/proc/{pid}/task/{tid}");
        let stat = std::fs::read_to_string(format!("{base}/stat")).unwrap_or_default();
        let state = stat.rfind(')').and_then(|i| stat[i + 1..].split_whitespace().next()).unwrap_or("?").to_string();
        out += &format!(
            "  tid {tid} ({}) state {state} wchan {}\n",
            read_trim(&format!("{base}/comm")),
            read_trim(&format!("{base}/wchan"))
        );
        if let Ok(s) = std::fs::read_to_string(format!("{base}/stack")) {
            for l in s.lines() {
                out += &format!("      {l}\n");
            }
        }
    }
    out
}

/// gdb's `thread apply all bt` for `pid`, killed after [`GDB_TIMEOUT`].
fn gdb_stacks(pid: i32) -> String {
    let file = std::env::temp_dir().join(format!("uswap-gdb-{}-{pid}.txt", std::process::id()));
    let Ok(f) = std::fs::File::create(&file) else { return "  (cannot create a file for gdb's output)\n".into() };
    let Ok(f2) = f.try_clone() else { return "  (cannot duplicate a descriptor)\n".into() };
    let spawned = Command::new("gdb")
        .args(["-batch", "-nx", "-q", "-iex", "set debuginfod enabled off", "-p"])
        .arg(pid.to_string())
        .args(["-ex", "set pagination off", "-ex", "set print thread-events off", "-ex", "thread apply all bt"])
        .env_remove("LD_PRELOAD")
        .env("DEBUGINFOD_URLS", "")
        .stdin(Stdio::null())
        .stdout(Stdio::from(f))
        .stderr(Stdio::from(f2))
        .spawn();
    let mut child = match spawned {
        Ok(c) => c,
        Err(e) => {
            let _ = std::fs::remove_file(&file);
            return format!("  (gdb not available: {e}; the kernel stacks above are all there is)\n");
        }
    };
    let start = Instant::now();
    let mut note = String::new();
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if start.elapsed() > GDB_TIMEOUT => {
                let _ = child.kill();
                let _ = child.wait();
                note = format!("  (gdb did not finish in {} s: killed)\n", GDB_TIMEOUT.as_secs());
                break;
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(50)),
            Err(_) => break,
        }
    }
    let text = std::fs::read_to_string(&file).unwrap_or_default();
    let _ = std::fs::remove_file(&file);
    let mut out = String::new();
    for (i, l) in text.lines().enumerate() {
        if i == GDB_MAX_LINES {
            out += &format!("  ... ({} more lines)\n", text.lines().count() - GDB_MAX_LINES);
            break;
        }
        out += "  ";
        out += l;
        out += "\n";
    }
    out + &note
}

/// Print (and return) the stacks of every thread of every process in `pids`: the kernel's
/// view first (it cannot hang), then gdb's.
pub fn dump_stacks(pids: &[i32], print: &mut dyn FnMut(&str)) -> String {
    let mut all = String::new();
    for &pid in pids {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let state = stat.rfind(')').and_then(|i| stat[i + 1..].split_whitespace().next()).unwrap_or("?").to_string();
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline"))
            .map(|b| {
                b.split(|c| *c == 0).map(|a| String::from_utf8_lossy(a).into_owned()).collect::<Vec<_>>().join(" ")
            })
            .unwrap_or_default();
        let mut s =
            format!("=== pid {pid} ({}) state {state}: {}\n", read_trim(&format!("/proc/{pid}/comm")), cmdline.trim());
        s += "kernel stacks (/proc/PID/task/*/{wchan,stack}):\n";
        s += &kernel_stacks(pid);
        if state != "Z" {
            s += "gdb thread apply all bt:\n";
            s += &gdb_stacks(pid);
        }
        print(&s);
        all += &s;
    }
    if pids.is_empty() {
        let s = "(no process left in the tree)\n".to_string();
        print(&s);
        all += &s;
    }
    let _ = std::io::stderr().flush();
    all
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeout_dumps_stacks_and_kills_the_tree() {
        let mut cmd = Command::new("sh");
        // A shell with a child that would outlive it.
        cmd.args(["-c", "sleep 600 & sleep 600; wait"]).stdout(Stdio::null()).stderr(Stdio::null());
        let mut p = spawn(&mut cmd, None).unwrap();
        std::thread::sleep(Duration::from_millis(200));
        let pgid = p.pgid;
        assert!(tree(pgid, p.pid).len() >= 3, "sh and two sleeps: {:?}", tree(pgid, p.pid));
        let mut printed = String::new();
        let w = p.wait(Instant::now() + Duration::from_millis(100), &mut |s| printed += s);
        assert!(w.stacks.is_some(), "{w:?}");
        assert!(w.describe().starts_with("timeout"), "{}", w.describe());
        assert!(printed.contains("sleep 600"), "{printed}");
        assert!(printed.contains("wchan"), "{printed}");
        // Everything is gone (zombies of init's aside).
        std::thread::sleep(Duration::from_millis(100));
        let left: Vec<i32> = procs().into_iter().filter(|p| p.2 == pgid && p.3 != 'Z').map(|p| p.0).collect();
        assert!(left.is_empty(), "left behind: {left:?}");
    }

    #[test]
    fn exit_status_and_peak_rss() {
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "exit 3"]);
        let mut p = spawn(&mut cmd, None).unwrap();
        let w = p.wait(Instant::now() + Duration::from_secs(30), &mut |_| {});
        assert_eq!(w.code(), Some(3));
        assert!(w.peak_rss > 0);
        assert!(w.stacks.is_none());
    }
}
