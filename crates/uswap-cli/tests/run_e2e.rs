//! End-to-end tests of `uswap run`: real programs run under the pager, their output is
//! checked byte for byte against values computed here independently (or against the same program
//! run without uswap), and their peak RSS against the limit.
//!
//! The C programs are in `tests/programs/` and are compiled with `cc -O2 -pthread` into a
//! temporary directory by each test. `tests/programs/pattern.h` defines the data they write;
//! [`page_words`] and [`page_hash`] below compute the same values.
//!
//! Statistics are read in the schema of docs/stats.md. Peak RSS: `uswap run --stats` reports `peak_rss_bytes` (the largest RSS of the program and
//! the processes it waited for). The bound checked is `limit + fixed overhead + slack`, where the
//! fixed overhead is the RSS when the pager had started (`fixed_overhead_bytes`, the largest over
//! the processes that ran under uswap) and [`slack`] covers the rest (the pager's own tables).
//!
//! Every test prints `SKIPPED: …` and passes when userfaultfd is not permitted here (the runner
//! then exits 1 and says so), unless `USWAP_REQUIRE_UFFD` is set (CI), which makes it a failure. Each run under uswap is killed after [`timeout`]: a pager that
//! thrashes or livelocks fails the test instead of hanging it.

mod common;

use common::*;
use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::process::Command;

// ---------------------------------------------------------------------------------------------
// The data pattern of tests/programs/pattern.h

const PAGE_WORDS: u64 = 512;
const PAGE_BYTES: u64 = 4096;
const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0100_0000_01b3;

fn mix64(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// 0: zero page, 1: compressible, 2: random.
fn page_kind(seed: u64, p: u64) -> u8 {
    match mix64(seed.wrapping_mul(0x0051_afd7_ed55_8ccd) ^ p) & 3 {
        0 => 0,
        1 => 1,
        _ => 2,
    }
}

/// The words of page `p` written with `seed`.
fn page_words(seed: u64, p: u64) -> impl Iterator<Item = u64> {
    let kind = page_kind(seed, p);
    (0..PAGE_WORDS).map(move |i| match kind {
        0 => 0,
        1 => mix64((seed << 48) ^ (p << 8) ^ (i & 7)),
        _ => mix64((seed << 48) ^ (p << 12) ^ i ^ 0x800),
    })
}

fn fnv_step(h: u64, w: u64) -> u64 {
    (h ^ w).wrapping_mul(FNV_PRIME)
}

/// FNV-1a over the words of page `p` written with `seed`.
fn page_hash(seed: u64, p: u64) -> u64 {
    page_words(seed, p).fold(FNV_OFFSET, fnv_step)
}

/// The hash of a sequence of pages, from their page hashes.
fn pages_hash(hashes: impl Iterator<Item = u64>) -> u64 {
    hashes.fold(FNV_OFFSET, fnv_step)
}

// ---------------------------------------------------------------------------------------------
// Real programs

/// Memory freed by `free`, `munmap`, `madvise(DONTNEED/FREE)` and `mremap` releases or moves
/// its swap entries: after ten rounds that push 40x the limit through every one of them, only
/// a handful of pages stay stored and no more managed address space than libc's own buffers.
#[test]
fn churn_through_free_munmap_madvise_mremap_leaks_nothing() {
    let dir = tempdir();
    let prog = compile("churn", dir.path());
    let limit = 16 * MIB;
    let st = dir.path().join("stats.json");
    let r = uswap_run_stats(&limit_arg(limit), &st, &[prog.as_os_str(), limit.to_string().as_ref()]);
    if no_uffd(&r) {
        return;
    }
    assert_eq!(r.out(), "bad=0\n", "churn output; stderr:\n{}", r.stderr);
    assert_eq!(r.code, Some(0), "churn exit status; stderr:\n{}", r.stderr);
    let s = stats(&st);
    assert!(num(&s, "/main/swap/pswpout") * PAGE_BYTES >= 10 * limit, "churn swapped out too little: {s:#}");
    // What stays stored at exit is what the program never gives back (libc's heap and buffers)
    // and happens to be swapped out then: a few dozen pages, more when a few more heap folios
    // are out at exit, the same for 10 rounds or 40, so it does not grow with the memory pushed
    // through. A leak of a folio per round, or of any share of the 40x the limit churned, is
    // far above this bound.
    let stored = num(&s, "/main/swap/stored_pages");
    assert!(stored < 160, "{stored} pages still stored at exit (leak): {s:#}");
    assert_eq!(num(&s, "/main/preload/adopt_errors"), 0, "mappings the pager could not adopt: {s:#}");
    check_peak("churn", &s, limit, r.secs);
}

#[test]
fn threads_write_and_verify_four_times_the_limit() {
    let dir = tempdir();
    let prog = compile("threads", dir.path());
    let limit = 32 * MIB;
    let (nthreads, bytes) = (4u64, 4 * limit);
    let st = dir.path().join("stats.json");
    let mut want = String::new();
    for t in 0..nthreads {
        let seed = t + 1;
        let pages = bytes / nthreads / PAGE_BYTES;
        // The block sizes of threads.c: 1 + mix64(seed * 1000 + n) % 256 pages.
        let (mut left, mut blocks) = (pages, 0u64);
        while left > 0 {
            left -= (1 + mix64(seed * 1000 + blocks) % 256).min(left);
            blocks += 1;
        }
        let h = pages_hash((0..pages).map(|p| page_hash(seed, p)));
        want += &format!(
            "thread {t}: {pages} pages in {blocks} blocks: pass 1 mismatches 0 hash {h:016x}, pass 2 mismatches 0 hash {h:016x}\n"
        );
    }
    want += "total mismatches 0\n";
    // A run's peak can exceed the bound by tens of MiB while the reconciler adopts the
    // threads' growing heaps (glibc grows a thread arena with its internal `mprotect`, which no
    // symbol interposes); the output is right every time. The same lag can leave so much of
    // the data outside the pager that it swaps out less than `bytes - limit`. Merged mappings
    // and large blocks are adopted on the allocating thread (waiting for a pass in progress),
    // which narrows the lag without closing it, and other tests running beside this one widen
    // it. So a run over either bound is run again, and a third run must stay within both (a
    // regression that shows every time still fails here).
    for attempt in 1..=3 {
        let r = uswap_run_stats(
            &limit_arg(limit),
            &st,
            &[prog.as_os_str(), nthreads.to_string().as_ref(), bytes.to_string().as_ref()],
        );
        if no_uffd(&r) {
            return;
        }
        assert_eq!(r.out(), want, "threads output; stderr:\n{}", r.stderr);
        assert_eq!(r.code, Some(0), "threads exit status; stderr:\n{}", r.stderr);
        let s = stats(&st);
        assert_eq!(num(&s, "/exit_code"), 0);
        let swapped_out = num(&s, "/main/swap/pswpout") * PAGE_BYTES;
        if attempt == 3 {
            assert!(swapped_out >= bytes - limit, "threads: the pager swapped out less than it must have: {s:#}");
            check_peak("threads", &s, limit, r.secs);
            return;
        }
        let (peak, bound) = peak_and_bound("threads", &s, limit, r.secs);
        if peak <= bound && swapped_out >= bytes - limit {
            return;
        }
        eprintln!(
            "threads: on run {attempt}, peak {} (bound {}), swapped out {} (at least {} expected): running it again",
            mib(peak),
            mib(bound),
            mib(swapped_out),
            mib(bytes - limit)
        );
    }
}

/// The shape of a Redis hang, as a test: four threads build and rework linked lists with the
/// program's own malloc (its arena lock held inside every call) over memory that is swapped out
/// under them, while the pager evicts and sets up its compressed pool for the first time. A
/// runner with one global heap lock held across faults, and a pager that takes the same lock
/// to map its pool, deadlocks here; the test's timeout turns a hang into a failure.
#[test]
fn threads_fault_inside_their_allocator_while_the_pager_evicts() {
    let dir = tempdir();
    let prog = compile("alloc_storm", dir.path());
    let limit = 24 * MIB;
    let st = dir.path().join("stats.json");
    let r = uswap_run_stats(&limit_arg(limit), &st, &[prog.as_os_str(), "4".as_ref(), "30000".as_ref()]);
    if no_uffd(&r) {
        return;
    }
    let out = r.out();
    let mut lines: Vec<&str> = out.lines().collect();
    lines.sort_unstable();
    let want: Vec<String> = std::iter::once("ok".to_string())
        .chain((0..4).map(|t| format!("thread {t}: 30000 nodes, 15000 kept, 0 bad bytes")))
        .collect();
    assert_eq!(lines, want, "alloc_storm output; stderr:\n{}", r.stderr);
    assert_eq!(r.code, Some(0), "alloc_storm exit status; stderr:\n{}", r.stderr);
    let s = stats(&st);
    assert!(num(&s, "/main/swap/pswpout") > 0, "alloc_storm: nothing was swapped out: {s:#}");
}

/// A program that fills a heap glibc grows with `brk` (`grow`: 4000-byte mallocs, then a fork
/// child that does the same) keeps to its limit: that memory takes no fault, and no interposed
/// call maps it, so what holds it back is its allocations waiting for the reclaimer while the
/// charge is over the limit (`alloc_throttled`). The tree's anonymous memory stays within limit
/// + own memory + limit/8 (with the reclaimer's speed as the only bound, it did not).
#[test]
fn a_heap_grown_with_brk_keeps_to_the_limit() {
    let dir = tempdir();
    let prog = compile("grow", dir.path());
    let limit = 32 * MIB;
    let st = dir.path().join("stats.json");
    let r = uswap_run_stats(&limit_arg(limit), &st, &[prog.as_os_str(), "96".as_ref()]);
    if no_uffd(&r) {
        return;
    }
    let s = checked_grow_96(&r, &st);
    check_tree_peak_within("grow", &s, limit, limit / 8);
}

#[test]
fn fork_copy_on_write_both_ways_two_generations() {
    let dir = tempdir();
    let prog = compile("fork", dir.path());
    let limit = 32 * MIB;
    let bytes = 4 * limit;
    let st = dir.path().join("stats.json");
    let r = uswap_run_stats(&limit_arg(limit), &st, &[prog.as_os_str(), bytes.to_string().as_ref()]);
    if no_uffd(&r) {
        return;
    }
    // Page hashes of every page as first written (seed 1) and of the pages each process
    // overwrites (parent: p % 5 == 0 with seed 2, child: p % 7 == 3 with seed 3, grandchild:
    // p % 11 == 5 with seed 4); a view's hash takes the last writer among those it sees.
    let pages = bytes / PAGE_BYTES;
    let base: Vec<u64> = (0..pages).map(|p| page_hash(1, p)).collect();
    let view = |parent: bool, child: bool, grandchild: bool| {
        pages_hash((0..pages).map(|p| {
            if grandchild && p % 11 == 5 {
                page_hash(4, p)
            } else if child && p % 7 == 3 {
                page_hash(3, p)
            } else if parent && p % 5 == 0 {
                page_hash(2, p)
            } else {
                base[p as usize]
            }
        }))
    };
    let (h0, hc, hg, hp) =
        (view(false, false, false), view(false, true, false), view(false, true, true), view(true, false, false));
    let want = format!(
        "parent: before fork: mismatches 0 hash {h0:016x}\n\
         child: inherited: mismatches 0 hash {h0:016x}\n\
         child: own writes: mismatches 0 hash {hc:016x}\n\
         grandchild: inherited: mismatches 0 hash {hc:016x}\n\
         grandchild: own writes: mismatches 0 hash {hg:016x}\n\
         child: grandchild exit status 0\n\
         child: after grandchild: mismatches 0 hash {hc:016x}\n\
         parent: child exit status 0\n\
         parent: after child: mismatches 0 hash {hp:016x}\n"
    );
    assert_eq!(r.out(), want, "fork output; stderr:\n{}", r.stderr);
    assert_eq!(r.code, Some(0), "fork exit status; stderr:\n{}", r.stderr);
    let s = stats(&st);
    // The child and the grandchild continued with pagers of their own, which wrote statistics.
    let others = s["other_processes"].as_array().map(Vec::len);
    assert_eq!(others, Some(2), "statistics of the child and the grandchild: {s:#}");
    // Both forks shared the swap file (nothing copied).
    let shared: u64 = std::iter::once(&s["main"])
        .chain(s["other_processes"].as_array().into_iter().flatten())
        .map(|p| p["forks_file_shared"].as_u64().unwrap_or(0))
        .sum();
    assert_eq!(shared, 2, "forks that shared the swap file: {s:#}");
    assert_eq!(num(&s, "/main/forks_file_copied"), 0, "a fork copied the swap file: {s:#}");
    // The child started with the parent's resident pages shared copy-on-write: its reclaim
    // passed over folios both map (evicting them would free nothing) before taking them.
    let cow_skipped: u64 = s["other_processes"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| p.pointer("/reclaim/cow_skipped").and_then(|v| v.as_u64()).unwrap_or(0))
        .sum();
    assert!(cow_skipped > 0, "no fork child passed over a folio shared with its parent: {s:#}");
    // Each process's statistics are its own from its fork on: the parent filled every page
    // (zero-fill faults) before the fork, the child and the grandchild filled none, so their
    // counts must not carry the parent's (a tree's sum would count them twice).
    let parent_zero = num(&s, "/main/faults/zero_fill");
    assert!(parent_zero > 0, "the parent filled its pages: {s:#}");
    for p in s["other_processes"].as_array().into_iter().flatten() {
        let z = p.pointer("/faults/zero_fill").and_then(|v| v.as_u64()).unwrap_or(u64::MAX);
        assert!(
            z * 10 < parent_zero,
            "a fork child counts the parent's {parent_zero} zero-fill faults as its own ({z}): {s:#}"
        );
    }
    check_peak("fork", &s, limit, r.secs);
}

/// A swap file on io_uring (`engine=uring`) works across `fork`: the child takes rings of its
/// own (the inherited ones are mapped shared with the parent, and a ring cannot be shared with
/// a child), so a Redis BGSAVE child goes on with the swap file. The pool is kept small so
/// the pages the processes read back come from the file, through the child's and the
/// grandchild's new rings.
#[test]
fn fork_with_an_io_uring_swap_file() {
    let dir = tempdir();
    let prog = compile("fork", dir.path());
    let limit = 32 * MIB;
    let st = dir.path().join("stats.json");
    let tiers = format!("zero,lz4:pool=2M,file:{}:engine=uring", dir.path().display());
    let bytes = (4 * limit).to_string();
    let (lim, stp) = (limit_arg(limit), st.as_os_str().to_owned());
    let args: Vec<&OsStr> = vec![
        OsStr::new("--limit"),
        OsStr::new(&lim),
        OsStr::new("--tiers"),
        OsStr::new(&tiers),
        OsStr::new("--stats"),
        &stp,
        OsStr::new("--"),
        prog.as_os_str(),
        OsStr::new(&bytes),
    ];
    let r = uswap_run(&args);
    if no_uffd(&r) {
        return;
    }
    assert_eq!(r.code, Some(0), "fork exit status; stdout:\n{}\nstderr:\n{}", r.out(), r.stderr);
    let out = r.out();
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 9, "every check of the three processes printed: {}", r.out());
    for l in &lines {
        assert!(l.contains("mismatches 0 ") || l.ends_with("exit status 0"), "fork: {l}\nstderr:\n{}", r.stderr);
    }
    let s = stats(&st);
    let procs: Vec<&serde_json::Value> =
        std::iter::once(&s["main"]).chain(s["other_processes"].as_array().into_iter().flatten()).collect();
    assert_eq!(procs.len(), 3, "statistics of the parent, the child and the grandchild: {s:#}");
    for p in &procs {
        let file = p["tiers"].as_object().and_then(|t| t.iter().find(|(k, _)| k.starts_with("file:"))).map(|(_, v)| v);
        assert!(file.is_some(), "a file tier in every process: {p:#}");
    }
    let file_pages: u64 = procs
        .iter()
        .filter_map(|p| p["tiers"].as_object())
        .flat_map(|t| {
            t.iter().filter(|(k, _)| k.starts_with("file:")).map(|(_, v)| v["stored_pages"].as_u64().unwrap_or(0))
        })
        .sum();
    assert!(file_pages * PAGE_BYTES >= limit, "the pages went to the io_uring file: {s:#}");
}

/// A fork child starts its pager thread before any thread of its own can serve a fault, and
/// glibc's `pthread_create` on a cached stack reaches the dynamic loader's start-up data (a
/// lazily bound `_dl_allocate_tls_init`: libc's link map, the TLS slot-info list). With that
/// data adopted and swapped out, a child without a pager thread to serve it hangs for good in
/// `handle_userfault` (a Redis BGSAVE child, or this program with small mappings adopted).
/// The loader's start-up mappings are small, so `USWAP_MMAP_MIN=4096` makes the scanner
/// consider them here as it does in a program with many libraries.
#[test]
fn fork_after_startup_memory_went_cold() {
    let dir = tempdir();
    let prog = compile("fork_cold", dir.path());
    let limit = 32 * MIB;
    let st = dir.path().join("stats.json");
    let rounds = 4;
    let (lim, n, bytes) = (limit_arg(limit), rounds.to_string(), (4 * limit).to_string());
    let args = [
        OsStr::new("--limit"),
        lim.as_ref(),
        OsStr::new("--stats"),
        st.as_os_str(),
        OsStr::new("--"),
        prog.as_os_str(),
        n.as_ref(),
        bytes.as_ref(),
    ];
    let r = uswap_run_env(&args, &[("USWAP_MMAP_MIN", "4096")]);
    if no_uffd(&r) {
        return;
    }
    let want: String = (0..rounds).map(|i| format!("round {i}: child exit 0\n")).collect::<String>() + "ok\n";
    assert_eq!(r.out(), want, "fork_cold output; stderr:\n{}", r.stderr);
    assert_eq!(r.code, Some(0), "fork_cold exit status; stderr:\n{}", r.stderr);
    let s = stats(&st);
    assert!(num(&s, "/main/unmanaged/loader_bytes") > 0, "the loader's start-up data was not found: {s:#}");
    assert!(num(&s, "/main/swap/pswpout") * PAGE_BYTES >= 3 * limit, "fork_cold: too little swapped out: {s:#}");
    check_peak("fork_cold", &s, limit, r.secs);
}

/// glibc's `fork` walks every thread's descriptor (at the top of its stack) and clears their
/// thread-specific blocks in the child before any atfork handler runs, so before the child
/// has a pager: pages swapped out at the fork must read as they were there too
/// (`uswap_pager`'s `forkserve`: the parent's event thread serves them). Closing the fork
/// descriptor at once would leave them zeros: every child of this program would die of
/// SIGSEGV in glibc's `reclaim_stacks`, and so would Redis's BGSAVE child (then hang in its
/// SIGSEGV handler on a lock held across the fork).
/// The program also loads a locale first, as CPython does: a new thread's start reads its data
/// (a heap block, swapped out too), and a child's event thread started only once the child has
/// a uffd of its own would fault on it and wait for itself (as `python-fork` would): the
/// child's pager threads start while the parent still serves the child.
#[test]
fn fork_reads_swapped_out_thread_descriptors() {
    let dir = tempdir();
    let prog = compile("fork_idle", dir.path());
    let limit = 16 * MIB;
    let st = dir.path().join("stats.json");
    let (forks, bytes) = (6u64, (4 * limit).to_string());
    let r =
        uswap_run_stats(&limit_arg(limit), &st, &[prog.as_os_str(), OsStr::new("8"), bytes.as_ref(), OsStr::new("6")]);
    if no_uffd(&r) {
        return;
    }
    let want = "children failed 0\nparent mismatches 0\nthreads with wrong keys 0\nok\n";
    assert_eq!(r.out(), want, "fork_idle output; stderr:\n{}", r.stderr);
    assert_eq!(r.code, Some(0), "fork_idle exit status; stderr:\n{}", r.stderr);
    let s = stats(&st);
    assert_eq!(num(&s, "/main/forks"), forks, "fork_idle: forks counted: {s:#}");
    // The sleeping threads' descriptors at least were swapped out and served to each child.
    assert!(num(&s, "/main/fork_child_faults") >= forks, "fork_idle: no page served to a fork child: {s:#}");
    check_peak("fork_idle", &s, limit, r.secs);
}

/// `git repack` of this repository under a limit well under its peak: the objects come out
/// the same, and the compressed pool of `git pack-objects` is written back toward its cap (8 %
/// of the limit; the reclaimer writes back what is over one and a half times it). Its data is
/// zlib-compressed already, so the pool saves little on it: a reclaimer that did not write back
/// what the pool holds over its cap while the charge is under its low mark would leave the
/// pool well over its cap, the resident pages would make up the difference, and the repack
/// would take about twice the faults.
#[test]
fn git_repack_writes_back_what_its_pool_holds_over_its_cap() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    assert!(
        root.join(".git").exists(),
        "this test repacks a clone of the workspace's git repository, and {} has none",
        root.display()
    );
    let dir = tempdir();
    let repo = dir.path().join("repo");
    let git = |args: &[&OsStr]| {
        let out = Command::new("git").args(args).output().expect("run git");
        assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        out.stdout
    };
    git(&[OsStr::new("clone"), OsStr::new("-q"), OsStr::new("--no-local"), root.as_os_str(), repo.as_os_str()]);
    let objects = |repo: &Path| {
        let out = git(&[
            OsStr::new("-C"),
            repo.as_os_str(),
            OsStr::new("rev-list"),
            OsStr::new("--all"),
            OsStr::new("--objects"),
        ]);
        let mut v: Vec<&[u8]> = out.split(|&b| b == b'\n').collect();
        v.sort_unstable();
        v.concat()
    };
    let before = objects(&repo);
    let limit = 40 * MIB;
    let st = dir.path().join("stats.json");
    let r = uswap_run_stats(
        &limit_arg(limit),
        &st,
        &["git", "-C", repo.to_str().unwrap(), "repack", "-adfq", "--window=250", "--depth=50"].map(OsStr::new),
    );
    if no_uffd(&r) {
        return;
    }
    assert_eq!(r.code, Some(0), "git repack under uswap run; stderr:\n{}", r.stderr);
    git(&[OsStr::new("-C"), repo.as_os_str(), OsStr::new("fsck"), OsStr::new("--strict"), OsStr::new("--no-progress")]);
    assert!(objects(&repo) == before, "the repacked repository lists other objects");
    let s = stats(&st);
    let pack = records(&s)
        .into_iter()
        .find(|p| p["argv"].as_array().is_some_and(|a| a.iter().any(|x| x == "pack-objects")))
        .unwrap_or_else(|| panic!("no statistics of git pack-objects: {s:#}"));
    let (pool, cap) = (num(pack, "/memory/pool_bytes"), num(pack, "/memory/pool_max_bytes"));
    assert!(num(pack, "/swap/pswpout") > 0, "git pack-objects swapped nothing out: {pack:#}");
    // What the pool held over its cap went to the file (a writeback that ran only while the
    // charge stayed over the low mark would write none: evicting resident pages ends that
    // first). The pool's size at exit depends on when the reclaimer last ran: a loose bound.
    assert!(num(pack, "/swap/zswpwb") > 0, "git pack-objects: nothing written back from the pool: {pack:#}");
    assert!(pool <= 3 * cap, "git pack-objects: pool {} against its cap of {}: {pack:#}", mib(pool), mib(cap));
}

/// `fork` while three threads fault: the copy must not catch the pager's event thread in the
/// middle of an operation (a cluster or pool lock held, a page claimed), or the child waits
/// for that lock forever (`uswap_pager::forkhold`). Without the fork hold, this program hangs
/// within a few hundred forks: a child waits in `forget_clean` → `Engine::put` for a pool
/// class lock, or a child's event thread retries forever a fault on a page its copy shows
/// claimed. The readers also allocate and free, so some fault while they hold a malloc arena
/// lock, which the forking thread needs before its `clone` (so a plain stop of the event
/// thread would deadlock).
#[test]
fn fork_while_other_threads_fault() {
    let dir = tempdir();
    let prog = compile("fork_busy", dir.path());
    let limit = 32 * MIB;
    let st = dir.path().join("stats.json");
    let bytes = (3 * limit).to_string();
    // 200 forks of a thrashing program take well over the default 60 s (longer in a debug
    // build, or where cross-CPU wake-ups are slow), hence 300 s; a hang still ends in the
    // stacks, later.
    let r = uswap_run_stats_within(
        &limit_arg(limit),
        &st,
        &[prog.as_os_str(), OsStr::new("200"), bytes.as_ref(), OsStr::new("3")],
        timeout_or(300),
    );
    if no_uffd(&r) {
        return;
    }
    assert_eq!(r.out(), "children failed 0\nparent mismatches 0\nok\n", "fork_busy output; stderr:\n{}", r.stderr);
    assert_eq!(r.code, Some(0), "fork_busy exit status; stderr:\n{}", r.stderr);
    let s = stats(&st);
    assert_eq!(num(&s, "/main/forks"), 200, "fork_busy: forks counted: {s:#}");
    assert!(num(&s, "/main/swap/pswpin") * PAGE_BYTES >= limit, "fork_busy: too little swapped in: {s:#}");
    eprintln!("fork_busy: {:.1} s, forks with a forced hold: {}", r.secs, num(&s, "/main/forks_hold_forced"));
}

#[test]
fn read_write_files_through_swapped_out_memory() {
    let dir = tempdir();
    let prog = compile("readwrite", dir.path());
    let limit = 16 * MIB;
    let (buf, other) = (2 * limit, 4 * limit);
    // The input: 3x the limit and a bit, not a multiple of the page size, of mixed data.
    let size = 3 * limit + 12345;
    let mut data = Vec::with_capacity(size as usize + 4096);
    for p in 0..size.div_ceil(PAGE_BYTES) {
        for w in page_words(9, p) {
            data.extend_from_slice(&w.to_le_bytes());
        }
    }
    data.truncate(size as usize);
    let input = dir.path().join("in");
    let output = dir.path().join("out");
    std::fs::write(&input, &data).expect("write the input file");
    let st = dir.path().join("stats.json");
    let r = uswap_run_stats(
        &limit_arg(limit),
        &st,
        &[
            prog.as_os_str(),
            buf.to_string().as_ref(),
            other.to_string().as_ref(),
            input.as_os_str(),
            output.as_os_str(),
        ],
    );
    if no_uffd(&r) {
        return;
    }
    // The calls readwrite.c makes (regular files: every call transfers all it asks for).
    let chunk = |n: u64| (4 << 20) - 4096 * (n % 5) + 1 + 97 * (n % 13);
    let (mut off, mut passes, mut calls, mut counts) = (0u64, 0u64, 0u64, [0u64; 6]);
    while off < size {
        let n = (size - off).min(buf - (1 + 4093 * (passes % 3)));
        for half in [0, 3] {
            let mut done = 0;
            while done < n {
                done += chunk(calls).min(n - done);
                counts[half + (calls % 3) as usize] += 1;
                calls += 1;
            }
        }
        off += n;
        passes += 1;
    }
    let [rd, prd, frd, wr, pwr, wrv] = counts;
    let want = format!(
        "copied {size} bytes in {passes} passes: read {rd}, pread {prd}, fread {frd}, write {wr}, pwrite {pwr}, \
         writev {wrv}; {} evictions, other memory mismatches 0\n",
        2 * passes
    );
    assert_eq!(r.out(), want, "readwrite output; stderr:\n{}", r.stderr);
    assert_eq!(r.code, Some(0), "readwrite exit status; stderr:\n{}", r.stderr);
    let got = std::fs::read(&output).expect("read the output file");
    if got != data {
        let at = got.iter().zip(&data).position(|(a, b)| a != b).unwrap_or(got.len().min(data.len()));
        panic!(
            "readwrite: the copy differs from the input: {} bytes vs {}, first difference at byte {at}",
            got.len(),
            data.len()
        );
    }
    let s = stats(&st);
    assert!(
        num(&s, "/main/swap/pswpout") * PAGE_BYTES >= 2 * other,
        "readwrite: the pager swapped out less than it must have: {s:#}"
    );
    check_peak("readwrite", &s, limit, r.secs);
}

/// Builds a dict of 1M str -> str, checks every entry, prints its length, the number of bad
/// entries and a SHA-256 over all items in order.
const DICT_PY: &str = r#"
import hashlib
N = 200_000
def val(i):
    return "value-%d-%s" % (i * 7919 % 1000003, "x" * (i % 13))
d = {}
for i in range(N):
    d["key%07d" % i] = val(i)
bad = sum(1 for i in range(N) if d["key%07d" % i] != val(i))
h = hashlib.sha256()
for k, v in d.items():
    h.update(k.encode())
    h.update(b"=")
    h.update(v.encode())
    h.update(b"\n")
print(len(d), bad, h.hexdigest())
"#;

/// The Python interpreter itself (not a pyenv shim script), or None when there is none (the
/// test is then skipped, and fails instead where `USWAP_REQUIRE_RUNTIMES` is set).
fn python_or_skip() -> Option<PathBuf> {
    let found = Command::new("python3").args(["-c", "import sys; print(sys.executable)"]).output().ok().and_then(|o| {
        let p = PathBuf::from(String::from_utf8(o.stdout).ok()?.trim());
        (o.status.success() && p.is_file()).then_some(p)
    });
    if found.is_none() {
        assert!(std::env::var_os("USWAP_REQUIRE_RUNTIMES").is_none(), "no python3 and USWAP_REQUIRE_RUNTIMES is set");
        eprintln!("SKIPPED: no python3 here");
    }
    found
}

#[test]
fn python_builds_and_checks_a_large_dict() {
    let Some(py) = python_or_skip() else { return };
    let mut native = Command::new(&py);
    native.args(["-c", DICT_PY]).env("PYTHONHASHSEED", "0");
    let want = run(native, "python3 (without uswap)");
    assert_eq!(want.code, Some(0), "python3 without uswap: {}", want.stderr);
    assert!(want.out().starts_with("200000 0 "), "python3 without uswap printed {:?}", want.out());
    let dir = tempdir();
    // The program's RSS without uswap is about three times this limit (the configuration the
    // README reports a measurement for).
    let limit = 32 * MIB;
    let st = dir.path().join("stats.json");
    let r = {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_uswap"));
        cmd.arg("run")
            .args(["--limit", &limit_arg(limit), "--stats"])
            .arg(&st)
            .arg("--")
            .arg(&py)
            .args(["-c", DICT_PY])
            .env("USWAP_PRELOAD", preload())
            .env_remove("LD_PRELOAD")
            .env("PYTHONHASHSEED", "0");
        run(cmd, "uswap run -- python3 (1M-entry dict)")
    };
    if no_uffd(&r) {
        return;
    }
    assert_eq!(r.out(), want.out(), "python3 under uswap; stderr:\n{}", r.stderr);
    assert_eq!(r.code, Some(0), "python3 exit status; stderr:\n{}", r.stderr);
    eprintln!("python3 without uswap: {:.1} s", want.secs);
    check_peak("python dict", &stats(&st), limit, r.secs);
}

/// A parent of 40 MiB (partly swapped out under the limit) forks children in batches; each
/// reads a slice of the parent's data, sends its checksum back through a pipe and ends with
/// `os._exit` (no `exit(3)` handlers, as a fork child usually ends).
const FORK_BURST_PY: &str = r#"
import hashlib, os, sys
kids, batch = int(sys.argv[1]), int(sys.argv[2])
data = bytearray(hashlib.shake_256(b"uswap").digest(40 << 20))
r, w = os.pipe()
done = 0
while done < kids:
    pids = []
    for i in range(batch):
        pid = os.fork()
        if pid == 0:
            n = done + i
            off = (n * 7919 % 40) << 20
            s = sum(data[off:off + (1 << 20):4096])
            os.write(w, b"%d:%d\n" % (n, s))
            os._exit(0)
        pids.append(pid)
    for p in pids:
        assert os.waitpid(p, 0)[1] == 0
    done += batch
os.close(w)
got = b""
while chunk := os.read(r, 65536):
    got += chunk
lines = sorted(got.split())
print(len(lines), hashlib.sha256(b" ".join(lines)).hexdigest())
"#;

#[test]
fn a_burst_of_fork_children_all_run_and_are_counted() {
    let Some(py) = python_or_skip() else { return };
    let (kids, batch) = ("120", "20");
    let mut native = Command::new(&py);
    native.args(["-c", FORK_BURST_PY, kids, batch]);
    let want = run(native, "python3 fork burst (without uswap)");
    assert_eq!(want.code, Some(0), "python3 without uswap: {}", want.stderr);
    assert!(want.out().starts_with("120 "), "python3 without uswap printed {:?}", want.out());
    let dir = tempdir();
    let st = dir.path().join("stats.json");
    let r = {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_uswap"));
        cmd.arg("run")
            .args(["--limit", &limit_arg(32 * MIB), "--stats"])
            .arg(&st)
            .arg("--")
            .arg(&py)
            .args(["-c", FORK_BURST_PY, kids, batch])
            .env("USWAP_PRELOAD", preload())
            .env_remove("LD_PRELOAD");
        run(cmd, "uswap run -- python3 fork burst")
    };
    if no_uffd(&r) {
        return;
    }
    assert_eq!(r.out(), want.out(), "python3 fork burst under uswap; stderr:\n{}", r.stderr);
    assert_eq!(r.code, Some(0), "exit status; stderr:\n{}", r.stderr);
    assert!(!r.stderr.contains("cannot start"), "a child's pager did not start:\n{}", r.stderr);
    // Every child ran under the pager and its statistics reached the summary, though none ran
    // `exit(3)`'s handlers.
    let s = stats(&st);
    let others = s["other_processes"].as_array().map_or(0, Vec::len);
    assert_eq!(others, 120, "children in the statistics; stderr:\n{}", r.stderr);
}

/// Run `sh -c PIPELINE` without and with uswap at `limit`; the outputs must be the same, and
/// `sort` must have run under uswap too. Returns the stats.
fn pipeline(name: &str, pipeline: &str, limit: u64) -> Option<serde_json::Value> {
    let mut native = Command::new("sh");
    native.args(["-c", pipeline]).env("LC_ALL", "C");
    let want = run(native, &format!("{pipeline} (without uswap)"));
    assert_eq!(want.code, Some(0), "{pipeline} without uswap: {}", want.stderr);
    let dir = tempdir();
    let st = dir.path().join("stats.json");
    let r = {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_uswap"));
        cmd.arg("run")
            .args(["--limit", &limit_arg(limit), "--stats"])
            .arg(&st)
            .args(["--", "sh", "-c", pipeline])
            .env("USWAP_PRELOAD", preload())
            .env_remove("LD_PRELOAD")
            .env("LC_ALL", "C");
        run(cmd, &format!("uswap run --limit {} -- sh -c '{pipeline}'", limit_arg(limit)))
    };
    if no_uffd(&r) {
        return None;
    }
    assert_eq!(r.out(), want.out(), "{pipeline} under uswap; stderr:\n{}", r.stderr);
    assert_eq!(r.code, Some(0), "{pipeline}: exit status; stderr:\n{}", r.stderr);
    let s = stats(&st);
    let argv0s: Vec<String> = s["other_processes"]
        .as_array()
        .map(|a| a.iter().filter_map(|p| p.pointer("/argv/0")?.as_str().map(str::to_string)).collect())
        .unwrap_or_default();
    assert!(argv0s.iter().any(|a| a.ends_with("sort")), "sort ran under uswap too: {s:#}");
    eprintln!("{name}: without uswap {:.1} s", want.secs);
    check_peak(name, &s, limit, r.secs);
    if r.secs > 0.5 {
        check_tree_peak(name, &s, limit);
    }
    Some(s)
}

/// Every program of a pipeline under uswap (sh, then seq, sort and md5sum exec'd by it): each
/// has its own pager. This sort fits in the limit.
#[test]
fn shell_pipeline_matches_a_run_without_uswap() {
    pipeline("shell pipeline", "seq 1 2000000 | sort -r | md5sum", 32 * MIB);
}

/// The same with sort keeping everything in memory (`-S 100M`: about 100 MiB of RSS without
/// uswap), so that its buffers are swapped out and in while it sorts. Sort's 100 MiB buffer
/// can be mapped next to a page of a pager thread's signal stack, and the kernel then merges
/// the two into one mapping: the reconciler adopts the parts of it that are not the pager's
/// own (`scan::pass::adopt_mapping`); left alone as the pager's own, the buffer would take the peak
/// far over the bound.
#[test]
fn shell_pipeline_sorting_beyond_the_limit() {
    let limit = 32 * MIB;
    let Some(s) = pipeline("sort -S 100M", "seq 1 2000000 | sort -S 100M -r | md5sum", limit) else { return };
    let sort = s["other_processes"]
        .as_array()
        .and_then(|a| {
            a.iter().find(|p| p.pointer("/argv/0").and_then(|a| a.as_str()).is_some_and(|a| a.ends_with("sort")))
        })
        .expect("sort's statistics");
    assert!(num(sort, "/swap/pswpout") * PAGE_BYTES >= limit, "sort swapped out less than the limit: {sort:#}");
}

// ---------------------------------------------------------------------------------------------
// Bad input, exit status

/// `uswap run ARGS…` must exit with `code` and say `msg` on stderr.
fn refused<S: AsRef<OsStr>>(args: &[S], code: i32, msg: &str) {
    let r = uswap_run(args);
    if code != 1 && no_uffd(&r) {
        return;
    }
    assert_eq!(r.code, Some(code), "exit status; stderr: {}", r.stderr);
    assert!(r.stderr.contains(msg), "stderr should mention {msg:?}: {}", r.stderr);
    assert!(r.stdout.is_empty(), "the program must not have run: {}", r.out());
}

#[test]
fn bad_limit_is_refused() {
    for l in ["lots", "0", "12Q", ""] {
        refused(&["--limit", l, "--", "echo", "ran"], 2, "--limit");
    }
    refused(&["--limit", "64K", "--", "echo", "ran"], 2, "below four folios");
}

#[test]
fn unknown_tier_is_refused() {
    refused(&["--limit", "32M", "--tiers", "zero,bogus", "--", "echo", "ran"], 2, "unknown tier 'bogus'");
}

#[test]
fn unusable_swap_directory_is_refused() {
    let dir = tempdir();
    let file = dir.path().join("a-file");
    std::fs::write(&file, b"").unwrap();
    // A path through a regular file, and a directory nobody may create files in (not even root).
    for d in [file.join("swap"), PathBuf::from("/proc/self")] {
        let mut t = OsString::from("zero,lz4,file:");
        t.push(&d);
        refused(
            &[
                OsStr::new("--limit"),
                "32M".as_ref(),
                "--tiers".as_ref(),
                &t,
                "--".as_ref(),
                "echo".as_ref(),
                "ran".as_ref(),
            ],
            2,
            "--tiers",
        );
    }
}

#[test]
fn missing_program_exits_127() {
    refused(&["--limit", "32M", "--", "/nonexistent/uswap-e2e-program"], 127, "no such file");
    refused(&["--limit", "32M", "--", "uswap-e2e-no-such-command"], 127, "command not found");
}

#[test]
fn non_executable_exits_126() {
    let dir = tempdir();
    let f = dir.path().join("not-executable");
    std::fs::write(&f, b"#!/bin/sh\necho ran\n").unwrap();
    refused(&[OsStr::new("--limit"), "32M".as_ref(), "--".as_ref(), f.as_os_str()], 126, "permission denied");
}

/// `name`.c linked statically into `dir`; None (the test skips, saying so) where no static C
/// library is installed, unless `USWAP_REQUIRE_RUNTIMES` is set (CI), where that fails.
fn compile_static(name: &str, dir: &std::path::Path) -> Option<PathBuf> {
    match try_compile(name, dir, &["-static"]) {
        Ok(p) => Some(p),
        Err(e) if std::env::var_os("USWAP_REQUIRE_RUNTIMES").is_none() => {
            eprintln!("SKIPPED: cannot link a static program here (no libc.a?): {}", e.trim());
            None
        }
        Err(e) => panic!("cannot link a static program (USWAP_REQUIRE_RUNTIMES is set; libc6-dev?): {e}"),
    }
}

#[test]
fn static_program_is_refused() {
    let dir = tempdir();
    let Some(prog) = compile_static("static_hello", dir.path()) else { return };
    let o = Command::new(&prog).output().expect("run the static program");
    assert_eq!(String::from_utf8_lossy(&o.stdout), "hello from a static program\n");
    refused(&[OsStr::new("--limit"), "32M".as_ref(), "--".as_ref(), prog.as_os_str()], 2, "statically linked");
}

/// The Go toolchain: `go` on PATH, else the usual install directory. None (the caller skips,
/// saying so) where there is none, unless `USWAP_REQUIRE_RUNTIMES` is set (CI), where that fails.
fn go_tool() -> Option<PathBuf> {
    let on_path =
        std::env::var_os("PATH").and_then(|p| std::env::split_paths(&p).map(|d| d.join("go")).find(|g| g.is_file()));
    let go = on_path.or_else(|| Some(PathBuf::from("/usr/local/go/bin/go")).filter(|g| g.is_file()));
    if go.is_none() {
        assert!(
            std::env::var_os("USWAP_REQUIRE_RUNTIMES").is_none(),
            "no Go toolchain and USWAP_REQUIRE_RUNTIMES is set"
        );
        eprintln!("SKIPPED: no Go toolchain (go) on PATH or in /usr/local/go/bin");
    }
    go
}

/// Build tests/programs/gohold.go into `dir/name` with `go build` and `extra` flags.
fn go_build(go: &std::path::Path, dir: &std::path::Path, name: &str, cgo: bool, extra: &[&str]) -> PathBuf {
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/programs/gohold.go");
    let out = dir.join(name);
    let o = Command::new(go)
        .arg("build")
        .args(extra)
        .arg("-o")
        .arg(&out)
        .arg(&src)
        .env("CGO_ENABLED", if cgo { "1" } else { "0" })
        .env("GOTOOLCHAIN", "local")
        .env("GOFLAGS", "")
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", go.display()));
    assert!(o.status.success(), "go build {name} failed:\n{}", String::from_utf8_lossy(&o.stderr));
    out
}

/// A Go program is refused, built either way (`go build` links statically without cgo; with
/// the external linker it is dynamic and would load the library): the Go runtime gives memory
/// back with `madvise` system calls of its own, which uswap does not see, so pages it has
/// swapped out would come back stale (a Go heap fails the runtime's check "found pointer to
/// free object"). One started deeper in the tree runs without the pager (the library leaves it
/// alone), is reported, and counts against the limit; its output is right.
#[test]
fn a_go_program_is_refused_and_one_in_the_tree_runs_without_the_pager() {
    let Some(go) = go_tool() else { return };
    let dir = tempdir();
    let stat = go_build(&go, dir.path(), "gohold_static", false, &[]);
    let dynamic = go_build(&go, dir.path(), "gohold_dynamic", true, &["-ldflags=-linkmode=external"]);
    for prog in [&stat, &dynamic] {
        refused(
            &[OsStr::new("--limit"), "64M".as_ref(), "--".as_ref(), prog.as_os_str(), "1".as_ref(), "0".as_ref()],
            2,
            "is a Go program",
        );
    }
    let native = Command::new(&dynamic).args(["40", "2"]).output().expect("run gohold natively");
    assert!(native.status.success(), "gohold natively: {native:?}");
    let limit = 64 * MIB;
    let st = dir.path().join("stats.json");
    let script = format!("{} 40 2; echo done", dynamic.display());
    let r = uswap_run_stats(&limit_arg(limit), &st, &["sh".as_ref(), "-c".as_ref(), script.as_ref()]);
    if no_uffd(&r) {
        return;
    }
    assert_eq!(r.code, Some(0), "exit status; stdout:\n{}\nstderr:\n{}", r.out(), r.stderr);
    assert_eq!(r.out(), format!("{}done\n", String::from_utf8_lossy(&native.stdout)), "stderr:\n{}", r.stderr);
    assert!(r.stderr.contains("runs without the pager (Go program"), "no warning in:\n{}", r.stderr);
    let s = stats(&st);
    let un = s["unmanaged_processes"].as_array().unwrap_or_else(|| panic!("no unmanaged_processes: {s:#}"));
    assert_eq!(un.len(), 1, "{s:#}");
    assert!(un[0]["reason"].as_str().is_some_and(|r| r.starts_with("Go program")), "{s:#}");
    assert!(num(&un[0], "/peak_anon_bytes") >= 40 * MIB, "{s:#}");
    // No pager ran in it: a pager leaves a record of its process in the statistics.
    let paged = records(&s).into_iter().any(|p| p["argv"][0].as_str().is_some_and(|a| a.ends_with("gohold_dynamic")));
    assert!(!paged, "the Go process ran under a pager: {s:#}");
}

/// Run `sh -c script` (a holder, `hold … MODE`, beside `hold 64 3 cycle`) under `limit` with
/// statistics; check both outputs (nothing mismatched) and that stderr holds `warning`. Returns
/// the statistics, or `None` where userfaultfd is not permitted.
fn holder_beside_a_cycler(
    dir: &Path,
    script: &str,
    limit: u64,
    mode: &str,
    warning: &str,
) -> Option<serde_json::Value> {
    let st = dir.join("stats.json");
    let r = uswap_run_stats(&limit_arg(limit), &st, &["sh".as_ref(), "-c".as_ref(), script.as_ref()]);
    if no_uffd(&r) {
        return None;
    }
    assert_eq!(r.code, Some(0), "exit status; stdout:\n{}\nstderr:\n{}", r.out(), r.stderr);
    let out = r.out();
    assert!(out.lines().any(|l| l.starts_with(&format!("{mode}: passes 1 seed 1 mismatches 0 "))), "{out}");
    assert!(out.lines().any(|l| l.starts_with("cycle: ") && l.contains(" mismatches 0 ")), "{out}");
    assert!(r.stderr.contains(warning), "no {warning:?} in:\n{}", r.stderr);
    Some(stats(&st))
}

/// A statically linked program in the tree never loads the library, so no pager holds its
/// memory: `uswap run` finds it, warns, lists it in the statistics, and counts its memory
/// against the limit, so that a managed process of the same tree gives up as much (as a memory
/// cgroup charges what it cannot reclaim). Here a static process holds 40 MiB under a 64 MiB
/// limit while a dynamic one cycles over 64 MiB: the cycler must be held to the rest, and the
/// tree's memory (both processes) must stay within the limit. Uncounted, the static process's
/// memory would let the cycler take the whole limit beside it, and nothing would be said.
#[test]
fn a_static_process_in_the_tree_is_reported_and_counted_against_the_limit() {
    let dir = tempdir();
    let sdir = dir.path().join("static");
    std::fs::create_dir_all(&sdir).expect("mkdir");
    let Some(held) = compile_static("hold", &sdir) else { return };
    let cycler = compile("hold", dir.path());
    let limit = 64 * MIB;
    let script = format!("{} 40 6 hold & sleep 1; {} 64 3 cycle; wait", held.display(), cycler.display());
    let warning = "runs without the pager (statically linked)";
    let Some(s) = holder_beside_a_cycler(dir.path(), &script, limit, "hold", warning) else { return };
    let un = s["unmanaged_processes"].as_array().unwrap_or_else(|| panic!("no unmanaged_processes: {s:#}"));
    assert_eq!(un.len(), 1, "{s:#}");
    assert_eq!(un[0]["reason"], "statically linked", "{s:#}");
    assert!(un[0]["command"].as_str().is_some_and(|c| c.ends_with("hold 40 6 hold")), "{s:#}");
    assert!(num(&un[0], "/peak_anon_bytes") >= 40 * MIB, "{s:#}");
    check_tree_peak("static beside a cycler", &s, limit);
    let rec = records(&s)
        .into_iter()
        .find(|p| p["argv"].get(3).and_then(|a| a.as_str()) == Some("cycle"))
        .unwrap_or_else(|| panic!("no record of the cycler: {s:#}"));
    eprintln!(
        "cycler: limit in force {}, the tree's unmanaged memory {}",
        mib(num(rec, "/memory/limit_in_force_bytes")),
        mib(num(rec, "/tree/unmanaged_bytes"))
    );
    assert!(num(rec, "/tree/unmanaged_bytes") >= 40 * MIB, "{rec:#}");
    assert!(num(rec, "/memory/limit_in_force_bytes") <= limit - 32 * MIB, "{rec:#}");
}

/// Shared memory (`MAP_SHARED|MAP_ANONYMOUS`, a memfd: a JVM's ZGC heap, PostgreSQL's shared
/// buffers) is not the pager's to swap. `uswap run` must say so and count it against the limit,
/// as it does a static process's memory, not pass it off as fixed overhead (which would report
/// a ZGC heap larger than the limit as under it). Here a managed process holds
/// 40 MiB of shared memory under a 64 MiB limit while another cycles over 64 MiB: the cycler is
/// held to the rest, and the summary and the statistics name the shared memory.
#[test]
fn shared_memory_is_reported_and_counted_against_the_limit() {
    let dir = tempdir();
    let hold = compile("hold", dir.path());
    let limit = 64 * MIB;
    // The holder's anonymous memory stays small: its pager is started at once, so that its
    // own figures of shared memory are there to check.
    let script = format!("USWAP_START_BYTES=0 {h} 40 6 shared & sleep 1; {h} 64 3 cycle; wait", h = hold.display());
    let warning = "of shared memory (MAP_SHARED or memfd";
    let Some(s) = holder_beside_a_cycler(dir.path(), &script, limit, "shared", warning) else { return };
    let shm = num(&s, "/tree_peak/shmem_bytes");
    // (Less uswap's own shared memory in the holder, counted at its full size: under 1 MiB.)
    assert!((39 * MIB..=44 * MIB).contains(&shm), "the tree's shared memory {}: {s:#}", mib(shm));
    let rec = |mode: &str| {
        records(&s)
            .into_iter()
            .find(|p| p["argv"].get(3).and_then(|a| a.as_str()) == Some(mode))
            .unwrap_or_else(|| panic!("no record of the {mode} process: {s:#}"))
    };
    let holder = rec("shared");
    assert!(num(holder, "/shmem_rss_growth_bytes") >= 40 * MIB, "{holder:#}");
    assert!(num(holder, "/fixed_overhead_bytes") < 32 * MIB, "shared memory counted as fixed overhead: {holder:#}");
    let cycler = rec("cycle");
    eprintln!(
        "cycler: limit in force {}, the tree's unmanaged memory {}",
        mib(num(cycler, "/memory/limit_in_force_bytes")),
        mib(num(cycler, "/tree/unmanaged_bytes"))
    );
    assert!(num(cycler, "/tree/unmanaged_bytes") >= 39 * MIB, "{cycler:#}");
    assert!(num(cycler, "/memory/limit_in_force_bytes") <= limit - 32 * MIB, "{cycler:#}");
    check_tree_peak("shared memory beside a cycler", &s, limit - 40 * MIB);
}

/// A program that drops privileges under `uswap run` (`runuser`, `gosu` and `setpriv` in a
/// container's entry point, a server's own `setuid`) loads the library (the cache directory is
/// open to traversal, 0711, the library readable, 0555: the directory's mode is checked by
/// `live`'s `the_run_directory_is_traversable_and_nothing_more`), but as an unprivileged user
/// it gets no userfaultfd fork events (`CAP_SYS_PTRACE`) and at most a user-mode userfaultfd: a
/// pager there would fail a `read(2)` into swapped-out memory with EFAULT, and its fork
/// children would die rebuilding theirs (PostgreSQL under `runuser -u postgres`, even with
/// `vm.unprivileged_userfaultfd=1`: the postmaster's children would exit 125).
/// So the library stands aside and leaves its mark, and the watch counts the process as
/// unmanaged, with the reason, against the limit. Here `runuser -u nobody` runs a process
/// holding 40 MiB beside a dynamic one cycling over 64 MiB as root under a 64 MiB limit: the
/// nobody process is reported, its output right, and the cycler held to the rest.
#[test]
fn a_program_that_drops_privileges_is_counted_not_paged() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempdir();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod the test directory");
    let hold = compile("hold", dir.path());
    let runuser = ["/usr/sbin/runuser", "/sbin/runuser", "/usr/bin/runuser"]
        .into_iter()
        .find(|p| Path::new(p).exists())
        .expect("this test needs runuser (util-linux)");
    let limit = 64 * MIB;
    // As nobody, a shell runs a pipeline first: dash starts the command after it with `vfork`,
    // whose trampoline needs a next definition where the library stands aside (without one:
    // "Cannot fork").
    let script = format!(
        "{runuser} -u nobody -- sh -c 'echo x | cat >/dev/null; {h} 40 6 hold' & sleep 1; {h} 64 3 cycle; wait",
        h = hold.display()
    );
    let warning = "runs without the pager (it dropped root privileges";
    let Some(s) = holder_beside_a_cycler(dir.path(), &script, limit, "hold", warning) else { return };
    let un = s["unmanaged_processes"].as_array().unwrap_or_else(|| panic!("no unmanaged_processes: {s:#}"));
    let held = un
        .iter()
        .find(|u| u["command"].as_str().is_some_and(|c| c == format!("{} 40 6 hold", hold.display())))
        .unwrap_or_else(|| panic!("the nobody process is not listed: {s:#}"));
    assert!(held["reason"].as_str().is_some_and(|r| r.starts_with("it dropped root privileges")), "{s:#}");
    assert!(num(held, "/peak_anon_bytes") >= 40 * MIB, "{s:#}");
    check_tree_peak("a process run as nobody beside a cycler", &s, limit);
}

/// A fork child's pager puts its new uffd, pidfds and swap file copies on the numbers the
/// parent's had, close-on-exec like every descriptor of the pager's: with `dup2` (which clears
/// the flag) a program the child exec'd inherited the child's uffd beside its own (and a
/// deleted swap file copy's blocks stayed allocated while it ran). Here a perl child execs `ls`
/// of its own descriptors: one userfaultfd and at most one pidfd, its own pager's (opened as
/// that pager starts).
#[test]
fn a_fork_childs_descriptors_do_not_leak_into_what_it_execs() {
    // Pagers started at once (perl and ls stay small): the child is a managed process's.
    let r = uswap_run_env(
        &[
            "--limit",
            "32M",
            "--quiet",
            "--",
            "perl",
            "-e",
            "if (fork() == 0) { exec 'ls', '-l', '/proc/self/fd' or die } wait",
        ],
        &[("USWAP_START_BYTES", "0")],
    );
    if no_uffd(&r) {
        return;
    }
    assert_eq!(r.code, Some(0), "stderr:\n{}", r.stderr);
    let out = r.out();
    assert_eq!(out.matches("anon_inode:[userfaultfd]").count(), 1, "the exec'd program's descriptors:\n{out}");
    assert!(out.matches("anon_inode:[pidfd]").count() <= 1, "the exec'd program's descriptors:\n{out}");
}

/// Every interposed call that succeeds leaves `errno` as it found it (`tests/programs/errno.c`:
/// `sigprocmask`, `pthread_sigmask`, `malloc` of a block the pager adopts, `mmap`, `madvise`,
/// `mremap`, `mprotect` of a reservation, `read`, `munmap`, `free`). A library `sigprocmask`
/// that left EINVAL from glibc's `sigdelset` of its internal signals would shut down
/// PostgreSQL's postmaster, which reads `select`'s `errno` after a `sigprocmask`.
#[test]
fn interposed_calls_leave_errno_alone() {
    let dir = tempdir();
    let prog = compile("errno", dir.path());
    let native = Command::new(&prog).output().expect("run errno natively");
    assert!(native.status.success(), "natively: {}", String::from_utf8_lossy(&native.stdout));
    let r = uswap_run(&[OsStr::new("--limit"), "32M".as_ref(), "--quiet".as_ref(), "--".as_ref(), prog.as_os_str()]);
    if no_uffd(&r) {
        return;
    }
    assert_eq!(r.code, Some(0), "stdout:\n{}\nstderr:\n{}", r.out(), r.stderr);
    assert_eq!(r.out(), String::from_utf8_lossy(&native.stdout), "stderr:\n{}", r.stderr);
}

/// The library's threads take no descriptor number the program counts on
/// (`tests/programs/lowfd.c`: number 1 freed, then `open` must give 1 and a `dup2`'ed 1 must
/// stay the file it names, in the program and in fork children). Their file work keeps to a
/// table of its own (`uswap::procfs`): a scan thread's `/proc/self/statm` opened as number 1
/// between a shell's `close(1)` and `dup2(fd, 1)` would have its `close` close the shell's
/// standard output (`echo: I/O error`), and this program would count wrong rounds.
#[test]
fn library_threads_take_no_descriptor_number_of_the_programs() {
    let dir = tempdir();
    let prog = compile("lowfd", dir.path());
    // Under its limit, and below it (the reclaimer, the event thread's CPU follower and the
    // fork children's new threads all run).
    for limit in ["64M", "8M"] {
        let r = uswap_run(&[
            OsStr::new("--limit"),
            limit.as_ref(),
            "--quiet".as_ref(),
            "--".as_ref(),
            prog.as_os_str(),
            "2".as_ref(),
        ]);
        if no_uffd(&r) {
            return;
        }
        assert_eq!(r.code, Some(0), "--limit {limit}: stderr:\n{}", r.stderr);
        assert!(r.stderr.contains(" 0 wrong"), "--limit {limit}: stderr:\n{}", r.stderr);
    }
}

/// A program built with AddressSanitizer refuses to start after an LD_PRELOAD library ("ASan
/// runtime does not come first in initial library list", advice to preload it), and with the
/// check off crashes in the library's `malloc` during its own start-up. `uswap run` refuses it
/// with the reason (exit 2), found in its dynamic string table (`exe::ExeKind::Sanitized`).
#[test]
fn a_sanitized_program_is_refused_with_the_reason() {
    let dir = tempdir();
    let prog = try_compile("static_hello", dir.path(), &["-fsanitize=address"])
        .unwrap_or_else(|e| panic!("this test needs gcc with AddressSanitizer (libasan): {e}"));
    refused(
        &[OsStr::new("--limit"), "32M".as_ref(), "--".as_ref(), prog.as_os_str()],
        2,
        "is built with AddressSanitizer",
    );
}

#[test]
fn exit_status_passes_through() {
    let dir = tempdir();
    let st = dir.path().join("stats.json");
    let r = uswap_run_stats("32M", &st, &["sh".as_ref(), "-c".as_ref(), "echo out; exit 7".as_ref()]);
    if no_uffd(&r) {
        return;
    }
    assert_eq!(r.code, Some(7), "stderr: {}", r.stderr);
    assert_eq!(r.out(), "out\n");
    let s = stats(&st);
    assert_eq!(num(&s, "/exit_code"), 7, "{s:#}");
    assert!(s["signal"].is_null(), "{s:#}");
}

#[test]
fn death_by_signal_is_128_plus_n() {
    let dir = tempdir();
    let st = dir.path().join("stats.json");
    let r = uswap_run_stats("32M", &st, &["sh".as_ref(), "-c".as_ref(), "kill -TERM $$".as_ref()]);
    if no_uffd(&r) {
        return;
    }
    assert_eq!(r.code, Some(128 + libc::SIGTERM), "stderr: {}", r.stderr);
    let s = stats(&st);
    assert_eq!(num(&s, "/exit_code"), 143, "{s:#}");
    assert_eq!(num(&s, "/signal"), libc::SIGTERM as u64, "{s:#}");
    // Without --stats the runner says what killed the program.
    let r = uswap_run(&["--limit", "32M", "--", "sh", "-c", "kill -KILL $$"]);
    assert_eq!(r.code, Some(128 + libc::SIGKILL), "stderr: {}", r.stderr);
    assert!(r.stderr.contains("SIGKILL"), "stderr: {}", r.stderr);
}

/// Reclaim takes the coldest memory across the tree. One child holds 40 MiB
/// and sleeps, another cycles over 40 MiB of its own, under 64 MiB for the tree: the sleeper's
/// pages must go so that the cycler's fit (shares in proportion to the charges would leave the
/// cycler under 40 MiB, and a cyclic pass over more than fits misses on every page: several
/// times the swap-ins of coldest-first shares). Both check every page.
#[test]
fn the_tree_reclaims_an_idle_process_before_a_busy_one() {
    let dir = tempdir();
    let prog = compile("cold_tree", dir.path());
    let limit = 64 * MIB;
    let bytes = 40 * MIB;
    let st = dir.path().join("stats.json");
    let r = uswap_run_stats(&limit_arg(limit), &st, &[prog.as_os_str(), bytes.to_string().as_ref(), "3".as_ref()]);
    if no_uffd(&r) {
        return;
    }
    assert_eq!(r.code, Some(0), "cold_tree exit status; stdout:\n{}\nstderr:\n{}", r.out(), r.stderr);
    let pages = bytes / PAGE_BYTES;
    let out = r.out();
    let holder = format!("holder: mismatches 0 hash {:016x}", pages_hash((0..pages).map(|p| page_hash(1, p))));
    assert!(out.lines().any(|l| l == holder), "missing {holder:?} in:\n{out}");
    let want = format!("mismatches 0 hash {:016x}", pages_hash((0..pages).map(|p| page_hash(2, p))));
    let cycler = out.lines().find(|l| l.starts_with("cycler ")).unwrap_or_else(|| panic!("no cycler line in:\n{out}"));
    assert!(cycler.ends_with(&want), "{cycler:?}, expected it to end with {want:?}");
    let pid: u64 =
        cycler.split_whitespace().nth(1).and_then(|p| p.trim_end_matches(':').parse().ok()).expect("cycler pid");
    let s = stats(&st);
    let rec = s["other_processes"]
        .as_array()
        .and_then(|a| a.iter().find(|p| p["pid"].as_u64() == Some(pid)))
        .unwrap_or_else(|| panic!("no record of the cycler {pid}: {s:#}"));
    let swapins = num(rec, "/swap/pswpin");
    eprintln!("cycler: {cycler}; {swapins} pages swapped in ({pages} pages of its own)");
    // The three processes together within the one limit.
    check_tree_peak("cold_tree", &s, limit);
    assert!(
        swapins < 10 * pages,
        "the cycler swapped in {swapins} pages, {} passes' worth: the sleeper kept its memory",
        swapins / pages
    );
}

/// Processes of one tree killed at any instant (while their pager restarts
/// after fork, mid-fault, mid-eviction) leave the rest of the tree with every byte right, and
/// their share of the tree's limit comes back (the parent ends alone with the whole limit).
#[test]
fn killed_children_leave_the_tree_correct_and_their_share_returns() {
    let dir = tempdir();
    let prog = compile("kill_tree", dir.path());
    let limit = 16 * MIB;
    let bytes = 3 * limit;
    let rounds = 10;
    let st = dir.path().join("stats.json");
    let r = uswap_run_stats(
        &limit_arg(limit),
        &st,
        &[prog.as_os_str(), bytes.to_string().as_ref(), rounds.to_string().as_ref()],
    );
    if no_uffd(&r) {
        return;
    }
    assert_eq!(r.code, Some(0), "kill_tree exit status; stdout:\n{}\nstderr:\n{}", r.out(), r.stderr);
    let pages = bytes / PAGE_BYTES;
    let view = |parent_wrote: bool, child: Option<u64>| {
        pages_hash((0..pages).map(|p| {
            let seed = match child {
                Some(c) if p % 3 == c % 3 => 10 + c,
                _ if parent_wrote && p % 4 == 1 => 2,
                _ => 1,
            };
            page_hash(seed, p)
        }))
    };
    let out = r.out();
    for round in 0..rounds {
        let parent = format!("parent after round {round}: mismatches 0 hash {:016x}", view(round >= 1, None));
        assert!(out.lines().any(|l| l == parent), "missing {parent:?} in:\n{out}\nstderr:\n{}", r.stderr);
        let child = format!("child {round}: mismatches 0 hash {:016x}", view(round >= 2, Some(round)));
        let printed: Vec<&str> = out.lines().filter(|l| l.starts_with(&format!("child {round}:"))).collect();
        // A killed child may have finished before the kill; one left alone must have.
        assert!(printed.iter().all(|l| *l == child), "child {round}: {printed:?}, expected {child:?}");
        if round % 5 == 4 {
            assert_eq!(printed.len(), 1, "child {round} was not killed and must report: {out}");
        }
    }
    let s = stats(&st);
    assert_eq!(s["main"]["tree"]["processes"], 1, "the killed children's slots were freed: {s:#}");
    assert_eq!(
        num(&s, "/main/memory/limit_in_force_bytes"),
        limit,
        "alone again, the parent has the whole limit: {s:#}"
    );
    assert!(num(&s, "/main/swap/pswpout") > 0, "{s:#}");
    // Every child shared the parent's swap file, killed ones included (their holds are
    // released by the parent's reclaimer once it finds them gone).
    assert_eq!(num(&s, "/main/forks_file_shared"), rounds, "forks that shared the swap file: {s:#}");
}

/// The pager pins a thread that has the faults to itself beside its event thread (uswap-pager's
/// `cpu` module); the program must not see it, and what the thread starts must not inherit
/// it: `sched_getaffinity`, a new thread, a `vfork`+`execl` child and a `posix_spawn` child each
/// get the program's mask. The program waits until it is pinned (its real mask, from
/// `/proc/thread-self/status`) before each check, so each check runs against a pin.
#[test]
fn a_pinned_thread_and_what_it_starts_see_the_programs_cpus() {
    // SAFETY: an all-zero cpu_set_t is a valid empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: sched_getaffinity of this thread into a cpu_set_t of the size given.
    assert_eq!(unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) }, 0);
    // SAFETY: CPU_COUNT reads a valid set.
    let all = unsafe { libc::CPU_COUNT(&set) };
    assert!(all >= 2, "this test needs two CPUs or more (this process may use {all}): the pager pins nothing on one");
    let dir = tempdir();
    let prog = compile("pin", dir.path());
    let st = dir.path().join("stats.json");
    let r = uswap_run_stats("24M", &st, &[prog.as_os_str(), OsStr::new("64"), OsStr::new(&all.to_string())]);
    if no_uffd(&r) {
        return;
    }
    assert_eq!(r.code, Some(0), "pin: {}\nstderr:\n{}", r.out(), r.stderr);
    assert_eq!(
        r.out().trim(),
        format!("reported {all} thread {all} vfork {all} spawn {all} of {all}"),
        "stderr:\n{}",
        r.stderr
    );
    let s = stats(&st);
    // Three checks against a pin; the pin the thread creation lifted is put back (not a new
    // pin), the one vfork left is made again.
    assert!(
        num(&s, "/main/faults/cpu_pins") >= 2,
        "the program was pinned twice at least, the pager counted fewer: {s:#}"
    );
}
