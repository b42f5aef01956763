//! The launch contract between `uswap run` and the LD_PRELOAD library: every `USWAP_*`
//! environment variable, declared once with its name, its type, its default and its parser.
//! The runner sets variables through [`Var::pair`] and [`TextVar::pair`], the library reads
//! them through [`Var::read`] and [`TextVar::read`]; neither writes a name of its own.
//!
//! A name is a `&'static CStr`, so the library reads it with `getenv` at its start without
//! building a string: `read` takes the reader (the library's `env`, which returns the
//! environment's own `&'static str`) and allocates nothing unless the value does not parse (the
//! error message). A [`Var`]'s parser is a plain function of the text; a [`TextVar`]'s value is
//! the text itself.
//!
//! Each variable has a [`Scope`]: who sets it and who reads it. [`ALL`] lists every one, for
//! the tests that check the runner sets only declared variables and the documentation names
//! every variable a user may set.
//!
//! Locking: none (constants and pure functions).

use crate::{FaultMode, Replacement};
use std::ffi::{CStr, OsStr, OsString};
use std::os::unix::ffi::OsStrExt;

/// Who sets a variable and who reads it.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Scope {
    /// Set by `uswap run` for the program (inherited by all it starts), read by the library.
    Runner,
    /// Read by the library; a user may set it for `uswap run` (documented in `run --help`
    /// and the README).
    User,
    /// Read by `uswap run` itself (documented in `run --help` and the README).
    Cli,
    /// Read by a benchmark of `uswap bench`.
    Bench,
    /// Read by tests only.
    Test,
}

/// One `USWAP_*` variable holding a `T`, read by a parser.
pub struct Var<T: 'static> {
    /// Its name, NUL-terminated for `getenv`.
    pub name: &'static CStr,
    /// Who sets and reads it.
    pub scope: Scope,
    /// The value when the variable is unset.
    pub default: T,
    /// The value of a set variable: `(name, text)`, the name for messages.
    parse: fn(&'static str, &str) -> Result<T, String>,
    /// The text that [`Self::parse`] reads back as the value (the runner's side).
    format: fn(T) -> String,
}

/// A variable's name as a `&str` (every name is ASCII).
fn name_str(name: &'static CStr) -> &'static str {
    name.to_str().unwrap_or("USWAP_?")
}

impl<T: Copy + 'static> Var<T> {
    /// The name as a `&str`.
    pub fn name(&self) -> &'static str {
        name_str(self.name)
    }

    /// The name for `std::env` and `Command::env`.
    pub fn os_name(&self) -> &'static OsStr {
        OsStr::from_bytes(self.name.to_bytes())
    }

    /// The value in force: `env` reads the environment (`None`: unset), the default if unset.
    /// Allocates nothing unless the text does not parse (the message).
    pub fn read(&self, env: impl FnOnce(&'static CStr) -> Option<&'static str>) -> Result<T, String> {
        match env(self.name) {
            None => Ok(self.default),
            Some(text) => self.parse(text),
        }
    }

    /// The value in force in this process's environment through `std::env` (the CLI's side; a
    /// value that is not UTF-8 counts as unset).
    pub fn read_std(&self) -> Result<T, String> {
        match std::env::var(self.os_name()) {
            Ok(text) => self.parse(&text),
            Err(_) => Ok(self.default),
        }
    }

    /// Parse `text` as the variable's value.
    pub fn parse(&self, text: &str) -> Result<T, String> {
        (self.parse)(self.name(), text)
    }

    /// The `(name, value)` pair that passes `v` to the library.
    pub fn pair(&self, v: T) -> (OsString, OsString) {
        (self.os_name().to_owned(), (self.format)(v).into())
    }
}

/// One `USWAP_*` variable holding text taken as it is (a path, a tier list): no parser, and
/// the library's value borrows the environment's own string.
pub struct TextVar {
    /// Its name, NUL-terminated for `getenv`.
    pub name: &'static CStr,
    /// Who sets and reads it.
    pub scope: Scope,
    /// The value when the variable is unset (`None`: no value).
    pub default: Option<&'static str>,
}

impl TextVar {
    /// The name as a `&str`.
    pub fn name(&self) -> &'static str {
        name_str(self.name)
    }

    /// The name for `std::env` and `Command::env`.
    pub fn os_name(&self) -> &'static OsStr {
        OsStr::from_bytes(self.name.to_bytes())
    }

    /// The value in force: `env` reads the environment (`None`: unset), the default if unset.
    /// Allocates nothing.
    pub fn read(&self, env: impl FnOnce(&'static CStr) -> Option<&'static str>) -> Option<&'static str> {
        env(self.name).or(self.default)
    }

    /// The `(name, value)` pair that passes `text` to the library.
    pub fn pair(&self, text: impl AsRef<OsStr>) -> (OsString, OsString) {
        (self.os_name().to_owned(), text.as_ref().to_owned())
    }
}

/// The text of [`DEFAULT_TIERS`], for `concat!` in help texts (a `const` cannot be).
#[macro_export]
macro_rules! default_tiers {
    () => {
        "zero,lz4:recomp=zstd,file:/var/tmp"
    };
}

/// The tiers of `uswap run` (and of the benchmarks that run a program under it): what does not
/// fit in [`RUN_POOL_PERCENT`] of the limit goes compressed to an encrypted, unlinked swap file
/// in `/var/tmp`, and pool objects idle for a whole period are recompressed with zstd.
pub const DEFAULT_TIERS: &str = default_tiers!();

/// The compressed pool's share of the limit, in percent, under `uswap run` when a file tier
/// takes the rest ([`POOL_PERCENT`]'s default), and the inactive list's share is small too
/// ([`INACTIVE_PERCENT`]): a program's resident set must hold its working set. Unlike the
/// kernel, the pager sees no accessed bits, so every page it takes from the resident set is a
/// guess and every wrong guess costs a fault; beside a swap file, a small pool leaves the room.
///
/// Not the same share as [`crate::DEFAULT_POOL_PERCENT_OF_LIMIT`] (the pager's default for an
/// embedder), nor as `uswap::config::DEFAULT_POOL_PERCENT_OF_RAM` (a pool tier's size as a share
/// of RAM, when its `pool=` is not given).
pub const RUN_POOL_PERCENT: u8 = 8;

fn size(name: &'static str, text: &str) -> Result<u64, String> {
    uswap::config::parse_size(name, text).map_err(|e| e.to_string())
}

/// A duration in ms whose `0` means something (off, or no bound): `0`, or what [`size`] takes.
fn millis(name: &'static str, text: &str) -> Result<u64, String> {
    size_or_0(name, text)
}

/// A size whose `0` means something: `0`, or what [`size`] takes.
fn size_or_0(name: &'static str, text: &str) -> Result<u64, String> {
    if text.trim() == "0" {
        Ok(0)
    } else {
        size(name, text)
    }
}

fn decimal(v: u64) -> String {
    v.to_string()
}

fn flag_on_unless_0(_: &'static str, t: &str) -> Result<bool, String> {
    Ok(t != "0")
}

fn flag_on_if_1(_: &'static str, t: &str) -> Result<bool, String> {
    Ok(t == "1")
}

fn bit(v: bool) -> String {
    if v { "1" } else { "0" }.into()
}

/// Activates the library (unset: it is inert, as in a program that links it for the C ABI)
/// and sets the limit in bytes.
pub const LIMIT: Var<u64> =
    Var { name: c"USWAP_LIMIT", scope: Scope::Runner, default: 0, parse: size, format: decimal };

/// Folio size of the program's regions, in bytes.
pub const FOLIO: Var<u64> =
    Var { name: c"USWAP_FOLIO", scope: Scope::Runner, default: 65536, parse: size, format: decimal };

/// The tiers (`uswap::config` grammar).
pub const TIERS: TextVar = TextVar { name: c"USWAP_TIERS", scope: Scope::Runner, default: Some(DEFAULT_TIERS) };

/// The tree's statistics directory: each process writes `<pid>.json` (snapshots) and
/// `<pid>.final.json` (at exit) there. Unset: no statistics files.
pub const STATS_DIR: TextVar = TextVar { name: c"USWAP_STATS_DIR", scope: Scope::Runner, default: None };

/// The tree's budget file (`crate::tree`), through which its processes share the limit.
pub const TREE_BUDGET: TextVar = TextVar { name: c"USWAP_TREE_BUDGET", scope: Scope::Runner, default: None };

/// How often each process rewrites its statistics snapshot, in ms (0 or not a number: never).
/// `uswap run` sets its own period (the live view of `uswap status`) unless the user set it.
pub const STATS_INTERVAL_MS: Var<u64> = Var {
    name: c"USWAP_STATS_INTERVAL_MS",
    scope: Scope::User,
    default: 0,
    parse: |_, t| Ok(t.parse().unwrap_or(0)),
    format: decimal,
};

/// `warn`: a process that cannot be put under the pager runs unprotected, with a warning,
/// instead of exiting with 125.
pub const ON_ERROR: Var<bool> = Var {
    name: c"USWAP_ON_ERROR",
    scope: Scope::User,
    default: false,
    parse: |_, t| Ok(t == "warn"),
    format: |w| if w { "warn" } else { "exit" }.into(),
};

/// Smallest anonymous mapping adopted when the program maps it, in bytes.
pub const MMAP_MIN: Var<u64> =
    Var { name: c"USWAP_MMAP_MIN", scope: Scope::User, default: 16 << 10, parse: size, format: decimal };

/// Anonymous resident memory at which a process of the tree starts its pager, in bytes
/// (thread fault mode; `0`, the default: every process starts it at once). Below it the
/// process runs with no pager, its memory counted, and starts one the first time it grows past
/// it (at most an eighth of the limit is used, so a small limit starts processes early).
/// Experimental: off by default while a fork burst under load can still fail in it
/// (`docs/design.md`, "Dormant start").
pub const START_BYTES: Var<u64> =
    Var { name: c"USWAP_START_BYTES", scope: Scope::User, default: 0, parse: size_or_0, format: decimal };

/// Period of the resident-set check for memory mapped where no call is seen, in ms, while it
/// moves (the scanner backs off while it stays put).
pub const SCAN_MS: Var<u64> =
    Var { name: c"USWAP_SCAN_MS", scope: Scope::User, default: 1, parse: size, format: decimal };

/// Share of the limit for the inactive list, in percent (at most 90).
pub const INACTIVE_PERCENT: Var<u64> = Var {
    name: c"USWAP_INACTIVE_PERCENT",
    scope: Scope::User,
    default: 5,
    parse: |n, t| size(n, t).map(|v| v.min(90)),
    format: decimal,
};

/// Share of the limit for the compressed pool when a file tier takes the rest, in percent
/// (5..=50).
pub const POOL_PERCENT: Var<u64> = Var {
    name: c"USWAP_POOL_PERCENT",
    scope: Scope::User,
    default: RUN_POOL_PERCENT as u64,
    parse: |n, t| size(n, t).map(|v| v.clamp(5, 50)),
    format: decimal,
};

/// `1`: the pool's share follows the workload (`crate::pool_share`).
pub const POOL_ADAPT: Var<bool> =
    Var { name: c"USWAP_POOL_ADAPT", scope: Scope::User, default: false, parse: flag_on_if_1, format: bit };

/// `fifo`: first in, first out straight to the store; anything else: the two lists.
pub const REPLACEMENT: Var<Replacement> = Var {
    name: c"USWAP_REPLACEMENT",
    scope: Scope::User,
    default: Replacement::TwoList,
    parse: |_, t| Ok(if t == "fifo" { Replacement::Fifo } else { Replacement::TwoList }),
    format: |r| if r == Replacement::Fifo { "fifo" } else { "two-list" }.into(),
};

/// Where a managed page's fault is resolved: `thread` (the pager's event thread, the
/// default) or `sigbus` (the faulting thread itself, with the system calls that take user
/// buffers trapped by a seccomp filter and re-issued once their buffers are resident).
pub const FAULT_MODE: Var<FaultMode> = Var {
    name: c"USWAP_FAULT_MODE",
    scope: Scope::User,
    default: FaultMode::Thread,
    parse: |name, t| match t {
        "thread" => Ok(FaultMode::Thread),
        "sigbus" => Ok(FaultMode::Sigbus),
        _ => Err(format!("{name}={t}: expected `thread` or `sigbus`")),
    },
    format: |m| if m == FaultMode::Sigbus { "sigbus" } else { "thread" }.into(),
};

/// Period of background recompression and tier moves, in ms (`0`: no background thread).
pub const RECOMP_MS: Var<u64> =
    Var { name: c"USWAP_RECOMP_MS", scope: Scope::User, default: 5000, parse: millis, format: decimal };

/// CPU budget of background recompression, in percent of one core (1..=100).
pub const RECOMP_CPU_PERCENT: Var<u64> = Var {
    name: c"USWAP_RECOMP_CPU_PERCENT",
    scope: Scope::User,
    default: 5,
    parse: |n, t| size(n, t).map(|v| v.clamp(1, 100)),
    format: decimal,
};

/// Pool objects unused this long are written back to the file, in ms (`0`: no writeback by
/// age).
pub const WRITEBACK_AGE_MS: Var<u64> =
    Var { name: c"USWAP_WRITEBACK_AGE_MS", scope: Scope::User, default: 60_000, parse: millis, format: decimal };

/// `0`: no promotion of refaulted file objects into the pool.
pub const PROMOTE: Var<bool> =
    Var { name: c"USWAP_PROMOTE", scope: Scope::User, default: true, parse: flag_on_unless_0, format: bit };

/// `0`: the event thread does not follow the faulting thread's CPU (`crate::cpu`).
pub const FOLLOW_CPU: Var<bool> =
    Var { name: c"USWAP_FOLLOW_CPU", scope: Scope::User, default: true, parse: flag_on_unless_0, format: bit };

/// `0`: it follows, but does not pin the thread it follows beside it.
pub const PIN_THREAD: Var<bool> =
    Var { name: c"USWAP_PIN_THREAD", scope: Scope::User, default: true, parse: flag_on_unless_0, format: bit };

/// While the store fails, how long faults over the limit wait for room, in ms (`0`: for ever).
pub const FULL_WAIT_MS: Var<u64> =
    Var { name: c"USWAP_FULL_WAIT_MS", scope: Scope::User, default: 10_000, parse: millis, format: decimal };

/// The library `uswap run` preloads instead of its built-in copy (a path).
pub const PRELOAD: TextVar = TextVar { name: c"USWAP_PRELOAD", scope: Scope::Cli, default: None };

/// `on`/`off`: whether the disk side of `bench programs` keeps zswap on (default: decided by
/// the cgroup version; `None`).
pub const BENCH_DISK_ZSWAP: Var<Option<bool>> = Var {
    name: c"USWAP_BENCH_DISK_ZSWAP",
    scope: Scope::Bench,
    default: None,
    parse: |_, t| {
        Ok(match t {
            "on" => Some(true),
            "off" => Some(false),
            _ => None,
        })
    },
    format: |v| {
        match v {
            Some(true) => "on",
            Some(false) => "off",
            None => "auto",
        }
        .into()
    },
};

/// Set: a test that finds userfaultfd unavailable fails instead of skipping.
pub const REQUIRE_UFFD: Var<bool> =
    Var { name: c"USWAP_REQUIRE_UFFD", scope: Scope::Test, default: false, parse: |_, _| Ok(true), format: bit };

/// A declared variable's name and scope, whatever its type.
#[derive(Copy, Clone, Debug)]
pub struct Declared {
    /// Its name.
    pub name: &'static CStr,
    /// Who sets and reads it.
    pub scope: Scope,
}

const fn declared<T: 'static>(v: &Var<T>) -> Declared {
    Declared { name: v.name, scope: v.scope }
}

const fn declared_text(v: &TextVar) -> Declared {
    Declared { name: v.name, scope: v.scope }
}

/// Every `USWAP_*` variable read at run time. (The build of `uswap-cli` has its own,
/// `USWAP_EMBED_PRELOAD`, `USWAP_EMBED_PATH` and `USWAP_EMBED_HASH`, read by `build.rs` and
/// `env!`, which need literal names.)
pub const ALL: &[Declared] = &[
    declared(&LIMIT),
    declared(&FOLIO),
    declared_text(&TIERS),
    declared_text(&STATS_DIR),
    declared_text(&TREE_BUDGET),
    declared(&STATS_INTERVAL_MS),
    declared(&ON_ERROR),
    declared(&MMAP_MIN),
    declared(&START_BYTES),
    declared(&SCAN_MS),
    declared(&INACTIVE_PERCENT),
    declared(&POOL_PERCENT),
    declared(&POOL_ADAPT),
    declared(&REPLACEMENT),
    declared(&FAULT_MODE),
    declared(&RECOMP_MS),
    declared(&RECOMP_CPU_PERCENT),
    declared(&WRITEBACK_AGE_MS),
    declared(&PROMOTE),
    declared(&FOLLOW_CPU),
    declared(&PIN_THREAD),
    declared(&FULL_WAIT_MS),
    declared_text(&PRELOAD),
    declared(&BENCH_DISK_ZSWAP),
    declared(&REQUIRE_UFFD),
];

/// The declared variable named `name`, if any.
pub fn lookup(name: &OsStr) -> Option<Declared> {
    ALL.iter().copied().find(|d| d.name.to_bytes() == name.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip<T: Copy + PartialEq + std::fmt::Debug>(v: &Var<T>, values: &[T]) {
        for &x in values {
            let (name, text) = v.pair(x);
            assert_eq!(name, v.os_name());
            let text: &'static str = Box::leak(text.into_string().unwrap().into_boxed_str());
            assert_eq!(v.parse(text).unwrap(), x, "{}", v.name());
            assert_eq!(v.read(|n| (n == v.name).then_some(text)).unwrap(), x, "{} set", v.name());
        }
        assert_eq!(v.read(|_| None).unwrap(), v.default, "{} unset", v.name());
    }

    #[test]
    fn every_parser_reads_back_what_its_formatter_writes() {
        for v in [&LIMIT, &FOLIO, &MMAP_MIN, &START_BYTES, &SCAN_MS, &RECOMP_MS, &WRITEBACK_AGE_MS, &FULL_WAIT_MS] {
            round_trip(v, &[1, 4096, 65536, 2 << 20, 3 << 30]);
        }
        // Durations whose 0 is documented (off, for ever) take it; sizes do not.
        for v in [&RECOMP_MS, &WRITEBACK_AGE_MS, &FULL_WAIT_MS, &START_BYTES] {
            round_trip(v, &[0]);
        }
        assert!(LIMIT.parse("0").is_err());
        round_trip(&STATS_INTERVAL_MS, &[0, 1, 500]);
        round_trip(&INACTIVE_PERCENT, &[1, 5, 90]);
        round_trip(&POOL_PERCENT, &[5, 8, 50]);
        round_trip(&RECOMP_CPU_PERCENT, &[1, 5, 100]);
        for v in [&PROMOTE, &FOLLOW_CPU, &PIN_THREAD, &POOL_ADAPT, &ON_ERROR] {
            round_trip(v, &[true, false]);
        }
        round_trip(&REPLACEMENT, &[Replacement::Fifo, Replacement::TwoList]);
        round_trip(&FAULT_MODE, &[FaultMode::Thread, FaultMode::Sigbus]);
        assert!(FAULT_MODE.parse("Sigbus").is_err());
        round_trip(&BENCH_DISK_ZSWAP, &[Some(true), Some(false), None]);
        round_trip(&REQUIRE_UFFD, &[true]);
        for v in [&TIERS, &STATS_DIR, &TREE_BUDGET, &PRELOAD] {
            for text in ["zero,lz4", "/run/user/0/uswap/tree/budget"] {
                let (name, value) = v.pair(text);
                assert_eq!((name.as_os_str(), value.to_str()), (v.os_name(), Some(text)));
                assert_eq!(v.read(|n| (n == v.name).then_some(text)), Some(text));
            }
            assert_eq!(v.read(|_| None), v.default);
        }
        assert_eq!(TIERS.read(|_| None), Some(DEFAULT_TIERS));
        assert_eq!(POOL_PERCENT.read(|_| None), Ok(u64::from(RUN_POOL_PERCENT)));
    }

    #[test]
    fn parsers_keep_their_meaning() {
        assert_eq!(MMAP_MIN.parse("16K").unwrap(), 16 << 10);
        assert_eq!(LIMIT.parse("1.5G").unwrap(), 3 << 29);
        let e = FOLIO.parse("lots").unwrap_err();
        assert!(e.contains("USWAP_FOLIO") && e.contains("lots"), "{e}");
        assert_eq!(INACTIVE_PERCENT.parse("95").unwrap(), 90);
        assert_eq!(POOL_PERCENT.parse("1").unwrap(), 5);
        assert_eq!(POOL_PERCENT.parse("70").unwrap(), 50);
        assert_eq!(RECOMP_CPU_PERCENT.parse("500").unwrap(), 100);
        assert_eq!(STATS_INTERVAL_MS.parse("1K").unwrap(), 0, "a plain number, not a size");
        assert!(PROMOTE.parse("no").unwrap(), "only 0 turns it off");
        assert!(!POOL_ADAPT.parse("yes").unwrap(), "only 1 turns it on");
        assert!(!ON_ERROR.parse("exit").unwrap());
        assert_eq!(REPLACEMENT.parse("lru").unwrap(), Replacement::TwoList);
        assert_eq!(BENCH_DISK_ZSWAP.parse("maybe").unwrap(), None);
    }

    #[test]
    fn names_are_unique_and_prefixed() {
        for (i, d) in ALL.iter().enumerate() {
            let n = d.name.to_str().unwrap();
            assert!(n.starts_with("USWAP_") && n.bytes().all(|b| b.is_ascii_uppercase() || b == b'_'), "{n}");
            assert!(ALL[..i].iter().all(|e| e.name != d.name), "{n} declared twice");
            assert_eq!(lookup(OsStr::new(n)).map(|e| e.name), Some(d.name));
        }
        assert!(lookup(OsStr::new("USWAP_NOPE")).is_none());
    }
}
