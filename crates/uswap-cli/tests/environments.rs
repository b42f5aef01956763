//! `uswap` in the environments people run it in: the statistics apart from the program's output
//! (the help's `--stats` example run as written), `--limit` as shells and scripts write it, and
//! `uswap top` on a terminal and on a pipe. Every program runs with a deadline; on timeout the
//! stacks of its threads are printed and the test fails.

mod common;

use common::*;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// `uswap ARGS…` with this build's preload library and its own run directory.
fn uswap(runtime: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_uswap"));
    cmd.args(args).env("USWAP_PRELOAD", preload()).env("XDG_RUNTIME_DIR", runtime).env_remove("LD_PRELOAD");
    cmd
}

/// The `--stats fd:3` example of `uswap run --help`, run by a shell as written (`uswap` the
/// binary under test) in a directory holding its input: the program's output is the program's
/// alone, byte for byte, and the statistics are one JSON document in their own file.
#[test]
fn the_helps_stats_example_keeps_the_json_apart_from_the_programs_output() {
    let runtime = tempdir();
    let help = uswap(runtime.path(), &["run", "--help"]).output().expect("uswap run --help");
    let help = String::from_utf8_lossy(&help.stdout).into_owned();
    let example = help
        .lines()
        .map(str::trim)
        .find(|l| l.starts_with("uswap run ") && l.contains("--stats") && l.contains("stats.json"))
        .unwrap_or_else(|| panic!("run --help has no --stats example writing stats.json:\n{help}"))
        .to_string();
    assert_eq!(example, "uswap run --limit 256M --stats fd:3 -- sort big.txt > sorted.txt 3> stats.json");
    let dir = tempdir();
    // Lines in no order, some repeated, one without a final newline.
    let mut big = String::new();
    for i in 0..20_000u64 {
        big += &format!("{:016x} line {}\n", i.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 17, i % 997);
    }
    big += "last line, no newline";
    std::fs::write(dir.path().join("big.txt"), &big).unwrap();
    let mut want: Vec<&str> = big.lines().collect();
    want.sort_unstable();
    let want = want.iter().map(|l| format!("{l}\n")).collect::<String>();
    let shell = example.replacen("uswap", &format!("'{}'", env!("CARGO_BIN_EXE_uswap")), 1);
    let mut cmd = Command::new("sh");
    cmd.args(["-c", &shell])
        .current_dir(dir.path())
        .env("LC_ALL", "C")
        .env("USWAP_PRELOAD", preload())
        .env("XDG_RUNTIME_DIR", runtime.path())
        .env_remove("LD_PRELOAD");
    let r = run(cmd, &example);
    if no_uffd(&r) {
        return;
    }
    assert_eq!(r.code, Some(0), "{example}: {}", r.stderr);
    let sorted = std::fs::read_to_string(dir.path().join("sorted.txt")).unwrap();
    assert!(
        sorted == want,
        "sorted.txt is not sort's output alone ({} bytes against {}):\n{}",
        sorted.len(),
        want.len(),
        &sorted[sorted.len().saturating_sub(500)..]
    );
    let text = std::fs::read_to_string(dir.path().join("stats.json")).unwrap();
    let st: serde_json::Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("stats.json: {e}:\n{text}"));
    assert_eq!(st["command"], serde_json::json!(["sort", "big.txt"]), "{st:#}");
    assert_eq!(st["exit_code"], 0, "{st:#}");
    assert_eq!(st["limit_bytes"], 256u64 << 20, "{st:#}");
    assert!(r.stdout.is_empty() && !r.stderr.contains("schema_version"), "stdout {:?}, stderr {}", r.out(), r.stderr);
    assert!(!dir.path().join("fd:3").exists(), "fd:3 was taken for a file name");
}

/// `--stats -` writes the statistics to stderr, after what the program wrote there; stdout is
/// the program's, byte for byte. A program that holds on to an `fd:N` descriptor would keep
/// a reader of it waiting: the program does not inherit it.
#[test]
fn stats_dash_goes_to_stderr_and_fd_n_is_not_inherited() {
    let runtime = tempdir();
    let mut cmd = uswap(runtime.path(), &["run", "--limit", "64M", "--stats", "-", "--"]);
    cmd.args(["sh", "-c", "printf 'out\\n'; printf 'err\\n' >&2; printf 'more out'"]);
    let r = run(cmd, "uswap run --stats -");
    if no_uffd(&r) {
        return;
    }
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert!(r.stdout == b"out\nmore out", "stdout is not the program's alone: {:?}; stderr: {}", r.out(), r.stderr);
    let json = r.stderr.strip_prefix("err\n").unwrap_or_else(|| panic!("stderr: {}", r.stderr));
    let st: serde_json::Value = serde_json::from_str(json).unwrap_or_else(|e| panic!("{e}: {json}"));
    assert_eq!(st["exit_code"], 0, "{st:#}");
    // fd:3 open on a file: the program finds its descriptor 3 is not that file.
    let dir = tempdir();
    let out = std::fs::File::create(dir.path().join("stats.json")).unwrap();
    let mut cmd = uswap(runtime.path(), &["run", "--limit", "64M", "--stats", "fd:3", "--"]);
    cmd.args(["sh", "-c", "readlink /proc/self/fd/3; true"]);
    let fd = out.as_raw_fd();
    // SAFETY: dup2 and fcntl in the child between fork and exec (async-signal-safe): the file
    // as descriptor 3, inherited across exec (dup2 onto itself keeps close-on-exec).
    unsafe {
        cmd.pre_exec(move || {
            if libc::dup2(fd, 3) < 0 || libc::fcntl(3, libc::F_SETFD, 0) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let r = run(cmd, "uswap run --stats fd:3");
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert!(!r.out().contains("stats.json"), "the program inherited fd:3: {}", r.out());
    let text = std::fs::read_to_string(dir.path().join("stats.json")).unwrap();
    serde_json::from_str::<serde_json::Value>(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
}

/// `--limit=SIZE` is `--limit SIZE`; a negative size, either way, is refused with uswap's own
/// message (exit 2), never clap's advice to write `-- -5` (which would run `-5`).
#[test]
fn limits_after_equals_work_and_negative_ones_get_uswaps_message() {
    let runtime = tempdir();
    for args in [&["--limit", "-5M"][..], &["--limit=-5M"], &["--limit", "-0.5G"]] {
        let mut cmd = uswap(runtime.path(), &["run"]);
        cmd.args(args).args(["--", "true"]);
        let r = run(cmd, &format!("uswap run {args:?}"));
        assert_eq!(r.code, Some(2), "{args:?}: {}", r.stderr);
        let v = args.last().unwrap().trim_start_matches("--limit=");
        assert_eq!(r.stderr, format!("uswap: --limit: a size cannot be negative: {v}\n"), "{args:?}");
    }
    let r = run(uswap(runtime.path(), &["run", "--limit", "--tiers", "zero", "--", "true"]), "--limit --tiers");
    assert_eq!(r.code, Some(2));
    assert!(r.stderr.contains("--limit needs a value") && !r.stderr.contains("negative"), "{}", r.stderr);
    let r = run(uswap(runtime.path(), &["run", "--limit=64M", "--stats", "-", "--", "true"]), "uswap run --limit=64M");
    if no_uffd(&r) {
        return;
    }
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    let st: serde_json::Value = serde_json::from_str(&r.stderr).unwrap_or_else(|e| panic!("{e}: {}", r.stderr));
    assert_eq!(st["limit_bytes"], 64u64 << 20);
}

/// A limit above physical memory runs, with one line of warning on stderr; one below it has
/// none.
#[test]
fn a_limit_above_physical_memory_is_warned_about_and_runs() {
    let runtime = tempdir();
    let total = uswap_mem_total();
    let above = format!("{}G", (total >> 30) + 2);
    let r = run(uswap(runtime.path(), &["run", "--limit", &above, "--", "true"]), "uswap run --limit above RAM");
    if no_uffd(&r) {
        return;
    }
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    let warned: Vec<&str> = r.stderr.lines().filter(|l| l.contains("physical memory")).collect();
    assert_eq!(warned.len(), 1, "{}", r.stderr);
    assert!(warned[0].starts_with("uswap: warning: --limit ") && warned[0].contains(&above), "{}", warned[0]);
    let r = run(uswap(runtime.path(), &["run", "--limit", "64M", "--", "true"]), "uswap run --limit 64M");
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert!(!r.stderr.contains("physical memory"), "{}", r.stderr);
}

/// `MemTotal` in bytes.
fn uswap_mem_total() -> u64 {
    let m = std::fs::read_to_string("/proc/meminfo").unwrap();
    let kb: u64 = m
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .unwrap()
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .unwrap();
    kb << 10
}

/// A pseudo-terminal: (master, slave), 80 columns by 24 rows.
fn pty() -> (std::fs::File, std::fs::File) {
    // SAFETY: posix_openpt/grantpt/unlockpt/ptsname_r on the descriptor opened here, into a
    // buffer of the given length.
    unsafe {
        let m = libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY);
        assert!(m >= 0, "posix_openpt: {}", std::io::Error::last_os_error());
        let master = std::fs::File::from(OwnedFd::from_raw_fd(m));
        assert_eq!(libc::grantpt(m), 0);
        assert_eq!(libc::unlockpt(m), 0);
        let mut name = [0 as libc::c_char; 128];
        assert_eq!(libc::ptsname_r(m, name.as_mut_ptr(), name.len()), 0);
        let path = std::ffi::CStr::from_ptr(name.as_ptr()).to_str().unwrap().to_string();
        let slave = std::fs::OpenOptions::new().read(true).write(true).open(&path).unwrap();
        let cooked = libc::ICANON | libc::ECHO;
        assert_eq!(lflag(&slave) & cooked, cooked, "a new pty has line editing and echo");
        let ws = libc::winsize { ws_row: 24, ws_col: 80, ws_xpixel: 0, ws_ypixel: 0 };
        assert_eq!(libc::ioctl(m, libc::TIOCSWINSZ, &ws), 0);
        (master, slave)
    }
}

/// The local modes of the terminal `f` (ICANON, ECHO, ...).
fn lflag(f: &std::fs::File) -> libc::tcflag_t {
    // SAFETY: tcgetattr into zeroed storage of the right type.
    unsafe {
        let mut t: libc::termios = std::mem::zeroed();
        assert_eq!(libc::tcgetattr(f.as_raw_fd(), &mut t), 0);
        t.c_lflag
    }
}

/// `uswap top` on a terminal of its own (its controlling terminal, in the foreground): its
/// screen, read from the master side as it comes, and the process.
struct TopOnTty {
    master: std::fs::File,
    slave: std::fs::File,
    child: std::process::Child,
    screen: std::sync::Arc<std::sync::Mutex<Vec<u8>>>,
}

impl TopOnTty {
    fn start(runtime: &Path) -> TopOnTty {
        let (master, slave) = pty();
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_uswap"));
        // Where no other run can be seen (`top` lists every run directory of the user).
        isolated(&mut cmd)
            .args(["top", "--interval", "0.2"])
            .env("XDG_RUNTIME_DIR", runtime)
            .stdin(slave.try_clone().unwrap())
            .stdout(slave.try_clone().unwrap())
            .stderr(slave.try_clone().unwrap());
        // SAFETY: setsid and ioctl between fork and exec (async-signal-safe): a session of its
        // own whose controlling terminal is the pty, top in its foreground process group.
        unsafe {
            cmd.pre_exec(|| {
                if libc::setsid() < 0 || libc::ioctl(0, libc::TIOCSCTTY, 0) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = cmd.spawn().expect("uswap top");
        let screen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let (mut m, s2) = (master.try_clone().unwrap(), screen.clone());
        // Reads until the pty closes (EIO once every slave descriptor is closed).
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = m.read(&mut buf) {
                if n == 0 {
                    break;
                }
                s2.lock().unwrap().extend_from_slice(&buf[..n]);
            }
        });
        TopOnTty { master, slave, child, screen }
    }

    fn screen(&self) -> String {
        String::from_utf8_lossy(&self.screen.lock().unwrap()).into_owned()
    }

    /// Wait until `cond` holds, or fail after `secs` with the screen and top's stacks.
    fn wait_for(&mut self, secs: u64, what: &str, mut cond: impl FnMut(&mut Self) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(secs);
        while !cond(self) {
            if Instant::now() > deadline {
                let pid = self.child.id() as i32;
                eprintln!("{what}: not after {secs} s; the stacks of top:\n{}", dump_stacks(pid));
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!("{what}: not after {secs} s; the screen:\n{}", self.screen());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().expect("wait")
    }
}

impl Drop for TopOnTty {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// On a terminal, `q` quits at once (no Enter), and Ctrl-C ends top by SIGINT: either way the
/// terminal has its settings back (line editing and echo). The view fits the 80 columns.
#[test]
fn top_quits_on_q_and_restores_the_terminal_also_on_ctrl_c() {
    let runtime = tempdir();
    let cooked = libc::ICANON | libc::ECHO;
    let mut top = TopOnTty::start(runtime.path());
    top.wait_for(20, "top's first view", |t| t.screen().contains("no uswap run is running"));
    assert_eq!(lflag(&top.slave) & cooked, 0, "top reads keys one at a time, without echo");
    top.master.write_all(b"q").unwrap();
    top.wait_for(10, "top quitting on q", |t| t.exited().is_some());
    assert_eq!(top.exited().unwrap().code(), Some(0));
    assert_eq!(lflag(&top.slave) & cooked, cooked, "q left the terminal without line editing or echo");
    for l in top.screen().split("\r\n") {
        assert!(l.trim_start_matches("\x1b[H\x1b[2J").chars().count() <= 80, "{l:?}");
    }
    drop(top);
    let mut top = TopOnTty::start(runtime.path());
    top.wait_for(20, "top's first view", |t| t.screen().contains("no uswap run is running"));
    top.master.write_all(b"\x03").unwrap();
    top.wait_for(10, "top ending on Ctrl-C", |t| t.exited().is_some());
    let st = top.exited().unwrap();
    assert_eq!(std::os::unix::process::ExitStatusExt::signal(&st), Some(libc::SIGINT), "{st}");
    assert_eq!(lflag(&top.slave) & cooked, cooked, "Ctrl-C left the terminal without line editing or echo");
}

/// With stdin a pipe, `q` on it quits; with stdin at its end (/dev/null) top neither ends early
/// nor waits on it: `--count` refreshes, then it ends.
#[test]
fn top_reads_q_from_a_pipe_and_refreshes_on_after_the_end_of_its_input() {
    let runtime = tempdir();
    let mut child = Command::new(env!("CARGO_BIN_EXE_uswap"))
        .args(["top", "--interval", "0.2"])
        .env("XDG_RUNTIME_DIR", runtime.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .expect("uswap top");
    let mut stdin = child.stdin.take().unwrap();
    std::thread::sleep(Duration::from_millis(500));
    stdin.write_all(b"q").unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break s;
        }
        if Instant::now() > deadline {
            eprintln!("the stacks of top:\n{}", dump_stacks(child.id() as i32));
            let _ = child.kill();
            let _ = child.wait();
            panic!("uswap top did not quit on q from a pipe in 10 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(status.code(), Some(0));
    drop(stdin);
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_uswap"));
    // Where no other run can be seen (`top` lists every run directory of the user).
    isolated(&mut cmd).args(["top", "--interval", "0.2", "--count", "3"]).env("XDG_RUNTIME_DIR", runtime.path());
    let r = run_with(cmd, "uswap top --count 3 < /dev/null", Duration::from_secs(20));
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert_eq!(r.out().matches("no uswap run is running").count(), 3, "{}", r.out());
    assert!(r.secs >= 0.55, "three refreshes 0.2 s apart took {} s: the end of stdin ended top", r.secs);
}
