//! Processes of the tree that run without the pager, found and counted by `uswap run`.
//!
//! Every program started below `uswap run` inherits `LD_PRELOAD` and gets a pager of its own,
//! but not every one loads the library: a statically linked program (a Go binary, a static
//! busybox) never runs the dynamic loader, a setuid program has `LD_PRELOAD` ignored, and a
//! program may clear its environment before `exec`. Such a process's memory can be neither
//! swapped nor limited by uswap, and a memory cgroup would still count it. So the runner looks
//! for them (every [`crate::run`] tree sample, 200 ms) and does what the cgroup would do with
//! memory it cannot reclaim: **counts it against the limit**. It writes their summed anonymous
//! RSS to the tree's budget file (`uswap_pager::tree::set_unmanaged`), and every pager of the
//! tree takes its share of the limit less that. It warns once per process on stderr, includes
//! them in the tree's peak, and lists them in the statistics (`unmanaged_processes`).
//! *Shared memory* of any process of the tree (managed or not) is counted the same way
//! (`tree_shmem`): the pager manages private anonymous memory only.
//!
//! *Which processes are the tree's*: the program, every process holding a slot of the budget
//! file, and their descendants (through `/proc/PID/task/*/children`, or by parent pid from
//! every `/proc/PID/stat` on a kernel without those files), and the descendants of the
//! program's guardian (`crate::guardian`), to which the tree's orphans are reparented.
//! *Which are managed*: those whose `/proc/PID/maps` names the library. A process is judged
//! once per image (pid, start time and `/proc/PID/exe`), and only after two readings a tree
//! sample apart both lack the library: a program caught between `execve` and the dynamic
//! loader's mapping of the preload has it mapped a few milliseconds later.
//! A managed process that holds no slot of the budget file is *dormant* (it has not grown to
//! `USWAP_START_BYTES`, so it runs with no pager yet): its anonymous RSS is counted with the
//! unmanaged memory, without a warning, until it starts its pager and takes a slot.
//!
//! Locking: none inside; the runner keeps the watch behind a mutex (its tree sampler samples,
//! the main thread takes the findings at the end).

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

/// Why a process runs without the pager.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Reason {
    /// Its executable has no ELF interpreter: the LD_PRELOAD library is never loaded.
    Static,
    /// A Go program: the preload leaves it alone ([`uswap_pager::exe::GO_REFUSED`]).
    Go,
    /// It may not open a userfaultfd with fork events (it dropped root privileges): the
    /// preload leaves it alone.
    NoUffd,
    /// Its executable is setuid or setgid: the dynamic loader ignores `LD_PRELOAD`.
    Setuid,
    /// Its environment has no `LD_PRELOAD` naming the library (the program cleared it).
    NoPreload,
    /// Any other (the library failed to load, or the environment cannot be read).
    NotLoaded,
}

impl Reason {
    /// The reason in words, for the warning and the statistics.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Static => "statically linked",
            Reason::Go => "Go program: the Go runtime's own madvise calls are not seen",
            Reason::NoUffd => "it dropped root privileges: a pager needs userfaultfd fork events (CAP_SYS_PTRACE)",
            Reason::Setuid => "setuid or setgid",
            Reason::NoPreload => "LD_PRELOAD removed from its environment",
            Reason::NotLoaded => "the library is not loaded",
        }
    }
}

/// One process of the tree found running without the pager.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Unmanaged {
    /// Its pid.
    pub pid: i32,
    /// Its command line (at most 200 bytes).
    pub command: String,
    /// Why it is not managed.
    pub reason: Reason,
    /// The largest anonymous RSS (`RssAnon`) seen.
    pub peak_anon_bytes: u64,
    /// Its anonymous RSS at the last sample.
    pub anon_bytes: u64,
    /// Alive at the last sample.
    pub running: bool,
}

/// What a process image was judged to be.
enum Seen {
    /// It maps the library.
    Managed,
    /// Read once without the library: judged at the next reading.
    Maybe,
    /// It runs without the pager: the index of its record.
    Unmanaged(usize),
}

/// The state of the search, kept across tree samples.
pub(crate) struct Watch {
    /// The program `uswap run` started.
    root: i32,
    /// The program's guardian (`crate::guardian`), a subreaper: the tree's orphans are its
    /// children. Not itself of the tree.
    owner: Option<i32>,
    /// The tree's budget file.
    budget: PathBuf,
    /// The library's path as `/proc/PID/maps` shows it.
    lib: String,
    /// Judgements by process image: (pid, start time in ticks, executable).
    seen: HashMap<(i32, u64, PathBuf), Seen>,
    /// Every process found unmanaged, in the order found.
    found: Vec<Unmanaged>,
    /// Print a warning for each (not with `--quiet`).
    warn: bool,
    /// The largest shared memory the tree held at a sample (see [`tree_shmem`]); the warning
    /// is printed when it first reaches [`SHMEM_WARN`].
    shmem_peak: u64,
    /// Reasons warned about: one warning per reason (a shell loop that starts short processes
    /// as another user would otherwise print a line for each).
    warned: HashSet<Reason>,
}

/// Shared memory the tree's programs hold (`MAP_SHARED|MAP_ANONYMOUS`, `memfd_create`,
/// `/dev/shm`: a JVM's ZGC heap, PostgreSQL's shared buffers, Python's `mmap.mmap(-1, n)`), in
/// bytes. The kernel swaps it (to swap, with the memory cgroup charging it); the pager manages
/// private anonymous memory only, so it is memory nobody else limits, and the watch counts it
/// against the limit like an unmanaged process's. Each page once: the sum of `Pss_Shmem` (a
/// page that several processes map, or one process maps several times, as ZGC's views of its
/// heap do, is shared out among the mappings), less uswap's own shared memory in each process
/// (the file tier's holds, the cipher's counter: mappings named
/// [`uswap::tier::shared::SHARED_NAME`], at their full size, an upper bound). The page walk
/// (`smaps_rollup`) is made only in a process whose `RssShmem` (every mapping's pages) is
/// more than its own mappings' size.
fn tree_shmem(pids: &[i32]) -> u64 {
    let mut total = 0;
    for &pid in pids {
        let rss = crate::procsum::status_sum([pid], "RssShmem:");
        if rss == 0 {
            continue;
        }
        let own = own_shared_bytes(pid);
        if rss > own {
            total += crate::procsum::smaps_sum([pid], "Pss_Shmem:").saturating_sub(own);
        }
    }
    total
}

/// The size of uswap's own shared mappings in `pid` (see [`tree_shmem`]), from its maps.
fn own_shared_bytes(pid: i32) -> u64 {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap_or_default();
    maps.lines()
        .filter(|l| l.contains(uswap::tier::shared::SHARED_NAME) || is_tree_budget(l))
        .filter_map(|l| {
            let (a, b) = l.split(' ').next()?.split_once('-')?;
            Some(u64::from_str_radix(b, 16).ok()? - u64::from_str_radix(a, 16).ok()?)
        })
        .sum()
}

/// A `/proc/PID/maps` line of a tree's budget file (`<tree dir>/budget`, mapped shared by every
/// process of the tree; on a tmpfs it is shared memory, and uswap's own).
fn is_tree_budget(line: &str) -> bool {
    line.trim_end().strip_suffix(crate::rundir::BUDGET_FILE).is_some_and(|p| p.ends_with('/'))
        && line.contains("/uswap")
}

/// Shared memory below which the watch says nothing (a multiprocessing semaphore, a small
/// `/dev/shm` buffer).
const SHMEM_WARN: u64 = 4 << 20;

/// `(pid, parent pid, state, start time)` of `roots` and their descendants: read from each
/// process's `/proc/PID/task/*/children` (the children of each of its threads) where the
/// kernel has them, so a sample costs a few reads per process of the tree, not one per
/// process of the machine (every 200 ms: 1.2 % of a CPU for a program asleep on this
/// 74-process machine, more on a shared host); else from every `/proc/*/stat`.
fn tree_processes(roots: &[i32]) -> Vec<(i32, i32, u8, u64)> {
    if !children_files() {
        let procs = all_processes();
        let pids: HashSet<i32> = tree_of(roots, &procs).into_iter().collect();
        return procs.into_iter().filter(|p| pids.contains(&p.0)).collect();
    }
    let mut out = Vec::new();
    let mut done = HashSet::new();
    let mut todo: Vec<i32> = roots.to_vec();
    while let Some(pid) = todo.pop() {
        if !done.insert(pid) {
            continue;
        }
        let Some((state, ppid, start)) =
            std::fs::read_to_string(format!("/proc/{pid}/stat")).ok().as_deref().and_then(parse_stat)
        else {
            continue;
        };
        out.push((pid, ppid, state, start));
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { continue };
        for t in tasks.flatten() {
            if let Ok(c) = std::fs::read_to_string(t.path().join("children")) {
                todo.extend(c.split_ascii_whitespace().filter_map(|v| v.parse::<i32>().ok()));
            }
        }
    }
    out
}

/// Whether this kernel has `/proc/PID/task/TID/children` (`CONFIG_PROC_CHILDREN`).
fn children_files() -> bool {
    static HAS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *HAS.get_or_init(|| {
        // SAFETY: gettid has no preconditions.
        let tid = unsafe { libc::gettid() };
        Path::new(&format!("/proc/self/task/{tid}/children")).exists()
    })
}

/// `(pid, parent pid, state, start time)` of every process, from `/proc/*/stat`.
fn all_processes() -> Vec<(i32, i32, u8, u64)> {
    let Ok(dir) = std::fs::read_dir("/proc") else { return Vec::new() };
    dir.filter_map(|e| {
        let pid: i32 = e.ok()?.file_name().to_str()?.parse().ok()?;
        let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        let (state, ppid, start) = parse_stat(&s)?;
        Some((pid, ppid, state, start))
    })
    .collect()
}

/// State, parent pid and start time (ticks) from a `/proc/PID/stat` line (the command name,
/// in parentheses, may hold spaces and parentheses: fields are counted from the last `)`).
fn parse_stat(s: &str) -> Option<(u8, i32, u64)> {
    let rest = &s[s.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // After the name: state (3), ppid (4), ..., starttime (22).
    Some((*f.first()?.as_bytes().first()?, f.get(1)?.parse().ok()?, f.get(19)?.parse().ok()?))
}

/// The pids of the tree: `roots` and their descendants, among `procs`.
fn tree_of(roots: &[i32], procs: &[(i32, i32, u8, u64)]) -> Vec<i32> {
    let mut children: HashMap<i32, Vec<i32>> = HashMap::new();
    for &(pid, ppid, _, _) in procs {
        children.entry(ppid).or_default().push(pid);
    }
    let live: HashSet<i32> = procs.iter().map(|p| p.0).collect();
    let mut out: Vec<i32> = Vec::new();
    let mut todo: Vec<i32> = roots.iter().copied().filter(|p| live.contains(p)).collect();
    let mut done = HashSet::new();
    while let Some(p) = todo.pop() {
        if done.insert(p) {
            out.push(p);
            todo.extend(children.get(&p).into_iter().flatten());
        }
    }
    out
}

/// The command line of `pid`, arguments joined by spaces, cut at 200 bytes.
fn command_of(pid: i32) -> String {
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    let mut s: String =
        raw.split(|&b| b == 0).filter(|a| !a.is_empty()).map(String::from_utf8_lossy).collect::<Vec<_>>().join(" ");
    if s.len() > 200 {
        let mut end = 200;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
    }
    s
}

/// Why `pid`, whose executable `exe` is of `kind` and whose maps lack the library `lib`, runs
/// without it.
fn reason_of(pid: i32, exe: &Path, kind: Option<uswap_pager::exe::ExeKind>, lib: &str) -> Reason {
    use std::os::unix::fs::MetadataExt;
    if kind == Some(uswap_pager::exe::ExeKind::Static) {
        return Reason::Static;
    }
    if std::fs::metadata(exe).is_ok_and(|m| m.mode() & 0o6000 != 0) {
        return Reason::Setuid;
    }
    match std::fs::read(format!("/proc/{pid}/environ")) {
        Ok(env) => {
            let preload = env.split(|&b| b == 0).find_map(|v| v.strip_prefix(b"LD_PRELOAD="));
            if preload.is_none_or(|v| !String::from_utf8_lossy(v).contains(lib)) {
                Reason::NoPreload
            } else {
                Reason::NotLoaded
            }
        }
        Err(_) => Reason::NotLoaded,
    }
}

/// Why the library stands aside in a process whose maps are `maps` (its mark, see
/// `uswap_pager::tree::INERT_MARK`), if it does.
fn inert_reason(maps: &str) -> Option<Reason> {
    use uswap_pager::tree::{INERT_GO, INERT_MARK, INERT_NO_UFFD};
    let at = maps.find(INERT_MARK)? + INERT_MARK.len();
    let why = maps[at..].split([' ', '\n']).next().unwrap_or("");
    Some(match why {
        INERT_GO => Reason::Go,
        INERT_NO_UFFD => Reason::NoUffd,
        _ => Reason::NotLoaded,
    })
}

/// The file in the tree's directory that lists the processes found so far.
pub(crate) const UNMANAGED_FILE: &str = "unmanaged.json";

impl Unmanaged {
    /// As the statistics and the live view show it.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "pid": self.pid,
            "command": self.command,
            "reason": self.reason.as_str(),
            "anon_bytes": self.anon_bytes,
            "peak_anon_bytes": self.peak_anon_bytes,
            "running": self.running,
        })
    }
}

impl Watch {
    /// A watch over the tree of `root`, whose processes take their shares from `budget`, with
    /// the library at `lib`.
    pub fn new(root: i32, budget: PathBuf, lib: &Path, warn: bool) -> Watch {
        Watch {
            root,
            owner: None,
            budget,
            lib: lib.to_string_lossy().into_owned(),
            seen: HashMap::new(),
            found: Vec::new(),
            warn,
            shmem_peak: 0,
            warned: HashSet::new(),
        }
    }

    /// The tree's processes are also the descendants of `owner` (the guardian that the
    /// tree's orphans are reparented to), but not `owner` itself.
    pub fn owned_by(mut self, owner: i32) -> Watch {
        self.owner = Some(owner);
        self
    }

    /// Read the tree once: judge new process images, publish the unmanaged memory to the
    /// budget file, and return the pids of the tree.
    pub fn sample(&mut self) -> Vec<i32> {
        let mut roots: Vec<i32> = vec![self.root];
        roots.extend(self.owner);
        let holders: HashSet<i32> =
            uswap_pager::tree::pids_in(&self.budget).into_iter().filter_map(|p| i32::try_from(p).ok()).collect();
        roots.extend(holders.iter().copied());
        let mut procs = tree_processes(&roots);
        procs.retain(|p| Some(p.0) != self.owner);
        let pids: Vec<i32> = procs.iter().map(|p| p.0).collect();
        let by_pid: HashMap<i32, (u8, u64)> = procs.iter().map(|&(p, _, st, t)| (p, (st, t))).collect();
        let mut unmanaged_bytes = 0;
        for u in &mut self.found {
            u.running = false;
        }
        for &pid in &pids {
            let Some(&(state, start)) = by_pid.get(&pid) else { continue };
            // A zombie has no memory and no maps left to read.
            if state == b'Z' || state == b'X' {
                continue;
            }
            let Ok(exe) = std::fs::read_link(format!("/proc/{pid}/exe")) else { continue };
            let key = (pid, start, exe);
            let seen = self.seen.get(&key);
            // A process that loaded the library but holds no slot runs dormant (no pager
            // until it grows): its memory is counted as the unmanaged processes' is.
            let dormant =
                |pid: i32| if holders.contains(&pid) { 0 } else { crate::procsum::status_sum([pid], "RssAnon:") };
            let index = match seen {
                Some(Seen::Managed) => {
                    unmanaged_bytes += dormant(pid);
                    continue;
                }
                Some(Seen::Unmanaged(i)) => *i,
                _ => {
                    let Ok(maps) = std::fs::read_to_string(format!("/proc/{pid}/maps")) else { continue };
                    // A process where the library stands aside maps it but has no pager: a Go
                    // program (`exe::GO_REFUSED`, also told by its executable), or one that may
                    // not open a full userfaultfd (`tree::INERT_MARK`).
                    let kind = uswap_pager::exe::exe_kind(&key.2).ok();
                    let aside =
                        inert_reason(&maps).or((kind == Some(uswap_pager::exe::ExeKind::Go)).then_some(Reason::Go));
                    if maps.contains(&self.lib) && aside.is_none() {
                        self.seen.insert(key, Seen::Managed);
                        unmanaged_bytes += dormant(pid);
                        continue;
                    }
                    if seen.is_none() && aside.is_none() {
                        self.seen.insert(key, Seen::Maybe);
                        continue;
                    }
                    let reason = aside.unwrap_or_else(|| reason_of(pid, &key.2, kind, &self.lib));
                    let u = Unmanaged {
                        pid,
                        command: command_of(pid),
                        reason,
                        peak_anon_bytes: 0,
                        anon_bytes: 0,
                        running: true,
                    };
                    if self.warn && self.warned.insert(reason) {
                        eprintln!(
                            "uswap: warning: pid {pid} ({}) runs without the pager ({}): its memory cannot be \
                             swapped out; it counts against the limit, and the rest of the tree gives up memory for it \
                             (others found for the same reason are listed at the end)",
                            u.command,
                            reason.as_str()
                        );
                    }
                    // Its slot, if the image it replaced by exec had one, is stale now.
                    uswap_pager::tree::release(&self.budget, pid as u32);
                    self.found.push(u);
                    self.seen.insert(key, Seen::Unmanaged(self.found.len() - 1));
                    self.found.len() - 1
                }
            };
            let anon = crate::procsum::status_sum([pid], "RssAnon:");
            let rec = &mut self.found[index];
            rec.peak_anon_bytes = rec.peak_anon_bytes.max(anon);
            (rec.anon_bytes, rec.running) = (anon, true);
            unmanaged_bytes += anon;
        }
        let shmem = tree_shmem(&pids);
        if shmem >= SHMEM_WARN && self.shmem_peak < SHMEM_WARN && self.warn {
            eprintln!(
                "uswap: warning: the program holds {} of shared memory (MAP_SHARED or memfd: a JVM's ZGC heap, \
                 PostgreSQL's shared buffers, Python's mmap.mmap(-1, n)), which uswap cannot swap out; it counts \
                 against the limit, and the rest of the tree gives up memory for it",
                uswap::size::format(shmem)
            );
        }
        self.shmem_peak = self.shmem_peak.max(shmem);
        uswap_pager::tree::set_unmanaged(&self.budget, unmanaged_bytes + shmem);
        if !self.found.is_empty() {
            // For `uswap status` and the metrics file (beside the budget file, in the tree's
            // directory; not a process record: its name is no pid).
            let doc: Vec<serde_json::Value> = self.found.iter().map(Unmanaged::to_json).collect();
            crate::rundir::write_atomic(
                &self.budget.with_file_name(UNMANAGED_FILE),
                serde_json::Value::from(doc).to_string().as_bytes(),
            );
        }
        pids
    }

    /// Every process found running without the pager so far.
    pub fn found(&self) -> &[Unmanaged] {
        &self.found
    }

    /// The largest shared memory the tree held at a sample (see `tree_shmem`).
    pub fn shmem_peak(&self) -> u64 {
        self.shmem_peak
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_librarys_mark_names_why_it_stands_aside() {
        let maps = "7f00-7f01 r--s 00000000 00:01 9 /memfd:uswap-inert:no-uffd (deleted)\n";
        assert_eq!(inert_reason(maps), Some(Reason::NoUffd));
        assert_eq!(inert_reason("7f00-7f01 r--s 00000000 00:01 9 /memfd:uswap-inert:go (deleted)"), Some(Reason::Go));
        assert_eq!(
            inert_reason("7f00-7f01 r--s 0 00:01 9 /memfd:uswap-inert:new-reason (deleted)"),
            Some(Reason::NotLoaded)
        );
        assert_eq!(inert_reason("7f00-7f01 rw-s 00000000 00:01 9 /memfd:uswap-shared (deleted)\n"), None);
    }

    #[test]
    fn stat_lines_parse_past_odd_command_names() {
        let line = "4242 (a b) (c)) S 17 4242 4242 0 -1 4194560 1 0 0 0 0 0 0 0 20 0 1 0 987654 1 2 3";
        assert_eq!(parse_stat(line), Some((b'S', 17, 987654)));
        assert_eq!(parse_stat("1 (x) S"), None);
    }

    #[test]
    fn the_tree_is_the_roots_and_their_descendants() {
        // 1 -> 10 -> 11 -> 12; 1 -> 20 (not ours); 30 is a root whose parent is not in the tree.
        let procs = [(1, 0, b'S', 0), (10, 1, b'S', 0), (11, 10, b'S', 0), (12, 11, b'S', 0), (20, 1, b'S', 0)];
        let mut t = tree_of(&[10, 30], &procs);
        t.sort();
        assert_eq!(t, vec![10, 11, 12]);
        let procs2 = [(30, 1, b'S', 0), (31, 30, b'R', 0)];
        let mut t = tree_of(&[10, 30], &procs2);
        t.sort();
        assert_eq!(t, vec![30, 31]);
    }

    /// The walk through the children files finds what the scan of every process finds: a
    /// shell and its two children.
    #[test]
    fn the_childrens_walk_finds_what_the_full_scan_finds() {
        assert!(children_files(), "this kernel has /proc/PID/task/TID/children (CONFIG_PROC_CHILDREN)");
        let mut child = std::process::Command::new("sh").args(["-c", "sleep 30 & sleep 30; wait"]).spawn().expect("sh");
        let sh = child.id() as i32;
        let mut found: Vec<i32> = Vec::new();
        for _ in 0..500 {
            found = tree_processes(&[sh]).iter().map(|p| p.0).collect();
            if found.len() >= 3 {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        found.sort();
        let mut full = tree_of(&[sh], &all_processes());
        full.sort();
        for &p in found.iter().chain(&full) {
            // SAFETY: kill(2) of processes this test started (the shell and its sleeps).
            unsafe { libc::kill(p, libc::SIGKILL) };
        }
        let _ = child.wait();
        assert_eq!(found.len(), 3, "the shell and its two sleeps: {found:?}");
        assert_eq!(found, full);
    }

    #[test]
    fn a_static_child_is_found_and_its_memory_published() {
        // A process of this test's own tree that does not map a library named "no-such-lib":
        // a child sleeping holding 16 MiB (python3 keeps the test free of a static binary).
        let dir = std::env::temp_dir().join(format!("uswap-unmanaged-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let budget = dir.join(crate::rundir::BUDGET_FILE);
        uswap_pager::tree::create(&budget, 64 << 20).unwrap();
        // The interpreter itself, not a version manager's shim (which runs helpers of its own).
        let py = std::process::Command::new("python3")
            .args(["-c", "import sys; print(sys.executable)"])
            .output()
            .expect("python3 is needed by this test");
        let py = String::from_utf8_lossy(&py.stdout).trim().to_string();
        let mut child = std::process::Command::new("sh")
            .args(["-c", &format!("exec {py} -c \"b=bytearray(16<<20); import time; time.sleep(30)\"")])
            .spawn()
            .expect("sh is needed by this test");
        let pid = child.id() as i32;
        let mut w = Watch::new(pid, budget.clone(), Path::new("/no-such-lib.so"), false);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        let mut published = 0;
        while std::time::Instant::now() < deadline {
            assert!(w.sample().contains(&pid), "the root is in its own tree");
            published = uswap_pager::tree::unmanaged_in(&budget);
            if published >= 16 << 20 {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        let _ = child.kill();
        let _ = child.wait();
        let found = w.found().to_vec();
        let _ = std::fs::remove_dir_all(&dir);
        assert!(published >= 16 << 20, "published {published} bytes for a process holding 16 MiB");
        // The interpreter's image (and, on a machine slow enough to see it twice, the shell's
        // before its exec: each image is judged on its own).
        assert!(found.iter().all(|u| u.pid == pid && u.reason == Reason::NoPreload), "{found:?}");
        let u = found.iter().find(|u| u.command.starts_with(&py)).unwrap_or_else(|| panic!("{found:?}"));
        assert!(u.running && u.command.contains(" -c b=bytearray"), "{found:?}");
        assert!(u.peak_anon_bytes >= 16 << 20, "{found:?}");
    }
}
