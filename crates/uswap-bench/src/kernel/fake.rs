//! A fake machine for the tests of the kernel side: a temp directory laid out like /sys, /proc,
//! /dev and /var/tmp, with swapon, swapoff and rmdir recorded in a log instead of performed, so
//! that setup, runs and restore can be checked without root. Single-threaded (the log is an
//! `Rc<RefCell<…>>`, like the guard that owns the ops).

use super::SysOps;
use std::cell::RefCell;
use std::io;
use std::path::{Path, PathBuf};
use std::rc::Rc;

/// The fake machine's operations.
pub struct FakeOps {
    root: PathBuf,
    /// What was done, in order: `swapon REL PRIO`, `swapoff REL`, `rmdir REL`.
    pub log: Rc<RefCell<Vec<String>>>,
    /// swapon fails with EINVAL.
    pub fail_swapon: bool,
    cgroup_v2: bool,
}

impl SysOps for FakeOps {
    fn root(&self) -> &Path {
        &self.root
    }
    fn swapon(&self, rel: &Path, prio: i32) -> io::Result<()> {
        if self.fail_swapon {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        self.log.borrow_mut().push(format!("swapon {} {prio}", rel.display()));
        Ok(())
    }
    fn swapoff(&self, rel: &Path) -> io::Result<()> {
        self.log.borrow_mut().push(format!("swapoff {}", rel.display()));
        Ok(())
    }
    /// A new cgroup with the control files the benchmarks read and write, as the kernel
    /// would fill them in.
    fn mkdir_cgroup(&self, rel: &Path) -> io::Result<()> {
        std::fs::create_dir(self.path(rel))?;
        let files: &[(&str, &str)] = if self.cgroup_v2 {
            &[
                ("cgroup.procs", ""),
                ("memory.peak", "0"),
                ("memory.events", "oom 0\noom_kill 0\n"),
                ("memory.swap.max", "max"),
            ]
        } else {
            &[
                ("cgroup.procs", ""),
                ("memory.max_usage_in_bytes", "0"),
                ("memory.oom_control", "oom_kill_disable 0\nunder_oom 0\noom_kill 0\n"),
                ("memory.swappiness", "60"),
            ]
        };
        for (f, v) in files {
            std::fs::write(self.path(&rel.join(f)), v)?;
        }
        Ok(())
    }
    fn rmdir_cgroup(&self, rel: &Path) -> io::Result<()> {
        self.log.borrow_mut().push(format!("rmdir {}", rel.display()));
        std::fs::remove_dir_all(self.path(rel))
    }
}

/// Removes the fake machine's directory when dropped.
pub struct TempRoot(pub PathBuf);

impl Drop for TempRoot {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A fake machine named `tag` (unique per test): a hot-addable zram device 1 offering lz4,
/// zswap off with lzo, no swap active, 64 MiB of RAM (a 32 MiB disk swap file), and a cgroup v1 or v2 memory controller.
pub fn machine(tag: &str, cgroup_v2: bool) -> (TempRoot, FakeOps, Rc<RefCell<Vec<String>>>) {
    let root = std::env::temp_dir().join(format!("uswap-fake-sys-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    for (p, v) in [
        ("sys/class/zram-control/hot_add", "1\n"),
        ("sys/class/zram-control/hot_remove", ""),
        ("sys/block/zram1/comp_algorithm", "[lzo-rle] lzo lz4 zstd\n"),
        ("sys/block/zram1/disksize", "0\n"),
        ("sys/block/zram1/reset", ""),
        ("sys/block/zram1/mm_stat", "1000 100 200 0 200 3 0 0 0\n"),
        ("dev/zram1", ""),
        ("proc/swaps", "Filename Type Size Used Priority\n"),
        ("proc/meminfo", "MemTotal:          65536 kB\nMemFree:           60000 kB\n"),
        ("proc/vmstat", "pswpin 0\npswpout 0\nzswpin 0\nzswpout 0\nzswpwb 0\n"),
        ("sys/module/zswap/parameters/enabled", "N\n"),
        ("sys/module/zswap/parameters/compressor", "lzo\n"),
        ("sys/module/zswap/parameters/max_pool_percent", "20\n"),
    ] {
        write(&root, p, v);
    }
    std::fs::create_dir_all(root.join("var/tmp")).unwrap();
    if cgroup_v2 {
        write(&root, "sys/fs/cgroup/cgroup.controllers", "cpu io memory pids\n");
        write(&root, "sys/fs/cgroup/cgroup.subtree_control", "cpu\n");
    } else {
        write(&root, "sys/fs/cgroup/memory/memory.limit_in_bytes", "9223372036854771712\n");
    }
    let log = Rc::new(RefCell::new(Vec::new()));
    let ops = FakeOps { root: root.clone(), log: log.clone(), fail_swapon: false, cgroup_v2 };
    (TempRoot(root), ops, log)
}

/// Write `value` to `rel` below `root`, creating the directories.
pub fn write(root: &Path, rel: &str, value: &str) {
    let p = root.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, value).unwrap();
}

/// The trimmed contents of `rel` below `root`.
pub fn read(root: &Path, rel: &str) -> String {
    std::fs::read_to_string(root.join(rel)).unwrap().trim().to_string()
}
