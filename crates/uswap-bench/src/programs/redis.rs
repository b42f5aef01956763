//! The Redis scenario of `uswap bench programs`. The server under test (native, in the kernel
//! side's memory cgroup, or under `uswap run`) listens on 127.0.0.1 only, on a free port, with
//! persistence off (`--save ''`) and its directory in the run's directory. This driver loads it
//! with deterministic values over a pipelined RESP connection, starts a BGSAVE while
//! `redis-benchmark -t get` reads random keys, waits for the dump, checks DBSIZE and a sample of
//! values, shuts the server down, then starts a second server (natively) on the dump and checks
//! that every key came back. The facts (key count, sample checksum) are the run's output; the
//! time is the whole scenario.
//!
//! Locking: none; the driver is single-threaded (each process has a waiter thread in `runner`).

use super::rng::Rng;
use super::runner::{self, Proc, Waited};
use std::ffi::OsString;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// What the scenario needs.
#[derive(Debug, Clone)]
pub struct Plan {
    /// redis-server.
    pub server: PathBuf,
    /// redis-benchmark.
    pub benchmark: PathBuf,
    /// Number of keys loaded.
    pub keys: u64,
    /// Bytes per value.
    pub value_len: usize,
}

/// SET commands per pipelined batch.
const BATCH: u64 = 1000;
/// Values read back and hashed (evenly spread over the keys).
const SAMPLE: u64 = 1000;

impl Plan {
    /// The command line shown in the report.
    pub fn display(&self) -> String {
        format!(
            "{} --bind 127.0.0.1 --port FREE --save '' --dir RUNDIR; load {} keys x {} B (pipelined SET); BGSAVE during {} -t get -r {}; \
             DBSIZE + {} sampled values; reload the dump in a second server (natively)",
            self.server.display(),
            self.keys,
            self.value_len,
            self.benchmark.display(),
            self.keys,
            SAMPLE.min(self.keys)
        )
    }
}

/// The key of index `i`, in redis-benchmark's `-r` format (so its GETs hit loaded keys).
fn key(i: u64) -> String {
    format!("key:{i:012}")
}

/// The value of key `i`: words from a small vocabulary (text-like, compresses a few times).
fn value(i: u64, len: usize) -> Vec<u8> {
    const W: [&[u8]; 8] = [b"lorem ", b"ipsum ", b"dolor ", b"sit ", b"amet ", b"redis ", b"swap ", b"page "];
    let mut v = format!("v{i}:").into_bytes();
    let mut r = Rng::new(i ^ 0x5eed);
    while v.len() < len {
        let x = r.next_u64();
        v.extend_from_slice(W[(x & 7) as usize]);
        v.extend_from_slice((x >> 40).to_string().as_bytes());
    }
    v.truncate(len);
    v
}

fn fnv(h: u64, b: &[u8]) -> u64 {
    b.iter().fold(h, |h, &c| (h ^ u64::from(c)).wrapping_mul(0x0100_0000_01b3))
}

/// A RESP reply.
#[derive(Debug)]
#[expect(dead_code, reason = "error texts and array items are read only through Debug, in error messages")]
enum Reply {
    Status(String),
    Error(String),
    Int(i64),
    Bulk(Option<Vec<u8>>),
    Array(Vec<Reply>),
}

/// Why the scenario stopped.
enum Stop {
    Timeout(String),
    Error(String),
}

fn io_stop(what: &str, e: std::io::Error) -> Stop {
    if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) {
        Stop::Timeout(format!("{what}: no answer before the deadline"))
    } else {
        Stop::Error(format!("{what}: {e}"))
    }
}

struct Conn {
    w: TcpStream,
    r: BufReader<TcpStream>,
    deadline: Instant,
}

impl Conn {
    fn connect(port: u16, deadline: Instant) -> std::io::Result<Conn> {
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
        let w = TcpStream::connect_timeout(&addr, Duration::from_secs(1))?;
        w.set_nodelay(true)?;
        let r = BufReader::with_capacity(1 << 16, w.try_clone()?);
        Ok(Conn { w, r, deadline })
    }

    fn arm(&self) -> std::io::Result<()> {
        let left = self.deadline.saturating_duration_since(Instant::now()).max(Duration::from_millis(1));
        self.w.set_read_timeout(Some(left))?;
        self.w.set_write_timeout(Some(left))
    }

    fn encode(buf: &mut Vec<u8>, args: &[&[u8]]) {
        buf.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
        for a in args {
            buf.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
            buf.extend_from_slice(a);
            buf.extend_from_slice(b"\r\n");
        }
    }

    fn line(&mut self) -> std::io::Result<String> {
        let mut l = String::new();
        if self.r.read_line(&mut l)? == 0 {
            return Err(std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "connection closed"));
        }
        Ok(l.trim_end_matches(['\r', '\n']).to_string())
    }

    fn reply(&mut self) -> std::io::Result<Reply> {
        let bad = |l: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, format!("bad reply {l:?}"));
        let l = self.line()?;
        let (t, rest) = l.split_at(l.len().min(1));
        Ok(match t {
            "+" => Reply::Status(rest.into()),
            "-" => Reply::Error(rest.into()),
            ":" => Reply::Int(rest.parse().map_err(|_| bad(&l))?),
            "$" => {
                let n: i64 = rest.parse().map_err(|_| bad(&l))?;
                if n < 0 {
                    Reply::Bulk(None)
                } else {
                    let mut b = vec![0u8; n as usize + 2];
                    self.r.read_exact(&mut b)?;
                    b.truncate(n as usize);
                    Reply::Bulk(Some(b))
                }
            }
            "*" => {
                let n: i64 = rest.parse().map_err(|_| bad(&l))?;
                let mut v = Vec::new();
                for _ in 0..n.max(0) {
                    v.push(self.reply()?);
                }
                Reply::Array(v)
            }
            _ => return Err(bad(&l)),
        })
    }

    fn cmd(&mut self, args: &[&[u8]]) -> std::io::Result<Reply> {
        self.arm()?;
        let mut b = Vec::new();
        Self::encode(&mut b, args);
        self.w.write_all(&b)?;
        self.reply()
    }

    /// Send all commands, then read all replies.
    fn pipeline(&mut self, cmds: &[Vec<Vec<u8>>]) -> std::io::Result<Vec<Reply>> {
        self.arm()?;
        let mut b = Vec::new();
        for c in cmds {
            let a: Vec<&[u8]> = c.iter().map(Vec::as_slice).collect();
            Self::encode(&mut b, &a);
        }
        self.w.write_all(&b)?;
        (0..cmds.len()).map(|_| self.reply()).collect()
    }
}

/// A port that was free a moment ago on 127.0.0.1.
fn free_port() -> Result<u16, Stop> {
    let l =
        TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).map_err(|e| Stop::Error(format!("finding a free port: {e}")))?;
    l.local_addr().map(|a| a.port()).map_err(|e| Stop::Error(e.to_string()))
}

fn server_argv(p: &Plan, port: u16, dir: &Path) -> Vec<OsString> {
    let mut v: Vec<OsString> = vec![p.server.clone().into()];
    for (k, val) in [
        ("--port", port.to_string()),
        ("--bind", "127.0.0.1".into()),
        ("--protected-mode", "yes".into()),
        ("--save", String::new()),
        ("--appendonly", "no".into()),
        ("--daemonize", "no".into()),
        ("--dbfilename", "dump.rdb".into()),
    ] {
        v.push(k.into());
        v.push(val.into());
    }
    v.push("--dir".into());
    v.push(dir.as_os_str().to_owned());
    v
}

fn log_to(cmd: &mut Command, path: &Path) -> Result<(), Stop> {
    let f = std::fs::File::create(path).map_err(|e| Stop::Error(format!("{}: {e}", path.display())))?;
    let f2 = f.try_clone().map_err(|e| Stop::Error(e.to_string()))?;
    cmd.stdin(Stdio::null()).stdout(Stdio::from(f)).stderr(Stdio::from(f2));
    Ok(())
}

/// Connect once the server answers (a loading server answers -LOADING to DBSIZE: keep trying).
fn ready(server: &mut Proc, port: u16, deadline: Instant, log: &Path) -> Result<Conn, Stop> {
    loop {
        if let Some(w) = server.try_wait() {
            let tail = std::fs::read_to_string(log).unwrap_or_default();
            let tail: Vec<&str> = tail.lines().rev().take(5).collect();
            return Err(Stop::Error(format!(
                "redis-server ended before answering ({}): {}",
                w.describe(),
                tail.join(" | ")
            )));
        }
        if Instant::now() > deadline {
            return Err(Stop::Timeout("redis-server did not answer".into()));
        }
        if let Ok(mut c) = Conn::connect(port, deadline) {
            if let Ok(Reply::Int(_)) = c.cmd(&[b"DBSIZE"]) {
                return Ok(c);
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn dbsize(c: &mut Conn) -> Result<i64, Stop> {
    match c.cmd(&[b"DBSIZE"]).map_err(|e| io_stop("DBSIZE", e))? {
        Reply::Int(n) => Ok(n),
        r => Err(Stop::Error(format!("DBSIZE answered {r:?}"))),
    }
}

/// GET the sampled keys: (count, mismatches, FNV over the values).
fn sample(c: &mut Conn, p: &Plan) -> Result<(u64, u64, u64), Stop> {
    let step = (p.keys / SAMPLE).max(1);
    let idx: Vec<u64> = (0..p.keys).step_by(step as usize).collect();
    let cmds: Vec<Vec<Vec<u8>>> = idx.iter().map(|&i| vec![b"GET".to_vec(), key(i).into_bytes()]).collect();
    let replies = c.pipeline(&cmds).map_err(|e| io_stop("GET sample", e))?;
    let (mut bad, mut h) = (0u64, 0xcbf2_9ce4_8422_2325u64);
    for (&i, r) in idx.iter().zip(&replies) {
        match r {
            Reply::Bulk(Some(v)) => {
                if *v != value(i, p.value_len) {
                    bad += 1;
                }
                h = fnv(h, v);
            }
            _ => {
                bad += 1;
                h = fnv(h, b"(missing)");
            }
        }
    }
    Ok((idx.len() as u64, bad, h))
}

/// Load the keys with pipelined SETs.
fn load(c: &mut Conn, p: &Plan) -> Result<(), Stop> {
    let mut i = 0;
    while i < p.keys {
        let n = BATCH.min(p.keys - i);
        let cmds: Vec<Vec<Vec<u8>>> =
            (i..i + n).map(|k| vec![b"SET".to_vec(), key(k).into_bytes(), value(k, p.value_len)]).collect();
        for r in c.pipeline(&cmds).map_err(|e| io_stop("SET", e))? {
            if !matches!(r, Reply::Status(ref s) if s == "OK") {
                return Err(Stop::Error(format!("SET answered {r:?}")));
            }
        }
        i += n;
    }
    Ok(())
}

/// Redis's `latest_fork_usec` (INFO stats): how long its last `fork` took.
fn latest_fork_usec(c: &mut Conn) -> Result<u64, Stop> {
    let info = match c.cmd(&[b"INFO", b"stats"]).map_err(|e| io_stop("INFO", e))? {
        Reply::Bulk(Some(b)) => String::from_utf8_lossy(&b).into_owned(),
        r => return Err(Stop::Error(format!("INFO stats answered {r:?}"))),
    };
    info.lines()
        .find_map(|l| l.trim().strip_prefix("latest_fork_usec:"))
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| Stop::Error("INFO stats has no latest_fork_usec".into()))
}

/// Has the BGSAVE ended (an error if it failed)?
fn bgsave_done(c: &mut Conn) -> Result<bool, Stop> {
    let info = match c.cmd(&[b"INFO", b"persistence"]).map_err(|e| io_stop("INFO", e))? {
        Reply::Bulk(Some(b)) => String::from_utf8_lossy(&b).into_owned(),
        r => return Err(Stop::Error(format!("INFO answered {r:?}"))),
    };
    if !info.lines().any(|l| l.trim() == "rdb_bgsave_in_progress:0") {
        return Ok(false);
    }
    if !info.lines().any(|l| l.trim() == "rdb_last_bgsave_status:ok") {
        return Err(Stop::Error(format!("BGSAVE failed: {}", info.replace("\r\n", " "))));
    }
    Ok(true)
}

/// Start a second server, natively, on the dump in `dir`: its DBSIZE and [`sample`].
fn reload(p: &Plan, dir: &Path, deadline: Instant) -> Result<(i64, u64, u64, u64), Stop> {
    let port = free_port()?;
    let mut cmd = Command::new(&p.server);
    cmd.args(&server_argv(p, port, dir)[1..]);
    let log = dir.join("server2.log");
    log_to(&mut cmd, &log)?;
    let mut srv = runner::spawn(&mut cmd, None).map_err(Stop::Error)?;
    let mut c = ready(&mut srv, port, deadline, &log)?;
    let n = dbsize(&mut c)?;
    let (cnt, bad, h) = sample(&mut c, p)?;
    shutdown(&mut c);
    drop(c);
    let _ = srv.wait(deadline, &mut |_| {});
    Ok((n, cnt, bad, h))
}

fn shutdown(c: &mut Conn) {
    // The server closes the connection instead of answering.
    let _ = c.cmd(&[b"SHUTDOWN", b"NOSAVE"]);
}

/// What a scenario run gives back: the server under test's wait result (its peak RSS; the
/// whole scenario's time), an error if a step failed, and the output written to `stdout`.
pub struct Outcome {
    /// The server under test (stacks set on timeout).
    pub waited: Waited,
    /// A step that failed (not a timeout).
    pub error: Option<String>,
}

/// Run the scenario once. `wrap` turns the server's argv into the command for the side
/// (native, cgroup, uswap run); its output is written to `stdout`.
pub fn run(
    p: &Plan,
    dir: &Path,
    stdout: &Path,
    wrap: &dyn Fn(&[OsString]) -> Result<Command, String>,
    deadline: Instant,
    print: &mut dyn FnMut(&str),
) -> Outcome {
    let start = Instant::now();
    let mut server: Option<Proc> = None;
    let res = scenario(p, dir, stdout, wrap, deadline, &mut server);
    let secs = start.elapsed().as_secs_f64();
    let _ = std::fs::remove_file(dir.join("dump.rdb"));
    let Some(mut srv) = server else {
        let error = match res {
            Err(Stop::Error(e)) | Err(Stop::Timeout(e)) => Some(e),
            Ok(()) => Some("the server never started".into()),
        };
        return Outcome { waited: Waited { status: None, peak_rss: 0, secs, stacks: None, pid: 0 }, error };
    };
    match res {
        Ok(()) => {
            let mut w = srv.wait(deadline, print);
            w.secs = secs;
            Outcome { waited: w, error: None }
        }
        Err(Stop::Timeout(what)) => {
            print(&format!("redis scenario: {what}"));
            // Dump the stacks of the server's tree now and kill it.
            let mut w = srv.wait(Instant::now(), print);
            w.secs = secs;
            if w.stacks.is_none() {
                w.stacks = Some(format!("(the server had already ended: {})", w.describe()));
            }
            Outcome { waited: w, error: None }
        }
        Err(Stop::Error(e)) => {
            srv.kill();
            let mut w = srv.wait(Instant::now(), &mut |_| {});
            w.secs = secs;
            Outcome { waited: w, error: Some(e) }
        }
    }
}

fn scenario(
    p: &Plan,
    dir: &Path,
    stdout: &Path,
    wrap: &dyn Fn(&[OsString]) -> Result<Command, String>,
    deadline: Instant,
    server: &mut Option<Proc>,
) -> Result<(), Stop> {
    let port = free_port()?;
    let mut cmd = wrap(&server_argv(p, port, dir)).map_err(Stop::Error)?;
    let log = dir.join("server.log");
    log_to(&mut cmd, &log)?;
    let srv = server.insert(runner::spawn(&mut cmd, None).map_err(Stop::Error)?);
    let pgid = srv.pgid;
    let mut c = ready(srv, port, deadline, &log)?;

    load(&mut c, p)?;

    // BGSAVE under a GET load.
    match c.cmd(&[b"BGSAVE"]).map_err(|e| io_stop("BGSAVE", e))? {
        Reply::Status(_) => {}
        r => return Err(Stop::Error(format!("BGSAVE answered {r:?}"))),
    }
    let mut bench = Command::new(&p.benchmark);
    bench.args(["-h", "127.0.0.1", "-p", &port.to_string(), "-t", "get", "-c", "8", "-q"]).args([
        "-n",
        &p.keys.to_string(),
        "-r",
        &p.keys.to_string(),
    ]);
    log_to(&mut bench, &dir.join("benchmark.log"))?;
    let mut b = runner::spawn(&mut bench, Some(pgid)).map_err(Stop::Error)?;
    crate::kernel::set_child(-pgid);
    let bw = b.wait(deadline, &mut |_| {});
    if bw.stacks.is_some() {
        return Err(Stop::Timeout("redis-benchmark -t get during BGSAVE did not finish".into()));
    }
    if !bw.success() {
        let log = std::fs::read_to_string(dir.join("benchmark.log")).unwrap_or_default();
        return Err(Stop::Error(format!("redis-benchmark: {}: {}", bw.describe(), log.trim())));
    }
    loop {
        if bgsave_done(&mut c)? {
            break;
        }
        if Instant::now() > deadline {
            return Err(Stop::Timeout("BGSAVE did not finish".into()));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let n = dbsize(&mut c)?;
    let (cnt, bad, h) = sample(&mut c, p)?;
    shutdown(&mut c);
    drop(c);
    let w = srv.wait(deadline, &mut |_| {});
    if w.stacks.is_some() {
        return Err(Stop::Timeout("redis-server did not exit after SHUTDOWN".into()));
    }

    // Reload the dump in a second server, natively.
    let (n2, cnt2, bad2, h2) = reload(p, dir, deadline)?;
    crate::kernel::set_child(-pgid);

    let out = format!(
        "keys {} value_len {}\ndbsize {n}\nsample {cnt} mismatches {bad} fnv {h:016x}\nbgsave ok\n\
         reloaded dbsize {n2}\nreloaded sample {cnt2} mismatches {bad2} fnv {h2:016x}\n",
        p.keys, p.value_len
    );
    std::fs::write(stdout, out).map_err(|e| Stop::Error(format!("{}: {e}", stdout.display())))?;
    // Put the server back for the caller, already reaped (its wait result is cached below).
    *server = Some(Proc::reaped(w));
    Ok(())
}

/// What the BGSAVE throughput scenario measured on one side (`uswap bench redis`).
#[derive(Debug, Clone, Default)]
pub struct Throughput {
    /// Seconds to load the keys (pipelined SETs).
    pub load_s: f64,
    /// GET requests per second with no BGSAVE running.
    pub get_rps: f64,
    /// GET requests per second while a BGSAVE runs (started just before).
    pub bgsave_get_rps: f64,
    /// Seconds from BGSAVE to `rdb_bgsave_in_progress:0`.
    pub bgsave_s: f64,
    /// Milliseconds the BGSAVE's `fork` took in the server (Redis's `latest_fork_usec`): the
    /// time the server stopped serving to fork, atfork handlers included.
    pub fork_ms: f64,
    /// The largest sum of the proportional set sizes (Pss: a page shared copy-on-write by the
    /// server and its BGSAVE child counts half in each) of the tree's redis-server processes,
    /// sampled every 50 ms: the memory the tree holds.
    pub tree_peak_pss: u64,
    /// Pages swapped in per GET with no BGSAVE running, and pages swapped in during the
    /// BGSAVE phase (the server and its child), read from `swapins` (None when it could not be
    /// read).
    pub get_swapin_pages_per_get: Option<f64>,
    pub bgsave_swapin_pages: Option<u64>,
    /// DBSIZE, the sampled values and the reloaded dump all right.
    pub correct: bool,
    /// What was checked, or what was wrong.
    pub detail: String,
}

/// Sums the Pss of a tree's `redis-server` processes every 50 ms, keeping the largest.
fn sample_servers(pgid: i32, root: i32) -> uswap_run::live::PeakSampler {
    uswap_run::live::PeakSampler::start(Duration::from_millis(50), move |peak| {
        let servers: Vec<i32> = runner::tree(pgid, root)
            .into_iter()
            .filter(|p| std::fs::read_to_string(format!("/proc/{p}/comm")).is_ok_and(|c| c.trim() == "redis-server"))
            .collect();
        uswap_run::procsum::pss_if_above(&servers, "Pss:", peak).map(|v| (v, 0))
    })
}

/// `redis-benchmark -q`'s figure: the last "GET: N requests per second".
fn parse_rps(out: &str) -> Option<f64> {
    let at = out.rfind("GET: ")?;
    out[at + 5..].split_whitespace().next()?.parse().ok()
}

/// Run `redis-benchmark -t get` against `port` (`requests` GETs of random loaded keys, 8
/// connections) in group `pgid`; its requests per second.
fn get_load(p: &Plan, port: u16, pgid: i32, requests: u64, dir: &Path, deadline: Instant) -> Result<f64, Stop> {
    let log = dir.join("benchmark.log");
    let mut bench = Command::new(&p.benchmark);
    bench.args(["-h", "127.0.0.1", "-p", &port.to_string(), "-t", "get", "-c", "8", "-q"]).args([
        "-n",
        &requests.to_string(),
        "-r",
        &p.keys.to_string(),
    ]);
    log_to(&mut bench, &log)?;
    let mut b = runner::spawn(&mut bench, Some(pgid)).map_err(Stop::Error)?;
    let bw = b.wait(deadline, &mut |_| {});
    let out = std::fs::read_to_string(&log).unwrap_or_default();
    if bw.stacks.is_some() {
        return Err(Stop::Timeout("redis-benchmark -t get did not finish".into()));
    }
    if !bw.success() {
        return Err(Stop::Error(format!("redis-benchmark: {}: {}", bw.describe(), out.trim())));
    }
    parse_rps(&out).ok_or_else(|| Stop::Error(format!("redis-benchmark printed no GET rate: {}", out.trim())))
}

/// The BGSAVE throughput scenario: load the keys, measure GETs per second without and then
/// during a BGSAVE (and how long the BGSAVE takes), check DBSIZE and sampled values, shut the
/// server down and reload its dump natively. `wrap` makes the server's command for the side.
/// Returns the figures, and the server's wait result (stacks on a timeout).
///
/// `swapins(pid)` reads the pages the side has swapped in so far (`pid`: the process started
/// for the server, `uswap run` on the uswap side); it is read between the phases, each time
/// after [`SWAPIN_SETTLE`].
pub fn throughput(
    p: &Plan,
    dir: &Path,
    wrap: &dyn Fn(&[OsString]) -> Result<Command, String>,
    swapins: &dyn Fn(i32) -> Option<u64>,
    requests: u64,
    deadline: Instant,
) -> (Result<Throughput, String>, Option<Waited>) {
    let mut server: Option<Proc> = None;
    let mut sampler: Option<uswap_run::live::PeakSampler> = None;
    let res = throughput_steps(p, dir, wrap, swapins, requests, deadline, &mut server, &mut sampler);
    let peak = sampler.map_or(0, |s| s.finish().value);
    let _ = std::fs::remove_file(dir.join("dump.rdb"));
    let waited = server.map(|mut srv| match &res {
        Ok(_) => srv.wait(deadline, &mut |_| {}),
        Err(Stop::Timeout(_)) => srv.wait(Instant::now(), &mut |_| {}),
        Err(Stop::Error(_)) => {
            srv.kill();
            srv.wait(Instant::now(), &mut |_| {})
        }
    });
    let res = match res {
        Ok(mut t) => {
            t.tree_peak_pss = peak;
            Ok(t)
        }
        Err(Stop::Timeout(e)) => Err(format!("timeout: {e}")),
        Err(Stop::Error(e)) => Err(e),
    };
    (res, waited)
}

/// How long to wait before reading the swap-ins between phases: `uswap run`'s processes
/// rewrite their statistics every 500 ms (`live::SNAPSHOT_MS`), so a reading this long after
/// the load stopped has all of it.
pub const SWAPIN_SETTLE: Duration = Duration::from_millis(600);

#[expect(clippy::too_many_arguments, reason = "the steps of one scenario, called from one place")]
fn throughput_steps(
    p: &Plan,
    dir: &Path,
    wrap: &dyn Fn(&[OsString]) -> Result<Command, String>,
    swapins: &dyn Fn(i32) -> Option<u64>,
    requests: u64,
    deadline: Instant,
    server: &mut Option<Proc>,
    sampler: &mut Option<uswap_run::live::PeakSampler>,
) -> Result<Throughput, Stop> {
    let port = free_port()?;
    let mut cmd = wrap(&server_argv(p, port, dir)).map_err(Stop::Error)?;
    let log = dir.join("server.log");
    log_to(&mut cmd, &log)?;
    let srv = server.insert(runner::spawn(&mut cmd, None).map_err(Stop::Error)?);
    let (pgid, root) = (srv.pgid, srv.pid);
    *sampler = Some(sample_servers(pgid, root));
    let mut c = ready(srv, port, deadline, &log)?;
    let mut t = Throughput::default();
    let t0 = Instant::now();
    load(&mut c, p)?;
    t.load_s = t0.elapsed().as_secs_f64();
    let settled = || {
        std::thread::sleep(SWAPIN_SETTLE);
        swapins(root)
    };
    let s0 = settled();
    t.get_rps = get_load(p, port, pgid, requests, dir, deadline)?;
    let s1 = settled();
    t.get_swapin_pages_per_get = s0.zip(s1).map(|(a, b)| b.saturating_sub(a) as f64 / requests as f64);
    // BGSAVE, and the same GET load at once; the BGSAVE's time is measured by polling INFO
    // from this connection meanwhile (the benchmark runs in its own process).
    let b0 = Instant::now();
    match c.cmd(&[b"BGSAVE"]).map_err(|e| io_stop("BGSAVE", e))? {
        Reply::Status(_) => {}
        r => return Err(Stop::Error(format!("BGSAVE answered {r:?}"))),
    }
    let (tx, rx) = std::sync::mpsc::channel();
    let (pp, dd) = (p.clone(), dir.to_path_buf());
    std::thread::spawn(move || {
        let _ = tx.send(get_load(&pp, port, pgid, requests, &dd, deadline).map_err(|e| match e {
            Stop::Timeout(m) | Stop::Error(m) => m,
        }));
    });
    // Until both the GETs and the BGSAVE (which may outlast them) are done.
    let (mut bgsave_s, mut rps) = (None, None);
    while bgsave_s.is_none() || rps.is_none() {
        if bgsave_s.is_none() && bgsave_done(&mut c)? {
            bgsave_s = Some(b0.elapsed().as_secs_f64());
        }
        match rx.try_recv() {
            Ok(r) => rps = Some(r.map_err(Stop::Error)?),
            Err(std::sync::mpsc::TryRecvError::Empty) => {}
            Err(_) if rps.is_some() => {}
            Err(e) => return Err(Stop::Error(format!("the GET load thread: {e}"))),
        }
        if Instant::now() > deadline {
            let what = if rps.is_none() { "GETs during BGSAVE did not finish" } else { "BGSAVE did not finish" };
            return Err(Stop::Timeout(what.into()));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    t.bgsave_get_rps = rps.unwrap_or(0.0);
    t.bgsave_s = bgsave_s.unwrap_or(0.0);
    t.bgsave_swapin_pages = s1.zip(settled()).map(|(a, b)| b.saturating_sub(a));
    t.fork_ms = latest_fork_usec(&mut c)? as f64 / 1000.0;
    let n = dbsize(&mut c)?;
    let (cnt, bad, _) = sample(&mut c, p)?;
    shutdown(&mut c);
    drop(c);
    // Reload the dump natively.
    let (n2, cnt2, bad2, _) = reload(p, dir, deadline)?;
    t.correct = n == p.keys as i64 && n2 == n && bad == 0 && bad2 == 0;
    t.detail = format!(
        "dbsize {n} of {}, {bad} of {cnt} sampled values wrong; reloaded dump: dbsize {n2}, {bad2} of {cnt2} wrong",
        p.keys
    );
    Ok(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_deterministic_and_sized() {
        assert_eq!(value(7, 1000), value(7, 1000));
        assert_ne!(value(7, 1000), value(8, 1000));
        assert_eq!(value(123_456, 1000).len(), 1000);
        assert_eq!(key(42), "key:000000000042");
    }

    #[test]
    fn redis_benchmark_rates_are_parsed() {
        let out = "GET: rps=0.0 (overall: nan) avg_msec=nan (overall: nan)\r\rGET: 81234.56 requests per second, p50=0.087 msec\n";
        assert_eq!(parse_rps(out), Some(81234.56));
        assert_eq!(parse_rps("SET: 5 requests per second"), None);
    }

    #[test]
    fn resp_encoding() {
        let mut b = Vec::new();
        Conn::encode(&mut b, &[b"SET", b"k", b"v1"]);
        assert_eq!(b, b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$2\r\nv1\r\n");
    }
}
