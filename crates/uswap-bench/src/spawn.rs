//! `uswap bench spawn`: what starting processes costs under `uswap run`, against the same
//! command natively. Three workloads of many short-lived processes: a shell loop of
//! `/bin/true`, a `make -j2` of small generated C files (gcc, cc1, as and ld per file), and an
//! autoconf `configure` of a generated project (skipped with a note when `autoconf` is not
//! installed). Runs alternate (native, uswap, native, …) and the report gives each side's
//! median and their ratio; each run's output is checked against the first native run's.
//!
//! Nothing is swapped: the limit (512 MiB unless `--limit` says otherwise) is far above what
//! the processes use. The figure is the cost of the library and of each process's pager, which
//! a build or a script pays per command.
//!
//! Locking: none (single-threaded).

use serde_json::json;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;
use uswap_run::exit::{CliError, CliResult};

/// Options of `uswap bench spawn`.
#[derive(clap::Args, Debug)]
#[command(after_help = "Examples:\n  uswap bench spawn\n  uswap bench spawn --runs 9 --only true-loop --json")]
pub struct Args {
    /// Print one JSON object instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Runs per side and workload (alternated).
    #[arg(long, default_value_t = 5)]
    pub runs: usize,
    /// The `--limit` of `uswap run`.
    #[arg(long, default_value = "512M")]
    pub limit: String,
    /// Processes of the shell loop.
    #[arg(long, default_value_t = 300)]
    pub processes: usize,
    /// C files of the make workload.
    #[arg(long, default_value_t = 40)]
    pub files: usize,
    /// Only these workloads (comma-separated: true-loop, make-small, configure).
    #[arg(long)]
    pub only: Option<String>,
}

/// One workload: a shell command run in `dir`, whose stdout must match the native run's.
struct Workload {
    name: &'static str,
    script: String,
    dir: PathBuf,
}

fn sh(cmd: &str, dir: &Path) -> Result<(), CliError> {
    let st = Command::new("sh")
        .arg("-c")
        .arg(cmd)
        .current_dir(dir)
        .status()
        .map_err(|e| CliError::fail(format!("bench spawn: sh -c {cmd}: {e}")))?;
    if st.success() {
        Ok(())
    } else {
        Err(CliError::fail(format!("bench spawn: `{cmd}` failed: {st}")))
    }
}

fn found(tool: &str) -> bool {
    Command::new("sh")
        .arg("-c")
        .arg(format!("command -v {tool}"))
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn write(path: &Path, text: &str) -> Result<(), CliError> {
    std::fs::write(path, text).map_err(|e| CliError::fail(format!("bench spawn: write {}: {e}", path.display())))
}

fn make_small(root: &Path, files: usize) -> Result<Workload, CliError> {
    let dir = root.join("make-small");
    std::fs::create_dir_all(&dir).map_err(|e| CliError::fail(format!("bench spawn: {e}")))?;
    let mut objs = Vec::new();
    let mut decls = String::new();
    let mut calls = String::new();
    for i in 0..files {
        write(
            &dir.join(format!("f{i}.c")),
            &format!(
                "unsigned long f{i}(unsigned long x) {{ unsigned long s = {i}; for (int k = 0; k < 64; k++) s = s * 31 + (x ^ k); return s; }}\n"
            ),
        )?;
        objs.push(format!("f{i}.o"));
        decls += &format!("unsigned long f{i}(unsigned long);\n");
        calls += &format!("    s += f{i}(s);\n");
    }
    write(
        &dir.join("main.c"),
        &format!(
            "#include <stdio.h>\n{decls}int main(void) {{\n    unsigned long s = 1;\n{calls}    printf(\"%lu\\n\", s);\n    return 0;\n}}\n"
        ),
    )?;
    let objs = objs.join(" ");
    write(
        &dir.join("Makefile"),
        &format!("prog: main.o {objs}\n\tgcc -o $@ $^\n%.o: %.c\n\tgcc -O1 -c $< -o $@\nclean:\n\trm -f prog *.o\n"),
    )?;
    Ok(Workload { name: "make-small", script: "make -s clean && make -s -j2 && ./prog".into(), dir })
}

/// A generated autoconf project: a C compiler check, headers, functions and type sizes, then
/// `config.h` and a Makefile, as a small real project's `configure` does.
fn configure(root: &Path) -> Result<Option<Workload>, CliError> {
    if !found("autoconf") {
        return Ok(None);
    }
    let dir = root.join("configure");
    std::fs::create_dir_all(&dir).map_err(|e| CliError::fail(format!("bench spawn: {e}")))?;
    let headers = "stdio.h stdlib.h string.h unistd.h fcntl.h sys/types.h sys/stat.h sys/mman.h sys/time.h \
                   sys/socket.h netinet/in.h arpa/inet.h pthread.h signal.h errno.h limits.h stdint.h inttypes.h \
                   locale.h wchar.h dlfcn.h poll.h termios.h zlib.h";
    let funcs = "mmap munmap madvise mremap posix_fadvise fallocate pread pwrite strndup strnlen getline \
                 clock_gettime nanosleep sigaction pipe2 dup3 accept4 epoll_create1 eventfd memfd_create \
                 getrandom reallocarray qsort_r";
    let ac = format!(
        "AC_INIT([spawnbench], [1.0])\nAC_CONFIG_HEADERS([config.h])\nAC_PROG_CC\nAC_CHECK_HEADERS([{headers}])\n\
         AC_CHECK_FUNCS([{funcs}])\nAC_CHECK_SIZEOF([long])\nAC_CHECK_SIZEOF([void *])\nAC_CHECK_SIZEOF([off_t])\n\
         AC_C_BIGENDIAN\nAC_CHECK_LIB([m], [cos])\nAC_CHECK_LIB([z], [deflate])\nAC_CONFIG_FILES([Makefile])\nAC_OUTPUT\n"
    );
    write(&dir.join("configure.ac"), &ac)?;
    write(&dir.join("Makefile.in"), "CC = @CC@\nLIBS = @LIBS@\nall:\n\t@echo $(CC) $(LIBS)\n")?;
    sh("autoconf && autoheader", &dir)?;
    Ok(Some(Workload { name: "configure", script: "./configure -q > /dev/null && cat config.h".into(), dir }))
}

fn workloads(a: &Args, root: &Path) -> Result<(Vec<Workload>, Vec<String>), CliError> {
    let want = |n: &str| a.only.as_deref().is_none_or(|o| o.split(',').any(|w| w.trim() == n));
    let mut w = Vec::new();
    let mut skipped = Vec::new();
    if want("true-loop") {
        let dir = root.join("true-loop");
        std::fs::create_dir_all(&dir).map_err(|e| CliError::fail(format!("bench spawn: {e}")))?;
        w.push(Workload {
            name: "true-loop",
            script: format!("i=0; while [ $i -lt {} ]; do /bin/true; i=$((i+1)); done; echo $i", a.processes),
            dir,
        });
    }
    if want("make-small") {
        if found("make") && found("gcc") {
            w.push(make_small(root, a.files)?);
        } else {
            skipped.push("make-small: make or gcc not found".into());
        }
    }
    if want("configure") {
        match configure(root)? {
            Some(c) => w.push(c),
            None => skipped.push("configure: autoconf not found (apt-get install autoconf)".into()),
        }
    }
    Ok((w, skipped))
}

/// One run: seconds and its stdout.
fn once(w: &Workload, uswap: Option<(&Path, &str)>) -> Result<(f64, Vec<u8>), CliError> {
    let mut cmd = match uswap {
        Some((exe, limit)) => {
            let mut c = Command::new(exe);
            c.args(["run", "--quiet", "--limit", limit, "--", "sh", "-c", &w.script]);
            c
        }
        None => {
            let mut c = Command::new("sh");
            c.arg("-c").arg(&w.script);
            c
        }
    };
    cmd.current_dir(&w.dir).stdin(Stdio::null()).stderr(Stdio::piped());
    let t = Instant::now();
    let out = cmd.output().map_err(|e| CliError::fail(format!("bench spawn: {}: {e}", w.name)))?;
    let secs = t.elapsed().as_secs_f64();
    let side = if uswap.is_some() { "under uswap" } else { "natively" };
    if !out.status.success() {
        return Err(CliError::fail(format!(
            "bench spawn: {} failed {side} ({}): {}",
            w.name,
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok((secs, out.stdout))
}

/// The benchmark's own directory in /var/tmp, removed when it ends.
struct WorkDir(PathBuf);

impl WorkDir {
    fn new() -> Result<WorkDir, CliError> {
        let p = PathBuf::from(format!("/var/tmp/uswap-bench-spawn-{}", std::process::id()));
        std::fs::create_dir(&p).map_err(|e| CliError::fail(format!("bench spawn: {}: {e}", p.display())))?;
        Ok(WorkDir(p))
    }
}

impl Drop for WorkDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    s[s.len() / 2]
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// Run the benchmark.
pub fn run(a: &Args) -> CliResult {
    if a.runs == 0 {
        return Err(CliError::usage("bench spawn: --runs must be at least 1"));
    }
    uswap::config::parse_size("--limit", &a.limit).map_err(|e| CliError::usage(e.to_string()))?;
    let exe = std::env::current_exe().map_err(|e| CliError::fail(format!("bench spawn: {e}")))?;
    let root = WorkDir::new()?;
    let (ws, skipped) = workloads(a, &root.0)?;
    if ws.is_empty() {
        return Err(CliError::usage(format!("bench spawn: no workload to run ({})", skipped.join("; "))));
    }
    let mut rows = Vec::new();
    for w in &ws {
        let (mut native, mut under) = (Vec::new(), Vec::new());
        let (_, want) = once(w, None)?;
        for _ in 0..a.runs {
            let (t, out) = once(w, None)?;
            if out != want {
                return Err(CliError::fail(format!("bench spawn: {}: native output changed between runs", w.name)));
            }
            native.push(t);
            let (t, out) = once(w, Some((&exe, &a.limit)))?;
            if out != want {
                return Err(CliError::fail(format!("bench spawn: {}: the output under uswap differs", w.name)));
            }
            under.push(t);
        }
        let (n, u) = (median(&native), median(&under));
        rows.push(json!({
            "name": w.name,
            "command": w.script,
            "native_s": round3(n),
            "uswap_s": round3(u),
            "ratio": (u / n * 100.0).round() / 100.0,
            "native_runs_s": native.iter().map(|&x| round3(x)).collect::<Vec<_>>(),
            "uswap_runs_s": under.iter().map(|&x| round3(x)).collect::<Vec<_>>(),
            "output_checked": true,
        }));
    }
    let doc = json!({
        "benchmark": "spawn",
        "limit": a.limit,
        "runs": a.runs,
        "workloads": rows,
        "skipped": skipped,
    });
    if a.json {
        println!("{doc}");
        return Ok(());
    }
    println!("{:<12} {:>10} {:>10} {:>7}", "workload", "native s", "uswap s", "ratio");
    for r in doc["workloads"].as_array().into_iter().flatten() {
        println!(
            "{:<12} {:>10.3} {:>10.3} {:>7.2}",
            r["name"].as_str().unwrap_or(""),
            r["native_s"].as_f64().unwrap_or(0.0),
            r["uswap_s"].as_f64().unwrap_or(0.0),
            r["ratio"].as_f64().unwrap_or(0.0)
        );
    }
    for s in &skipped {
        println!("skipped: {s}");
    }
    println!("(medians of {} alternated runs per side; output checked against the native run's)", a.runs);
    Ok(())
}
