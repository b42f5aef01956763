//! Tier configuration that reads like the kernel's knobs: `--tiers zero,lz4,file:/var/tmp`.
//!
//! Grammar: a comma-separated list of items. An item is a tier, optionally followed by
//! `:`-separated arguments, or a bare `key=value` that applies to the most recent tier that
//! knows the key (so `lz4,pool=20%,accept=90%` and `lz4:pool=20%:accept=90%` are the same).
//!
//! | tier | meaning | keys |
//! |---|---|---|
//! | `zero` | zero-page elision (no backend: a flag) | |
//! | `lz4`, `zstd`, `pool` | compressed pool (`pool` = lz4) | `pool=20%` or `pool=512M` (zswap `max_pool_percent`), `accept=90%` (`accept_threshold_percent`), `threshold=75%`, `incompressible=raw\|reject\|auto` (default auto: reject to a file tier below the pool, else raw), `folio=16k\|whole\|page` (default 16k), `comp=lz4\|zstd`, `level=1`, `recomp=zstd\|lz4\|off` (zram's `recomp_algorithm`: idle objects re-encoded by [`crate::vswap::Engine::recompress_tier`]; default off), `recomp_level=9` (zstd level of it; implies `recomp=zstd`) |
//! | `file[:PATH]` | swap file: an unlinked temp file in directory PATH (default `/var/tmp`), or the file/block device PATH | `size=8G`, `engine=psync\|uring`, `encrypt=on\|off`, `discard=on\|off`, `direct=on\|off` (O_DIRECT), `force` (use an existing file or device without uswap's header, overwriting it) |
//! | `mem` | uncompressed RAM (tests) | `pages=N` |
//!
//! Every bad value is a [`SwapError::Config`] whose message names it. Parsing checks that a
//! file tier's directory exists and is writable, so a typo fails at start-up, not at the first
//! writeback. This module holds no state and takes no lock.

use crate::backend::{Backend, MemBackend};
use crate::error::SwapError;
use crate::swap_table::TIER_MAX;
use crate::tier::file::{EngineKind, FileConfig, FileTarget, FileTier};
use crate::tier::zpool::{Compressor, FolioMode, Incompressible, PoolConfig, ZPool};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Default directory of the swap file.
pub(crate) const DEFAULT_FILE_DIR: &str = "/var/tmp";
/// A pool tier's size as a share of RAM, in percent, when its `pool=` is not given: zswap's
/// default `max_pool_percent`. (Not the pool's cap as a share of the pager's limit:
/// `uswap_pager::DEFAULT_POOL_PERCENT_OF_LIMIT`, `uswap_pager::launch::RUN_POOL_PERCENT`.)
pub const DEFAULT_POOL_PERCENT_OF_RAM: u8 = 20;
/// zstd level of `recomp=zstd` (recompression runs in the background: ratio over speed).
pub const DEFAULT_RECOMP_LEVEL: i32 = 9;

/// One configured tier.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub enum TierSpec {
    /// Compressed pool.
    Pool(PoolConfig),
    /// Swap file.
    File(FileConfig),
    /// Uncompressed RAM, at most this many pages (0 = unlimited).
    Memory(u64),
}

/// A parsed `--tiers` string.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct TiersConfig {
    /// Detect zero pages and store nothing for them.
    pub zero_elision: bool,
    /// The backends, in order of preference (tier index = position).
    pub tiers: Vec<TierSpec>,
}

fn bad(msg: String) -> SwapError {
    SwapError::Config(msg)
}

/// Total RAM in bytes (`MemTotal` of /proc/meminfo).
pub(crate) fn mem_total_bytes() -> Result<u64, SwapError> {
    crate::size::mem_total().map_err(bad)
}

/// Parse `N%` with 1 <= N <= 100.
fn percent(key: &str, v: &str) -> Result<u8, SwapError> {
    let n = v
        .strip_suffix('%')
        .and_then(|n| n.parse::<u8>().ok())
        .filter(|n| (1..=100).contains(n))
        .ok_or_else(|| bad(format!("bad percent '{v}' for {key}= (expected 1%..100%)")))?;
    Ok(n)
}

/// Parse a size for option `key` (a tier option such as `size`, or a flag such as `--limit`)
/// with [`crate::size::parse`]: `512M`, `1.5G`, `256MiB`, `64kB`. Zero is an error.
pub fn parse_size(key: &str, v: &str) -> Result<u64, SwapError> {
    // A tier option is `key=value`; a command-line flag (`--limit`) is named as it is.
    let eq = if key.starts_with('-') { "" } else { "=" };
    crate::size::parse(v).map_err(|e| bad(format!("bad size '{v}' for {key}{eq}: {}", e.why)))
}

fn on_off(key: &str, v: &str) -> Result<bool, SwapError> {
    match v {
        "on" | "yes" | "1" | "true" => Ok(true),
        "off" | "no" | "0" | "false" => Ok(false),
        _ => Err(bad(format!("bad value '{v}' for {key}= (expected on or off)"))),
    }
}

fn check_dir(dir: &Path) -> Result<(), SwapError> {
    let md = std::fs::metadata(dir).map_err(|e| bad(format!("swap file directory '{}': {e}", dir.display())))?;
    if !md.is_dir() {
        return Err(bad(format!("swap file directory '{}' is not a directory", dir.display())));
    }
    let c = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes())
        .map_err(|_| bad(format!("swap file directory '{}' has a NUL byte", dir.display())))?;
    // SAFETY: access(2) with a valid NUL-terminated path.
    if unsafe { libc::access(c.as_ptr(), libc::W_OK | libc::X_OK) } != 0 {
        return Err(bad(format!("swap file directory '{}' is not writable", dir.display())));
    }
    Ok(())
}

fn set_pool_key(p: &mut PoolConfig, key: &str, v: &str, mem: &mut Option<u64>) -> Result<bool, SwapError> {
    match key {
        "pool" | "max" => {
            p.max_bytes = if v.ends_with('%') {
                let pct = percent(key, v)?;
                let total = match mem {
                    Some(t) => *t,
                    None => *mem.insert(mem_total_bytes()?),
                };
                total / 100 * u64::from(pct)
            } else {
                parse_size(key, v)?
            };
        }
        "accept" => p.accept_percent = percent(key, v)?,
        "threshold" => p.threshold_percent = percent(key, v)?,
        "incompressible" => {
            p.incompressible = match v {
                "raw" | "store" => Incompressible::StoreRaw,
                "reject" => Incompressible::Reject,
                "auto" => Incompressible::Auto,
                _ => return Err(bad(format!("bad value '{v}' for incompressible= (expected raw, reject or auto)"))),
            }
        }
        "folio" => {
            p.folio_mode = match v {
                "whole" => FolioMode::Whole,
                "page" | "perpage" => FolioMode::PerPage,
                "16k" | "16K" => FolioMode::Block16K,
                _ => return Err(bad(format!("bad value '{v}' for folio= (expected whole, page or 16k)"))),
            }
        }
        "comp" | "compressor" => {
            p.compressor = match v {
                "lz4" => Compressor::Lz4,
                "zstd" => Compressor::Zstd { level: 1 },
                _ => return Err(bad(format!("unknown compressor '{v}' (expected lz4 or zstd)"))),
            }
        }
        "level" => {
            let l = v
                .parse::<i32>()
                .ok()
                .filter(|l| (1..=19).contains(l))
                .ok_or_else(|| bad(format!("bad zstd level '{v}' (expected 1..19)")))?;
            p.compressor = Compressor::Zstd { level: l };
        }
        "recomp" | "recomp_algorithm" => {
            p.recompress = match v {
                "off" | "none" => None,
                "zstd" => Some(Compressor::Zstd { level: DEFAULT_RECOMP_LEVEL }),
                "lz4" => Some(Compressor::Lz4),
                _ => return Err(bad(format!("unknown recompression algorithm '{v}' (expected zstd, lz4 or off)"))),
            }
        }
        "recomp_level" => {
            let l = v
                .parse::<i32>()
                .ok()
                .filter(|l| (1..=19).contains(l))
                .ok_or_else(|| bad(format!("bad zstd level '{v}' for recomp_level= (expected 1..19)")))?;
            p.recompress = Some(Compressor::Zstd { level: l });
        }
        _ => return Ok(false),
    }
    Ok(true)
}

fn set_file_key(f: &mut FileConfig, key: &str, v: &str) -> Result<bool, SwapError> {
    match key {
        "size" => f.size_bytes = parse_size(key, v)?,
        "engine" => {
            f.engine = match v {
                "psync" | "pread" => EngineKind::Psync,
                "uring" | "io_uring" => EngineKind::Uring,
                _ => return Err(bad(format!("unknown I/O engine '{v}' (expected psync or uring)"))),
            }
        }
        "encrypt" => f.encrypt = on_off(key, v)?,
        "discard" => f.discard = on_off(key, v)?,
        "direct" => f.direct = on_off(key, v)?,
        "force" => f.force = on_off(key, v)?,
        _ => return Ok(false),
    }
    Ok(true)
}

fn set_key(spec: &mut TierSpec, key: &str, v: &str, mem: &mut Option<u64>) -> Result<bool, SwapError> {
    match spec {
        TierSpec::Pool(p) => set_pool_key(p, key, v, mem),
        TierSpec::File(f) => set_file_key(f, key, v),
        TierSpec::Memory(n) if key == "pages" => {
            *n = v.parse().map_err(|_| bad(format!("bad page count '{v}' for pages=")))?;
            Ok(true)
        }
        TierSpec::Memory(_) => Ok(false),
    }
}

impl TiersConfig {
    /// Set `force` on every file tier (what [`with_force`] does to the string).
    #[cfg(test)]
    pub(crate) fn force_files(&mut self) {
        for t in &mut self.tiers {
            if let TierSpec::File(f) = t {
                f.force = true;
            }
        }
    }

    /// Parse a `--tiers` string.
    pub fn parse(s: &str) -> Result<TiersConfig, SwapError> {
        let mut cfg = TiersConfig { zero_elision: false, tiers: Vec::new() };
        let mut mem = None;
        if s.trim().is_empty() {
            return Err(bad("empty --tiers (expected e.g. zero,lz4,file:/var/tmp)".into()));
        }
        for item in s.split(',').map(str::trim) {
            if item.is_empty() {
                return Err(bad(format!("empty item in --tiers '{s}'")));
            }
            let mut parts = item.split(':');
            let head = parts.next().unwrap_or_default();
            if let Some((key, v)) = head.split_once('=') {
                // A bare key=value: the most recent tier that knows the key.
                let mut done = false;
                for t in cfg.tiers.iter_mut().rev() {
                    if set_key(t, key, v, &mut mem)? {
                        done = true;
                        break;
                    }
                }
                if !done {
                    return Err(bad(format!("option '{item}' does not apply to any tier before it")));
                }
                continue;
            }
            let mut spec = match head {
                "zero" => {
                    cfg.zero_elision = true;
                    if let Some(a) = parts.next() {
                        return Err(bad(format!("tier 'zero' takes no argument, got '{a}'")));
                    }
                    continue;
                }
                "lz4" | "pool" | "zswap" => {
                    TierSpec::Pool(PoolConfig { incompressible: Incompressible::Auto, ..PoolConfig::default() })
                }
                "zstd" => TierSpec::Pool(PoolConfig {
                    compressor: Compressor::Zstd { level: 1 },
                    incompressible: Incompressible::Auto,
                    ..PoolConfig::default()
                }),
                "file" => TierSpec::File(FileConfig {
                    target: FileTarget::TempIn(PathBuf::from(DEFAULT_FILE_DIR)),
                    ..FileConfig::default()
                }),
                "mem" => TierSpec::Memory(0),
                _ => {
                    return Err(bad(format!("unknown tier '{head}' (expected zero, lz4, zstd, pool, file or mem)")));
                }
            };
            let mut explicit_limit = false;
            for a in parts {
                match a.split_once('=') {
                    Some((k, v)) => {
                        if !set_key(&mut spec, k, v, &mut mem)? {
                            return Err(bad(format!("unknown option '{k}' for tier '{head}'")));
                        }
                        explicit_limit |= k == "pool" || k == "max";
                    }
                    None => match &mut spec {
                        TierSpec::File(f) if a == "force" => f.force = true,
                        TierSpec::File(f) => {
                            let p = PathBuf::from(a);
                            f.target = if p.is_dir() || a.ends_with('/') {
                                FileTarget::TempIn(p)
                            } else {
                                FileTarget::Path(p)
                            };
                        }
                        _ => return Err(bad(format!("unexpected argument '{a}' for tier '{head}'"))),
                    },
                }
            }
            if let TierSpec::Pool(p) = &mut spec {
                if !explicit_limit && p.max_bytes == 0 {
                    let total = match mem {
                        Some(t) => t,
                        None => *mem.insert(mem_total_bytes()?),
                    };
                    p.max_bytes = total / 100 * u64::from(DEFAULT_POOL_PERCENT_OF_RAM);
                }
            }
            cfg.tiers.push(spec);
        }
        // `incompressible=auto` (the default): reject to a file tier below the pool, if any.
        for i in 0..cfg.tiers.len() {
            let file_below = cfg.tiers[i + 1..].iter().any(|t| matches!(t, TierSpec::File(_)));
            if let TierSpec::Pool(p) = &mut cfg.tiers[i] {
                if p.incompressible == Incompressible::Auto {
                    p.incompressible = if file_below { Incompressible::Reject } else { Incompressible::StoreRaw };
                }
            }
        }
        if cfg.tiers.len() > usize::from(TIER_MAX) + 1 {
            return Err(bad(format!("{} tiers configured, at most {}", cfg.tiers.len(), TIER_MAX + 1)));
        }
        for t in &cfg.tiers {
            if let TierSpec::File(f) = t {
                match &f.target {
                    FileTarget::TempIn(d) => check_dir(d)?,
                    FileTarget::Path(p) => {
                        if !p.exists() {
                            check_dir(p.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new(".")))?;
                        }
                    }
                }
            }
        }
        Ok(cfg)
    }

    /// Build the backends, in order (tier index = position).
    pub fn build(&self) -> Result<Vec<Arc<dyn Backend>>, SwapError> {
        self.tiers
            .iter()
            .enumerate()
            .map(|(i, t)| -> Result<Arc<dyn Backend>, SwapError> {
                Ok(match t {
                    TierSpec::Pool(p) => {
                        let name = match p.compressor {
                            Compressor::Lz4 => "zpool:lz4".to_string(),
                            Compressor::Zstd { level } => format!("zpool:zstd-{level}"),
                        };
                        Arc::new(ZPool::new(&name, p.clone()))
                    }
                    TierSpec::File(f) => Arc::new(
                        FileTier::open(f)
                            .map_err(|e| bad(format!("tier {i} ({}): {e}", describe_target(&f.target))))?,
                    ),
                    TierSpec::Memory(n) => Arc::new(MemBackend::new("mem", *n)),
                })
            })
            .collect()
    }
}

/// The same `--tiers` string with `force` added to every file tier (what the CLI's `--force`
/// passes on to the processes it starts, which parse the string themselves).
pub fn with_force(spec: &str) -> String {
    spec.split(',')
        .map(|item| {
            let t = item.trim();
            if t == "file" || t.starts_with("file:") {
                format!("{t}:force")
            } else {
                t.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join(",")
}

fn describe_target(t: &FileTarget) -> String {
    match t {
        FileTarget::TempIn(d) => format!("temporary file in {}", d.display()),
        FileTarget::Path(p) => p.display().to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::TierKind;

    fn err(s: &str) -> String {
        match TiersConfig::parse(s) {
            Err(SwapError::Config(m)) => m,
            other => panic!("{s}: expected a config error, got {other:?}"),
        }
    }

    #[test]
    fn recompression_keys() {
        let pool = |s: &str| match TiersConfig::parse(s).unwrap().tiers.remove(0) {
            TierSpec::Pool(p) => p,
            other => panic!("{s}: {other:?}"),
        };
        assert_eq!(pool("lz4").recompress, None);
        let p = pool("lz4:recomp=zstd");
        assert_eq!((p.compressor, p.recompress), (Compressor::Lz4, Some(Compressor::Zstd { level: 9 })));
        assert_eq!(pool("lz4,recomp=zstd,recomp_level=15").recompress, Some(Compressor::Zstd { level: 15 }));
        assert_eq!(pool("lz4:recomp_level=3").recompress, Some(Compressor::Zstd { level: 3 }));
        assert_eq!(pool("lz4:recomp=zstd:recomp=off").recompress, None);
        assert!(err("lz4:recomp=lzo").contains("'lzo'"));
        assert!(err("lz4:recomp_level=0").contains("'0'"));
    }

    #[test]
    fn incompressible_pages_skip_a_pool_with_a_file_below_it_unless_told() {
        let policy = |s: &str| {
            TiersConfig::parse(s)
                .unwrap()
                .tiers
                .iter()
                .find_map(|t| match t {
                    TierSpec::Pool(p) => Some(p.incompressible),
                    _ => None,
                })
                .unwrap()
        };
        assert_eq!(policy("zero,lz4,file:/var/tmp"), Incompressible::Reject);
        assert_eq!(policy("zero,lz4:recomp=zstd,file:/var/tmp"), Incompressible::Reject);
        assert_eq!(policy("zstd,mem,file"), Incompressible::Reject);
        assert_eq!(policy("zero,lz4"), Incompressible::StoreRaw);
        assert_eq!(policy("lz4,mem"), Incompressible::StoreRaw);
        assert_eq!(policy("file:/var/tmp,lz4"), Incompressible::StoreRaw);
        assert_eq!(policy("lz4:incompressible=raw,file:/var/tmp"), Incompressible::StoreRaw);
        assert_eq!(policy("lz4,incompressible=reject"), Incompressible::Reject);
        assert_eq!(policy("lz4,incompressible=auto,file"), Incompressible::Reject);
        assert!(err("lz4:incompressible=maybe").contains("'maybe'"));
    }

    #[test]
    fn the_kernel_like_strings() {
        let c = TiersConfig::parse("zero,lz4,file:/var/tmp").unwrap();
        assert!(c.zero_elision);
        assert_eq!(c.tiers.len(), 2);
        let TierSpec::Pool(p) = &c.tiers[0] else { panic!() };
        assert_eq!(p.compressor, Compressor::Lz4);
        let ram = mem_total_bytes().unwrap();
        assert_eq!(p.max_bytes, ram / 100 * 20);
        assert_eq!(p.accept_percent, 90);
        let TierSpec::File(f) = &c.tiers[1] else { panic!() };
        assert_eq!(f.target, FileTarget::TempIn("/var/tmp".into()));
        assert!(f.encrypt);

        let c = TiersConfig::parse("zstd,pool=10%,accept=80%,threshold=60%,incompressible=reject,folio=page").unwrap();
        assert!(!c.zero_elision);
        let TierSpec::Pool(p) = &c.tiers[0] else { panic!() };
        assert_eq!(p.compressor, Compressor::Zstd { level: 1 });
        assert_eq!(p.max_bytes, ram / 100 * 10);
        assert_eq!((p.accept_percent, p.threshold_percent), (80, 60));
        assert_eq!((p.incompressible, p.folio_mode), (Incompressible::Reject, FolioMode::PerPage));

        let a = TiersConfig::parse(
            "lz4:pool=256M:comp=zstd:level=3, file:/tmp:size=1G:engine=uring:encrypt=off:discard=on",
        )
        .unwrap();
        let TierSpec::Pool(p) = &a.tiers[0] else { panic!() };
        assert_eq!((p.max_bytes, p.compressor), (256 << 20, Compressor::Zstd { level: 3 }));
        let TierSpec::File(f) = &a.tiers[1] else { panic!() };
        assert_eq!((f.size_bytes, f.engine, f.encrypt, f.discard), (1 << 30, EngineKind::Uring, false, true));
        // Options as separate items go to the latest tier that knows them.
        let b =
            TiersConfig::parse("lz4,file:/tmp,size=1G,pool=256M,comp=zstd,level=3,engine=uring,encrypt=off,discard=on")
                .unwrap();
        assert_eq!(a, b);
        assert_eq!(TiersConfig::parse("mem:pages=10").unwrap().tiers, vec![TierSpec::Memory(10)]);
        assert!(TiersConfig::parse("file").is_ok());
        // force: a bare word, a key, or through with_force.
        for s in ["file:/tmp/x.swap:force", "file:/tmp/x.swap:force=on", "lz4,file:/tmp/x.swap,force=yes"] {
            let c = TiersConfig::parse(s).unwrap();
            let TierSpec::File(f) = c.tiers.last().unwrap() else { panic!() };
            assert!(f.force, "{s}");
        }
        let TierSpec::File(f) = &TiersConfig::parse("file:/tmp/x.swap").unwrap().tiers[0] else { panic!() };
        assert!(!f.force);
        assert_eq!(with_force("zero,lz4,file:/var/tmp,file"), "zero,lz4,file:/var/tmp:force,file:force");
        let mut c = TiersConfig::parse(&with_force("zero, lz4, file:/var/tmp:size=1G")).unwrap();
        let TierSpec::File(f) = &c.tiers[1] else { panic!() };
        assert!(f.force && f.size_bytes == 1 << 30);
        c.force_files();
        assert_eq!(c, TiersConfig::parse("zero,lz4,file:/var/tmp:size=1G:force").unwrap());
        // One size grammar: decimals and IEC units.
        let TierSpec::File(f) = &TiersConfig::parse("file:/tmp:size=1.5GiB").unwrap().tiers[0] else { panic!() };
        assert_eq!(f.size_bytes, 3 << 29);
    }

    #[test]
    fn bad_values_name_themselves() {
        assert!(err("zero,lz5").contains("'lz5'"));
        assert!(err("").contains("empty"));
        assert!(err("lz4,,file").contains("empty item"));
        assert!(err("lz4,pool=120%").contains("'120%'"));
        assert!(err("lz4,pool=0%").contains("'0%'"));
        assert!(err("lz4,accept=ninety%").contains("'ninety%'"));
        assert!(err("lz4:pool=12Q").contains("'12Q'"));
        assert!(err("lz4:comp=lzo").contains("'lzo'"));
        assert!(err("zstd:level=99").contains("'99'"));
        assert!(err("pool=20%").contains("'pool=20%'"));
        assert!(err("zero:x").contains("'x'"));
        assert!(err("lz4:bogus=1").contains("'bogus'"));
        assert!(err("file:/nonexistent/dir/").contains("/nonexistent/dir"));
        assert!(err("file:/nonexistent/dir/swapfile").contains("/nonexistent/dir"));
        assert!(err("file:/tmp:engine=aio").contains("'aio'"));
        assert!(err("file:/tmp:encrypt=maybe").contains("'maybe'"));
        assert!(err("file:/tmp:size=-1").contains("'-1'"));
        assert!(err("mem,mem,mem,mem,mem,mem,mem,mem,mem").contains("at most 8"));
        // A directory that exists but is not writable (skipped when running as root).
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            assert!(err("file:/proc").contains("not writable"));
        }
        assert!(err("file:/etc/hostname/").contains("/etc/hostname"));
    }

    #[test]
    fn builds_backends_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let c = TiersConfig::parse(&format!("zero,lz4:pool=64M,file:{}:size=64M", dir.path().display())).unwrap();
        let b = c.build().unwrap();
        assert_eq!(b.iter().map(|b| b.kind()).collect::<Vec<_>>(), vec![TierKind::Pool, TierKind::File]);
        assert_eq!(b[0].usage().limit_bytes, 64 << 20);
        assert_eq!(b[1].usage().limit_bytes, 64 << 20);
        // Nothing left in the directory: the file is unlinked.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }
}
