//! `uswap bench drain`: online drain ("swapoff") of a tier while its entries stay valid,
//! against the kernel's `swapoff` of the same amount from zram.
//!
//! uswap: an [`Engine`] is filled with `--mib` of pages (synthetic heap-like data, about 2-3x
//! compressible, no zero pages), then [`Engine::drain_tier`] empties one tier: the pool into
//! memory (the swapoff analogue), the encrypted file into memory, and the pool into the file.
//! A sample of entries is swapped in and compared afterwards. Reported per case:
//! `drain_s_per_gib` (seconds per GiB of original data moved); at the top, the pool and file
//! drains against the kernel's swapoff of the same run (`ratio_to_kernel_swapoff`,
//! `file_ratio_to_kernel_swapoff`: lower is better). The drain is batched per cluster and runs
//! on `--threads` threads ([`Engine::set_drain_threads`]).
//!
//! Kernel (root, cgroup v1, zram): a zram device is hot-added (lz4), made swap with the top
//! priority, a forked child joins a fresh memory cgroup with a small limit and fills the same
//! amount of the same pages so most of it lands in zram; then the limit is lifted and
//! `swapoff` of the device is timed (`kernel_swapoff_s_per_gib`, per GiB actually swapped).
//! Everything is restored afterwards (child killed, swapoff, cgroup removed, zram reset and
//! removed), also on error.

use crate::zpool::{print_tree, zram_add, ZramDev};
use indicatif::ProgressBar;
use serde_json::{json, Map, Value};
use std::ffi::CString;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;
use uswap::backend::Backend;
use uswap::tier::file::{FileConfig, FileTarget, FileTier};
use uswap::tier::zpool::{PoolConfig, ZPool};
use uswap::vswap::{Engine, EngineConfig};
use uswap::PAGE_SIZE;
use uswap_run::exit::{CliError, CliResult};

/// Options of `uswap bench drain`.
#[derive(clap::Args, Debug)]
#[command(after_help = "Examples:\n  uswap bench drain\n  uswap bench drain --no-kernel --json")]
pub struct Args {
    /// Print one JSON object instead of a table.
    #[arg(long)]
    pub json: bool,
    /// MiB of data to drain.
    #[arg(long, default_value_t = 1024)]
    pub mib: usize,
    /// MiB for the two cases that involve the swap file (kept smaller so the default run
    /// stays under a minute on a 2-vCPU machine; results are per GiB).
    #[arg(long, default_value_t = 256)]
    pub file_mib: usize,
    /// Folio order for the uswap side (0 = 4 KiB pages, as the kernel's zram swap).
    #[arg(long, default_value_t = 0)]
    pub order: u8,
    /// Directory of the swap file.
    #[arg(long, default_value = "/var/tmp")]
    pub dir: PathBuf,
    /// Memory limit of the kernel side's cgroup, in MiB.
    #[arg(long, default_value_t = 64)]
    pub limit_mib: usize,
    /// Skip the kernel comparison.
    #[arg(long)]
    pub no_kernel: bool,
    /// Drain threads (the caller's included; 0 = the engine's default: the CPUs, at most 4).
    #[arg(long, default_value_t = 0)]
    pub threads: usize,
}

const GIB: f64 = (1u64 << 30) as f64;

/// Page `i` of the workload: heap-like words (pointers, small counters, a few random words).
/// Pure computation, no allocation (it runs in a forked child too).
fn gen_page(i: u64, page: &mut [u8]) {
    let mut x = i.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    for (j, w) in page.chunks_exact_mut(8).enumerate() {
        let j = j as u64;
        let v = match j % 8 {
            0 | 4 => 0x7f3a_0000_0000 + i * 4096 + j * 8,
            1 => j % 100,
            2 | 6 => 0x0000_6d65_7469 + (j & 3),
            7 => {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x
            }
            _ => i,
        };
        w.copy_from_slice(&v.to_le_bytes());
    }
}

/// Bytes a uswap case moves, for the progress bar: the fill, then the drain of all of it.
fn case_work(bytes: usize, order: u8) -> u64 {
    let folio = PAGE_SIZE << order;
    2 * (bytes / folio * folio) as u64
}

/// Bytes filled between two progress updates (the fill is timed but not the figure reported).
const PROGRESS_BYTES: usize = 4 << 20;

/// One uswap case; advances `pb` by [`case_work`]: during the fill once per
/// [`PROGRESS_BYTES`], and by the whole drain once it is done.
fn uswap_case(
    name: &str,
    tiers: Vec<Arc<dyn Backend>>,
    drain: usize,
    bytes: usize,
    order: u8,
    threads: usize,
    pb: &ProgressBar,
) -> Result<Value, CliError> {
    let folio = PAGE_SIZE << order;
    let n = bytes / folio;
    let per_inc = (PROGRESS_BYTES / folio).max(1);
    let pages = (n * folio / PAGE_SIZE) as u64;
    let eng = Engine::new(
        EngineConfig { virtual_slots: pages + (4 << 9), zero_elision: true, ..EngineConfig::default() },
        tiers,
    )
    .map_err(|e| CliError::fail(format!("{name}: {e}")))?;
    if threads > 0 {
        eng.set_drain_threads(threads);
    }
    let mut buf = vec![0u8; folio];
    let mut entries = Vec::with_capacity(n);
    let t = Instant::now();
    for i in 0..n {
        for (k, p) in buf.chunks_exact_mut(PAGE_SIZE).enumerate() {
            gen_page((i * (folio / PAGE_SIZE) + k) as u64, p);
        }
        entries.push(eng.swap_out(0, &buf).map_err(|e| CliError::fail(format!("{name}: swap_out: {e}")))?);
        if (i + 1) % per_inc == 0 {
            pb.inc((per_inc * folio) as u64);
        }
    }
    let fill = t.elapsed();
    pb.inc((n % per_inc * folio) as u64);
    let before = eng.tier_usage(drain).map_err(|e| CliError::fail(e.to_string()))?;
    let t = Instant::now();
    let moved = eng.drain_tier(drain).map_err(|e| CliError::fail(format!("{name}: drain: {e}")))?;
    let dt = t.elapsed();
    pb.inc((n * folio) as u64);
    let after = eng.tier_usage(drain).map_err(|e| CliError::fail(e.to_string()))?;
    // Check a sample byte for byte.
    let mut out = vec![0u8; folio];
    for (i, e) in entries.iter().enumerate().step_by(97) {
        eng.swap_in(*e, &mut out, false).map_err(|e| CliError::fail(format!("{name}: swap_in after drain: {e}")))?;
        for (k, p) in buf.chunks_exact_mut(PAGE_SIZE).enumerate() {
            gen_page((i * (folio / PAGE_SIZE) + k) as u64, p);
        }
        if out != buf {
            return Err(CliError::fail(format!("{name}: entry {i} differs after the drain")));
        }
    }
    let moved_bytes = moved as f64 * PAGE_SIZE as f64;
    Ok(json!({
        "pages_moved": moved,
        "tier_pages_before": before.stored_pages,
        "tier_pages_after": after.stored_pages,
        "tier_bytes_before": before.used_bytes,
        "fill_s": (fill.as_secs_f64() * 1000.0).round() / 1000.0,
        "drain_s": (dt.as_secs_f64() * 1000.0).round() / 1000.0,
        "drain_s_per_gib": (dt.as_secs_f64() / (moved_bytes / GIB).max(1e-9) * 1000.0).round() / 1000.0,
    }))
}

/// Everything the kernel side set up, undone on drop in reverse order.
struct KernelRig {
    zram: Option<ZramDev>,
    dev: String,
    swap_on: bool,
    cgroup: Option<PathBuf>,
    child: Option<libc::pid_t>,
}

impl Drop for KernelRig {
    fn drop(&mut self) {
        if let Some(pid) = self.child.take() {
            // SAFETY: plain syscalls on our own child's pid.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::waitpid(pid, std::ptr::null_mut(), 0);
            }
        }
        if self.swap_on {
            if let Ok(c) = CString::new(self.dev.clone()) {
                // SAFETY: swapoff with a valid NUL-terminated path.
                unsafe { libc::swapoff(c.as_ptr()) };
            }
        }
        if let Some(cg) = self.cgroup.take() {
            for _ in 0..50 {
                if std::fs::remove_dir(&cg).is_ok() {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
        }
        drop(self.zram.take());
    }
}

fn swap_used_kib(dev: &str) -> u64 {
    std::fs::read_to_string("/proc/swaps")
        .unwrap_or_default()
        .lines()
        .find(|l| l.split_whitespace().next() == Some(dev))
        .and_then(|l| l.split_whitespace().nth(3).and_then(|u| u.parse().ok()))
        .unwrap_or(0)
}

fn kernel_swapoff(bytes: usize, limit_mib: usize) -> Result<Value, String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err("not root".into());
    }
    let cg_root = PathBuf::from("/sys/fs/cgroup/memory");
    if !cg_root.join("memory.limit_in_bytes").exists() {
        return Err("no cgroup v1 memory controller at /sys/fs/cgroup/memory".into());
    }
    let zram = zram_add()?;
    let dev = format!("/dev/zram{}", zram.id);
    let mut rig = KernelRig { dev: dev.clone(), zram: Some(zram), swap_on: false, cgroup: None, child: None };
    let z = rig.zram.as_ref().ok_or("zram")?;
    std::fs::write(z.sys("comp_algorithm"), "lz4").map_err(|e| format!("comp_algorithm: {e}"))?;
    std::fs::write(z.sys("disksize"), (bytes + (256 << 20)).to_string()).map_err(|e| format!("disksize: {e}"))?;
    let st = std::process::Command::new("mkswap").arg(&dev).output().map_err(|e| format!("mkswap: {e}"))?;
    if !st.status.success() {
        return Err(format!("mkswap {dev}: {}", String::from_utf8_lossy(&st.stderr)));
    }
    let cdev = CString::new(dev.clone()).map_err(|e| e.to_string())?;
    const SWAP_FLAG_PREFER: libc::c_int = 0x8000;
    // SAFETY: swapon with a valid NUL-terminated path and flags.
    if unsafe { libc::swapon(cdev.as_ptr(), SWAP_FLAG_PREFER | 32767) } != 0 {
        return Err(format!("swapon {dev}: {}", std::io::Error::last_os_error()));
    }
    rig.swap_on = true;
    let cg = cg_root.join(format!("uswap_bench_drain_{}", std::process::id()));
    std::fs::create_dir(&cg).map_err(|e| format!("mkdir {}: {e}", cg.display()))?;
    rig.cgroup = Some(cg.clone());
    std::fs::write(cg.join("memory.limit_in_bytes"), (limit_mib << 20).to_string())
        .map_err(|e| format!("limit: {e}"))?;
    let _ = std::fs::write(cg.join("memory.swappiness"), "100");
    let procs = CString::new(cg.join("cgroup.procs").as_os_str().as_encoded_bytes()).map_err(|e| e.to_string())?;
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: pipe with a valid two-element array.
    if unsafe { libc::pipe(fds.as_mut_ptr()) } != 0 {
        return Err(format!("pipe: {}", std::io::Error::last_os_error()));
    }
    // SAFETY: the child only makes raw syscalls and runs `gen_page` (no allocation, no locks)
    // before it pauses; it never returns into Rust code of the parent.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(format!("fork: {}", std::io::Error::last_os_error()));
    }
    if pid == 0 {
        // SAFETY: the child: async-signal-safe syscalls only; `mem` is a fresh private
        // mapping of `bytes` bytes that only this loop writes.
        unsafe {
            libc::close(fds[0]);
            let fd = libc::open(procs.as_ptr(), libc::O_WRONLY);
            if fd < 0 || libc::write(fd, b"0".as_ptr().cast(), 1) != 1 {
                libc::_exit(2);
            }
            libc::close(fd);
            let mem = libc::mmap(
                std::ptr::null_mut(),
                bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
            if mem == libc::MAP_FAILED {
                libc::_exit(3);
            }
            let s = std::slice::from_raw_parts_mut(mem.cast::<u8>(), bytes);
            for (i, p) in s.chunks_exact_mut(PAGE_SIZE).enumerate() {
                gen_page(i as u64, p);
            }
            libc::write(fds[1], b"r".as_ptr().cast(), 1);
            loop {
                libc::pause();
            }
        }
    }
    rig.child = Some(pid);
    // SAFETY: closing our copy of the write end; reading one byte into a local.
    let got = unsafe {
        libc::close(fds[1]);
        let mut b = 0u8;
        let r = libc::read(fds[0], (&mut b as *mut u8).cast(), 1);
        libc::close(fds[0]);
        r
    };
    if got != 1 {
        return Err("the filling child died (OOM?) before it was done".into());
    }
    let used = swap_used_kib(&dev) * 1024;
    if used < (bytes as u64) / 4 {
        return Err(format!("only {used} bytes reached {dev}; is another swap device preferred?"));
    }
    let mm = std::fs::read_to_string(rig.zram.as_ref().ok_or("zram")?.sys("mm_stat")).unwrap_or_default();
    // The child's own swapped bytes, and any other active swap (whose users may also have
    // swapped onto our device, which has the top priority: then the kernel side is shared).
    let child_swap = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmSwap:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024);
    let others: Vec<String> = std::fs::read_to_string("/proc/swaps")
        .unwrap_or_default()
        .lines()
        .skip(1)
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .filter(|d| d != &dev)
        .collect();
    // Lift the limit so swapoff can bring everything back without reclaim or OOM.
    std::fs::write(cg.join("memory.limit_in_bytes"), "-1").map_err(|e| format!("lift limit: {e}"))?;
    let t = Instant::now();
    // SAFETY: swapoff with a valid NUL-terminated path.
    let r = unsafe { libc::swapoff(cdev.as_ptr()) };
    let dt = t.elapsed();
    if r != 0 {
        return Err(format!("swapoff {dev}: {}", std::io::Error::last_os_error()));
    }
    rig.swap_on = false;
    drop(rig);
    Ok(json!({
        "device": dev,
        "cgroup_limit_mib": limit_mib,
        "swapped_bytes": used,
        "child_swapped_bytes": child_swap,
        "other_active_swap": others,
        "note": "swapoff time is per GiB on the device (swapped_bytes); other processes may have swapped onto it too",
        "zram_mm_stat": mm.trim(),
        "swapoff_s": (dt.as_secs_f64() * 1000.0).round() / 1000.0,
        "kernel_swapoff_s_per_gib": (dt.as_secs_f64() / (used as f64 / GIB) * 1000.0).round() / 1000.0,
    }))
}

/// Run the benchmark.
pub fn run(a: &Args) -> CliResult {
    if a.mib < 4 || a.file_mib < 4 || a.order > 9 {
        return Err(CliError::usage("--mib and --file-mib must be at least 4, --order at most 9"));
    }
    let file_bytes = a.file_mib << 20;
    let bytes = a.mib << 20;
    let t0 = Instant::now();
    let machine = crate::kernel::machine();
    let mut out = Map::new();
    out.insert("mib".into(), json!(a.mib));
    out.insert("file_mib".into(), json!(a.file_mib));
    // Bytes: the kernel side counts as the data it fills and swaps off (one step, when done),
    // then each uswap case its fill and drain.
    let kernel_work = if a.no_kernel { 0 } else { bytes as u64 };
    let bar = uswap_run::progress::Bar::without_ticker(
        a.json,
        "uswap bench drain",
        kernel_work + case_work(bytes, a.order) + 2 * case_work(file_bytes, a.order),
        uswap_run::progress::Unit::Bytes,
    );
    // The kernel side first, while this process is still single-threaded (it forks): the bar's
    // ticker thread starts after it.
    let kernel = if a.no_kernel {
        Err("--no-kernel".to_string())
    } else {
        bar.set_message("kernel: zram swap, fill under a memory cgroup, swapoff");
        kernel_swapoff(bytes, a.limit_mib)
    };
    bar.inc(kernel_work);
    bar.tick_steadily();
    let pool = || -> Arc<dyn Backend> { Arc::new(ZPool::new("zpool:lz4", PoolConfig::default())) };
    let file = |size: usize| -> Result<Arc<dyn Backend>, CliError> {
        let cfg = FileConfig {
            target: FileTarget::TempIn(a.dir.clone()),
            size_bytes: (size as u64 + (64 << 20)).next_multiple_of(2 << 20),
            ..FileConfig::default()
        };
        Ok(Arc::new(FileTier::open(&cfg).map_err(|e| CliError::fail(format!("file tier: {e}")))?))
    };
    let mut cases = Map::new();
    bar.set_message("uswap: pool to memory");
    cases.insert(
        "pool_to_memory".into(),
        uswap_case("pool_to_memory", vec![pool()], 0, bytes, a.order, a.threads, &bar)?,
    );
    bar.set_message("uswap: file to memory");
    cases.insert(
        "file_to_memory".into(),
        uswap_case("file_to_memory", vec![file(file_bytes)?], 0, file_bytes, a.order, a.threads, &bar)?,
    );
    bar.set_message("uswap: pool to file");
    cases.insert(
        "pool_to_file".into(),
        uswap_case("pool_to_file", vec![pool(), file(file_bytes)?], 0, file_bytes, a.order, a.threads, &bar)?,
    );
    out.insert("drain_s_per_gib".into(), cases["pool_to_memory"]["drain_s_per_gib"].clone());
    out.insert("file_drain_s_per_gib".into(), cases["file_to_memory"]["drain_s_per_gib"].clone());
    out.insert("uswap".into(), Value::Object(cases));
    match kernel {
        Ok(k) => {
            out.insert("kernel_swapoff_s_per_gib".into(), k["kernel_swapoff_s_per_gib"].clone());
            let ratio = |case: &str| -> Value {
                match (out["uswap"][case]["drain_s_per_gib"].as_f64(), k["kernel_swapoff_s_per_gib"].as_f64()) {
                    (Some(u), Some(kk)) if kk > 0.0 => json!((u / kk * 1000.0).round() / 1000.0),
                    _ => Value::Null,
                }
            };
            let (rp, rf) = (ratio("pool_to_memory"), ratio("file_to_memory"));
            out.insert("ratio_to_kernel_swapoff".into(), rp);
            out.insert("file_ratio_to_kernel_swapoff".into(), rf);
            out.insert("kernel".into(), k);
        }
        Err(why) => {
            out.insert("kernel_swapoff_s_per_gib".into(), Value::Null);
            out.insert("kernel".into(), json!({ "skipped": why }));
        }
    }
    out.insert("order".into(), json!(a.order));
    out.insert("threads".into(), json!(a.threads));
    out.insert("elapsed_s".into(), json!((t0.elapsed().as_secs_f64() * 100.0).round() / 100.0));
    bar.done();
    if a.json {
        println!("{}", uswap_run::report::with_header("drain", machine, Value::Object(out)));
    } else {
        print_tree("drain", &Value::Object(out));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_case_advances_the_bar_by_its_fill_and_drain() {
        // 4 MiB + 3 folios: the last, partial batch is counted too.
        for (bytes, order) in [(PROGRESS_BYTES + 3 * PAGE_SIZE, 0u8), (PROGRESS_BYTES + (3 << 16), 4)] {
            let bar = ProgressBar::hidden();
            let pool: Arc<dyn Backend> = Arc::new(ZPool::new("zpool:lz4", PoolConfig::default()));
            let v = uswap_case("t", vec![pool], 0, bytes, order, 0, &bar).unwrap();
            assert_eq!(bar.position(), case_work(bytes, order), "order {order}");
            assert_eq!(case_work(bytes, order), 2 * bytes as u64);
            assert_eq!(v["tier_pages_after"], 0);
        }
    }
}
