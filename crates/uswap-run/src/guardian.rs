//! The guardian: the process between `uswap run` and its program through which the runner owns
//! the program's tree, so that the tree ends when the runner ends, however it ends (SIGKILL
//! included). The reasons for this design are in docs/design.md, "The runner owns its tree".
//!
//! The processes: the runner, its child the guardian, the guardian's child the program, and
//! everything the program starts.
//! - The guardian is forked from the runner (no exec) and is a *child subreaper*
//!   (`PR_SET_CHILD_SUBREAPER`): a process of the tree whose parent dies (a double fork, a
//!   daemon, whatever `setsid` or `setpgid` it made) is reparented to it, never to init, so the
//!   tree is exactly the guardian's descendants, managed (with a pager) or not.
//! - It watches the read end of a pipe whose only write end the runner holds (close-on-exec,
//!   and never closed by the runner: the kernel closes it when the runner ends). End of file
//!   there means the runner is gone, whether it died before the program was even started or
//!   after it ended. The guardian then SIGKILLs its children, again as their orphans come to it,
//!   until it has none ([`end_children`]), and execs `uswap` as [`END_ARG0`] to write the end
//!   of the run ([`end_main`]: the metrics file says the run is over, the tree directory goes).
//! - The same pipe carries the signals the runner forwards to the program (one byte each: the
//!   guardian signals its own child, whose pid cannot be reused before the guardian reaps it)
//!   and, once the program has ended and the runner has reported it, the release byte: the
//!   guardian exits at once and leaves what may remain (a program's background processes)
//!   running, as a shell does.
//! - It reaps every child, and reports the program's pid, then its wait status and resource
//!   usage, on a second pipe.
//! - The program sets `PR_SET_PDEATHSIG` (SIGKILL) and then checks that its parent is still the
//!   guardian (the guardian may have died before the signal was set), then execs. The runner is
//!   a subreaper too: should the guardian alone be killed, the program dies of its death signal
//!   and the rest of the tree comes to the runner, which ends it the same way and fails.
//!
//! Code between fork and exec (the guardian, the program before its exec) runs in a child of a
//! multithreaded process: system calls on memory prepared before the fork or on the stack, no
//! allocation, no lock, no panic (an unwind there ends the process rather than return into the
//! runner's code).
//!
//! Locking: none. The runner's signal handler writes one byte to the pipe (`write(2)` is
//! async-signal-safe) through a descriptor published in an atomic, never closed.

use std::ffi::{CStr, CString, OsStr, OsString};
use std::io::Read;
use std::os::fd::{FromRawFd, IntoRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicI32, Ordering};

/// The name (`argv[0]`) under which the guardian execs `uswap` to write the end of a run whose
/// runner died ([`end_main`]), with the tree directory as the argument.
pub(crate) const END_ARG0: &str = "uswap-end-tree";

/// The byte that releases the tree (any other byte is a signal number to forward).
const RELEASE: u8 = 0;

/// What the guardian ignores: the signals a terminal sends to the whole foreground process
/// group (the program gets them itself, and the guardian must outlive it), those the runner
/// forwards, SIGPIPE (its reports to a runner that died), and SIGTTIN and SIGTTOU (it is in
/// a process group of its own). The program gets their default actions back before its exec,
/// as it had them from the runner before.
const IGNORED: [libc::c_int; 9] = [
    libc::SIGHUP,
    libc::SIGINT,
    libc::SIGQUIT,
    libc::SIGTERM,
    libc::SIGUSR1,
    libc::SIGUSR2,
    libc::SIGPIPE,
    libc::SIGTTIN,
    libc::SIGTTOU,
];

/// A report of the guardian to the runner: one `write(2)` of a whole record (smaller than
/// `PIPE_BUF`, so never split).
#[repr(C)]
#[derive(Clone, Copy)]
struct Msg {
    /// [`STARTED`], [`FORK_FAILED`] or [`EXITED`].
    kind: i32,
    /// The program's pid.
    pid: i32,
    /// The wait status ([`EXITED`]) or the errno ([`FORK_FAILED`]).
    value: i32,
    /// Explicit, so that every byte of the record is initialized.
    pad: i32,
    /// The program's resource usage ([`EXITED`]).
    ru: libc::rusage,
}

/// The program is forked (its pid).
const STARTED: i32 = 1;
/// The guardian could not fork the program (the errno).
const FORK_FAILED: i32 = 2;
/// The program ended (its wait status and resource usage).
const EXITED: i32 = 3;

/// The write end of the guardian's pipe, for [`forward`] (-1 before there is one).
static FORWARD_FD: AtomicI32 = AtomicI32::new(-1);

/// Forward signal `sig` to the program through its guardian. Async-signal-safe (for the
/// runner's signal handler): one non-blocking `write(2)`.
pub fn forward(sig: libc::c_int) {
    let fd = FORWARD_FD.load(Ordering::Relaxed);
    if fd >= 0 && (1..=64).contains(&sig) {
        let b = sig as u8;
        // SAFETY: one byte from the stack to a descriptor that is never closed.
        unsafe { libc::write(fd, (&b as *const u8).cast(), 1) };
    }
}

/// The program under its guardian, as the runner sees it.
pub struct Child {
    /// The program's pid.
    pub pid: i32,
    /// The guardian's pid.
    pub guardian: i32,
    /// The write end of the guardian's pipe (non-blocking). Never closed: the kernel closes it
    /// when the runner ends, which is how the guardian learns of it.
    watch: RawFd,
    /// The read end of the guardian's reports.
    reports: std::fs::File,
}

/// How the program ended.
pub struct Exit {
    /// Its wait status.
    pub status: i32,
    /// Its resource usage (with that of its descendants it waited for).
    pub rusage: libc::rusage,
}

/// What the fork children use, prepared before the fork: pointers into the vectors of
/// [`spawn`], which outlive it (the child has a copy of them and never returns).
struct Plan {
    /// The runner's process group, which the program joins.
    group: libc::pid_t,
    /// The runner's argument area (`/proc/self/stat` fields 48 and 49), which the guardian
    /// overwrites with its own name.
    args: Option<(usize, usize)>,
    prog: *const libc::c_char,
    argv: *const *const libc::c_char,
    envp: *const *const libc::c_char,
    end_argv: *const *const libc::c_char,
    end_envp: *const *const libc::c_char,
    watch_r: RawFd,
    watch_w: RawFd,
    reports_r: RawFd,
    reports_w: RawFd,
    exec_r: RawFd,
    exec_w: RawFd,
}

/// In a fork child, an unwind must not run the parent's code after the fork: it ends the
/// process instead.
struct ExitOnUnwind;

impl Drop for ExitOnUnwind {
    fn drop(&mut self) {
        // SAFETY: _exit(2) ends the process; nothing runs after it.
        unsafe { libc::_exit(126) }
    }
}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

fn pipe() -> std::io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: pipe2(2) into an array of two descriptors.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: both descriptors are new and ours.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

fn cstring(s: &OsStr) -> std::io::Result<CString> {
    CString::new(s.as_bytes()).map_err(|_| {
        std::io::Error::new(std::io::ErrorKind::InvalidInput, "an argument or environment variable holds a NUL byte")
    })
}

fn pointers(v: &[CString]) -> Vec<*const libc::c_char> {
    v.iter().map(|s| s.as_ptr()).chain(std::iter::once(std::ptr::null())).collect()
}

/// Start `prog` (`argv`, `argv[0]` first) under a guardian, with this process's environment
/// and `env` on top of it, for the tree whose directory is `tree_dir`. Returns once the program
/// is running (its `execve` succeeded) or with the error of its `execve`. Makes this process a
/// child subreaper.
pub fn spawn(prog: &Path, argv: &[OsString], env: &[(OsString, OsString)], tree_dir: &Path) -> std::io::Result<Child> {
    let pair = |k: &OsStr, v: &OsStr| {
        let mut s = k.to_os_string();
        s.push("=");
        s.push(v);
        cstring(&s)
    };
    let prog = cstring(prog.as_os_str())?;
    let argv = argv.iter().map(|a| cstring(a)).collect::<std::io::Result<Vec<_>>>()?;
    let mut envp = Vec::new();
    for (k, v) in std::env::vars_os() {
        if !env.iter().any(|(o, _)| *o == k) {
            envp.push(pair(&k, &v)?);
        }
    }
    for (k, v) in env {
        envp.push(pair(k, v)?);
    }
    let end_argv = vec![cstring(OsStr::new(END_ARG0))?, cstring(tree_dir.as_os_str())?];
    let end_envp = std::env::vars_os().map(|(k, v)| pair(&k, &v)).collect::<std::io::Result<Vec<_>>>()?;
    let (argv_p, envp_p, end_argv_p, end_envp_p) =
        (pointers(&argv), pointers(&envp), pointers(&end_argv), pointers(&end_envp));
    let (watch_r, watch_w) = pipe()?;
    let (reports_r, reports_w) = pipe()?;
    let (exec_r, exec_w) = pipe()?;
    let raw = |f: &OwnedFd| std::os::fd::AsRawFd::as_raw_fd(f);
    let args = std::fs::read_to_string("/proc/self/stat").ok().and_then(|s| {
        let f: Vec<u64> = s.get(s.rfind(')')? + 2..)?.split(' ').map(|v| v.trim().parse().unwrap_or(0)).collect();
        let (start, end) = (*f.get(45)? as usize, *f.get(46)? as usize);
        (start > 0 && end > start).then_some((start, end))
    });
    let plan = Plan {
        // SAFETY: getpgrp cannot fail.
        group: unsafe { libc::getpgrp() },
        args,
        prog: prog.as_ptr(),
        argv: argv_p.as_ptr(),
        envp: envp_p.as_ptr(),
        end_argv: end_argv_p.as_ptr(),
        end_envp: end_envp_p.as_ptr(),
        watch_r: raw(&watch_r),
        watch_w: raw(&watch_w),
        reports_r: raw(&reports_r),
        reports_w: raw(&reports_w),
        exec_r: raw(&exec_r),
        exec_w: raw(&exec_w),
    };
    // The runner is a subreaper too: if the guardian dies, the tree comes here (see `wait`).
    // SAFETY: prctl(2) on this process.
    unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
    // SAFETY: fork(2); the child runs `guardian` only, which never returns.
    let g = unsafe { libc::fork() };
    if g < 0 {
        return Err(std::io::Error::last_os_error());
    }
    if g == 0 {
        let _exit = ExitOnUnwind;
        // SAFETY: in the fork child, with the plan's pointers valid in its copy of our memory.
        unsafe { guardian(&plan) }
    }
    drop((watch_r, reports_w, exec_w));
    let watch = watch_w.into_raw_fd();
    // SAFETY: fcntl(2) on our descriptor: the signal handler's writes must never block.
    unsafe { libc::fcntl(watch, libc::F_SETFL, libc::O_NONBLOCK) };
    let mut child = Child { pid: 0, guardian: g, watch, reports: std::fs::File::from(reports_r) };
    let first = child.read_msg();
    match first {
        Ok(m) if m.kind == STARTED => child.pid = m.pid,
        Ok(m) => {
            child.reap_guardian();
            return Err(std::io::Error::from_raw_os_error(m.value));
        }
        Err(e) => {
            child.reap_guardian();
            return Err(e);
        }
    }
    // The program's exec: end of file when it succeeded (the pipe is close-on-exec), its
    // errno when it failed.
    let mut failed = Vec::new();
    let _ = std::fs::File::from(exec_r).read_to_end(&mut failed);
    if let Some(e) = failed.get(..4) {
        let e = i32::from_ne_bytes([e[0], e[1], e[2], e[3]]);
        let _ = child.wait();
        child.release();
        return Err(std::io::Error::from_raw_os_error(e));
    }
    FORWARD_FD.store(watch, Ordering::Relaxed);
    Ok(child)
}

impl Child {
    fn read_msg(&mut self) -> std::io::Result<Msg> {
        let mut b = [0u8; std::mem::size_of::<Msg>()];
        self.reports.read_exact(&mut b)?;
        // SAFETY: `Msg` is integers only, every byte of it explicit: any bytes are a value.
        Ok(unsafe { std::ptr::read_unaligned(b.as_ptr().cast::<Msg>()) })
    }

    /// Wait for the program to end. Should the guardian die first, the tree (reparented to
    /// this process) is ended and the error says so.
    pub fn wait(&mut self) -> Result<Exit, String> {
        loop {
            match self.read_msg() {
                Ok(m) if m.kind == EXITED && m.pid == self.pid => return Ok(Exit { status: m.value, rusage: m.ru }),
                Ok(_) => continue,
                Err(_) => {
                    end_children();
                    return Err(format!(
                        "the guardian process of the program (pid {}) died: the program and the rest of its tree \
                         were ended",
                        self.guardian
                    ));
                }
            }
        }
    }

    /// Release the tree and reap the guardian: the program has ended and the runner is done.
    /// What the program left running goes on running.
    pub fn release(self) {
        FORWARD_FD.store(-1, Ordering::Relaxed);
        for _ in 0..1000 {
            // SAFETY: one byte from the stack to our pipe.
            let n = unsafe { libc::write(self.watch, [RELEASE].as_ptr().cast(), 1) };
            if n == 1 || ![libc::EAGAIN, libc::EINTR].contains(&errno()) {
                break;
            }
            // Full of forwarded signals the guardian has not read yet.
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        self.reap_guardian();
    }

    /// Reap the guardian, which exits at once when released or when it could not start the
    /// program; at most 100 ms, so that a guardian someone stopped does not hold the runner.
    fn reap_guardian(&self) {
        for _ in 0..2000 {
            // SAFETY: waitpid(2) for our own child.
            if unsafe { libc::waitpid(self.guardian, std::ptr::null_mut(), libc::WNOHANG) } != 0 {
                return;
            }
            std::thread::sleep(std::time::Duration::from_micros(50));
        }
    }
}

/// The guardian, in the child of the runner's fork: ignores the group's signals, becomes a
/// subreaper, forks the program, then reaps, reports and forwards until the runner releases it
/// or ends.
///
/// # Safety
/// Only in the fork child of [`spawn`], with `p` as `spawn` made it.
unsafe fn guardian(p: &Plan) -> ! {
    // SAFETY: system calls on our descriptors, on sigsets on the stack, and on the pointers of
    // the plan; nothing that allocates or locks. The argument area is this process's own
    // memory as the kernel reports it (the strings `argv` points to), read by nothing here.
    unsafe {
        libc::close(p.watch_w);
        libc::close(p.reports_r);
        libc::close(p.exec_r);
        // Told apart from the runner: `ps`, `pgrep -f 'uswap run'` and `killall uswap` find the
        // runner only, and a signal to the runner's process group (`timeout`, a shell's job
        // control, `kill -- -PGID`) does not reach it, so it outlives them and ends what of
        // the tree left the group (a `setsid` daemon).
        libc::prctl(libc::PR_SET_NAME, c"uswap-guardian".as_ptr(), 0, 0, 0);
        if let Some((start, end)) = p.args {
            let name = b"uswap-guardian";
            let at = start as *mut u8;
            std::ptr::write_bytes(at, 0, end - start);
            std::ptr::copy_nonoverlapping(name.as_ptr(), at, name.len().min(end - start - 1));
        }
        libc::setpgid(0, 0);
        for s in IGNORED {
            libc::signal(s, libc::SIG_IGN);
        }
        let mut chld: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut chld);
        libc::sigaddset(&mut chld, libc::SIGCHLD);
        libc::sigprocmask(libc::SIG_BLOCK, &chld, std::ptr::null_mut());
        libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
        let sfd = libc::signalfd(-1, &chld, libc::SFD_CLOEXEC | libc::SFD_NONBLOCK);
        let me = libc::getpid();
        let pid = libc::fork();
        if pid == 0 {
            program(p, me);
        }
        libc::close(p.exec_w);
        if pid < 0 {
            report(p.reports_w, FORK_FAILED, 0, errno(), None);
            libc::_exit(1);
        }
        // The caller's terminal or pipes are the program's: the guardian holds none of them
        // but stderr (the end of a dead run may have to say why it failed).
        let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR | libc::O_CLOEXEC);
        if null >= 0 {
            libc::dup2(null, 0);
            libc::dup2(null, 1);
            libc::close(null);
        }
        report(p.reports_w, STARTED, pid, 0, None);
        let mut reaped = false;
        loop {
            let mut fds = [
                libc::pollfd { fd: p.watch_r, events: libc::POLLIN, revents: 0 },
                libc::pollfd { fd: sfd, events: libc::POLLIN, revents: 0 },
            ];
            // Without a signalfd, ended children are looked for every 10 ms.
            libc::poll(fds.as_mut_ptr(), 2, if sfd < 0 { 10 } else { -1 });
            if sfd >= 0 {
                let mut info = [0u64; 16];
                while libc::read(sfd, info.as_mut_ptr().cast(), std::mem::size_of_val(&info)) > 0 {}
            }
            loop {
                let mut st = 0;
                let mut ru: libc::rusage = std::mem::zeroed();
                let r = libc::wait4(-1, &mut st, libc::WNOHANG, &mut ru);
                if r <= 0 {
                    break;
                }
                if r == pid && !reaped {
                    reaped = true;
                    report(p.reports_w, EXITED, pid, st, Some(&ru));
                }
            }
            if fds[0].revents == 0 {
                continue;
            }
            let mut b = [0u8; 64];
            let n = libc::read(p.watch_r, b.as_mut_ptr().cast(), b.len());
            if n == 0 {
                // The runner ended without releasing the tree.
                end_children();
                libc::execve(c"/proc/self/exe".as_ptr(), p.end_argv, p.end_envp);
                libc::_exit(1);
            }
            for &s in b.get(..usize::try_from(n).unwrap_or(0)).unwrap_or(&[]) {
                if s == RELEASE {
                    libc::_exit(0);
                }
                if !reaped {
                    libc::kill(pid, s.into());
                }
            }
        }
    }
}

/// The program, in the guardian's fork child: dies with the guardian, gets the default actions
/// of the guardian's ignored signals and an empty signal mask, and execs; if that fails, writes
/// the errno for the runner.
///
/// # Safety
/// Only in the guardian's fork child, with `p` as [`spawn`] made it.
unsafe fn program(p: &Plan, guardian: libc::pid_t) -> ! {
    // SAFETY: system calls on the plan's pointers and on the stack.
    unsafe {
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0);
        // Dead already, before the death signal was set: it will never come.
        if libc::getppid() != guardian {
            libc::_exit(127);
        }
        // Back in the runner's process group, where the terminal's signals and job control
        // reach it as if the runner had started it.
        libc::setpgid(0, p.group);
        for s in IGNORED {
            libc::signal(s, libc::SIG_DFL);
        }
        let mut none: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut none);
        libc::sigprocmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
        libc::execve(p.prog, p.argv, p.envp);
        let e = errno().to_ne_bytes();
        libc::write(p.exec_w, e.as_ptr().cast(), e.len());
        libc::_exit(127)
    }
}

/// One report to the runner (see [`Msg`]).
fn report(fd: RawFd, kind: i32, pid: i32, value: i32, ru: Option<&libc::rusage>) {
    // SAFETY: a zeroed rusage is a valid value.
    let ru = ru.copied().unwrap_or_else(|| unsafe { std::mem::zeroed() });
    let m = Msg { kind, pid, value, pad: 0, ru };
    // SAFETY: the whole record from the stack to our pipe.
    unsafe { libc::write(fd, (&m as *const Msg).cast(), std::mem::size_of::<Msg>()) };
}

/// SIGKILL every child of this process, and every process that becomes its child meanwhile (a
/// subreaper receives the orphans of those it kills), reaping them, until it has none. A child
/// keeps its pid until it is reaped here, so no other process can be hit. System calls and
/// buffers on the stack only: it runs in the guardian. Returns when there are no children
/// left; a process in uninterruptible sleep holds it until it dies.
pub(crate) fn end_children() {
    loop {
        let mut killed = false;
        for_each_child(&mut |c| {
            // SAFETY: kill(2) of a child of ours not reaped yet.
            unsafe { libc::kill(c, libc::SIGKILL) };
            killed = true;
        });
        // SAFETY: waitpid(2) for any child; blocking only when one was just killed (it dies at
        // once, and its orphans are ours when it does).
        let r = unsafe { libc::waitpid(-1, std::ptr::null_mut(), if killed { 0 } else { libc::WNOHANG }) };
        if r < 0 && errno() != libc::EINTR {
            return;
        }
        if r == 0 {
            // A child the lists missed (it came while they were read): look again.
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }
}

/// Call `f` with the pid of every child of this process, from the children files of each of
/// its threads (`/proc/self/task/TID/children`), else (a kernel without them) from the parent
/// pid of every process.
pub(crate) fn for_each_child(f: &mut dyn FnMut(i32)) {
    let mut listed = false;
    for_each_number_in(c"/proc/self/task", &mut |tid| {
        let mut buf = [0u8; 64];
        let Some(path) = path_of(&mut buf, b"/proc/self/task/", tid, b"/children") else { return };
        // SAFETY: open(2) of a NUL-terminated path.
        let fd = unsafe { libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
        if fd >= 0 {
            listed = true;
            read_numbers(fd, &mut *f);
            // SAFETY: our descriptor.
            unsafe { libc::close(fd) };
        }
    });
    if !listed {
        // SAFETY: getpid(2) cannot fail.
        let me = unsafe { libc::getpid() };
        for_each_number_in(c"/proc", &mut |pid| {
            if parent_of(pid) == Some(me) {
                f(pid)
            }
        });
    }
}

/// The number that `name` is, if it is all digits (a pid or tid).
fn number(name: &[u8]) -> Option<i32> {
    if name.is_empty() || name.len() > 9 || !name.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(name.iter().fold(0i32, |n, &d| n * 10 + i32::from(d - b'0')))
}

/// `prefix`, the decimal `n`, `suffix` and a NUL in `buf` (None when it does not fit).
fn path_of<'a>(buf: &'a mut [u8; 64], prefix: &[u8], n: i32, suffix: &[u8]) -> Option<&'a CStr> {
    let mut digits = [0u8; 10];
    let mut at = digits.len();
    let mut v = u32::try_from(n).ok()?;
    loop {
        at -= 1;
        digits[at] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 || at == 0 {
            break;
        }
    }
    let mut len = 0;
    for part in [prefix, &digits[at..], suffix, b"\0"] {
        buf.get_mut(len..len + part.len())?.copy_from_slice(part);
        len += part.len();
    }
    CStr::from_bytes_with_nul(buf.get(..len)?).ok()
}

/// Call `f` with every number in what `fd` reads (a children file: pids separated by spaces).
fn read_numbers(fd: RawFd, f: &mut dyn FnMut(i32)) {
    let mut buf = [0u8; 512];
    let mut cur: Option<i32> = None;
    loop {
        // SAFETY: read(2) into the buffer on the stack.
        let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
        let Some(got) = usize::try_from(n).ok().filter(|&n| n > 0).and_then(|n| buf.get(..n)) else { break };
        for &b in got {
            if b.is_ascii_digit() {
                cur = Some(cur.unwrap_or(0).saturating_mul(10).saturating_add(i32::from(b - b'0')));
            } else if let Some(c) = cur.take() {
                f(c);
            }
        }
    }
    if let Some(c) = cur {
        f(c);
    }
}

/// Call `f` with every entry of the directory `dir` whose name is a number, read with
/// getdents64 into a buffer on the stack.
fn for_each_number_in(dir: &CStr, f: &mut dyn FnMut(i32)) {
    // SAFETY: open(2) of a NUL-terminated path.
    let fd = unsafe { libc::open(dir.as_ptr(), libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC) };
    if fd < 0 {
        return;
    }
    // 8-byte aligned, as the records are.
    let mut buf = [0u64; 512];
    loop {
        // SAFETY: getdents64 into the buffer on the stack, of its size.
        let n = unsafe { libc::syscall(libc::SYS_getdents64, fd, buf.as_mut_ptr(), std::mem::size_of_val(&buf)) };
        let Ok(n) = usize::try_from(n) else { break };
        if n == 0 {
            break;
        }
        // SAFETY: the kernel wrote `n` bytes (at most the buffer's size) of records.
        let bytes = unsafe { std::slice::from_raw_parts(buf.as_ptr().cast::<u8>(), n) };
        let mut at = 0;
        // Each record: inode (8 bytes), offset (8), record length (2), type (1), name (NUL-terminated).
        while let Some(rec) = bytes.get(at..) {
            let Some(&[lo, hi]) = rec.get(16..18) else { break };
            let len = usize::from(u16::from_ne_bytes([lo, hi]));
            if len == 0 {
                break;
            }
            if let Some(name) = rec.get(19..len.min(rec.len())) {
                if let Some(v) = number(name.split(|&b| b == 0).next().unwrap_or(&[])) {
                    f(v);
                }
            }
            at += len;
        }
    }
    // SAFETY: our descriptor.
    unsafe { libc::close(fd) };
}

/// The parent pid of process `pid`, from `/proc/PID/stat` (fields count from the last `)`: the
/// command name before it may hold anything).
fn parent_of(pid: i32) -> Option<i32> {
    let mut path = [0u8; 64];
    let path = path_of(&mut path, b"/proc/", pid, b"/stat")?;
    // SAFETY: open(2) of a NUL-terminated path.
    let fd = unsafe { libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        return None;
    }
    let mut buf = [0u8; 1024];
    // SAFETY: read(2) into the buffer on the stack, then close(2) of our descriptor.
    let n = unsafe {
        let n = libc::read(fd, buf.as_mut_ptr().cast(), buf.len());
        libc::close(fd);
        n
    };
    let stat = buf.get(..usize::try_from(n).ok()?)?;
    let rest = stat.get(stat.iter().rposition(|&b| b == b')')? + 1..)?;
    // " S 1234 ...": the state, then the parent pid.
    let mut fields = rest.split(|&b| b == b' ').filter(|f| !f.is_empty());
    fields.next()?;
    number(fields.next()?)
}

/// `uswap` started as [`END_ARG0`] by a guardian whose runner died, once the tree has ended:
/// write the end of the run in the tree directory named by the argument
/// ([`crate::live::end_run`]). None when this process is not that.
pub fn end_main() -> Option<std::process::ExitCode> {
    let mut args = std::env::args_os();
    if Path::new(&args.next()?).file_name()? != END_ARG0 {
        return None;
    }
    Some(match args.next() {
        Some(dir) => {
            crate::live::end_run(Path::new(&dir));
            std::process::ExitCode::SUCCESS
        }
        None => std::process::ExitCode::from(crate::exit::USAGE),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_and_numbers_are_made_on_the_stack() {
        let mut b = [0u8; 64];
        assert_eq!(path_of(&mut b, b"/proc/self/task/", 4242, b"/children").unwrap(), c"/proc/self/task/4242/children");
        assert_eq!(path_of(&mut b, b"/proc/", 0, b"/stat").unwrap(), c"/proc/0/stat");
        assert!(path_of(&mut b, &[b'x'; 60], 12345, b"/stat").is_none(), "too long for the buffer");
        assert_eq!(number(b"123"), Some(123));
        for bad in [&b""[..], b"12a", b"self", b"1234567890"] {
            assert_eq!(number(bad), None, "{bad:?}");
        }
        // SAFETY: getpid cannot fail.
        let me = unsafe { libc::getpid() };
        assert_eq!(parent_of(me), Some(std::os::unix::process::parent_id() as i32));
    }

    /// The children lists name exactly this process's children (a forked one and a spawned one
    /// among the test harness's threads), as the scan of every process's parent pid does.
    #[test]
    fn the_children_of_this_process_are_listed() {
        let mut kids = Vec::new();
        for _ in 0..2 {
            kids.push(std::process::Command::new("sleep").arg("30").spawn().expect("sleep"));
        }
        let mut listed = Vec::new();
        for_each_child(&mut |c| listed.push(c));
        // SAFETY: getpid cannot fail.
        let me = unsafe { libc::getpid() };
        let mut scanned = Vec::new();
        for_each_number_in(c"/proc", &mut |p| {
            if parent_of(p) == Some(me) {
                scanned.push(p)
            }
        });
        for k in &mut kids {
            let _ = k.kill();
            let _ = k.wait();
        }
        for k in &kids {
            let pid = k.id() as i32;
            assert!(listed.contains(&pid), "{pid} not in the children lists {listed:?}");
            assert!(scanned.contains(&pid), "{pid} not in the scan {scanned:?}");
        }
    }
}
