//! End-to-end tests of SIGBUS fault mode (`USWAP_FAULT_MODE=sigbus`): faults served in the
//! faulting thread, and libc's system calls on user buffers trapped and re-issued once their
//! buffers are resident. Each program runs natively and under `uswap run` with a limit far
//! below what it touches, and its output must be the same byte for byte; the program under
//! uswap must have run with the filter installed (`Seccomp: 2`). Every run has the deadline of
//! [`common::timeout`] and prints every thread's stack when it fires. Tests skip only when
//! userfaultfd is not permitted and `USWAP_REQUIRE_UFFD` is unset.

mod common;

use common::*;
use std::process::Command;

const SIGBUS: &[(&str, &str)] = &[("USWAP_FAULT_MODE", "sigbus")];

/// Run `program` natively and under `uswap run --limit LIMIT` in SIGBUS mode; the two
/// outputs (after `strip`) must match. Returns the managed run's stdout, or None when
/// userfaultfd is not permitted.
fn same_output(limit: &str, program: &[&str], strip: impl Fn(&str) -> String) -> Option<String> {
    same_output_env(limit, program, &[], strip)
}

/// [`same_output`] with `envs` set on both runs.
fn same_output_env(
    limit: &str,
    program: &[&str],
    envs: &[(&str, &str)],
    strip: impl Fn(&str) -> String,
) -> Option<String> {
    let n = {
        let mut cmd = Command::new(program[0]);
        cmd.args(&program[1..]).envs(envs.iter().copied());
        let r = run(cmd, program[0]);
        assert_eq!(r.code, Some(0), "{program:?} natively: {}", r.stderr);
        r
    };
    let mut args = vec!["--limit", limit, "--"];
    args.extend_from_slice(program);
    let u = uswap_run_env(&args, &[SIGBUS, envs].concat());
    if no_uffd(&u) {
        return None;
    }
    assert_eq!(u.code, Some(0), "{program:?} under uswap (SIGBUS mode): stderr:\n{}", u.stderr);
    assert_eq!(strip(&u.out()), strip(&n.out()), "{program:?}: output differs; stderr:\n{}", u.stderr);
    Some(u.out())
}

#[test]
fn threads_read_swapped_out_memory_and_pass_it_to_system_calls() {
    let dir = tempdir();
    let exe = compile("random_read", dir.path());
    let exe = exe.to_str().expect("utf-8 path");
    let no_mode = |s: &str| s.lines().filter(|l| !l.starts_with("seccomp")).collect::<Vec<_>>().join("\n");
    let Some(out) = same_output("32M", &[exe, "128", "2", "20000"], no_mode) else { return };
    assert!(out.contains("seccomp 2"), "the filter was not installed: {out}");
}

#[test]
fn cpython_threads_build_dicts() {
    let script = "import threading\n\
                  r = [0] * 4\n\
                  def w(i):\n    d = {j: str(j) * 2 for j in range(150000)}\n    r[i] = sum(map(len, d.values()))\n\
                  t = [threading.Thread(target=w, args=(i,)) for i in range(4)]\n\
                  [x.start() for x in t]\n[x.join() for x in t]\nprint(r)\n\
                  print([l for l in open('/proc/self/status') if l.startswith('Seccomp:')][0].split()[1])\n";
    let strip = |s: &str| s.lines().next().unwrap_or("").to_string();
    let Some(out) = same_output("48M", &["python3", "-c", script], strip) else { return };
    assert_eq!(out.lines().nth(1), Some("2"), "the filter was not installed: {out}");
}

#[test]
fn sort_reads_and_writes_through_swapped_out_buffers() {
    let dir = tempdir();
    let input = dir.path().join("in");
    let lines: String = (0..400_000u64).map(|i| format!("{}\n", i.wrapping_mul(2654435761) % 1_000_003)).collect();
    std::fs::write(&input, lines).expect("write the input");
    let input = input.to_str().expect("utf-8 path");
    same_output("16M", &["sort", "-n", "-S", "64M", input], str::to_string);
}

/// The last program of a pipeline reads into a fresh heap buffer while the reconciler adopts
/// its heap: the trapped `read` finds the page registered although no region held it when its
/// buffers were checked, and must be retried, not fail with `EFAULT` ("Bad address").
#[test]
fn a_buffer_adopted_during_its_read_is_retried() {
    let dir = tempdir();
    let awk = dir.path().join("reverse.awk");
    std::fs::write(&awk, "{ a[NR] = $0 }\nEND { for (i = NR; i > 0; i--) print a[i] }\n").expect("write the script");
    let pipeline = format!("seq -f 'line %.0f' 1 1500000 | awk -f {} | md5sum", awk.display());
    same_output("20M", &["sh", "-c", &pipeline], str::to_string);
}

/// `getrandom(buf, len, flags)` takes its buffer as its first argument: a managed buffer must
/// be made resident before the call (CPython's `os.urandom` into fresh 64 KiB objects).
#[test]
fn getrandom_fills_managed_buffers() {
    let script = "import os\nb = [os.urandom(1 << 16) for _ in range(1500)]\nprint(sum(map(len, b)))\n";
    same_output("24M", &["python3", "-c", script], str::to_string);
}

/// Fork children whose first steps read swapped-out memory before their pager runs: glibc's
/// thread start in the child (`__ctype_init` reads the locale data `setlocale` put on the
/// heap, cold and swapped out by then). In SIGBUS mode the kernel raises SIGBUS in the child
/// for those pages; the parent's event thread, which still holds the child's registrations,
/// must serve them, or the child waits for a pager that its own faults keep from starting.
#[test]
fn fork_children_read_swapped_out_pages_before_their_pager_runs() {
    let script = "import os, sys\n\
                  blocks = [bytearray(i.to_bytes(4, 'little') * (1 << 14)) for i in range(2000)]\n\
                  n = 0\n\
                  for i in range(40):\n    pid = os.fork()\n    if pid == 0:\n        os._exit(0)\n    \
                  n += os.waitpid(pid, 0)[1] == 0\n    blocks[i * 7 % len(blocks)][0] ^= 1\n\
                  print(n, sum(b[0] for b in blocks) % 251)\n";
    same_output_env("32M", &["python3", "-c", script], &[("LC_ALL", "C.UTF-8")], str::to_string);
}

/// A mapping grown in place by a raw `mremap` (as glibc's `realloc` of a large chunk issues
/// it) over a range of its own that was just unmapped: the new pages lie in a region whose
/// words there say unmapped. The fault must be served as registered memory no region holds
/// (zero-filled), not passed on as the program's own SIGBUS (CPython building a list).
#[test]
fn a_mapping_grown_in_place_over_its_unmapped_tail_reads_zeros() {
    let dir = tempdir();
    let exe = compile("mremap_grow", dir.path());
    let exe = exe.to_str().expect("utf-8 path");
    same_output("16M", &[exe, "48"], str::to_string);
}
