//! Long help texts: examples for every command, and for `run` the tier grammar, the size
//! grammar, what the limit covers, exit codes and environment variables. The README's CLI
//! section says the same; `tests/cli.rs` checks that the help and README agree on the lists.
//!
//! Locking: none (constants).

/// `uswap --help`.
pub const MAIN: &str = "\
Examples:
  uswap run --limit 512M -- python3 train.py     run a program with its memory under 512 MiB
  uswap run --limit 25% --stats - make -j2       a quarter of RAM; statistics as JSON on stderr
  uswap demo --limit 128M                        the pager on a built-in workload
  uswap bench usemem --quick                     uswap against kernel swap in a memory cgroup
  uswap completions bash > /etc/bash_completion.d/uswap
  uswap man > uswap.1

Sizes everywhere: K, M, G, T and KiB, MiB, GiB, TiB are 1024-based (as systemd's MemoryMax=);
kB, MB, GB, TB are 1000-based (as GNU dd); decimals such as 1.5G are allowed.

Statistics (run --stats, demo --json, bench --json) follow docs/stats.md (schema_version 1).";

/// `uswap run --help`.
pub const RUN: &str = concat!(
    "\
Examples:
  uswap run --limit 512M -- python3 -c 'x = bytearray(2 << 30)'
  uswap run --limit 1.5G make -j2                      (the program starts at the first word)
  uswap run --limit 25% --tiers zero,zstd -- ./a.out   (RAM only: zstd-compressed pool)
  uswap run --limit 1G --tiers zero,lz4,file:/mnt/ssd/swap.img --force -- ./sim
  uswap run --limit 256M --stats fd:3 -- sort big.txt > sorted.txt 3> stats.json

Options end at `--` or at the first word that is not an option: everything from the program
name on is passed to it unchanged. A mistyped option is an error (exit 2), never a program.

Statistics (--stats, as JSON: docs/stats.md) replace the summary and never go to stdout, which
is the program's: --stats FILE writes FILE, --stats - stderr (in one write, after the program
ended), --stats fd:N the file descriptor N that uswap was started with (the shell's `3> FILE`
or `3>&1 >out.txt | jq`; the program does not inherit it).

--limit SIZE or --limit=SIZE; a negative size is an error (exit 2). A limit above physical
memory (MemTotal) is warned about on stderr: the machine runs out of memory before it is
reached.

The limit (--limit SIZE or N% of physical memory) covers the pages the pager manages: the
resident pages of the program's heap and of its anonymous private mappings of 16 KiB or more,
plus the uncompressed swap cache, plus the compressed pool, each counted as the memory it holds.
On top comes a fixed overhead, which the summary prints: the RSS when the pager started (the
program's binary and libraries, the preload library, the pager's tables), what uswap's own heap
grew by (the engine's tables), and file-backed pages loaded since (libraries opened later,
program text, mapped files: not anonymous memory; the kernel reclaims them by itself). Shared
memory (MAP_SHARED or memfd: a ZGC heap, PostgreSQL's shared buffers) cannot be swapped by
uswap: it is counted against the limit and named in the summary, not fixed overhead. The
limit covers the whole process tree (pipelines, exec, fork, shells), as a memory cgroup's
memory.max: each process's pager takes a share, its charge plus what the tree leaves free, or
over the limit its charge in proportion (pages shared copy-on-write counted in proportion).

Tiers (--tiers, comma-separated, in order of preference; default ",
    uswap_pager::default_tiers!(),
    "):
  zero                 store nothing for all-zero pages
  lz4 | zstd | pool    compressed RAM pool (pool = lz4), options:
    pool=20%|512M        pool size (share of RAM or a size; zswap's max_pool_percent)
    accept=90%           refill the pool only below this share (accept_threshold_percent)
    threshold=75%        store a page compressed only below this share of its size
    incompressible=raw|reject|auto
                         a page above the threshold: kept raw in the pool, or sent to the
                         next tier; auto (default): sent on when a file tier follows (the
                         pool counts against the limit, so a raw page there frees nothing)
    folio=16k|whole|page compression unit of a large folio (default 16k: 16 KiB units;
                         whole: one unit, ~5 % denser, slower 4 KiB swap-ins)
    comp=lz4|zstd, level=1..19
    recomp=zstd|lz4|off  recompress objects idle for a whole period (USWAP_RECOMP_MS, default
                         5 s) in the background, within USWAP_RECOMP_CPU_PERCENT (default 5 %)
                         of one core (zram's recompress type=idle); on in the default tiers
    recomp_level=1..19   zstd level of it (default 9)
  file:PATH, file      swap file, compressed pages AES-256-GCM encrypted with a per-process key:
                         PATH a directory: an unlinked temporary file in it (default /var/tmp);
                         PATH missing: created (mode 0600) and unlinked at once;
                         PATH an existing file or block device: used only if it carries
                         uswap's header, or with `force`; refused while in use (mounted,
                         active swap, another uswap process), even with force.
    size=8G, engine=psync|uring, encrypt=on|off, discard=on|off, force,
    direct=on|off        off (default): buffered I/O that drops what it read and wrote behind
                         it, so the file keeps at most 4 MiB of page cache; on: O_DIRECT, no
                         page cache at all (buffered where the file system refuses it)
  mem[:pages=N]        uncompressed RAM (tests)
Options follow their tier with `:` (lz4:pool=10%) or as items of their own (lz4,pool=10%).

Sizes: K, M, G, T and KiB, MiB, GiB, TiB are 1024-based; kB, MB, GB, TB are 1000-based;
decimals such as 1.5G are allowed.

Exit status:
  N        the program's exit status
  128+N    the program was killed by signal N
  127      the program was not found
  126      the program cannot be executed
  125      a process could not be put under the pager at start (the library says why)
  2        bad option, limit, folio or tiers; unusable swap file or directory; a statically
           linked program (the preload library would never load); a Go program (the Go
           runtime's own madvise calls go unseen: not paged yet); a program built with a
           sanitizer (its runtime must load first and maps its own shadow memory)
  1        userfaultfd is not permitted (root or CAP_SYS_PTRACE, vm.unprivileged_userfaultfd=1,
           or access to /dev/userfaultfd), or another failure before the program started

Environment:
  USWAP_PRELOAD      path of libuswap_ffi.so to preload instead of the built-in copy (checked: an
                     ELF shared library, else exit 1)
  USWAP_ON_ERROR     `warn`: a process that cannot be put under the pager runs unprotected
                     with a warning instead of exiting with 125
  USWAP_MMAP_MIN     smallest anonymous mapping adopted when the program maps it (default 16K)
  USWAP_START_BYTES  experimental: a process starts its pager only once its anonymous memory
                     reaches this (e.g. 16M, at most an eighth of the limit); below it, no pager
                     (default 0: at once)
  USWAP_SCAN_MS      how often the resident set is checked for memory mapped where no call
                     is seen, e.g. glibc's heap, while it moves (default 1 ms; up to 5 ms
                     while it stays put)
  USWAP_INACTIVE_PERCENT  share of the limit for the inactive list, unmapped pages kept
                     uncompressed for a cheap refault (default 5)
  USWAP_POOL_PERCENT share of the limit for the compressed pool when a file tier takes the
                     rest (default 8, 5-50)
  USWAP_FULL_WAIT_MS while no tier takes the pages reclaim evicts (a full or failing swap
                     file, data that does not compress), how long faults wait for room
                     before they map over the limit (default 10000; 0 waits for ever)
  USWAP_POOL_ADAPT   1: the pool's share starts there and follows what swap-ins from the
                     pool and from the file cost (experimental; off by default)
  USWAP_REPLACEMENT  `fifo`: evict first in, first out straight to the store instead of
                     through the active and inactive lists (for comparison)
  USWAP_WRITEBACK_AGE_MS  pool objects unused this long are written back to the file in the
                     background (default 60000; 0 = off)
  USWAP_PROMOTE      `0`: do not move file objects read back since they got there into the
                     pool (promotion is on by default, while the pool has room)
  USWAP_FOLLOW_CPU   `0`: do not move the pager's fault-serving thread to the CPU of the
                     thread that faults (nor its background threads off that CPU)
  USWAP_PIN_THREAD   `0`: follow, but do not pin the thread that faults beside it (the pin
                     is on while one process of the tree takes nearly all the faults; it is
                     hidden from sched_getaffinity and not inherited)
  USWAP_FAULT_MODE   `sigbus` (experimental): faults are served in the thread that takes
                     them, and libc's system calls on user buffers are trapped (seccomp) and
                     issued again once their buffers are resident (default `thread`)
  USWAP_STATS_INTERVAL_MS  how often each process rewrites its statistics in USWAP_STATS_DIR
                     (the live view of `uswap status`; uswap run sets 500 unless it is set)
  Set by uswap run for the program (inherited by everything it starts): LD_PRELOAD,
  USWAP_LIMIT, USWAP_FOLIO, USWAP_TIERS, USWAP_STATS_DIR, USWAP_TREE_BUDGET (the file
  through which the processes of the tree share the limit)."
);

/// `uswap bench redis --help`.
pub const BENCH_REDIS: &str = "\
Examples:
  uswap bench redis                            128 MiB limit, 3x that in 1 KiB values, against kernel zram (root)
  uswap bench redis --limit 256M --runs 3 --json
  uswap bench redis --compare none             uswap only (no root needed)

Sides: kernel zram (lz4 zram, zswap off; the `_kernel` keys), kernel disk (zswap in front of a
swap file on /var/tmp; the `_disk` keys), each in a memory cgroup at the limit (--compare kernel
= both, zram, disk, none), and uswap run in a memory cgroup at the limit + --uswap-allowance
with no kernel swap.

JSON keys: get_rps_uswap, get_rps_kernel, get_rps_disk, nobgsave_get_ratio (uswap / zram),
nobgsave_get_ratio_disk, bgsave_get_rps_{uswap,kernel,disk}, bgsave_get_ratio,
bgsave_get_ratio_disk, bgsave_seconds_{uswap,kernel,disk}, fork_ms_{uswap,kernel,disk} (Redis's
latest_fork_usec: how long the server stopped to fork), uswap_tree_peak_pss_bytes (the largest
sum of the Pss of the server and its BGSAVE child), uswap_fixed_overhead_bytes,
footprint_peak_bytes (the peak of uswap's cgroup), footprint_bound_bytes (limit + the tree's
fixed overheads summed), footprint_within (+10 %), get_swapin_pages_per_get_{uswap,kernel,disk}
(pages swapped in per GET with no BGSAVE: the tree's swap.pswpin, the kernel's pswpin, plus
zswpin on the disk side), bgsave_swapin_pages_{uswap,kernel,disk} (pages swapped in during the
BGSAVE phase), failures, and every run. Ratios are uswap / kernel.";

/// `uswap status --help`.
pub const STATUS: &str = "\
Examples:
  uswap status                 every running `uswap run` of this user, with rates over 1 s
  uswap status --json          the same as one JSON object
  uswap status --interval 0    one reading, no rates

Each `uswap run` keeps its processes' statistics in $XDG_RUNTIME_DIR/uswap/<pid>/ (else,
without a usable XDG_RUNTIME_DIR, /dev/shm/uswap-<uid>/<pid>/, or /tmp/uswap-<uid>/<pid>/ where
/dev/shm is not a tmpfs), rewritten every 500 ms while they run; status lists the runs of all
of these directories (and of /run/user/<uid>/uswap/). A process that ended without exit(3)
(_exit, a signal) shows its last snapshot. A run whose runner died without ending its tree is
marked stale (\"up\": false in --json), and removed once nothing of it runs.";

/// `uswap top --help`.
pub const TOP: &str = "\
Examples:
  uswap top                    refresh every second until `q` (or Ctrl-C)
  uswap top --interval 5 --count 3

Keys: q quits (read from stdin: a terminal key by key, a pipe or a file until its end; the
terminal's settings are restored however top ends). On a terminal the screen is cleared for
each refresh and the view cut to its height.

The view, as `uswap status` prints it once: per tree a line with its runner's pid, age, limit
and command, a line of its tiers, then a table that fits the terminal (80 columns when not on
one), the command cut to the room left:
  PID      the process (`total`: the sums over the tree's running processes); with --all the
           command of one that ended says (exited), or (ended) without exit(3): last snapshot
  RSS      its resident set
  SHARE    its share of the tree's limit (in the totals row: the limit)
  RES      managed pages mapped     CACHE  the uncompressed swap cache
  POOL     the compressed pool      RATIO  the compression ratio of what the pool holds
  FILE     the swap file's use      FLT/S  faults per second
  IN/S     bytes swapped in per second, OUT/S out
Sizes are 1024-based (K, M, G, T), counts 1000-based (k, M); --json has every figure in full.";

/// `uswap demo --help`.
pub const DEMO: &str = "\
Examples:
  uswap demo                                   1 GiB of mixed data under 256 MiB, default tiers
  uswap demo --limit 64M --tiers zero,zstd     RAM only, zstd
  uswap demo --size 2G --limit 10% --json      statistics as JSON (docs/stats.md)";

/// `uswap bench --help`.
pub const BENCH: &str = "\
Examples:
  uswap bench usemem --quick                   smoke test against kernel swap (root for the kernel side)
  uswap bench usemem --size 1G --limit 1.5G --compare zram
  uswap bench table --json > table.json
  uswap bench zpool --mib 64
  uswap bench file --dir /var/tmp
  uswap bench drain --no-kernel

Every benchmark prints a table, or one JSON object with --json (schema_version, bench, date,
machine, then its figures: docs/stats.md); a progress bar of the work done is drawn on stderr
when it is a terminal and --json is off.";

/// `uswap completions --help`.
pub const COMPLETIONS: &str = "\
Examples:
  uswap completions bash > ~/.local/share/bash-completion/completions/uswap
  uswap completions zsh > ~/.zfunc/_uswap
  uswap completions fish > ~/.config/fish/completions/uswap.fish";

/// `uswap man --help`.
pub const MAN: &str = "\
Examples:
  uswap man > uswap.1 && man ./uswap.1
  uswap man --dir /usr/local/share/man/man1     (one page per command: uswap-run.1, ...)";
