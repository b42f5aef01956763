//! Setting up kernel swap and a memory cgroup for one benchmark, each step recorded in the
//! [`Restore`] guard before the next one starts (so a failure half-way undoes exactly what
//! was done). zram: a hot-added device (or a free one; never one listed in /proc/swaps) with
//! lz4 and a swap header. zswap: its module parameters plus a swap file on /var/tmp. cgroup:
//! v1 (`memory.limit_in_bytes`) or v2 (`memory.max`). Single-threaded, like the guard.

use super::restore::{Restore, Undo};
use super::SysOps;
use std::io::{Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Priority given to our swap devices (above any the machine already has).
pub const SWAP_PRIO: i32 = 32000;

/// Write a version-1 Linux swap header for a swap area of `bytes` into `dev` (relative to
/// the ops root), like `mkswap`.
pub fn write_swap_header(ops: &dyn SysOps, dev: &Path, bytes: u64) -> Result<(), String> {
    const PAGE: u64 = 4096;
    let pages = bytes / PAGE;
    if pages < 10 {
        return Err(format!("swap area of {bytes} bytes is too small"));
    }
    let mut h = vec![0u8; PAGE as usize];
    // struct swap_header_v1_2 at offset 1024: version, last_page, nr_badpages, uuid, label.
    h[1024..1028].copy_from_slice(&1u32.to_ne_bytes());
    let last = u32::try_from(pages - 1).map_err(|_| format!("swap area of {bytes} bytes is too large"))?;
    h[1028..1032].copy_from_slice(&last.to_ne_bytes());
    let mut uuid = [0u8; 16];
    let seed = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(1);
    uuid.copy_from_slice(&(seed ^ (u128::from(std::process::id()) << 64)).to_le_bytes());
    uuid[6] = (uuid[6] & 0x0f) | 0x40;
    uuid[8] = (uuid[8] & 0x3f) | 0x80;
    h[1036..1052].copy_from_slice(&uuid);
    h[1052..1063].copy_from_slice(b"uswap-bench");
    h[PAGE as usize - 10..].copy_from_slice(b"SWAPSPACE2");
    let path = ops.path(dev);
    let mut f =
        std::fs::OpenOptions::new().write(true).open(&path).map_err(|e| format!("open {}: {e}", path.display()))?;
    f.seek(SeekFrom::Start(0))
        .and_then(|_| f.write_all(&h))
        .and_then(|_| f.sync_all())
        .map_err(|e| format!("writing the swap header to {}: {e}", path.display()))?;
    Ok(())
}

/// A zram device set up as swap (not yet enabled).
#[derive(Debug, Clone)]
pub struct Zram {
    /// Device number.
    pub id: u32,
    /// `dev/zramN`, relative to the root.
    pub dev: PathBuf,
    /// Whether we hot-added it (else we borrowed a free one).
    pub hot_added: bool,
}

impl Zram {
    /// `orig_data_size`, `compr_data_size`, `mem_used_total`, `same_pages` and the ratio.
    pub fn mm_stat(&self, ops: &dyn SysOps) -> serde_json::Value {
        let s = ops.read(&PathBuf::from(format!("sys/block/zram{}/mm_stat", self.id))).unwrap_or_default();
        let f: Vec<u64> = s.split_whitespace().filter_map(|x| x.parse().ok()).collect();
        let get = |i: usize| f.get(i).copied().unwrap_or(0);
        let ratio = if get(1) > 0 { get(0) as f64 / get(1) as f64 } else { 0.0 };
        serde_json::json!({
            "orig_data_size": get(0), "compr_data_size": get(1), "mem_used_total": get(2),
            "same_pages": get(5), "ratio": (ratio * 100.0).round() / 100.0,
        })
    }
}

/// Swap areas listed in /proc/swaps.
pub fn active_swaps(ops: &dyn SysOps) -> Vec<String> {
    ops.read(Path::new("proc/swaps"))
        .map(|s| s.lines().skip(1).filter_map(|l| l.split_whitespace().next().map(String::from)).collect())
        .unwrap_or_default()
}

/// Set up a zram device with `algo` and `disksize` bytes as a swap area.
pub fn setup_zram(r: &mut Restore, disksize: u64, algo: &str) -> Result<Zram, String> {
    let hot_add = Path::new("sys/class/zram-control/hot_add");
    let (id, hot_added) = if r.ops().exists(hot_add) {
        let id: u32 = r
            .ops()
            .read(hot_add)
            .map_err(|e| format!("zram hot_add: {e}"))?
            .parse()
            .map_err(|_| "zram hot_add returned no device number".to_string())?;
        r.done(Undo::ZramHotRemove(id));
        (id, true)
    } else {
        // Borrow a free device: initstate 0 and not a swap area.
        let swaps = active_swaps(r.ops());
        let mut found = None;
        for id in 0..64u32 {
            let init = PathBuf::from(format!("sys/block/zram{id}/initstate"));
            let dev = format!("/dev/zram{id}");
            if r.ops().read(&init).is_ok_and(|s| s == "0") && !swaps.contains(&dev) {
                found = Some(id);
                break;
            }
        }
        let id = found.ok_or("no zram device available (load the zram module: modprobe zram)")?;
        (id, false)
    };
    r.done(Undo::ZramReset(id));
    let sys = PathBuf::from(format!("sys/block/zram{id}"));
    let ops = r.ops();
    let algo_path = sys.join("comp_algorithm");
    let offered = ops.read(&algo_path).map_err(|e| format!("zram{id}: comp_algorithm: {e}"))?;
    if !offered.split_whitespace().any(|a| a.trim_matches(|c| c == '[' || c == ']') == algo) {
        return Err(format!("zram does not offer {algo} (comp_algorithm: {offered})"));
    }
    ops.write(&algo_path, algo).map_err(|e| format!("zram{id}: setting comp_algorithm {algo}: {e}"))?;
    ops.write(&sys.join("disksize"), &disksize.to_string()).map_err(|e| format!("zram{id}: disksize: {e}"))?;
    let dev = PathBuf::from(format!("dev/zram{id}"));
    for _ in 0..100 {
        if ops.exists(&dev) {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    write_swap_header(ops, &dev, disksize)?;
    Ok(Zram { id, dev, hot_added })
}

/// Turn a swap area on (recorded for swapoff).
pub fn swapon(r: &mut Restore, dev: &Path) -> Result<(), String> {
    r.ops().swapon(dev, SWAP_PRIO).map_err(|e| format!("swapon {}: {e}", r.ops().path(dev).display()))?;
    r.done(Undo::Swapoff(dev.to_path_buf()));
    Ok(())
}

/// Turn a swap area we enabled off again now.
pub fn swapoff(r: &mut Restore, dev: &Path) -> Result<(), String> {
    r.undo_now(&Undo::Swapoff(dev.to_path_buf()))
}

/// A memory cgroup with a limit.
#[derive(Debug, Clone)]
pub struct Cgroup {
    /// Directory relative to the root.
    pub dir: PathBuf,
    /// 1 or 2.
    pub version: u8,
}

impl Cgroup {
    /// Absolute path of the file a process writes its pid to, to join.
    pub fn procs_file(&self, ops: &dyn SysOps) -> PathBuf {
        ops.path(&self.dir.join("cgroup.procs"))
    }
    /// Selected lines of memory.stat.
    pub fn stat(&self, ops: &dyn SysOps) -> serde_json::Value {
        let keys = ["swap", "pgmajfault", "pgfault", "zswpout", "zswpin", "zswapped", "workingset_refault_anon"];
        let s = ops.read(&self.dir.join("memory.stat")).unwrap_or_default();
        let m: serde_json::Map<String, serde_json::Value> = s
            .lines()
            .filter_map(|l| {
                let mut it = l.split_whitespace();
                let k = it.next()?;
                let v: u64 = it.next()?.parse().ok()?;
                keys.contains(&k).then(|| (k.to_string(), serde_json::json!(v)))
            })
            .collect();
        serde_json::Value::Object(m)
    }
    /// The largest usage since the cgroup was created (v1 `memory.max_usage_in_bytes`, page
    /// cache included; v2 `memory.peak`).
    pub fn peak(&self, ops: &dyn SysOps) -> Option<u64> {
        let f = if self.version == 1 { "memory.max_usage_in_bytes" } else { "memory.peak" };
        ops.read(&self.dir.join(f)).ok().and_then(|s| s.parse().ok())
    }
    /// What the cgroup's processes hold other than unmapped page cache, from the text of its
    /// `memory.stat`: anonymous, shared and mapped file pages (v1 `total_rss`,
    /// `total_shmem`, `total_mapped_file`; v2 `anon`, `shmem`, `file_mapped`).
    pub fn held_bytes(version: u8, stat: &str) -> u64 {
        let keys: [&str; 3] = if version == 1 {
            ["total_rss", "total_shmem", "total_mapped_file"]
        } else {
            ["anon", "shmem", "file_mapped"]
        };
        stat.lines()
            .filter_map(|l| l.split_once(' '))
            .filter(|(k, _)| keys.contains(k))
            .filter_map(|(_, v)| v.trim().parse::<u64>().ok())
            .sum()
    }
    /// Processes the kernel OOM-killed in the cgroup (the `oom_kill` line of v1
    /// `memory.oom_control`, v2 `memory.events`; 0 when unreadable).
    pub fn oom_kills(&self, ops: &dyn SysOps) -> u64 {
        let f = if self.version == 1 { "memory.oom_control" } else { "memory.events" };
        ops.read(&self.dir.join(f))
            .unwrap_or_default()
            .lines()
            .find_map(|l| l.strip_prefix("oom_kill ").and_then(|n| n.trim().parse::<u64>().ok()))
            .unwrap_or(0)
    }
    /// Keep the cgroup's memory out of kernel swap: v1 `memory.swappiness` 0 (anonymous pages
    /// are then reclaimed only by an OOM kill), v2 `memory.swap.max` 0 (absent without swap
    /// accounting, and then nothing to do). The files go with the cgroup: nothing to restore.
    pub fn forbid_swap(&self, ops: &dyn SysOps) -> Result<(), String> {
        let (f, required) = if self.version == 1 { ("memory.swappiness", true) } else { ("memory.swap.max", false) };
        let rel = self.dir.join(f);
        if !required && !ops.exists(&rel) {
            return Ok(());
        }
        ops.write(&rel, "0").map_err(|e| format!("{}: {e}", rel.display()))
    }
    /// `stat` minus an earlier `stat` for the counters; `swap` (a level) is kept as is.
    pub fn stat_delta(&self, ops: &dyn SysOps, before: Option<&serde_json::Value>) -> serde_json::Value {
        let mut now = self.stat(ops);
        if let (serde_json::Value::Object(m), Some(b)) = (&mut now, before) {
            for (k, v) in m.iter_mut() {
                if k == "swap" || k == "zswapped" {
                    continue;
                }
                let old = b.get(k).and_then(serde_json::Value::as_u64).unwrap_or(0);
                *v = serde_json::json!(v.as_u64().unwrap_or(0).saturating_sub(old));
            }
        }
        now
    }
}

/// Create memory cgroup `name` with `limit` bytes (v2 if the unified hierarchy is mounted,
/// else v1's memory controller).
pub fn setup_cgroup(r: &mut Restore, name: &str, limit: u64) -> Result<Cgroup, String> {
    let base = Path::new("sys/fs/cgroup");
    if r.ops().exists(&base.join("cgroup.controllers")) {
        let ctl = r.ops().read(&base.join("cgroup.controllers")).unwrap_or_default();
        if !ctl.split_whitespace().any(|c| c == "memory") {
            return Err("cgroup v2 without the memory controller".into());
        }
        let sub = base.join("cgroup.subtree_control");
        let cur = r.ops().read(&sub).unwrap_or_default();
        if !cur.split_whitespace().any(|c| c == "memory") {
            r.ops().write(&sub, "+memory").map_err(|e| format!("enabling the memory controller: {e}"))?;
            r.done(Undo::Write { rel: sub, value: "-memory".into() });
        }
        let dir = base.join(name);
        r.ops().mkdir_cgroup(&dir).map_err(|e| format!("creating cgroup {}: {e}", dir.display()))?;
        r.done(Undo::Rmdir(dir.clone()));
        r.ops().write(&dir.join("memory.max"), &limit.to_string()).map_err(|e| format!("memory.max: {e}"))?;
        Ok(Cgroup { dir, version: 2 })
    } else if r.ops().exists(&base.join("memory/memory.limit_in_bytes")) {
        let dir = base.join("memory").join(name);
        r.ops().mkdir_cgroup(&dir).map_err(|e| format!("creating cgroup {}: {e}", dir.display()))?;
        r.done(Undo::Rmdir(dir.clone()));
        r.ops()
            .write(&dir.join("memory.limit_in_bytes"), &limit.to_string())
            .map_err(|e| format!("memory.limit_in_bytes: {e}"))?;
        Ok(Cgroup { dir, version: 1 })
    } else {
        Err("no memory cgroup controller mounted under /sys/fs/cgroup".into())
    }
}

/// zswap in front of a swap file of ours.
#[derive(Debug, Clone)]
pub struct Zswap {
    /// The swap file, relative to the root.
    pub file: PathBuf,
    /// The compressor zswap uses in our runs.
    pub compressor: String,
}

const ZSWAP: &str = "sys/module/zswap/parameters";

impl Zswap {
    /// Turn zswap on or off (its previous value is restored by the guard at the end).
    pub fn set_enabled(&self, ops: &dyn SysOps, on: bool) -> Result<(), String> {
        ops.write(&Path::new(ZSWAP).join("enabled"), if on { "Y" } else { "N" })
            .map_err(|e| format!("zswap enabled: {e}"))
    }
    /// zswap's `max_pool_percent`: the share of RAM its compressed pool may hold before it
    /// writes pages back to the swap file.
    pub fn max_pool_percent(ops: &dyn SysOps) -> Option<u64> {
        ops.read(&Path::new(ZSWAP).join("max_pool_percent")).ok().and_then(|s| s.parse().ok())
    }
}

/// The size of the disk swap file for a machine with `mem_total` bytes of RAM: half of RAM, at
/// most 8 GiB (more than the suite's programs swap out), in whole pages.
pub fn swap_file_bytes(mem_total: u64) -> u64 {
    (mem_total / 2).min(8 << 30) & !4095
}

/// Turn kernel swap to disk on for one run: zswap on or off as `with_zswap` says, then the
/// swap file on. If swapon fails, zswap is turned off again.
pub fn disk_swapon(r: &mut Restore, zs: &Zswap, with_zswap: bool) -> Result<(), String> {
    zs.set_enabled(r.ops(), with_zswap)?;
    if let Err(e) = swapon(r, &zs.file) {
        let _ = zs.set_enabled(r.ops(), false);
        return Err(e);
    }
    Ok(())
}

/// Undo [`disk_swapon`] after the run: swapoff, then zswap off (both tried; the errors joined).
pub fn disk_swapoff(r: &mut Restore, zs: &Zswap) -> Result<(), String> {
    let off = swapoff(r, &zs.file);
    let dis = zs.set_enabled(r.ops(), false);
    match (off, dis) {
        (Ok(()), Ok(())) => Ok(()),
        (Err(a), Err(b)) => Err(format!("{a}; {b}")),
        (Err(e), _) | (_, Err(e)) => Err(e),
    }
}

/// Record zswap's parameters for restore, choose `compressor` (keeping the current one if the
/// kernel refuses it), and create a swap file of `bytes` at `file` (relative to the root).
/// zswap is left disabled; `Zswap::set_enabled` turns it on for a run.
pub fn setup_zswap(r: &mut Restore, file: &Path, bytes: u64, compressor: &str) -> Result<Zswap, String> {
    let params = Path::new(ZSWAP);
    if !r.ops().exists(&params.join("enabled")) {
        return Err("this kernel has no zswap (no /sys/module/zswap)".into());
    }
    let enabled = params.join("enabled");
    let comp = params.join("compressor");
    let old_enabled = r.ops().read(&enabled).map_err(|e| format!("zswap enabled: {e}"))?;
    let old_comp = r.ops().read(&comp).map_err(|e| format!("zswap compressor: {e}"))?;
    r.done(Undo::Write { rel: comp.clone(), value: old_comp.clone() });
    r.done(Undo::Write { rel: enabled.clone(), value: old_enabled });
    r.ops().write(&enabled, "N").map_err(|e| format!("zswap enabled: {e}"))?;
    let used = match r.ops().write(&comp, compressor) {
        Ok(()) => r.ops().read(&comp).unwrap_or(old_comp),
        Err(_) => old_comp,
    };

    let path = r.ops().path(file);
    let f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&path)
        .map_err(|e| format!("creating swap file {}: {e}", path.display()))?;
    r.done(Undo::RemoveFile(file.to_path_buf()));
    use std::os::unix::fs::PermissionsExt;
    f.set_permissions(std::fs::Permissions::from_mode(0o600)).map_err(|e| format!("chmod {}: {e}", path.display()))?;
    rustix::fs::fallocate(&f, rustix::fs::FallocateFlags::empty(), 0, bytes)
        .map_err(|e| format!("fallocate {} ({bytes} bytes): {e}", path.display()))?;
    drop(f);
    write_swap_header(r.ops(), file, bytes)?;
    Ok(Zswap { file: file.to_path_buf(), compressor: used })
}

#[cfg(test)]
mod tests {

    #[test]
    fn held_bytes_leave_out_unmapped_page_cache() {
        let v1 = "cache 900\nrss 5\ntotal_cache 1000\ntotal_rss 100\ntotal_rss_huge 50\ntotal_shmem 20\ntotal_mapped_file 7\n";
        assert_eq!(Cgroup::held_bytes(1, v1), 127);
        let v2 = "anon 100\nfile 1000\nfile_mapped 7\nshmem 20\nanon_thp 50\n";
        assert_eq!(Cgroup::held_bytes(2, v2), 127);
    }
    use super::*;
    use crate::kernel::fake::{machine as fake_machine, read};

    #[test]
    fn full_setup_then_drop_restores_everything() {
        let (tmp, ops, log) = fake_machine("full", false);
        let root = tmp.0.clone();
        {
            let mut r = Restore::new(Box::new(ops));
            let z = setup_zram(&mut r, 64 << 20, "lz4").unwrap();
            assert_eq!((z.id, z.hot_added), (1, true));
            assert_eq!(read(&root, "sys/block/zram1/comp_algorithm"), "lz4");
            assert_eq!(read(&root, "sys/block/zram1/disksize"), (64u64 << 20).to_string());
            let hdr = std::fs::read(root.join("dev/zram1")).unwrap();
            assert_eq!(&hdr[4086..4096], b"SWAPSPACE2");
            assert_eq!(u32::from_ne_bytes(hdr[1028..1032].try_into().unwrap()), (64 << 20) / 4096 - 1);
            assert_eq!(z.mm_stat(r.ops())["ratio"], 10.0);

            let cg = setup_cgroup(&mut r, "uswap-test", 256 << 20).unwrap();
            assert_eq!(cg.version, 1);
            assert_eq!(
                read(&root, "sys/fs/cgroup/memory/uswap-test/memory.limit_in_bytes"),
                (256u64 << 20).to_string()
            );

            let zs = setup_zswap(&mut r, Path::new("var/tmp/test.swap"), 1 << 20, "lz4").unwrap();
            assert_eq!(zs.compressor, "lz4");
            assert_eq!(std::fs::metadata(root.join("var/tmp/test.swap")).unwrap().len(), 1 << 20);
            zs.set_enabled(r.ops(), true).unwrap();
            assert_eq!(read(&root, "sys/module/zswap/parameters/enabled"), "Y");

            // A run: swapon, then swapoff right after; the guard forgets it.
            swapon(&mut r, &z.dev).unwrap();
            swapoff(&mut r, &z.dev).unwrap();
            // Leave one swapped on, as if interrupted mid-run.
            swapon(&mut r, &zs.file).unwrap();
            // Dropping the guard restores the machine.
        }
        let log = log.borrow().clone();
        assert_eq!(
            log,
            vec![
                "swapon dev/zram1 32000",
                "swapoff dev/zram1",
                "swapon var/tmp/test.swap 32000",
                "swapoff var/tmp/test.swap",
                "rmdir sys/fs/cgroup/memory/uswap-test",
            ]
        );
        assert!(!root.join("var/tmp/test.swap").exists());
        assert!(!root.join("sys/fs/cgroup/memory/uswap-test").exists());
        assert_eq!(read(&root, "sys/module/zswap/parameters/enabled"), "N");
        assert_eq!(read(&root, "sys/module/zswap/parameters/compressor"), "lzo");
        assert_eq!(read(&root, "sys/block/zram1/reset"), "1");
        assert_eq!(read(&root, "sys/class/zram-control/hot_remove"), "1");
    }

    #[test]
    fn failure_half_way_undoes_what_was_done() {
        let (tmp, ops, _log) = fake_machine("half", false);
        let root = tmp.0.clone();
        std::fs::write(root.join("sys/block/zram1/comp_algorithm"), "[lzo-rle] lzo\n").unwrap();
        let mut r = Restore::new(Box::new(ops));
        let e = setup_zram(&mut r, 64 << 20, "lz4").unwrap_err();
        assert!(e.contains("does not offer lz4"), "{e}");
        assert_eq!(r.pending(), &[Undo::ZramHotRemove(1), Undo::ZramReset(1)]);
        assert!(r.restore().is_empty());
        assert_eq!(read(&root, "sys/class/zram-control/hot_remove"), "1");
        assert_eq!(read(&root, "sys/block/zram1/reset"), "1");
        assert!(r.pending().is_empty());
    }

    #[test]
    fn failed_swapon_is_not_recorded_and_panic_still_restores() {
        let (tmp, mut ops, log) = fake_machine("panic", true);
        let root = tmp.0.clone();
        ops.fail_swapon = true;
        let res = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let mut r = Restore::new(Box::new(ops));
            let cg = setup_cgroup(&mut r, "uswap-v2", 1 << 20).unwrap();
            assert_eq!(cg.version, 2);
            assert_eq!(read(&root, "sys/fs/cgroup/uswap-v2/memory.max"), "1048576");
            let z = setup_zram(&mut r, 1 << 20, "lz4").unwrap();
            assert!(swapon(&mut r, &z.dev).is_err());
            assert!(!r.pending().iter().any(|u| matches!(u, Undo::Swapoff(_))));
            panic!("boom");
        }));
        assert!(res.is_err());
        assert!(log.borrow().iter().all(|l| !l.starts_with("swap")));
        assert!(!root.join("sys/fs/cgroup/uswap-v2").exists());
        // We enabled the memory controller in subtree_control, so we disabled it again.
        assert_eq!(read(&root, "sys/fs/cgroup/cgroup.subtree_control"), "-memory");
        assert_eq!(read(&root, "sys/class/zram-control/hot_remove"), "1");
    }

    #[test]
    fn borrows_only_a_free_zram_device_not_in_use_as_swap() {
        let (tmp, ops, _log) = fake_machine("borrow", false);
        let root = tmp.0.clone();
        std::fs::remove_file(root.join("sys/class/zram-control/hot_add")).unwrap();
        let w = |p: &str, v: &str| {
            std::fs::create_dir_all(root.join(p).parent().unwrap()).unwrap();
            std::fs::write(root.join(p), v).unwrap();
        };
        w("sys/block/zram0/initstate", "0");
        w("sys/block/zram1/initstate", "0");
        w("proc/swaps", "Filename Type Size Used Priority\n/dev/zram0 partition 100 0 5\n");
        let mut r = Restore::new(Box::new(ops));
        let z = setup_zram(&mut r, 1 << 20, "lz4").unwrap();
        assert_eq!((z.id, z.hot_added), (1, false));
        assert_eq!(r.pending(), &[Undo::ZramReset(1)]);
        drop(r);
        // Nothing was hot-removed.
        assert_eq!(read(&root, "sys/class/zram-control/hot_remove"), "");
    }

    #[test]
    fn no_zswap_no_cgroup_are_clear_errors() {
        let (tmp, ops, _log) = fake_machine("none", false);
        let root = tmp.0.clone();
        std::fs::remove_dir_all(root.join("sys/module/zswap")).unwrap();
        std::fs::remove_dir_all(root.join("sys/fs/cgroup")).unwrap();
        let mut r = Restore::new(Box::new(ops));
        assert!(setup_zswap(&mut r, Path::new("var/tmp/x.swap"), 1 << 20, "lz4").unwrap_err().contains("no zswap"));
        assert!(setup_cgroup(&mut r, "x", 1 << 20).unwrap_err().contains("no memory cgroup"));
        assert!(r.pending().is_empty());
    }

    #[test]
    fn disk_swap_turns_zswap_on_only_while_its_file_is_on() {
        let (tmp, mut ops, log) = fake_machine("disk", false);
        let root = tmp.0.clone();
        ops.fail_swapon = true;
        let mut r = Restore::new(Box::new(ops));
        let zs = setup_zswap(&mut r, Path::new("var/tmp/d.swap"), 1 << 20, "lz4").unwrap();
        // swapon fails: zswap is off again and no swapoff is pending.
        assert!(disk_swapon(&mut r, &zs, true).unwrap_err().contains("swapon"));
        assert_eq!(read(&root, "sys/module/zswap/parameters/enabled"), "N");
        assert!(!r.pending().iter().any(|u| matches!(u, Undo::Swapoff(_))));
        drop(r);
        assert!(log.borrow().is_empty());
        assert!(!root.join("var/tmp/d.swap").exists());

        let (tmp, ops, log) = fake_machine("disk-ok", false);
        let root = tmp.0.clone();
        let mut r = Restore::new(Box::new(ops));
        let zs = setup_zswap(&mut r, Path::new("var/tmp/d.swap"), 1 << 20, "lz4").unwrap();
        disk_swapon(&mut r, &zs, true).unwrap();
        assert_eq!(read(&root, "sys/module/zswap/parameters/enabled"), "Y");
        disk_swapoff(&mut r, &zs).unwrap();
        assert_eq!(read(&root, "sys/module/zswap/parameters/enabled"), "N");
        assert_eq!(Zswap::max_pool_percent(r.ops()), Some(20));
        assert_eq!(*log.borrow(), vec!["swapon var/tmp/d.swap 32000", "swapoff var/tmp/d.swap"]);
    }

    #[test]
    fn cgroup_peak_oom_kills_and_no_swap() {
        for v2 in [false, true] {
            let (tmp, ops, _log) = fake_machine(if v2 { "cg2" } else { "cg1" }, v2);
            let root = tmp.0.clone();
            let mut r = Restore::new(Box::new(ops));
            let cg = setup_cgroup(&mut r, "c", 1 << 30).unwrap();
            let d = cg.dir.display().to_string();
            let (peak, events, events_text, noswap) = if v2 {
                ("memory.peak", "memory.events", "low 0\nhigh 0\nmax 4\noom 1\noom_kill 1\n", "memory.swap.max")
            } else {
                (
                    "memory.max_usage_in_bytes",
                    "memory.oom_control",
                    "oom_kill_disable 0\nunder_oom 0\noom_kill 1\n",
                    "memory.swappiness",
                )
            };
            assert_eq!((cg.peak(r.ops()), cg.oom_kills(r.ops())), (Some(0), 0));
            crate::kernel::fake::write(&root, &format!("{d}/{peak}"), "123456\n");
            crate::kernel::fake::write(&root, &format!("{d}/{events}"), events_text);
            assert_eq!((cg.peak(r.ops()), cg.oom_kills(r.ops())), (Some(123456), 1));
            cg.forbid_swap(r.ops()).unwrap();
            assert_eq!(read(&root, &format!("{d}/{noswap}")), "0");
            if v2 {
                // Without swap accounting there is no memory.swap.max, and nothing to forbid.
                std::fs::remove_file(root.join(format!("{d}/memory.swap.max"))).unwrap();
                cg.forbid_swap(r.ops()).unwrap();
                assert!(!root.join(format!("{d}/memory.swap.max")).exists());
            }
        }
        assert_eq!(swap_file_bytes(24 << 30), 8 << 30);
        assert_eq!(swap_file_bytes((4 << 30) + 4097), 2 << 30);
    }
}
