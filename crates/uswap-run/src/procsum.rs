//! Sums of `/proc` fields over a set of processes: the kernel's counters (`status`, cheap) and
//! the proportional sizes (`smaps_rollup`, a page-table walk), and [`PssWatch`], which walks
//! only when the counters allow a new peak.
//!
//! Locking: none (each reader works on its own state).

/// The sum of one `smaps_rollup` field (`Pss:`, `Pss_Anon:`, in bytes) over processes `pids`
/// (those gone meanwhile count 0). Each read walks the process's page tables.
pub(crate) fn smaps_sum<P: std::fmt::Display>(pids: impl IntoIterator<Item = P>, key: &str) -> u64 {
    proc_sum(pids, "smaps_rollup", key)
}

/// The sum of one `/proc/PID/status` field (`VmRSS:`, `RssAnon:`, in bytes) over processes
/// `pids`: the kernel's counters, read without walking page tables. `RssAnon` bounds
/// `Pss_Anon` from above, and `VmRSS` bounds `Pss` (a proportional share is at most the page).
pub(crate) fn status_sum<P: std::fmt::Display>(pids: impl IntoIterator<Item = P>, key: &str) -> u64 {
    proc_sum(pids, "status", key)
}

/// Whether a sum of [`status_sum`] counters over `procs` processes may hide a proportional
/// size above `peak`. The counters are per-CPU batched in the kernel and may lag the page
/// tables by 32 pages per CPU; 512 KiB per process covers that on the machines we run on.
fn may_exceed(counters: u64, procs: usize, peak: u64) -> bool {
    counters + procs as u64 * COUNTER_LAG > peak
}

/// How far a process's `/proc/PID/status` counters may lag its page tables (see [`may_exceed`]).
const COUNTER_LAG: u64 = 512 << 10;

/// The sum of `pss_key` (`Pss:` or `Pss_Anon:`) over `pids` if it may be above `peak`: the
/// page tables are walked only when the counters that bound it (`VmRSS:`, `RssAnon:`) allow
/// a new peak.
pub fn pss_if_above<P: std::fmt::Display>(pids: &[P], pss_key: &str, peak: u64) -> Option<u64> {
    PssWatch::default().read(pids, pss_key, peak)
}

/// [`pss_if_above`] that also skips the walk when it cannot find a new peak: the processes
/// are the same as at the last walk, their counters (`RssAnon:` or `VmRSS:`) sum to no more
/// than then, and that walk found no page shared between them (the proportional sum equal to
/// the counters' within their lag). Pages come to be shared only through a `fork`, which
/// brings a new process, so the sum is still the counters', at most the last reading. So a
/// program at rest under its limit does not have its page tables walked at every sample.
#[derive(Default)]
pub(crate) struct PssWatch {
    /// (processes, counters' sum) at the last walk that found nothing shared.
    unshared: Option<(Vec<String>, u64)>,
}

impl PssWatch {
    /// As [`pss_if_above`].
    pub fn read<P: std::fmt::Display>(&mut self, pids: &[P], pss_key: &str, peak: u64) -> Option<u64> {
        let bound = if pss_key == "Pss_Anon:" { "RssAnon:" } else { "VmRSS:" };
        let counters = status_sum(pids, bound);
        if !may_exceed(counters, pids.len(), peak) {
            return None;
        }
        let names: Vec<String> = pids.iter().map(|p| p.to_string()).collect();
        if self.unshared.as_ref().is_some_and(|(n, c)| *n == names && counters <= *c) {
            return None;
        }
        let pss = smaps_sum(pids, pss_key);
        let unshared = pss + pids.len() as u64 * COUNTER_LAG >= counters;
        self.unshared = unshared.then_some((names, counters));
        Some(pss)
    }
}

/// The number of a `Key:  N kB` line of a procfs file (`/proc/meminfo`, `smaps_rollup`,
/// `status`), in kB.
pub fn kb_field(text: &str, key: &str) -> Option<u64> {
    text.lines().find(|l| l.starts_with(key)).and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
}

fn proc_sum<P: std::fmt::Display>(pids: impl IntoIterator<Item = P>, file: &str, key: &str) -> u64 {
    pids.into_iter()
        .filter_map(|p| std::fs::read_to_string(format!("/proc/{p}/{file}")).ok())
        .filter_map(|st| kb_field(&st, key))
        .sum::<u64>()
        * 1024
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fork child at rest: it runs `prepare` (which must be async-signal-safe: this test
    /// binary has other threads), reports through a pipe that it did, and pauses until the
    /// guard's drop kills and reaps it.
    struct PausedChild(libc::pid_t);

    impl PausedChild {
        fn fork(prepare: impl FnOnce()) -> PausedChild {
            let mut ready = [0i32; 2];
            // SAFETY: pipe(2) into a two-element array.
            assert_eq!(unsafe { libc::pipe(ready.as_mut_ptr()) }, 0);
            // SAFETY: fork; the child runs only `prepare` (async-signal-safe by the caller),
            // write(2) and pause(2) until killed.
            let pid = unsafe { libc::fork() };
            assert!(pid >= 0);
            if pid == 0 {
                prepare();
                // SAFETY: write(2) of one byte from a local; pause(2).
                unsafe {
                    libc::write(ready[1], [1u8].as_ptr().cast(), 1);
                    loop {
                        libc::pause();
                    }
                }
            }
            let child = PausedChild(pid);
            let mut byte = 0u8;
            // SAFETY: read(2) of one byte into a local; close(2) of our pipe ends.
            let got = unsafe {
                let got = libc::read(ready[0], (&raw mut byte).cast(), 1);
                libc::close(ready[0]);
                libc::close(ready[1]);
                got
            };
            assert_eq!(got, 1, "the child never reported itself ready");
            child
        }

        fn pid(&self) -> u32 {
            self.0 as u32
        }
    }

    impl Drop for PausedChild {
        fn drop(&mut self) {
            // SAFETY: our own child, killed and reaped once.
            unsafe {
                libc::kill(self.0, libc::SIGKILL);
                libc::waitpid(self.0, std::ptr::null_mut(), 0);
            }
        }
    }

    /// A process alone: once walked, a reading with its counters no higher is skipped. With a
    /// fork child sharing its pages: every reading walks (the shared part can move while the
    /// counters stay).
    #[test]
    fn pss_watch_skips_walks_only_while_nothing_is_shared() {
        let me = std::process::id();
        let mut w = PssWatch::default();
        // A process at rest (not this one: other tests of this binary allocate meanwhile): of
        // 50 readings, those after its start-up settled find its counters no higher.
        let mut sleeper = std::process::Command::new("sleep").arg("30").spawn().expect("sleep");
        let walks: Vec<bool> = (0..50).map(|_| w.read(&[sleeper.id()], "Pss_Anon:", 0).is_some()).collect();
        let _ = sleeper.kill();
        let _ = sleeper.wait();
        assert!(walks[0], "the first reading walks");
        assert!(walks.contains(&false), "a reading with nothing grown and nothing shared was never skipped");
        let mut block = vec![1u8; 16 << 20];
        std::hint::black_box(&mut block);
        let child = PausedChild::fork(|| {});
        let pids = [me, child.pid()];
        let walked = (0..5).filter(|_| w.read(&pids, "Pss_Anon:", 0).is_some()).count();
        drop(child);
        assert_eq!(walked, 5, "16 MiB shared with a fork child: every reading walks");
    }

    /// The counters bound the page-table walk from above, which is what lets the samplers
    /// skip the walk. Read on a fork child at rest that owns an 8 MiB block (not on this
    /// process: other tests of this binary allocate and free on other threads meanwhile); a
    /// reading counts only when the counter did not move across the walk (by more than its
    /// lag), and one such reading in ten is required.
    #[test]
    fn status_counters_bound_the_proportional_sizes() {
        let mut block = std::hint::black_box(vec![1u8; 8 << 20]);
        // Breaking the copy-on-write sharing makes the block the child's own 8 MiB.
        let child = PausedChild::fork(|| {
            for page in block.chunks_mut(4096) {
                page[0] = 2;
            }
            std::hint::black_box(&mut block);
        });
        let pid = [child.pid()];
        let steady = |counter: &str, pss_key: &str| {
            (0..10).find_map(|_| {
                let before = status_sum(pid, counter);
                let pss = smaps_sum(pid, pss_key);
                let after = status_sum(pid, counter);
                (before.abs_diff(after) <= COUNTER_LAG).then_some((before.min(after), pss))
            })
        };
        let anon_reading = steady("RssAnon:", "Pss_Anon:");
        let reading = steady("VmRSS:", "Pss:");
        drop(child);
        let (anon, pss_anon) = anon_reading.expect("RssAnon never steady across a walk");
        let (rss, pss) = reading.expect("VmRSS never steady across a walk");
        assert!(pss_anon >= 8 << 20, "Pss_Anon {pss_anon} without the child's 8 MiB block");
        assert!(may_exceed(anon, 1, pss_anon - 1), "RssAnon {anon} against Pss_Anon {pss_anon}");
        assert!(may_exceed(rss, 1, pss - 1), "VmRSS {rss} against Pss {pss}");
    }
}
