//! A futex mutex that allocates nothing, usable before `main`, from interposed `malloc`, and
//! across `fork` (the child resets it with [`RawLock::force_unlock`]).
//!
//! Locking: this *is* the lock. States: 0 free, 1 held, 2 held with waiters. Waiters sleep in
//! `FUTEX_WAIT` (no spinning burns the other vCPU while a holder is inside a page fault).

use std::sync::atomic::{AtomicU32, Ordering};

/// A non-recursive futex lock.
pub struct RawLock {
    state: AtomicU32,
}

impl Default for RawLock {
    fn default() -> Self {
        Self::new()
    }
}

impl RawLock {
    /// A free lock.
    pub const fn new() -> RawLock {
        RawLock { state: AtomicU32::new(0) }
    }

    /// Take the lock, sleeping while another thread holds it.
    pub fn lock(&self) {
        if self.state.compare_exchange(0, 1, Ordering::Acquire, Ordering::Relaxed).is_ok() {
            return;
        }
        for _ in 0..64 {
            std::hint::spin_loop();
            if self.state.compare_exchange(0, 1, Ordering::Acquire, Ordering::Relaxed).is_ok() {
                return;
            }
        }
        while self.state.swap(2, Ordering::Acquire) != 0 {
            // SAFETY: FUTEX_WAIT on a valid aligned u32 that lives as long as the lock.
            unsafe {
                libc::syscall(
                    libc::SYS_futex,
                    self.state.as_ptr(),
                    libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
                    2u32,
                    std::ptr::null::<libc::timespec>(),
                );
            }
        }
    }

    /// Take the lock unless `bail` becomes true while waiting (then return false without it).
    /// Waiters re-check `bail` every millisecond.
    pub fn lock_or_bail(&self, bail: impl Fn() -> bool) -> bool {
        loop {
            if self.state.compare_exchange(0, 1, Ordering::Acquire, Ordering::Relaxed).is_ok() {
                return true;
            }
            if bail() {
                return false;
            }
            if self.state.swap(2, Ordering::Acquire) == 0 {
                return true;
            }
            let ts = libc::timespec { tv_sec: 0, tv_nsec: 1_000_000 };
            // SAFETY: FUTEX_WAIT with a relative timeout on a valid aligned u32.
            unsafe {
                libc::syscall(
                    libc::SYS_futex,
                    self.state.as_ptr(),
                    libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
                    2u32,
                    &ts,
                );
            }
        }
    }

    /// Release the lock (the caller holds it).
    pub fn unlock(&self) {
        if self.state.swap(0, Ordering::Release) == 2 {
            self.wake(1);
        }
    }

    /// Make the lock free: in a fork child, where the holder (the forking thread) took it in
    /// the prepare handler. Threads the child's handler started meanwhile may already wait for
    /// it, and are woken: the child's reconciler, started while the forking thread still held
    /// the lock, slept forever in its first pass when this only cleared the word (its
    /// `FUTEX_WAIT` saw 2, and a later holder's unlock found 1 and woke nobody).
    pub fn force_unlock(&self) {
        if self.state.swap(0, Ordering::Release) == 2 {
            self.wake(i32::MAX);
        }
    }

    /// Wake up to `n` threads asleep on the lock.
    fn wake(&self, n: i32) {
        // SAFETY: FUTEX_WAKE on a valid aligned u32.
        unsafe {
            libc::syscall(libc::SYS_futex, self.state.as_ptr(), libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG, n);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// A thread that went to sleep on the lock before a fork child's handler forced it free
    /// gets it (it slept forever when `force_unlock` only cleared the word).
    #[test]
    fn force_unlock_wakes_a_sleeping_waiter() {
        let l = Arc::new(RawLock::new());
        l.lock();
        let (tx, rx) = std::sync::mpsc::channel();
        let l2 = l.clone();
        std::thread::spawn(move || {
            l2.lock();
            l2.unlock();
            let _ = tx.send(());
        });
        // Wait until the waiter has announced itself (state 2), then give it time to sleep.
        let t0 = std::time::Instant::now();
        while l.state.load(Ordering::Acquire) != 2 {
            assert!(t0.elapsed().as_secs() < 10, "the waiter never waited");
            std::thread::yield_now();
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
        l.force_unlock();
        assert!(
            rx.recv_timeout(std::time::Duration::from_secs(10)).is_ok(),
            "the waiter still sleeps 10 s after force_unlock"
        );
    }

    #[test]
    fn lock_excludes() {
        struct Shared {
            l: RawLock,
            v: std::cell::UnsafeCell<u64>,
        }
        // SAFETY: v is only touched under l.
        unsafe impl Sync for Shared {}
        let s = Arc::new(Shared { l: RawLock::new(), v: std::cell::UnsafeCell::new(0) });
        let th: Vec<_> = (0..4)
            .map(|_| {
                let s = s.clone();
                std::thread::spawn(move || {
                    for _ in 0..20_000 {
                        s.l.lock();
                        // SAFETY: under the lock.
                        unsafe { *s.v.get() += 1 };
                        s.l.unlock();
                    }
                })
            })
            .collect();
        for t in th {
            t.join().unwrap();
        }
        // SAFETY: all threads joined.
        assert_eq!(unsafe { *s.v.get() }, 80_000);
    }
}
