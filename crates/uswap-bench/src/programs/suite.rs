//! The programs of `uswap bench programs`: what each runs, at what size (scaled by `--scale`),
//! which executables it needs, and the inputs it needs generated once per benchmark
//! (deterministic: a splitmix64 stream, so every side and every run sees the same bytes).
//! The small scripts are in `scripts/` and compiled into the binary.
//!
//! Locking: none (called from the benchmark's main thread only).

use super::rng::Rng;
use std::ffi::OsString;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

/// One program of the suite.
pub struct Program {
    /// Name for `--only` and the report.
    pub name: &'static str,
    /// The runtime or tool it exercises.
    pub runtime: &'static str,
    /// What it does at scale 1.
    pub about: &'static str,
    /// Executables it needs on PATH (a missing one skips the program).
    pub needs: &'static [&'static str],
    /// How many processes about as large as its largest run at once: the native peak, which
    /// is the largest process's (`wait4`), counts this many times toward the limit.
    pub at_once: u32,
    /// The smallest fraction of its native peak its limit is set to unless `--limit-fraction`
    /// says otherwise (0 for most). A program that walks its whole heap at random has a
    /// working set as large as its peak; below it, it thrashes under any swap (xz and
    /// perl-hash: found with `bench programs --only xz,perl-hash --compare kernel
    /// --limit-fraction F` over several fractions).
    pub floor: f64,
    prepare: fn(&Ctx) -> Result<Body, String>,
}

/// The fraction of its native peak each program's limit is set to by default.
pub const DEFAULT_FRACTION: f64 = 0.4;

/// What to run.
pub enum Body {
    /// One command (its stdout and the listed output files are compared with the native run's).
    Cmd(CmdSpec),
    /// The Redis scenario (see `redis.rs`).
    Redis(super::redis::Plan),
}

/// A command line, run with the run's own directory as working directory.
#[derive(Debug, Clone)]
pub struct CmdSpec {
    /// Program (absolute path) and arguments.
    pub argv: Vec<OsString>,
    /// Extra environment.
    pub env: Vec<(&'static str, String)>,
    /// File to read stdin from.
    pub stdin: Option<PathBuf>,
    /// Output files the command writes into its working directory, compared too.
    pub outputs: Vec<&'static str>,
}

impl CmdSpec {
    /// The command as a shell would show it.
    pub fn display(&self) -> String {
        let mut s: Vec<String> = self.env.iter().map(|(k, v)| format!("{k}={v}")).collect();
        for a in &self.argv {
            let a = a.to_string_lossy();
            if a.contains(|c: char| c.is_whitespace() || c == '\'' || c == '"' || c == '|' || c == ';') || a.is_empty()
            {
                s.push(format!("'{}'", a.replace('\'', "'\\''")));
            } else {
                s.push(a.into_owned());
            }
        }
        if let Some(i) = &self.stdin {
            s.push(format!("< {}", i.display()));
        }
        s.join(" ")
    }
}

/// What a program's preparation gets.
pub struct Ctx<'a> {
    /// A directory of its own for generated inputs.
    pub dir: &'a Path,
    /// `--scale`.
    pub scale: f64,
}

impl Ctx<'_> {
    /// `base` scaled, at least 1.
    pub fn n(&self, base: u64) -> u64 {
        ((base as f64 * self.scale).round() as u64).max(1)
    }
}

impl Program {
    /// The fraction of its native peak its limit is set to: `--limit-fraction` if given, else
    /// the default or its floor, whichever is larger.
    pub fn limit_fraction(&self, given: Option<f64>) -> f64 {
        given.unwrap_or(DEFAULT_FRACTION.max(self.floor))
    }

    /// Generate the inputs and build the command. Err: why it cannot run here.
    pub fn prepare(&self, ctx: &Ctx) -> Result<Body, String> {
        for n in self.needs {
            which(n).ok_or_else(|| format!("{n} not found on PATH"))?;
        }
        (self.prepare)(ctx)
    }
}

/// The suite, in the order it runs.
pub fn all() -> Vec<Program> {
    vec![
        Program {
            name: "python-list",
            runtime: "CPython",
            about: "x = [i*3 for i in range(20M)], then a checksum over every element",
            at_once: 1,
            floor: 0.0,
            needs: &["python3"],
            prepare: |c| python_script(c, "list.py", LIST_PY, 20_000_000),
        },
        Program {
            name: "python-fork",
            runtime: "CPython",
            about: "a 2M-str list checksummed by four multiprocessing workers forked from the parent",
            at_once: 1,
            floor: 0.0,
            needs: &["python3"],
            prepare: |c| python_script(c, "fork.py", FORK_PY, 2_000_000),
        },
        Program {
            name: "python-dict",
            runtime: "CPython",
            about: "a 3M-entry str -> str dict, every entry checked, SHA-256 over the items",
            at_once: 1,
            floor: 0.0,
            needs: &["python3"],
            prepare: |c| python_script(c, "dict.py", DICT_PY, 3_000_000),
        },
        Program {
            name: "node-objects",
            runtime: "Node.js",
            about: "node --max-old-space-size=4096: 3M small objects in an array, a sum over all, SHA-256 of the JSON of every 97th",
            at_once: 1,
            floor: 0.0,
            needs: &["node"],
            prepare: |c| {
                Ok(Body::Cmd(CmdSpec {
                    // Node sizes its heap from the memory cgroup's limit and aborts when it
                    // fills: a fixed heap limit makes every side run the same program.
                    argv: args(
                        need("node")?,
                        &[
                            "--max-old-space-size=4096".into(),
                            script(c, "objects.js", OBJECTS_JS)?.into_os_string(),
                            c.n(3_000_000).to_string().into(),
                        ],
                    ),
                    env: vec![],
                    stdin: None,
                    outputs: vec![],
                }))
            },
        },
        Program {
            name: "java-hashmap",
            runtime: "JVM",
            about: "java -Xmx1g (G1, container support off so every side runs the same JVM): a 2M-entry HashMap<String,String>",
            at_once: 1,
            floor: 0.0,
            needs: &["java", "javac"],
            prepare: |c| {
                let src = script(c, "HashMapBench.java", HASHMAP_JAVA)?;
                let out = std::process::Command::new(need("javac")?)
                    .arg("-d")
                    .arg(c.dir)
                    .arg(&src)
                    .output()
                    .map_err(|e| format!("javac: {e}"))?;
                if !out.status.success() {
                    return Err(format!("javac failed: {}", String::from_utf8_lossy(&out.stderr).trim()));
                }
                let mut a: Vec<OsString> =
                    ["-Xmx1g", "-XX:+UseG1GC", "-XX:-UseContainerSupport", "-Xshare:auto", "-cp"].map(OsString::from).to_vec();
                a.push(c.dir.as_os_str().to_owned());
                a.push("HashMapBench".into());
                a.push(c.n(2_000_000).to_string().into());
                Ok(Body::Cmd(CmdSpec { argv: args(need("java")?, &a), env: vec![], stdin: None, outputs: vec![] }))
            },
        },
        Program {
            name: "sqlite",
            runtime: "SQLite",
            about: "sqlite3 :memory:, 1.5M rows inserted by a recursive CTE, an index, aggregates",
            at_once: 1,
            floor: 0.0,
            needs: &["sqlite3"],
            prepare: |c| {
                let sql = TABLE_SQL.replace("@ROWS@", &c.n(1_500_000).to_string());
                let f = script(c, "table.sql", &sql)?;
                Ok(Body::Cmd(CmdSpec {
                    argv: args(need("sqlite3")?, &[":memory:".into()]),
                    env: vec![],
                    stdin: Some(f),
                    outputs: vec![],
                }))
            },
        },
        Program {
            name: "sort",
            runtime: "GNU coreutils",
            about: "sort -S 400M of a 100 MB generated file",
            at_once: 1,
            floor: 0.0,
            needs: &["sort"],
            prepare: |c| {
                let input = c.dir.join("sort-input.txt");
                gen_lines(&input, c.n(100 << 20))?;
                Ok(Body::Cmd(CmdSpec {
                    argv: args(
                        need("sort")?,
                        &["-S".into(), "400M".into(), "-o".into(), "sorted.txt".into(), input.into_os_string()],
                    ),
                    env: vec![("LC_ALL", "C".into())],
                    stdin: None,
                    outputs: vec!["sorted.txt"],
                }))
            },
        },
        Program {
            name: "redis",
            runtime: "Redis",
            about: "redis-server loaded with 600k 1000-byte values, BGSAVE under a GET load, the dump reloaded natively",
            at_once: 1,
            floor: 0.0,
            needs: &["redis-server", "redis-benchmark"],
            prepare: |c| {
                Ok(Body::Redis(super::redis::Plan {
                    server: need("redis-server")?,
                    benchmark: need("redis-benchmark")?,
                    keys: c.n(600_000),
                    value_len: 1000,
                }))
            },
        },
        Program {
            name: "gcc",
            runtime: "GCC",
            about: "gcc -O2 -c of a generated 24 MB C file (a 2M-entry table and 40 functions)",
            at_once: 1,
            floor: 0.0,
            needs: &["gcc", "as"],
            prepare: |c| {
                let src = c.dir.join("big.c");
                gen_c(&src, c.n(2_000_000), c.n(40))?;
                Ok(Body::Cmd(CmdSpec {
                    argv: args(
                        need("gcc")?,
                        &["-O2".into(), "-c".into(), src.into_os_string(), "-o".into(), "big.o".into()],
                    ),
                    env: vec![("LC_ALL", "C".into())],
                    stdin: None,
                    outputs: vec!["big.o"],
                }))
            },
        },
        Program {
            name: "make-j2",
            runtime: "make + GCC",
            about: "make -j2 of two generated 12 MB C files (gcc -O2 -c each, two compilers at once)",
            at_once: 2,
            floor: 0.0,
            needs: &["make", "gcc", "as"],
            prepare: |c| {
                let gcc = need("gcc")?;
                let mut mk = String::from("all: a.o b.o\n");
                for (i, name) in ["a", "b"].iter().enumerate() {
                    let src = c.dir.join(format!("{name}.c"));
                    gen_c(&src, c.n(1_000_000) + i as u64, c.n(20))?;
                    mk += &format!("{name}.o: {}\n\t{} -O2 -c $< -o $@\n", src.display(), gcc.display());
                }
                let makefile = script(c, "Makefile", &mk)?;
                Ok(Body::Cmd(CmdSpec {
                    argv: args(need("make")?, &["-s".into(), "-j2".into(), "-f".into(), makefile.into_os_string()]),
                    env: vec![("LC_ALL", "C".into())],
                    stdin: None,
                    outputs: vec!["a.o", "b.o"],
                }))
            },
        },
        Program {
            name: "xz",
            runtime: "xz-utils",
            about: "xz -9 -T1 of 16 MB of generated text (64 MiB dictionary)",
            at_once: 1,
            floor: 0.8,
            needs: &["xz"],
            prepare: |c| {
                let input = c.dir.join("text.txt");
                gen_text(&input, c.n(16 << 20))?;
                Ok(Body::Cmd(CmdSpec {
                    argv: args(need("xz")?, &["-9".into(), "-T1".into(), "-c".into(), input.into_os_string()]),
                    env: vec![],
                    stdin: None,
                    outputs: vec![],
                }))
            },
        },
        Program {
            name: "perl-hash",
            runtime: "Perl",
            about: "a 3M-entry hash, every entry read back",
            at_once: 1,
            floor: 0.8,
            needs: &["perl"],
            prepare: |c| {
                Ok(Body::Cmd(CmdSpec {
                    argv: args(
                        need("perl")?,
                        &[script(c, "hash.pl", HASH_PL)?.into_os_string(), c.n(3_000_000).to_string().into()],
                    ),
                    env: vec![("PERL_HASH_SEED", "0".into()), ("PERL_PERTURB_KEYS", "0".into())],
                    stdin: None,
                    outputs: vec![],
                }))
            },
        },
        Program {
            name: "pipeline",
            runtime: "shell",
            about: "sh -c 'seq 3M lines | awk (holds them all, prints them reversed) | sha256sum'",
            at_once: 1,
            floor: 0.0,
            needs: &["sh", "seq", "awk", "sha256sum"],
            prepare: |c| {
                let awk = script(c, "reverse.awk", REVERSE_AWK)?;
                let line = format!(
                    "seq -f 'line %.0f' 1 {} | awk -f {} | sha256sum",
                    c.n(3_000_000),
                    awk.display()
                );
                Ok(Body::Cmd(CmdSpec {
                    argv: args(need("sh")?, &["-c".into(), line.into()]),
                    env: vec![("LC_ALL", "C".into())],
                    stdin: None,
                    outputs: vec![],
                }))
            },
        },
    ]
}

const LIST_PY: &str = include_str!("scripts/list.py");
const DICT_PY: &str = include_str!("scripts/dict.py");
const FORK_PY: &str = include_str!("scripts/fork.py");
const OBJECTS_JS: &str = include_str!("scripts/objects.js");
const HASHMAP_JAVA: &str = include_str!("scripts/HashMapBench.java");
const HASH_PL: &str = include_str!("scripts/hash.pl");
const TABLE_SQL: &str = include_str!("scripts/table.sql");
const REVERSE_AWK: &str = include_str!("scripts/reverse.awk");

fn args(prog: PathBuf, rest: &[OsString]) -> Vec<OsString> {
    std::iter::once(prog.into_os_string()).chain(rest.iter().cloned()).collect()
}

fn script(c: &Ctx, name: &str, text: &str) -> Result<PathBuf, String> {
    let p = c.dir.join(name);
    std::fs::write(&p, text).map_err(|e| format!("{}: {e}", p.display()))?;
    Ok(p)
}

/// Search PATH.
pub fn which(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|d| d.join(name)).find(|p| {
        use std::os::unix::fs::PermissionsExt;
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    })
}

fn need(name: &str) -> Result<PathBuf, String> {
    which(name).ok_or_else(|| format!("{name} not found on PATH"))
}

/// The Python interpreter itself (`sys.executable`), not a pyenv shim script: a wrapper
/// script would put a shell in front of every run.
/// `python3 FILE N` (the script's text written to the work directory), with a fixed hash seed.
fn python_script(c: &Ctx, file: &str, text: &str, n: u64) -> Result<Body, String> {
    Ok(Body::Cmd(CmdSpec {
        argv: args(python()?, &[script(c, file, text)?.into_os_string(), c.n(n).to_string().into()]),
        env: vec![("PYTHONHASHSEED", "0".into())],
        stdin: None,
        outputs: vec![],
    }))
}

fn python() -> Result<PathBuf, String> {
    let o = std::process::Command::new(need("python3")?)
        .args(["-c", "import sys; print(sys.executable)"])
        .output()
        .map_err(|e| format!("python3: {e}"))?;
    let p = PathBuf::from(String::from_utf8_lossy(&o.stdout).trim());
    if o.status.success() && p.is_file() {
        Ok(p)
    } else {
        Err(format!("python3 does not say where its interpreter is: {}", String::from_utf8_lossy(&o.stderr).trim()))
    }
}

const WORDS: [&str; 10] = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet"];

fn create(p: &Path) -> Result<BufWriter<std::fs::File>, String> {
    std::fs::File::create(p).map(|f| BufWriter::with_capacity(1 << 20, f)).map_err(|e| format!("{}: {e}", p.display()))
}

/// About `bytes` of lines `"<16 hex digits> <word> <number>"` for sort.
fn gen_lines(p: &Path, bytes: u64) -> Result<(), String> {
    let mut w = create(p)?;
    let mut r = Rng::new(1);
    let mut n = 0u64;
    while n < bytes {
        let s = format!("{:016x} {} {}\n", r.next_u64(), WORDS[r.below(10) as usize], r.below(1_000_000));
        n += s.len() as u64;
        w.write_all(s.as_bytes()).map_err(|e| e.to_string())?;
    }
    w.flush().map_err(|e| e.to_string())
}

/// About `bytes` of text: sentences of words from a 2000-word vocabulary with a skewed
/// frequency (compresses about 4x with xz -9).
pub fn gen_text(p: &Path, bytes: u64) -> Result<(), String> {
    let mut r = Rng::new(2);
    let vocab: Vec<String> = (0..2000)
        .map(|_| {
            let len = 2 + r.below(9);
            (0..len).map(|_| (b'a' + r.below(26) as u8) as char).collect()
        })
        .collect();
    let mut w = create(p)?;
    let mut n = 0u64;
    while n < bytes {
        let mut s = String::new();
        for i in 0..12 {
            // Skewed: the product of two uniforms favours small indices.
            let k = (r.below(2000) * r.below(2000) / 2000) as usize;
            if i > 0 {
                s.push(' ');
            }
            s += &vocab[k];
        }
        s += ".\n";
        n += s.len() as u64;
        w.write_all(s.as_bytes()).map_err(|e| e.to_string())?;
    }
    w.flush().map_err(|e| e.to_string())
}

/// A C file with a `table` of `entries` constants (the front end's memory grows with it) and
/// `funcs` functions of 100 statements that read it.
fn gen_c(p: &Path, entries: u64, funcs: u64) -> Result<(), String> {
    let mut w = create(p)?;
    let mut s = String::from("const unsigned int table[] = {\n");
    for i in 0..entries {
        s += &format!("{}u,", i.wrapping_mul(2_654_435_761) % (1 << 32));
        if i % 16 == 15 {
            s.push('\n');
        }
        if s.len() > 1 << 16 {
            w.write_all(s.as_bytes()).map_err(|e| e.to_string())?;
            s.clear();
        }
    }
    s += "};\n";
    for f in 0..funcs {
        s += &format!(
            "unsigned long f{f}(unsigned long x, unsigned long y) {{\n  unsigned long a = x ^ {f}, b = y + {};\n",
            f * 7
        );
        for st in 0..100u64 {
            let k = (f * 31 + st * 17) % entries.min(1024);
            let sh = st % 31 + 1;
            s += &format!("  a = (a << {sh}) | (a >> {}); b += a ^ table[{k}];\n", 64 - sh);
            if st % 10 == 0 {
                s += &format!("  if (b & {}) a += b * {}; else b ^= a >> 3;\n", 1u64 << (st % 13), st + 3);
            }
        }
        s += "  return a ^ b;\n}\n";
        w.write_all(s.as_bytes()).map_err(|e| e.to_string())?;
        s.clear();
    }
    w.write_all(s.as_bytes()).and_then(|_| w.flush()).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_sizes_scale() {
        let all = all();
        let mut names: Vec<&str> = all.iter().map(|p| p.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), all.len());
        let d = Path::new("/");
        assert_eq!(Ctx { dir: d, scale: 0.5 }.n(1000), 500);
        assert_eq!(Ctx { dir: d, scale: 1e-9 }.n(1000), 1);
    }

    #[test]
    fn generated_inputs_are_deterministic() {
        let d = std::env::temp_dir().join(format!("uswap-suite-gen-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        let (a, b) = (d.join("a"), d.join("b"));
        gen_lines(&a, 10_000).unwrap();
        gen_lines(&b, 10_000).unwrap();
        assert_eq!(std::fs::read(&a).unwrap(), std::fs::read(&b).unwrap());
        gen_text(&a, 10_000).unwrap();
        gen_text(&b, 10_000).unwrap();
        assert_eq!(std::fs::read(&a).unwrap(), std::fs::read(&b).unwrap());
        gen_c(&d.join("t.c"), 100, 2).unwrap();
        let c = std::fs::read_to_string(d.join("t.c")).unwrap();
        assert!(c.starts_with("const unsigned int table[] = {") && c.contains("unsigned long f1("), "{c}");
        std::fs::remove_dir_all(&d).unwrap();
    }
}
