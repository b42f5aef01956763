//! `uswap bench file`: the swap file tier's write and read MB/s for 4 KiB and 2 MiB folios, per
//! I/O engine (psync, io_uring), with encryption on and off, in an unlinked temporary file.
//!
//! Per row, single thread, through the `Backend` trait (allocation of physical slots, sealing,
//! I/O): `write_mb_s` (buffered writes, as the tier does them), `write_sync_mb_s` (the same
//! plus `fdatasync`: what the device took), `read_cold_mb_s` (after dropping the file from the
//! page cache: from the device), and `read_hot_mb_s` (page cache: the CPU cost of the read
//! path, including authentication and decryption). Rows with `direct` use O_DIRECT (no page
//! cache; with encryption each store also reads and rewrites its 4 KiB metadata block).
//! Also AES-256-GCM alone, per 4 KiB page.

use crate::zpool::print_tree;
use indicatif::ProgressBar;
use serde_json::{json, Map, Value};
use std::path::PathBuf;
use std::time::{Duration, Instant};
use uswap::backend::Backend;
use uswap::internals::crypt::{PageCipher, META_BYTES};
use uswap::tier::file::{EngineKind, FileConfig, FileTarget, FileTier};
use uswap::{SwapEntry, PAGE_SIZE};
use uswap_run::exit::{CliError, CliResult};

/// Options of `uswap bench file`.
#[derive(clap::Args, Debug)]
#[command(after_help = "Examples:\n  uswap bench file\n  uswap bench file --dir /mnt/ssd --json")]
pub struct Args {
    /// Print one JSON object instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Directory of the temporary swap file.
    #[arg(long, default_value = "/var/tmp")]
    pub dir: PathBuf,
    /// MiB written per 4 KiB row.
    #[arg(long, default_value_t = 32)]
    pub mib_4k: usize,
    /// MiB written per 4 KiB row with O_DIRECT.
    #[arg(long, default_value_t = 4)]
    pub mib_4k_direct: usize,
    /// MiB written per 2 MiB row.
    #[arg(long, default_value_t = 256)]
    pub mib_2m: usize,
}

fn mbs(bytes: usize, d: Duration) -> f64 {
    (bytes as f64 / 1e6 / d.as_secs_f64().max(1e-9) * 10.0).round() / 10.0
}

/// One row of the table, before it runs.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Plan {
    engine: EngineKind,
    encrypt: bool,
    direct: bool,
    folio: usize,
    /// Bytes written (a multiple of `folio`); the row reads them back twice.
    bytes: usize,
}

/// The rows in the order they run: per engine, per (encrypt, direct), 4 KiB then 2 MiB.
fn plan(a: &Args) -> Vec<Plan> {
    let mut v = Vec::new();
    for engine in [EngineKind::Psync, EngineKind::Uring] {
        for (encrypt, direct) in [(true, false), (false, false), (true, true), (false, true)] {
            for (folio, mib) in [(PAGE_SIZE, a.mib_4k), (2 << 20, a.mib_2m)] {
                // Direct 4 KiB I/O runs at device QD1 speed: a smaller volume keeps the run short.
                let mib = if direct && folio == PAGE_SIZE { mib.min(a.mib_4k_direct) } else { mib };
                let bytes = (mib.max(2) << 20) / folio * folio;
                v.push(Plan { engine, encrypt, direct, folio, bytes });
            }
        }
    }
    v
}

/// Bytes a row moves, for the progress bar: the writes, then the cold and the hot reads.
fn row_work(p: &Plan) -> u64 {
    3 * p.bytes as u64
}

/// Run one row; advances `pb` by [`row_work`] in three steps, each after a timed phase.
fn row(dir: &std::path::Path, p: &Plan, pb: &ProgressBar) -> Result<Value, String> {
    let Plan { engine, encrypt, direct, folio, bytes: total } = *p;
    let cfg = FileConfig {
        target: FileTarget::TempIn(dir.to_path_buf()),
        size_bytes: (total as u64 + (4 << 20)).next_multiple_of(2 << 20),
        engine,
        encrypt,
        discard: false,
        direct,
        force: false,
    };
    let t = FileTier::open(&cfg).map_err(|e| e.to_string())?;
    let mut data = vec![0u8; folio];
    data.iter_mut().enumerate().for_each(|(i, b)| *b = (i * 131 % 251) as u8);
    let n = total / folio;
    let mut handles = Vec::with_capacity(n);
    let t0 = Instant::now();
    for i in 0..n {
        data[0] = i as u8;
        handles.push(t.store(&data, SwapEntry((i * folio / PAGE_SIZE) as u64)).map_err(|e| e.to_string())?.handle);
    }
    let tw = t0.elapsed();
    t.sync_and_drop_cache().map_err(|e| e.to_string())?;
    let tws = t0.elapsed();
    pb.inc((n * folio) as u64);
    let mut out = vec![0u8; folio];
    let mut read = |label: &str| -> Result<Duration, String> {
        let t1 = Instant::now();
        for (i, h) in handles.iter().enumerate() {
            t.load(*h, &mut out).map_err(|e| format!("{label}: {e}"))?;
            data[0] = i as u8;
            if out != data {
                return Err(format!("{label}: data mismatch"));
            }
        }
        Ok(t1.elapsed())
    };
    let cold = read("cold read")?;
    pb.inc((n * folio) as u64);
    let hot = read("hot read")?;
    pb.inc((n * folio) as u64);
    Ok(json!({
        "engine": t.engine_name(),
        "encrypt": encrypt,
        "direct": direct,
        "folio": if folio == PAGE_SIZE { "4k" } else { "2m" },
        "bytes": n * folio,
        "write_mb_s": mbs(n * folio, tw),
        "write_sync_mb_s": mbs(n * folio, tws),
        "read_cold_mb_s": mbs(n * folio, cold),
        "read_hot_mb_s": mbs(n * folio, hot),
    }))
}

fn crypto_only() -> Value {
    let c = match PageCipher::new_random() {
        Ok(c) => c,
        Err(e) => return json!({ "error": e.to_string() }),
    };
    let mut page = vec![7u8; PAGE_SIZE];
    let mut meta = [0u8; META_BYTES];
    let n = 20_000;
    let t = Instant::now();
    for i in 0..n {
        let _ = c.seal(i, i, &mut page, &mut meta);
    }
    let seal = t.elapsed();
    let t = Instant::now();
    let mut ok = 0;
    for _ in 0..n {
        let mut p = page.clone();
        ok += usize::from(c.open(n - 1, n - 1, &mut p, &meta));
    }
    let open = t.elapsed();
    json!({
        "seal_mb_s": mbs(n as usize * PAGE_SIZE, seal),
        "open_mb_s": mbs(n as usize * PAGE_SIZE, open),
        "seal_us_per_page": (seal.as_secs_f64() * 1e6 / n as f64 * 100.0).round() / 100.0,
        "open_us_per_page": (open.as_secs_f64() * 1e6 / n as f64 * 100.0).round() / 100.0,
        "open_ok": ok == n as usize,
    })
}

/// Run the rows of `plan`. A failing row skips the rest of its (engine, encrypt, direct) group
/// when it is io_uring that is unavailable or O_DIRECT that is refused (recorded in the second
/// map), else ends the benchmark. The bar's length drops by the work of the rows not done.
fn run_rows(a: &Args, plan: &[Plan], bar: &ProgressBar) -> Result<(Vec<Value>, Map<String, Value>), CliError> {
    let mut rows: Vec<Value> = Vec::new();
    let mut skipped = Map::new();
    let mut skip_group = None;
    for p in plan {
        let group = (p.engine, p.encrypt, p.direct);
        if skip_group == Some(group) {
            bar.dec_length(row_work(p));
            continue;
        }
        bar.set_message(format!(
            "{:?}{}{}, {} KiB folios",
            p.engine,
            if p.encrypt { ", encrypted" } else { "" },
            if p.direct { ", O_DIRECT" } else { "" },
            p.folio >> 10
        ));
        let before = bar.position();
        match row(&a.dir, p, bar) {
            Ok(r) => rows.push(r),
            Err(e) => {
                bar.set_position(before);
                bar.dec_length(row_work(p));
                if p.engine == EngineKind::Uring && rows.iter().all(|r| r["engine"] != "io_uring") {
                    skipped.insert("io_uring".into(), json!(e));
                } else if p.direct {
                    skipped.insert(format!("{:?} direct", p.engine), json!(e));
                } else {
                    return Err(CliError::fail(format!("{:?} encrypt={} folio={}: {e}", p.engine, p.encrypt, p.folio)));
                }
                skip_group = Some(group);
            }
        }
    }
    Ok((rows, skipped))
}

/// Run the benchmark.
pub fn run(a: &Args) -> CliResult {
    if !a.dir.is_dir() {
        return Err(CliError::usage(format!("--dir {}: not a directory", a.dir.display())));
    }
    let t0 = Instant::now();
    let machine = crate::kernel::machine();
    let plan = plan(a);
    let bar = uswap_run::progress::Bar::new(
        a.json,
        "uswap bench file",
        plan.iter().map(row_work).sum(),
        uswap_run::progress::Unit::Bytes,
    );
    let (rows, skipped) = run_rows(a, &plan, &bar)?;
    bar.set_message("AES-256-GCM alone");
    let v = json!({
        "dir": a.dir.display().to_string(),
        "io": "positional I/O on an unlinked O_TMPFILE, buffered or O_DIRECT; data + 32-byte nonce/tag record per page (direct: read-modify-write of its 4 KiB block)",
        "rows": rows,
        "aes_256_gcm": crypto_only(),
        "skipped": skipped,
        "elapsed_s": (t0.elapsed().as_secs_f64() * 100.0).round() / 100.0,
    });
    bar.done();
    if a.json {
        println!("{}", uswap_run::report::with_header("file", machine, v));
    } else {
        println!("uswap bench file (dir {})", a.dir.display());
        println!(
            "{:<9} {:<8} {:<7} {:<6} {:>10} {:>14} {:>13} {:>13}",
            "engine", "encrypt", "direct", "folio", "write MB/s", "write+sync", "read cold", "read hot"
        );
        for r in v["rows"].as_array().into_iter().flatten() {
            println!(
                "{:<9} {:<8} {:<7} {:<6} {:>10} {:>14} {:>13} {:>13}",
                r["engine"].as_str().unwrap_or(""),
                r["encrypt"].to_string(),
                r["direct"].to_string(),
                r["folio"].as_str().unwrap_or(""),
                r["write_mb_s"].to_string(),
                r["write_sync_mb_s"].to_string(),
                r["read_cold_mb_s"].to_string(),
                r["read_hot_mb_s"].to_string()
            );
        }
        let mut rest = v.clone();
        if let Some(m) = rest.as_object_mut() {
            m.remove("rows");
        }
        print_tree("file (other)", &rest);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bar_counts_the_rows_that_ran() {
        let dir = tempfile::tempdir().unwrap();
        let a = Args { json: true, dir: dir.path().to_path_buf(), mib_4k: 2, mib_4k_direct: 2, mib_2m: 3 };
        let plan = plan(&a);
        assert_eq!(plan.len(), 16);
        // 3 MiB of 2 MiB folios is one folio.
        assert!(plan.iter().all(|p| p.bytes == 2 << 20));
        let total: u64 = plan.iter().map(row_work).sum();
        let bar = ProgressBar::hidden();
        bar.set_length(total);
        let (rows, skipped) = run_rows(&a, &plan, &bar).unwrap();
        // Rows that could not run (no io_uring, no O_DIRECT here) leave the length too.
        let done: u64 = rows.iter().map(|r| 3 * r["bytes"].as_u64().unwrap()).sum();
        assert_eq!(bar.position(), done);
        assert_eq!(bar.length(), Some(done));
        assert!(rows.len() >= 4, "{skipped:?}");
    }
}
