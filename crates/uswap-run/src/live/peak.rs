//! [`PeakSampler`]: a thread that samples a reading on a period and keeps the largest
//! ([`Peak`]), as `uswap run` does for the tree's memory and the benchmarks for their servers.
//!
//! Locking: none. The sampling thread owns its [`Peak`] and hands it back when it is joined;
//! [`PeakSampler::finish`] stops it through a channel.

/// The largest reading a [`PeakSampler`] saw.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Peak {
    /// The largest reading's value.
    pub value: u64,
    /// What came with it (e.g. the processes it was summed over).
    pub with: u64,
    /// Readings taken.
    pub samples: u64,
}

/// A thread that takes a reading (a value and what came with it) right away and then every
/// `every`, until [`PeakSampler::finish`], keeping the largest. The reading is given the
/// largest value so far and may answer `None` when a cheap bound shows it cannot beat it
/// (e.g. the summed `RssAnon` before walking page tables for `Pss_Anon`, see
/// [`crate::procsum::status_sum`]): sampling a tree that sits at its limit then costs a few
/// counters, not a page-table walk every period, which takes CPU from the program.
pub struct PeakSampler {
    stop: std::sync::mpsc::Sender<()>,
    thread: std::thread::JoinHandle<Peak>,
}

impl PeakSampler {
    /// Start sampling with `read`.
    pub fn start(
        every: std::time::Duration,
        mut read: impl FnMut(u64) -> Option<(u64, u64)> + Send + 'static,
    ) -> PeakSampler {
        let (stop, rx) = std::sync::mpsc::channel::<()>();
        let thread = std::thread::spawn(move || {
            let mut peak = Peak::default();
            loop {
                if let Some((value, with)) = read(peak.value) {
                    if value > peak.value {
                        (peak.value, peak.with) = (value, with);
                    }
                }
                peak.samples += 1;
                if !matches!(rx.recv_timeout(every), Err(std::sync::mpsc::RecvTimeoutError::Timeout)) {
                    return peak;
                }
            }
        });
        PeakSampler { stop, thread }
    }

    /// Stop, and the largest reading.
    pub fn finish(self) -> Peak {
        let _ = self.stop.send(());
        self.thread.join().unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The reading sees the largest value so far, and a reading that declines (`None`) leaves
    /// the peak as it was.
    #[test]
    fn peak_sampler_keeps_the_largest_reading_and_skips_declined_ones() {
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let s2 = seen.clone();
        let mut values = [5u64, 3, 9, 2, 9, 1].into_iter();
        let sampler = PeakSampler::start(std::time::Duration::from_millis(1), move |peak| {
            s2.lock().unwrap().push(peak);
            let v = values.next()?;
            // Decline what cannot beat the peak, as the callers' cheap bound does.
            (v > peak).then_some((v, v * 10))
        });
        while seen.lock().unwrap().len() < 8 {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        let peak = sampler.finish();
        assert_eq!((peak.value, peak.with), (9, 90));
        assert!(peak.samples >= 8);
        assert_eq!(seen.lock().unwrap()[..7], [0, 5, 5, 9, 9, 9, 9]);
    }
}
