//! A swap file shared across `fork` (`tier::holds`, `cluster/share.rs`): the child reads what
//! the parent stored before the fork with nothing copied; neither process writes over a slot
//! the other may still read (the parent frees and stores while the child checks); the holds of
//! a child that exits, is killed or calls `exec` come back to the parent; and the clusters
//! thaw. Each test forks real processes, so each runs in a process of its own (this file has
//! one test that runs the cases in turn: a fork from a many-threaded test harness could copy
//! a lock another test thread holds).

use std::io::{Read, Write};
use std::os::fd::FromRawFd;
use uswap::backend::{Backend, ShareStep};
use uswap::internals::swap_table::{SwapEntry, SLOTS_PER_CLUSTER};
use uswap::tier::file::{EngineKind, FileConfig, FileTarget, FileTier};

const PAGE: usize = 4096;

fn page(seed: u64) -> Vec<u8> {
    let mut v = vec![0u8; PAGE];
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    for c in v.chunks_exact_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        c.copy_from_slice(&x.to_le_bytes());
    }
    v
}

fn tier() -> FileTier {
    FileTier::open(&FileConfig {
        target: FileTarget::TempIn(std::env::temp_dir()),
        size_bytes: 16 << 20, // 8 clusters
        engine: EngineKind::Psync,
        encrypt: true,
        discard: false,
        direct: false,
        force: false,
    })
    .expect("open file tier")
}

fn cluster_of(handle: u64) -> usize {
    (handle >> 4) as usize / SLOTS_PER_CLUSTER
}

/// Store `n` pages with seeds `base..base + n`; returns their handles.
fn store(t: &FileTier, base: u64, n: u64) -> Vec<u64> {
    (0..n).map(|i| t.store(&page(base + i), SwapEntry(base + i)).expect("store").handle).collect()
}

fn check(t: &FileTier, base: u64, handles: &[u64]) -> Result<(), String> {
    let mut out = vec![0u8; PAGE];
    for (i, &h) in handles.iter().enumerate() {
        t.load(h, &mut out).map_err(|e| format!("load of page {i}: {e}"))?;
        if out != page(base + i as u64) {
            return Err(format!("page {i} differs"));
        }
    }
    Ok(())
}

fn pipe() -> (std::fs::File, std::fs::File) {
    let mut fds = [0i32; 2];
    // SAFETY: pipe writes two fds.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    // SAFETY: fresh fds we own.
    unsafe { (std::fs::File::from_raw_fd(fds[0]), std::fs::File::from_raw_fd(fds[1])) }
}

fn wait(pid: i32) -> i32 {
    let mut st = 0;
    // SAFETY: waitpid on our child.
    assert_eq!(unsafe { libc::waitpid(pid, &mut st, 0) }, pid);
    st
}

/// The child reads the parent's pages while the parent frees them and stores new ones; then
/// exits with `_exit` (no destructor runs) or `exec`s, or is killed.
fn share_case(end: &str) {
    let t = tier();
    let old = store(&t, 1_000, 3 * SLOTS_PER_CLUSTER as u64 / 2);
    let old_clusters: std::collections::BTreeSet<usize> = old.iter().map(|&h| cluster_of(h)).collect();
    assert!(t.fork_share(ShareStep::Prepare), "no holds row free for a child");
    let (mut to_child_r, mut to_child_w) = pipe();
    let (mut to_parent_r, mut to_parent_w) = pipe();
    // SAFETY: fork; the child only uses the tier, pipes and _exit/exec.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0);
    if pid == 0 {
        let code = (|| -> Result<(), String> {
            if !t.fork_share(ShareStep::Child { shared: true }) {
                return Err("child could not take its holds".into());
            }
            to_parent_w.write_all(b"k").map_err(|e| e.to_string())?;
            check(&t, 1_000, &old)?;
            // The child stores too: into clusters nobody else holds.
            let mine = store(&t, 50_000, 600);
            if mine.iter().any(|&h| old_clusters.contains(&cluster_of(h))) {
                return Err("child stored into a cluster shared with its parent".into());
            }
            let mut b = [0u8; 1];
            to_child_r.read_exact(&mut b).map_err(|e| e.to_string())?;
            // The parent freed every old page and stored as many new ones meanwhile.
            check(&t, 1_000, &old)?;
            check(&t, 50_000, &mine)?;
            to_parent_w.write_all(b"v").map_err(|e| e.to_string())?;
            match b[0] {
                b'x' => {
                    let sh = std::ffi::CString::new("/bin/sleep").unwrap();
                    let arg = std::ffi::CString::new("3").unwrap();
                    // SAFETY: execv with NUL-terminated argument vector.
                    unsafe { libc::execv(sh.as_ptr(), [sh.as_ptr(), arg.as_ptr(), std::ptr::null()].as_ptr()) };
                    Err("exec failed".into())
                }
                b'k' => {
                    std::thread::sleep(std::time::Duration::from_secs(60));
                    Ok(())
                }
                _ => Ok(()),
            }
        })();
        if let Err(e) = &code {
            eprintln!("child: {e}");
        }
        // SAFETY: leave without running the parent's destructors.
        unsafe { libc::_exit(if code.is_ok() { 0 } else { 1 }) };
    }
    // The child's ends go, so a child that dies is an end of file here, not a hang.
    drop((to_parent_w, to_child_r));
    let mut b = [0u8; 1];
    let took = to_parent_r.read(&mut b).unwrap() == 1;
    t.fork_share(ShareStep::Parent { child_took: took });
    assert!(took, "child did not take its holds");
    assert_eq!(t.holds().sharers(), 2);
    let u = t.usage();
    assert_eq!((u.sharers, u.frozen_bytes), (2, old_clusters.len() as u64 * 2 * 1024 * 1024), "usage after the fork");
    // A live child is never reaped, nor its clusters thawed.
    t.fork_share(ShareStep::Refresh);
    let u = t.usage();
    assert_eq!(
        (u.sharers, u.frozen_bytes),
        (2, old_clusters.len() as u64 * 2 * 1024 * 1024),
        "a live child was reaped"
    );
    for &c in &old_clusters {
        assert_eq!(t.holds().holders(c), 2, "cluster {c} is not held by both");
    }
    // Free every old page and store as many new: nothing may land in a shared cluster.
    for &h in &old {
        assert!(t.free(h) > 0);
    }
    let new = store(&t, 9_000, old.len() as u64);
    assert!(new.iter().all(|&h| !old_clusters.contains(&cluster_of(h))), "parent reused a cluster its child holds");
    assert!(t.space().alloc_stats().foreign_clusters > 0 || t.space().alloc_stats().free_clusters > 0);
    let cmd = match end {
        "exit" => b"e",
        "exec" => b"x",
        _ => b"k",
    };
    to_child_w.write_all(cmd).unwrap();
    let mut v = [0u8; 1];
    to_parent_r.read_exact(&mut v).expect("child verified");
    match end {
        "kill" => {
            // SAFETY: killing our child.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            wait(pid);
        }
        "exec" => {
            // The child lives on as /bin/sleep, with the file closed: its holds go anyway.
            std::thread::sleep(std::time::Duration::from_millis(300));
        }
        _ => assert_eq!(wait(pid), 0, "child failed"),
    }
    t.fork_share(ShareStep::Refresh);
    assert_eq!(t.holds().sharers(), 1, "the child's row was not reaped ({end})");
    for &c in &old_clusters {
        assert_eq!(t.holds().holders(c), 0, "cluster {c} still held after the parent freed it ({end})");
    }
    let s = t.space().alloc_stats();
    assert_eq!((s.shared_clusters, s.foreign_clusters), (0, 0), "clusters not given back ({end})");
    assert_eq!((t.usage().sharers, t.usage().frozen_bytes), (1, 0), "usage with the child gone ({end})");
    t.space().check_invariants().unwrap();
    check(&t, 9_000, &new).unwrap();
    // Every slot is allocatable again: the file fills up to the last slot.
    let room = t.space().nr_slots() - new.len() as u64;
    let again = store(&t, 100_000, room);
    assert!(again.iter().any(|&h| old_clusters.contains(&cluster_of(h))));
    check(&t, 100_000, &again).unwrap();
    if end == "exec" {
        wait(pid);
    }
}

/// A fork that failed (the child never takes its row): the parent gives the holds up.
fn failed_fork_case() {
    let t = tier();
    let old = store(&t, 1, 700);
    assert!(t.fork_share(ShareStep::Prepare));
    t.fork_share(ShareStep::Parent { child_took: false });
    assert_eq!(t.holds().sharers(), 1);
    t.fork_share(ShareStep::Refresh);
    assert_eq!(t.space().alloc_stats().shared_clusters, 0);
    check(&t, 1, &old).unwrap();
}

#[test]
fn a_swap_file_is_shared_across_fork() {
    // A hang is a failure: give up loudly after two minutes.
    std::thread::spawn(|| {
        std::thread::sleep(std::time::Duration::from_secs(120));
        eprintln!("file_fork: timed out after 120 s");
        std::process::abort();
    });
    failed_fork_case();
    for end in ["exit", "kill", "exec"] {
        share_case(end);
    }
}
