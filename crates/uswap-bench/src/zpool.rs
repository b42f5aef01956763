//! `uswap bench zpool`: the compressed pool on a mixed corpus built on this machine (text,
//! a live program heap, machine code, zeros, random), side by side with the kernel's zram on
//! the same pages when run as root.
//!
//! uswap side: every page goes through the engine's zero check (zero pages cost nothing) and
//! then [`ZPool::store`]; then every page is loaded back and compared. Reported: compress and
//! decompress MB/s (of original data, single thread), RAM bytes per stored page
//! (`pool_total_size / pages`), per category, for lz4 and zstd, and large folios stored whole
//! against per page. Also the zero check itself (ns per 4 KiB page, hot and cold).
//!
//! Recompression (key `recompression`): the lz4 4 KiB run and the 64 KiB whole-folio run then
//! mark everything idle, run one [`ZPool::recompress`] pass with zstd at `--recomp-level` and
//! one compaction pass, and report RAM per page after it, its ratio to zram from the same run,
//! the pass's thread CPU time (µs per recompressed page, MB/s) and the load speed of the
//! recompressed objects; every unit is loaded back and compared.
//!
//! zram side (root only): a zram device is hot-added (never one in use), set to lz4, the same
//! pages are written with O_DIRECT and read back (and compared), `mm_stat` gives
//! `mem_used_total`; the device is reset and removed afterwards whatever happens.

use indicatif::ProgressBar;
use serde_json::{json, Map, Value};
use std::io::Read;
use std::time::{Duration, Instant};
use uswap::backend::Backend;
use uswap::internals::zero;
use uswap::tier::zpool::{Compressor, FolioMode, PoolConfig, ZPool};
use uswap::{SwapEntry, PAGE_SIZE};
use uswap_run::exit::{CliError, CliResult};

/// Options of `uswap bench zpool`.
#[derive(clap::Args, Debug)]
#[command(after_help = "Examples:\n  uswap bench zpool\n  uswap bench zpool --mib 64 --no-zram --json")]
pub struct Args {
    /// Print one JSON object instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Corpus size in MiB (split text 25%, heap 25%, code 25%, zeros 12.5%, random 12.5%).
    #[arg(long, default_value_t = 64)]
    pub mib: usize,
    /// Store a page compressed only below this percent of its size (else raw).
    #[arg(long)]
    pub threshold: Option<u8>,
    /// Skip the kernel zram comparison.
    #[arg(long)]
    pub no_zram: bool,
    /// zstd level of the recompression pass measured after the lz4 runs (4 KiB pages and
    /// 64 KiB whole folios): `recomp=zstd`, `recomp_level=N`.
    #[arg(long, default_value_t = uswap::config::DEFAULT_RECOMP_LEVEL)]
    pub recomp_level: i32,
}

/// A category of pages.
pub struct Category {
    /// Name ("text", "heap", "code", "zero", "random").
    pub name: &'static str,
    /// Where the pages came from.
    pub source: String,
    /// The pages (a multiple of PAGE_SIZE bytes).
    pub data: Vec<u8>,
}

fn rng_fill(buf: &mut [u8], seed: u64) {
    use rand::{RngCore, SeedableRng};
    rand::rngs::SmallRng::seed_from_u64(seed).fill_bytes(buf);
}

/// Pages of files under `roots` accepted by `want`, up to `bytes` bytes, skipping all-zero pages.
fn file_pages(roots: &[&str], want: &dyn Fn(&std::path::Path, &[u8]) -> bool, bytes: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(bytes);
    let mut stack: Vec<std::path::PathBuf> = roots.iter().map(Into::into).collect();
    let mut head = [0u8; 4];
    while let Some(p) = stack.pop() {
        if out.len() >= bytes {
            break;
        }
        let Ok(md) = std::fs::symlink_metadata(&p) else { continue };
        if md.is_dir() {
            if let Ok(rd) = std::fs::read_dir(&p) {
                let mut v: Vec<_> = rd.flatten().map(|e| e.path()).collect();
                v.sort();
                v.reverse();
                stack.extend(v);
            }
            continue;
        }
        if !md.is_file() || md.len() < 64 {
            continue;
        }
        let Ok(mut f) = std::fs::File::open(&p) else { continue };
        if f.read_exact(&mut head).is_err() || !want(&p, &head) {
            continue;
        }
        let mut v = Vec::new();
        if std::io::Read::take(&mut std::fs::File::open(&p).unwrap_or(f), 4 << 20).read_to_end(&mut v).is_err() {
            continue;
        }
        for c in v.chunks(PAGE_SIZE) {
            if out.len() >= bytes {
                break;
            }
            let mut page = [0u8; PAGE_SIZE];
            page[..c.len()].copy_from_slice(c);
            if !zero::is_zero(&page) {
                out.extend_from_slice(&page);
            }
        }
    }
    out
}

/// Non-zero anonymous pages of a live python3 process building dicts (via /proc/PID/mem).
fn python_heap(bytes: usize) -> Result<Vec<u8>, String> {
    use std::io::{BufRead, BufReader};
    use std::os::unix::fs::FileExt;
    let script = "import sys\nd=[{'k%d'%i:[i,str(i)*3,(i,i*2.5)],'name':'item%d'%i} for i in range(300000)]\nprint('ready',flush=True)\nsys.stdin.read()\n";
    let mut child = std::process::Command::new("python3")
        .args(["-c", script])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| format!("python3: {e}"))?;
    let pid = child.id();
    let res = (|| {
        let mut line = String::new();
        BufReader::new(child.stdout.take().ok_or("no stdout")?).read_line(&mut line).map_err(|e| e.to_string())?;
        if !line.starts_with("ready") {
            return Err("python3 did not start".to_string());
        }
        let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).map_err(|e| e.to_string())?;
        let mem = std::fs::File::open(format!("/proc/{pid}/mem")).map_err(|e| e.to_string())?;
        let mut out = Vec::with_capacity(bytes);
        let mut page = vec![0u8; PAGE_SIZE];
        for l in maps.lines() {
            let f: Vec<&str> = l.split_whitespace().collect();
            // Anonymous (no path) or [heap] read-write private mappings.
            if f.len() < 5 || !f[1].starts_with("rw") || !(f.len() == 5 || f[5] == "[heap]") {
                continue;
            }
            let Some((a, b)) = f[0].split_once('-') else { continue };
            let (Ok(a), Ok(b)) = (u64::from_str_radix(a, 16), u64::from_str_radix(b, 16)) else { continue };
            let mut at = a;
            while at < b && out.len() < bytes {
                if mem.read_exact_at(&mut page, at).is_ok() && !zero::is_zero(&page) {
                    out.extend_from_slice(&page);
                }
                at += PAGE_SIZE as u64;
            }
        }
        Ok(out)
    })();
    let _ = child.kill();
    let _ = child.wait();
    res
}

/// A synthetic heap: small objects with pointers, lengths and short strings.
fn synthetic_heap(bytes: usize) -> Vec<u8> {
    let mut out = vec![0u8; bytes];
    let mut x = 0x7f3a_1000_0000u64;
    for (i, c) in out.chunks_exact_mut(64).enumerate() {
        x = x.wrapping_add(64 + (i as u64 % 7) * 16);
        c[..8].copy_from_slice(&x.to_le_bytes());
        c[8..16].copy_from_slice(&((i % 1000) as u64).to_le_bytes());
        let s = format!("key_{:08}", i * 2654435761 % 100_000_000);
        c[16..16 + s.len()].copy_from_slice(s.as_bytes());
    }
    out
}

/// Build the mixed corpus (`bytes` total).
pub fn build_corpus(bytes: usize) -> Vec<Category> {
    let quarter = bytes / 4 / PAGE_SIZE * PAGE_SIZE;
    let eighth = bytes / 8 / PAGE_SIZE * PAGE_SIZE;
    let is_text = |p: &std::path::Path, h: &[u8]| {
        let ext = p.extension().and_then(|e| e.to_str()).unwrap_or("");
        !matches!(ext, "gz" | "xz" | "bz2" | "zst" | "png" | "jpg" | "svg" | "pyc")
            && h.iter().all(|&b| b == b'\n' || b == b'\t' || (32..127).contains(&b))
    };
    let mut text = file_pages(&["/usr/share/doc", "/usr/share/common-licenses", "/usr/lib/python3"], &is_text, quarter);
    let text_src = "/usr/share/doc, /usr/share/common-licenses, /usr/lib/python3* (plain text files)".to_string();
    if text.len() < quarter {
        text.extend(file_pages(&["/usr/include", "/usr/share"], &is_text, quarter - text.len()));
    }
    let (heap, heap_src) = match python_heap(quarter) {
        Ok(h) if h.len() >= quarter / 2 => {
            (h, "python3 building 300k dicts, anonymous rw pages via /proc/PID/mem".to_string())
        }
        Ok(_) | Err(_) => (synthetic_heap(quarter), "synthetic heap (python3 unavailable)".to_string()),
    };
    let is_elf = |_: &std::path::Path, h: &[u8]| h == b"\x7fELF";
    let code = file_pages(&["/usr/lib/x86_64-linux-gnu", "/usr/bin", "/usr/lib"], &is_elf, quarter);
    let mut random = vec![0u8; eighth];
    rng_fill(&mut random, 42);
    vec![
        Category { name: "text", source: text_src, data: text },
        Category { name: "heap", source: heap_src, data: heap },
        Category { name: "code", source: "ELF files in /usr/lib/x86_64-linux-gnu, /usr/bin".to_string(), data: code },
        Category { name: "zero", source: "zero pages".to_string(), data: vec![0u8; eighth] },
        Category { name: "random", source: "random bytes".to_string(), data: random },
    ]
}

fn mbs(bytes: usize, d: Duration) -> f64 {
    bytes as f64 / 1e6 / d.as_secs_f64().max(1e-9)
}

fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

/// Pool runs per benchmark: lz4 and zstd per page, then 64 KiB and 2 MiB folios in three modes.
const POOL_RUNS: u64 = 2 + 2 * 3;

struct PoolRun {
    compress_mb_s: f64,
    decompress_mb_s: f64,
    bytes_per_page: f64,
    per_category: Map<String, Value>,
    /// After a recompression pass (when the config has a secondary algorithm).
    recompressed: Option<Value>,
}

/// Mark everything idle, recompress the idle objects, compact; then load every unit back
/// (timed) and compare. `handles[k]` is unit `k`'s handle (owner `SwapEntry(k)`).
fn recompress_pass(
    pool: &ZPool,
    corpus: &[Category],
    unit: usize,
    handles: &mut [Option<u64>],
    pages_all: u64,
) -> Result<Value, CliError> {
    let before = pool.usage().used_bytes;
    pool.mark_idle();
    let mut moved = vec![false; handles.len()];
    let t = Instant::now();
    let r = pool.recompress(true, &mut |owner, old, new| match handles.get_mut(owner.0 as usize) {
        Some(Some(h)) if *h == old => {
            *h = new;
            moved[owner.0 as usize] = true;
            true
        }
        _ => false,
    });
    let wall = t.elapsed();
    let after_pass = pool.usage().used_bytes;
    let compacted = pool.compact(&mut |owner, old, new| match handles.get_mut(owner.0 as usize) {
        Some(Some(h)) if *h == old => {
            *h = new;
            true
        }
        _ => false,
    });
    let after = pool.usage().used_bytes;
    // Every unit back and compared; the recompressed ones (zstd now) timed apart.
    let mut out = vec![0u8; unit];
    let (mut k, mut bytes, mut td) = (0, 0usize, Duration::ZERO);
    for c in corpus {
        for u in c.data.chunks_exact(unit) {
            match handles[k] {
                Some(h) => {
                    let t = Instant::now();
                    pool.load(h, &mut out).map_err(|e| CliError::fail(format!("load after recompression: {e}")))?;
                    if moved[k] {
                        td += t.elapsed();
                        bytes += unit;
                    }
                }
                None => out.fill(0),
            }
            k += 1;
            if out != u {
                return Err(CliError::fail(format!("{}: data mismatch after recompression", c.name)));
            }
        }
    }
    pool.check_invariants().map_err(CliError::fail)?;
    let st = pool.stats();
    let recompressed_bytes = r.pages as usize * PAGE_SIZE;
    Ok(json!({
        "algorithm": format!("{:?}", pool.config().recompress),
        "bytes_per_page": round2(after as f64 / pages_all.max(1) as f64),
        "bytes_per_page_before": round2(before as f64 / pages_all.max(1) as f64),
        "bytes_per_page_before_compaction": round2(after_pass as f64 / pages_all.max(1) as f64),
        "compacted_bytes": compacted,
        "num_recompressed": r.objects,
        "recompressed_pages": r.pages,
        "recompress_kept": r.kept,
        "recompress_saved_bytes": r.saved_bytes,
        "recompress_cpu_ms": round2(r.cpu_ns as f64 / 1e6),
        "recompress_wall_ms": round2(wall.as_secs_f64() * 1e3),
        "recompress_cpu_us_per_page": round2(r.cpu_ns as f64 / 1e3 / r.pages.max(1) as f64),
        "recompress_mb_s_cpu": round2(recompressed_bytes as f64 / 1e3 / (r.cpu_ns.max(1) as f64 / 1e6)),
        "decompress_mb_s_recompressed": round2(mbs(bytes, td)),
        "pool_num_recompressed": st.num_recompressed,
    }))
}

/// Store every page (zero pages elided as the engine does), then load and compare. Advances
/// `pb` by twice the corpus's pages, per category after its timed store and load loops.
fn run_pool(corpus: &[Category], cfg: PoolConfig, unit: usize, pb: &ProgressBar) -> Result<PoolRun, CliError> {
    let pool = ZPool::new("bench", cfg);
    let mut per_category = Map::new();
    let mut handles = Vec::new();
    let (mut tc, mut td, mut total) = (Duration::ZERO, Duration::ZERO, 0usize);
    let mut pages_all = 0u64;
    for c in corpus {
        let before = pool.usage().used_bytes;
        let t = Instant::now();
        for u in c.data.chunks_exact(unit) {
            if zero::is_zero(u) {
                handles.push(None);
                continue;
            }
            let owner = SwapEntry(handles.len() as u64);
            let st = pool.store(u, owner).map_err(|e| CliError::fail(format!("store: {e}")))?;
            handles.push(Some(st.handle));
        }
        let dt = t.elapsed();
        tc += dt;
        let pages = (c.data.len() / PAGE_SIZE) as u64;
        pb.inc(pages);
        pages_all += pages;
        let used = pool.usage().used_bytes - before;
        per_category.insert(
            c.name.to_string(),
            json!({ "pages": pages, "bytes_per_page": round2(used as f64 / pages.max(1) as f64),
                    "compress_mb_s": round2(mbs(c.data.len(), dt)) }),
        );
        total += c.data.len();
    }
    let mut out = vec![0u8; unit];
    let mut k = 0;
    for c in corpus {
        let t = Instant::now();
        for u in c.data.chunks_exact(unit) {
            match handles[k] {
                Some(h) => pool.load(h, &mut out).map_err(|e| CliError::fail(format!("load: {e}")))?,
                None => out.fill(0),
            }
            k += 1;
            if out != u {
                return Err(CliError::fail(format!("{}: data mismatch after load", c.name)));
            }
        }
        let dt = t.elapsed();
        td += dt;
        pb.inc((c.data.len() / PAGE_SIZE) as u64);
        if let Some(Value::Object(m)) = per_category.get_mut(c.name) {
            m.insert("decompress_mb_s".into(), json!(round2(mbs(c.data.len(), dt))));
        }
    }
    pool.check_invariants().map_err(CliError::fail)?;
    let bytes_per_page = pool.usage().used_bytes as f64 / pages_all.max(1) as f64;
    let recompressed = match pool.config().recompress {
        Some(_) => Some(recompress_pass(&pool, corpus, unit, &mut handles, pages_all)?),
        None => None,
    };
    Ok(PoolRun {
        compress_mb_s: mbs(total, tc),
        decompress_mb_s: mbs(total, td),
        bytes_per_page,
        per_category,
        recompressed,
    })
}

/// The zero check: ns per 4 KiB page, hot (one page in L1) and cold (streaming a buffer much
/// larger than the caches), for the dispatched kernel and the naive loop.
fn zero_check() -> Value {
    let page = vec![0u8; PAGE_SIZE];
    let n = 200_000;
    let time_hot = |f: fn(&[u8]) -> bool| {
        let t = Instant::now();
        for _ in 0..n {
            assert!(f(std::hint::black_box(&page)));
        }
        t.elapsed().as_nanos() as f64 / n as f64
    };
    let big = 256 << 20;
    let mut buf = vec![0u8; big];
    // Touch every page so the measurement is not of page faults.
    for p in buf.chunks_exact_mut(PAGE_SIZE) {
        p[0] = 1;
        p[0] = 0;
    }
    let time_cold = |buf: &[u8], f: fn(&[u8]) -> bool| {
        let t = Instant::now();
        let mut z = 0;
        for p in buf.chunks_exact(PAGE_SIZE) {
            z += usize::from(f(std::hint::black_box(p)));
        }
        std::hint::black_box(z);
        t.elapsed().as_nanos() as f64 / (buf.len() / PAGE_SIZE) as f64
    };
    let cold_zero = time_cold(&buf, zero::is_zero);
    let cold_zero_naive = time_cold(&buf, zero::is_zero_naive);
    for p in buf.chunks_exact_mut(PAGE_SIZE) {
        p[100] = 1;
    }
    let cold_nonzero = time_cold(&buf, zero::is_zero);
    json!({
        "kernel": if cfg!(target_arch = "x86_64") && std::is_x86_feature_detected!("avx2") { "avx2" } else { "sse2/portable" },
        "hot_ns": round2(time_hot(zero::is_zero)),
        "hot_naive_ns": round2(time_hot(zero::is_zero_naive)),
        "cold_zero_ns": round2(cold_zero),
        "cold_zero_naive_ns": round2(cold_zero_naive),
        "cold_nonzero_early_exit_ns": round2(cold_nonzero),
    })
}

/// Restores a hot-added zram device on drop.
pub(crate) struct ZramDev {
    pub(crate) id: u32,
    added: bool,
    orig_alg: Option<String>,
}

impl ZramDev {
    pub(crate) fn sys(&self, f: &str) -> String {
        format!("/sys/block/zram{}/{f}", self.id)
    }
}

impl Drop for ZramDev {
    fn drop(&mut self) {
        let _ = std::fs::write(self.sys("reset"), "1");
        if self.added {
            let _ = std::fs::write("/sys/class/zram-control/hot_remove", self.id.to_string());
        } else if let Some(a) = &self.orig_alg {
            let _ = std::fs::write(self.sys("comp_algorithm"), a);
        }
    }
}

/// Hot-add a zram device (never touch one that is in use).
pub(crate) fn zram_add() -> Result<ZramDev, String> {
    if !std::path::Path::new("/sys/class/zram-control/hot_add").exists() {
        return Err("no zram module (/sys/class/zram-control missing)".into());
    }
    let id = std::fs::read_to_string("/sys/class/zram-control/hot_add")
        .map_err(|e| format!("hot_add: {e}"))?
        .trim()
        .parse::<u32>()
        .map_err(|e| format!("hot_add: {e}"))?;
    Ok(ZramDev { id, added: true, orig_alg: None })
}

/// Write the corpus to a fresh zram device with O_DIRECT, read it back; returns a JSON object.
/// Advances `pb` by twice the corpus's pages, once per category written and read.
fn run_zram(corpus: &[Category], pb: &ProgressBar) -> Result<Value, String> {
    use std::os::unix::fs::{FileExt, OpenOptionsExt};
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err("not root".into());
    }
    let total: usize = corpus.iter().map(|c| c.data.len()).sum();
    let dev = zram_add()?;
    let swaps = std::fs::read_to_string("/proc/swaps").unwrap_or_default();
    if swaps.contains(&format!("/dev/zram{} ", dev.id)) {
        return Err(format!("zram{} is in use as swap", dev.id));
    }
    std::fs::write(dev.sys("comp_algorithm"), "lz4").map_err(|e| format!("comp_algorithm lz4: {e}"))?;
    std::fs::write(dev.sys("disksize"), (total + (16 << 20)).to_string()).map_err(|e| format!("disksize: {e}"))?;
    let path = format!("/dev/zram{}", dev.id);
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_DIRECT)
        .open(&path)
        .map_err(|e| format!("open {path}: {e}"))?;
    let chunk = 1 << 20;
    let mut buf = uswap::internals::io_engine::IoBuf::new(chunk);
    let mut off = 0u64;
    let t = Instant::now();
    for c in corpus {
        for piece in c.data.chunks(chunk) {
            buf.as_mut_slice()[..piece.len()].copy_from_slice(piece);
            f.write_all_at(&buf.as_slice()[..piece.len()], off).map_err(|e| format!("write {path}: {e}"))?;
            off += piece.len() as u64;
        }
        pb.inc((c.data.len() / PAGE_SIZE) as u64);
    }
    let tw = t.elapsed();
    let mm = std::fs::read_to_string(dev.sys("mm_stat")).map_err(|e| format!("mm_stat: {e}"))?;
    let v: Vec<u64> = mm.split_whitespace().filter_map(|x| x.parse().ok()).collect();
    if v.len() < 6 {
        return Err(format!("unexpected mm_stat '{mm}'"));
    }
    let (orig, compr, used, same) = (v[0], v[1], v[2], v[5]);
    let t = Instant::now();
    let mut off = 0u64;
    let mut same_data = true;
    for c in corpus {
        for piece in c.data.chunks(chunk) {
            f.read_exact_at(&mut buf.as_mut_slice()[..piece.len()], off).map_err(|e| format!("read {path}: {e}"))?;
            same_data &= &buf.as_slice()[..piece.len()] == piece;
            off += piece.len() as u64;
        }
        pb.inc((c.data.len() / PAGE_SIZE) as u64);
    }
    let tr = t.elapsed();
    drop(f);
    let pages = (total / PAGE_SIZE) as f64;
    Ok(json!({
        "device": path,
        "comp_algorithm": "lz4",
        "zram_bytes_per_page": round2(used as f64 / pages),
        "zram_compr_bytes_per_page": round2(compr as f64 / pages),
        "orig_data_size": orig,
        "compr_data_size": compr,
        "mem_used_total": used,
        "same_pages": same,
        "zram_write_mb_s": round2(mbs(total, tw)),
        "zram_read_mb_s": round2(mbs(total, tr)),
        "read_back_identical": same_data,
        "note": "write/read go through the block layer with O_DIRECT in 1 MiB requests; zram compresses per 4 KiB page",
    }))
}

/// Run the benchmark.
pub fn run(a: &Args) -> CliResult {
    if a.mib < 1 {
        return Err(CliError::usage("--mib must be at least 1"));
    }
    let t0 = Instant::now();
    let machine = crate::kernel::machine();
    // Pages: building the corpus counts as one pass over it, then each pool run two (store,
    // load), then zram two (write, read). The corpus may come out a little smaller than asked
    // (short files): the length is corrected once it is built.
    let passes = 1 + 2 * POOL_RUNS + if a.no_zram { 0 } else { 2 };
    let bar = uswap_run::progress::Bar::new(
        a.json,
        "uswap bench zpool",
        passes * ((a.mib as u64) << 20) / PAGE_SIZE as u64,
        uswap_run::progress::Unit::Count("pages"),
    );
    bar.set_message("building the corpus");
    let corpus = build_corpus(a.mib << 20);
    let total: usize = corpus.iter().map(|c| c.data.len()).sum();
    let pages = total / PAGE_SIZE;
    bar.set_length(passes * pages as u64);
    bar.set_position(pages as u64);
    let mut out = Map::new();
    out.insert("corpus_pages".into(), json!(pages));
    out.insert(
        "corpus".into(),
        Value::Object(
            corpus
                .iter()
                .map(|c| (c.name.to_string(), json!({"pages": c.data.len() / PAGE_SIZE, "source": c.source})))
                .collect(),
        ),
    );
    let base = PoolConfig {
        threshold_percent: a.threshold.unwrap_or(PoolConfig::default().threshold_percent).clamp(1, 100),
        ..PoolConfig::default()
    };
    out.insert("threshold_percent".into(), json!(base.threshold_percent));
    if !(1..=19).contains(&a.recomp_level) {
        return Err(CliError::usage("--recomp-level must be 1..=19"));
    }
    let recomp = Some(Compressor::Zstd { level: a.recomp_level });
    bar.set_message("lz4");
    let lz4 = run_pool(&corpus, PoolConfig { recompress: recomp, ..base.clone() }, PAGE_SIZE, &bar)?;
    bar.set_message("zstd");
    let zstd =
        run_pool(&corpus, PoolConfig { compressor: Compressor::Zstd { level: 1 }, ..base.clone() }, PAGE_SIZE, &bar)?;
    out.insert("compressor".into(), json!("lz4"));
    out.insert("uswap_bytes_per_page".into(), json!(round2(lz4.bytes_per_page)));
    out.insert("uswap_bytes_per_page_with_table_word".into(), json!(round2(lz4.bytes_per_page + 8.0)));
    out.insert("compress_mb_s".into(), json!(round2(lz4.compress_mb_s)));
    out.insert("decompress_mb_s".into(), json!(round2(lz4.decompress_mb_s)));
    out.insert("lz4_per_category".into(), Value::Object(lz4.per_category));
    let mut recomp_runs = Map::new();
    if let Some(rc) = lz4.recompressed {
        recomp_runs.insert("lz4_4k".into(), rc);
    }
    out.insert(
        "zstd".into(),
        json!({ "level": 1, "bytes_per_page": round2(zstd.bytes_per_page), "compress_mb_s": round2(zstd.compress_mb_s),
                "decompress_mb_s": round2(zstd.decompress_mb_s), "per_category": zstd.per_category }),
    );
    // Large folios: whole, 16 KiB units or per page, 64 KiB and 2 MiB folios.
    let mut folios = Map::new();
    for unit in [64 << 10, 2 << 20] {
        for (mode, name) in
            [(FolioMode::Whole, "whole"), (FolioMode::Block16K, "16k"), (FolioMode::PerPage, "per_page")]
        {
            bar.set_message(format!("lz4, {} KiB folios, {name}", unit >> 10));
            let recompress = if mode == FolioMode::Whole && unit == 64 << 10 { recomp } else { None };
            let r = run_pool(&corpus, PoolConfig { folio_mode: mode, recompress, ..base.clone() }, unit, &bar)?;
            let mut v = json!({ "bytes_per_page": round2(r.bytes_per_page), "compress_mb_s": round2(r.compress_mb_s),
                        "decompress_mb_s": round2(r.decompress_mb_s) });
            if let Some(rc) = r.recompressed {
                recomp_runs.insert(format!("lz4_{}k_{name}", unit >> 10), rc.clone());
                v["recompressed"] = rc;
            }
            folios.insert(format!("lz4_{}k_{name}", unit >> 10), v);
        }
    }
    out.insert("large_folios".into(), Value::Object(folios));
    bar.set_message("zero check");
    out.insert("zero_check_4k".into(), zero_check());
    if a.no_zram {
        out.insert("zram".into(), json!({"skipped": "--no-zram"}));
        out.insert("zram_bytes_per_page".into(), Value::Null);
    } else {
        bar.set_message("kernel zram");
        let before = bar.position();
        let r = run_zram(&corpus, &bar);
        if r.is_err() {
            bar.set_position(before);
            bar.dec_length(2 * pages as u64);
        }
        match r {
            Ok(z) => {
                out.insert("zram_bytes_per_page".into(), z["zram_bytes_per_page"].clone());
                out.insert("zram".into(), z);
            }
            Err(why) => {
                out.insert("zram_bytes_per_page".into(), Value::Null);
                out.insert("zram".into(), json!({ "skipped": why }));
            }
        }
    }
    // RAM per page after recompression, and its ratio to zram's from this run.
    let zram = out.get("zram_bytes_per_page").and_then(Value::as_f64);
    for rc in recomp_runs.values_mut() {
        let ratio = zram.zip(rc["bytes_per_page"].as_f64()).map(|(z, u)| json!((u / z * 1000.0).round() / 1000.0));
        rc["ratio_to_zram"] = ratio.unwrap_or(Value::Null);
        let before =
            zram.zip(rc["bytes_per_page_before"].as_f64()).map(|(z, u)| json!((u / z * 1000.0).round() / 1000.0));
        rc["ratio_to_zram_before"] = before.unwrap_or(Value::Null);
    }
    out.insert("recompression".into(), Value::Object(recomp_runs));
    out.insert("elapsed_s".into(), json!(round2(t0.elapsed().as_secs_f64())));
    bar.done();
    if a.json {
        println!("{}", uswap_run::report::with_header("zpool", machine, Value::Object(out)));
    } else {
        print_tree("zpool", &Value::Object(out));
    }
    Ok(())
}

/// Print a result object for people, as indented `key: value` lines (`--json` prints the
/// document with the common header instead).
pub fn print_tree(name: &str, v: &Value) {
    fn walk(v: &Value, indent: usize) {
        if let Value::Object(m) = v {
            for (k, x) in m {
                match x {
                    Value::Object(_) => {
                        println!("{:indent$}{k}:", "");
                        walk(x, indent + 2);
                    }
                    _ => println!("{:indent$}{k}: {x}", ""),
                }
            }
        }
    }
    println!("uswap bench {name}");
    walk(v, 2);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pool_run_advances_the_bar_by_two_passes() {
        let mut text = vec![b'a'; 40 * PAGE_SIZE];
        text.iter_mut().enumerate().for_each(|(i, b)| *b = b'a' + (i % 23) as u8);
        let mut random = vec![0u8; 24 * PAGE_SIZE];
        rng_fill(&mut random, 1);
        let corpus = vec![
            Category { name: "text", source: String::new(), data: text },
            Category { name: "zero", source: String::new(), data: vec![0; 16 * PAGE_SIZE] },
            Category { name: "random", source: String::new(), data: random },
        ];
        for unit in [PAGE_SIZE, 64 << 10] {
            let bar = ProgressBar::hidden();
            run_pool(&corpus, PoolConfig::default(), unit, &bar).unwrap();
            assert_eq!(bar.position(), 2 * 80, "unit {unit}");
        }
    }
}
