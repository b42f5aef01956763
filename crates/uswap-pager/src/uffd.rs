//! The userfaultfd layer: a thin, allocation-free wrapper over the `userfaultfd(2)` ioctls.
//!
//! Structures and most ioctl numbers come from `linux-raw-sys` (the UAPI headers rustix uses);
//! `USERFAULTFD_IOC_NEW` is computed here because the generated tables lack it. Every call is
//! one `ioctl` and is safe to issue from a signal handler (no allocation, no lock). Error handling follows firecracker's protocol: `EEXIST` from `COPY`/`ZEROPAGE`
//! means "already populated" and is reported as success (`Filled::Exists`); `EAGAIN` means
//! a non-cooperative event (unmap, remap, fork) is pending or the copy was partial, and the
//! call is retried from where it stopped.
//!
//! Locking: none. A [`Uffd`] may be used from any number of threads at once; the kernel
//! serializes the range operations itself.

use crate::sys::errno;
use linux_raw_sys::general as g;
use linux_raw_sys::ioctl as io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// `_IOWR(type, nr, size)` as the kernel computes it.
const fn iowr(nr: u32, size: usize) -> u32 {
    (3 << 30) | ((size as u32) << 16) | (g::UFFDIO << 8) | nr
}
/// `USERFAULTFD_IOC_NEW` = `_IO(0xAA, 0x00)`: create a uffd through `/dev/userfaultfd`.
pub(crate) const USERFAULTFD_IOC_NEW: u32 = g::USERFAULTFD_IOC << 8;

const _: () = assert!(iowr(g::_UFFDIO_COPY, std::mem::size_of::<g::uffdio_copy>()) == io::UFFDIO_COPY);
const _: () = assert!(iowr(g::_UFFDIO_API, std::mem::size_of::<g::uffdio_api>()) == io::UFFDIO_API);
const _: () = assert!(std::mem::size_of::<g::uffd_msg>() == 32);

/// Feature bits (`UFFD_FEATURE_*`) used by the pager.
pub mod feature {
    use linux_raw_sys::general as g;
    /// Write-protect faults carry `UFFD_PAGEFAULT_FLAG_WP`.
    pub const PAGEFAULT_FLAG_WP: u64 = g::UFFD_FEATURE_PAGEFAULT_FLAG_WP as u64;
    /// Fork event: the child gets its own uffd.
    pub const EVENT_FORK: u64 = g::UFFD_FEATURE_EVENT_FORK as u64;
    /// mremap event.
    pub const EVENT_REMAP: u64 = g::UFFD_FEATURE_EVENT_REMAP as u64;
    /// madvise(DONTNEED/REMOVE) event (blocks the madvise caller until read).
    pub const EVENT_REMOVE: u64 = g::UFFD_FEATURE_EVENT_REMOVE as u64;
    /// munmap event.
    pub const EVENT_UNMAP: u64 = g::UFFD_FEATURE_EVENT_UNMAP as u64;
    /// Deliver faults as SIGBUS to the faulting thread instead of a message.
    pub const SIGBUS: u64 = g::UFFD_FEATURE_SIGBUS as u64;
    /// Pagefault messages carry the faulting thread id.
    pub const THREAD_ID: u64 = g::UFFD_FEATURE_THREAD_ID as u64;
}

/// Registration modes.
pub mod mode {
    use linux_raw_sys::general as g;
    /// Missing-page faults.
    pub const MISSING: u64 = g::UFFDIO_REGISTER_MODE_MISSING as u64;
    /// Write-protect faults.
    pub const WP: u64 = g::UFFDIO_REGISTER_MODE_WP as u64;
}

thread_local! {
    /// Set on the thread that reads the uffd's messages: an ioctl that finds a non-cooperative
    /// event pending (`EAGAIN`, which only that thread's next read clears) returns the error
    /// instead of retrying, and sets [`AGAIN`].
    pub(crate) static NOWAIT: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    /// An ioctl of this thread gave up on `EAGAIN` (see [`NOWAIT`]).
    pub(crate) static AGAIN: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// `EAGAIN` with no progress: retry (false), or give up on the event-reading thread (true).
fn give_up_on_eagain() -> bool {
    if NOWAIT.with(|c| c.get()) {
        AGAIN.with(|c| c.set(true));
        return true;
    }
    std::thread::yield_now();
    false
}

/// Outcome of a populate ioctl.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Filled {
    /// The whole range was populated by this call.
    Done,
    /// (Part of) the range was already populated (`EEXIST`): someone else resolved it.
    Exists,
}

/// An error from a uffd ioctl: the errno and the operation.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct UffdError {
    /// Which ioctl failed.
    pub op: &'static str,
    /// The errno.
    pub errno: i32,
}

impl std::fmt::Display for UffdError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} failed: {}", self.op, std::io::Error::from_raw_os_error(self.errno))
    }
}

impl std::error::Error for UffdError {}

/// A decoded uffd message.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Event {
    /// A page fault (only in message mode, not with `SIGBUS`).
    Pagefault {
        /// Faulting address (not rounded).
        addr: u64,
        /// The access was a write.
        write: bool,
        /// A write-protect fault.
        wp: bool,
        /// The faulting thread's id (0 without `UFFD_FEATURE_THREAD_ID`).
        tid: u32,
    },
    /// The process forked; `uffd` is the child's userfaultfd, now open in this process.
    Fork {
        /// The child's uffd (caller owns it).
        uffd: RawFd,
    },
    /// `mremap` moved `len` bytes from `from` to `to`.
    Remap {
        /// Old start.
        from: u64,
        /// New start.
        to: u64,
        /// Length.
        len: u64,
    },
    /// `madvise(DONTNEED/REMOVE)` dropped `[start, end)`.
    Remove {
        /// Start.
        start: u64,
        /// End (exclusive).
        end: u64,
    },
    /// `munmap` unmapped `[start, end)`.
    Unmap {
        /// Start.
        start: u64,
        /// End (exclusive).
        end: u64,
    },
    /// An event this version does not know.
    Unknown(u8),
}

/// Decode one raw message.
pub(crate) fn decode(m: &g::uffd_msg) -> Event {
    let ev = m.event as u32;
    // SAFETY: the union member read matches the event tag set by the kernel; every member is
    // plain integers, so any bit pattern is valid.
    unsafe {
        match ev {
            g::UFFD_EVENT_PAGEFAULT => {
                let f = m.arg.pagefault.flags;
                Event::Pagefault {
                    addr: m.arg.pagefault.address,
                    write: f & u64::from(g::UFFD_PAGEFAULT_FLAG_WRITE) != 0,
                    wp: f & u64::from(g::UFFD_PAGEFAULT_FLAG_WP) != 0,
                    tid: m.arg.pagefault.feat.ptid,
                }
            }
            g::UFFD_EVENT_FORK => Event::Fork { uffd: m.arg.fork.ufd as RawFd },
            g::UFFD_EVENT_REMAP => Event::Remap { from: m.arg.remap.from, to: m.arg.remap.to, len: m.arg.remap.len },
            g::UFFD_EVENT_REMOVE => Event::Remove { start: m.arg.remove.start, end: m.arg.remove.end },
            g::UFFD_EVENT_UNMAP => Event::Unmap { start: m.arg.remove.start, end: m.arg.remove.end },
            _ => Event::Unknown(m.event),
        }
    }
}

/// A userfaultfd, its API negotiated.
#[derive(Debug)]
pub struct Uffd {
    fd: OwnedFd,
    /// Opened with `UFFD_USER_MODE_ONLY` (all an unprivileged process may get): faults the
    /// kernel takes on the process's behalf, inside system calls, are not delivered and the
    /// call fails with EFAULT.
    user_mode_only: bool,
}

/// Why userfaultfd could not be opened, with the ways to permit it.
pub const PERMIT_HINT: &str = "userfaultfd is not permitted for this process; permit it by running as root \
     (or with CAP_SYS_PTRACE), or `sysctl vm.unprivileged_userfaultfd=1`, or giving this user \
     read/write access to /dev/userfaultfd";

impl Uffd {
    /// Open a userfaultfd (first through `/dev/userfaultfd`, then the syscall) and negotiate
    /// `features` with `UFFDIO_API`. `optional` features are requested when the kernel offers
    /// them; `EVENT_FORK` is dropped from the optional ones when the process may not have it
    /// (it needs CAP_SYS_PTRACE). Returns a message naming the ways to permit userfaultfd when
    /// it is refused.
    pub fn open(required: u64, optional: u64, nonblocking: bool) -> Result<Uffd, String> {
        let mut flags = libc::O_CLOEXEC;
        if nonblocking {
            flags |= libc::O_NONBLOCK;
        }
        let (fd, user_mode_only) = Self::open_fd(flags)?;
        // Ask which features exist: a first UFFDIO_API with features 0 would lock the API, so
        // probe on a throwaway fd.
        let avail = {
            let (probe, _) = Self::open_fd(libc::O_CLOEXEC)?;
            let mut api = g::uffdio_api { api: u64::from(g::UFFD_API), features: 0, ioctls: 0 };
            // SAFETY: valid fd and a properly sized uffdio_api.
            if unsafe { libc::ioctl(probe.as_raw_fd(), io::UFFDIO_API as _, &mut api) } != 0 {
                return Err(format!("UFFDIO_API: {}", std::io::Error::last_os_error()));
            }
            api.features
        };
        if avail & required != required {
            return Err(format!("this kernel lacks userfaultfd features {:#x} (has {avail:#x})", required & !avail));
        }
        let mut want = required | (optional & avail);
        let mut fd = fd;
        loop {
            let mut api = g::uffdio_api { api: u64::from(g::UFFD_API), features: want, ioctls: 0 };
            // SAFETY: as above.
            if unsafe { libc::ioctl(fd.as_raw_fd(), io::UFFDIO_API as _, &mut api) } == 0 {
                return Ok(Uffd { fd, user_mode_only });
            }
            let e = errno();
            if e == libc::EPERM && want & feature::EVENT_FORK != 0 && required & feature::EVENT_FORK == 0 {
                // The fork event needs CAP_SYS_PTRACE; go on without it (a child process then
                // does not inherit the registration) on a fresh fd.
                want &= !feature::EVENT_FORK;
                fd = Self::open_fd(flags)?.0;
                continue;
            }
            if e == libc::EPERM {
                return Err(format!("{PERMIT_HINT} (UFFDIO_API with features {want:#x} was refused)"));
            }
            return Err(format!("UFFDIO_API(features {want:#x}): {}", std::io::Error::from_raw_os_error(e)));
        }
    }

    /// True if this process may open a userfaultfd that handles faults the kernel takes inside
    /// system calls too (not `UFFD_USER_MODE_ONLY`) and delivers fork events
    /// (`UFFD_FEATURE_EVENT_FORK`, which needs `CAP_SYS_PTRACE`): root does. A process that
    /// dropped root privileges under `uswap run` does not: a pager there would fail a `read(2)`
    /// into swapped-out memory with EFAULT, and at a `fork` its child's ranges would lose their
    /// registration until its pager is rebuilt, while glibc's fork code already touches memory
    /// that may be swapped out (and the rebuild, which also asks for fork events, would fail).
    pub fn fork_events_permitted() -> bool {
        Self::open(feature::EVENT_FORK, 0, false).is_ok_and(|u| !u.user_mode_only())
    }

    /// A new userfaultfd, and whether it handles user-mode faults only.
    fn open_fd(flags: i32) -> Result<(OwnedFd, bool), String> {
        // SAFETY: plain open of a device node with a NUL-terminated path.
        let dev = unsafe { libc::open(c"/dev/userfaultfd".as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
        if dev >= 0 {
            // SAFETY: dev is an fd we just opened.
            let dev = unsafe { OwnedFd::from_raw_fd(dev) };
            // SAFETY: USERFAULTFD_IOC_NEW takes the flags by value and returns a new fd.
            let fd = unsafe { libc::ioctl(dev.as_raw_fd(), USERFAULTFD_IOC_NEW as _, flags) };
            if fd >= 0 {
                // SAFETY: the ioctl returned a new fd we own.
                return Ok((unsafe { OwnedFd::from_raw_fd(fd) }, false));
            }
        }
        // SAFETY: the userfaultfd syscall takes flags and returns a new fd or -1.
        let fd = unsafe { libc::syscall(libc::SYS_userfaultfd, flags) } as i32;
        if fd >= 0 {
            // SAFETY: new fd we own.
            return Ok((unsafe { OwnedFd::from_raw_fd(fd) }, false));
        }
        let e = errno();
        if e == libc::EPERM || e == libc::EACCES {
            // Unprivileged users may still handle user-mode faults only (enough for SIGBUS mode
            // in most cases, but kernel-mode faults in syscalls then fail).
            // SAFETY: as above.
            let fd = unsafe { libc::syscall(libc::SYS_userfaultfd, flags | g::UFFD_USER_MODE_ONLY as i32) } as i32;
            if fd >= 0 {
                // SAFETY: new fd we own.
                return Ok((unsafe { OwnedFd::from_raw_fd(fd) }, true));
            }
            return Err(PERMIT_HINT.to_string());
        }
        if e == libc::ENOSYS {
            return Err("this kernel has no userfaultfd (CONFIG_USERFAULTFD is off)".into());
        }
        Err(format!("userfaultfd: {}", std::io::Error::from_raw_os_error(e)))
    }

    /// The descriptor a `UFFD_EVENT_FORK` delivered (the child's registrations, with our
    /// features), made non-blocking.
    ///
    /// # Safety
    /// - `fd` is that descriptor, owned by the caller and closed by no one else.
    pub(crate) unsafe fn from_fork_event(fd: RawFd) -> Uffd {
        // SAFETY: fcntl on the caller's descriptor (raw: nothing interposed).
        unsafe {
            let fl = libc::syscall(libc::SYS_fcntl, fd, libc::F_GETFL);
            if fl >= 0 {
                libc::syscall(libc::SYS_fcntl, fd, libc::F_SETFL, fl | libc::c_long::from(libc::O_NONBLOCK));
            }
        }
        // SAFETY: the caller owns `fd` (this function's contract).
        Uffd { fd: unsafe { OwnedFd::from_raw_fd(fd) }, user_mode_only: false }
    }

    /// The raw fd.
    pub fn raw(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// True when only faults in user mode are delivered (see the field).
    pub fn user_mode_only(&self) -> bool {
        self.user_mode_only
    }

    /// Register `[start, start+len)` in `mode` (`mode::MISSING | mode::WP`).
    pub fn register(&self, start: usize, len: usize, mode: u64) -> Result<u64, UffdError> {
        let mut r =
            g::uffdio_register { range: g::uffdio_range { start: start as u64, len: len as u64 }, mode, ioctls: 0 };
        // SAFETY: valid fd, properly sized struct.
        if unsafe { libc::ioctl(self.raw(), io::UFFDIO_REGISTER as _, &mut r) } != 0 {
            return Err(UffdError { op: "UFFDIO_REGISTER", errno: errno() });
        }
        Ok(r.ioctls)
    }

    /// Unregister a range.
    pub(crate) fn unregister(&self, start: usize, len: usize) -> Result<(), UffdError> {
        let mut r = g::uffdio_range { start: start as u64, len: len as u64 };
        // SAFETY: valid fd, properly sized struct.
        if unsafe { libc::ioctl(self.raw(), io::UFFDIO_UNREGISTER as _, &mut r) } != 0 {
            return Err(UffdError { op: "UFFDIO_UNREGISTER", errno: errno() });
        }
        Ok(())
    }

    /// `UFFDIO_COPY` `len` bytes from `src` to `dst`. `wp` installs the pages write-protected;
    /// `wake` wakes threads blocked on the range (message mode). Retries on `EAGAIN` from where
    /// the kernel stopped.
    ///
    /// # Safety
    /// - `src` must be readable for `len` bytes.
    /// - `dst..dst+len` must be inside a range registered on this uffd, page aligned.
    pub(crate) unsafe fn copy(
        &self,
        dst: usize,
        src: *const u8,
        len: usize,
        wp: bool,
        wake: bool,
    ) -> Result<Filled, UffdError> {
        let mut done = 0usize;
        let mut mode = 0u64;
        if wp {
            mode |= u64::from(g::UFFDIO_COPY_MODE_WP);
        }
        if !wake {
            mode |= u64::from(g::UFFDIO_COPY_MODE_DONTWAKE);
        }
        loop {
            let mut c = g::uffdio_copy {
                dst: (dst + done) as u64,
                src: src as u64 + done as u64,
                len: (len - done) as u64,
                mode,
                copy: 0,
            };
            // SAFETY: caller guarantees the ranges; struct is properly sized.
            let r = unsafe { libc::ioctl(self.raw(), io::UFFDIO_COPY as _, &mut c) };
            if r == 0 {
                return Ok(Filled::Done);
            }
            let e = errno();
            match e {
                libc::EEXIST if len - done > 4096 => {
                    // Some page in the range exists; the kernel stopped there. Finish page by
                    // page, skipping the pages that exist.
                    let mut any = false;
                    let mut off = done;
                    while off < len {
                        // SAFETY: a sub-range of the caller's ranges.
                        match unsafe { self.copy(dst + off, src.add(off), 4096, wp, wake) }? {
                            Filled::Exists => any = true,
                            Filled::Done => {}
                        }
                        off += 4096;
                    }
                    return Ok(if any { Filled::Exists } else { Filled::Done });
                }
                libc::EEXIST => {
                    // The kernel wakes waiters only when it populated the range: a thread that
                    // faulted on a page that turned out present would sleep forever.
                    if wake {
                        let _ = self.wake(dst + done, 4096);
                    }
                    return Ok(Filled::Exists);
                }
                libc::EAGAIN => {
                    if c.copy > 0 {
                        done += c.copy as usize;
                        if done >= len {
                            return Ok(Filled::Done);
                        }
                    } else if give_up_on_eagain() {
                        return Err(UffdError { op: "UFFDIO_COPY", errno: e });
                    }
                }
                _ => return Err(UffdError { op: "UFFDIO_COPY", errno: e }),
            }
        }
    }

    /// `UFFDIO_ZEROPAGE` over `[start, start+len)` (maps the shared zero page; a later write
    /// is an ordinary copy-on-write fault).
    pub(crate) fn zeropage(&self, start: usize, len: usize, wake: bool) -> Result<Filled, UffdError> {
        let mut done = 0usize;
        loop {
            let mut z = g::uffdio_zeropage {
                range: g::uffdio_range { start: (start + done) as u64, len: (len - done) as u64 },
                mode: if wake { 0 } else { u64::from(g::UFFDIO_ZEROPAGE_MODE_DONTWAKE) },
                zeropage: 0,
            };
            // SAFETY: valid fd, properly sized struct; the kernel checks the range.
            let r = unsafe { libc::ioctl(self.raw(), io::UFFDIO_ZEROPAGE as _, &mut z) };
            if r == 0 {
                return Ok(Filled::Done);
            }
            let e = errno();
            match e {
                libc::EEXIST if len - done > 4096 => {
                    let mut any = false;
                    let mut off = done;
                    while off < len {
                        if self.zeropage(start + off, 4096, wake)? == Filled::Exists {
                            any = true;
                        }
                        off += 4096;
                    }
                    return Ok(if any { Filled::Exists } else { Filled::Done });
                }
                libc::EEXIST => {
                    // As in copy: wake whoever waits on the present page.
                    if wake {
                        let _ = self.wake(start + done, 4096);
                    }
                    return Ok(Filled::Exists);
                }
                libc::EAGAIN => {
                    if z.zeropage > 0 {
                        done += z.zeropage as usize;
                        if done >= len {
                            return Ok(Filled::Done);
                        }
                    } else if give_up_on_eagain() {
                        return Err(UffdError { op: "UFFDIO_ZEROPAGE", errno: e });
                    }
                }
                _ => return Err(UffdError { op: "UFFDIO_ZEROPAGE", errno: e }),
            }
        }
    }

    /// Set (`protect = true`) or clear write protection on a populated range. Clearing wakes
    /// waiters unless `wake` is false.
    pub(crate) fn writeprotect(&self, start: usize, len: usize, protect: bool, wake: bool) -> Result<(), UffdError> {
        let mut mode = 0u64;
        if protect {
            mode |= 1; // UFFDIO_WRITEPROTECT_MODE_WP
        }
        if !wake && !protect {
            mode |= 2; // UFFDIO_WRITEPROTECT_MODE_DONTWAKE (only valid when un-protecting)
        }
        loop {
            let mut w =
                g::uffdio_writeprotect { range: g::uffdio_range { start: start as u64, len: len as u64 }, mode };
            // SAFETY: valid fd, properly sized struct.
            let r = unsafe { libc::ioctl(self.raw(), io::UFFDIO_WRITEPROTECT as _, &mut w) };
            if r == 0 {
                return Ok(());
            }
            let e = errno();
            if e != libc::EAGAIN || give_up_on_eagain() {
                return Err(UffdError { op: "UFFDIO_WRITEPROTECT", errno: e });
            }
        }
    }

    /// True when no non-cooperative event (unmap, remap, remove, fork) is pending on the uffd
    /// and the page at `addr` is still in a registered range: one write-protect of a page that
    /// is write-protected already (the kernel refuses range operations with `EAGAIN` while an
    /// event is pending, and fails on a range that is gone).
    pub(crate) fn probe_quiet(&self, addr: usize) -> bool {
        let mut w = g::uffdio_writeprotect { range: g::uffdio_range { start: addr as u64, len: 4096 }, mode: 1 };
        // SAFETY: valid fd, properly sized struct.
        unsafe { libc::ioctl(self.raw(), io::UFFDIO_WRITEPROTECT as _, &mut w) == 0 }
    }

    /// Wake threads blocked on `[start, start+len)` (message mode).
    pub(crate) fn wake(&self, start: usize, len: usize) -> Result<(), UffdError> {
        let mut r = g::uffdio_range { start: start as u64, len: len as u64 };
        // SAFETY: valid fd, properly sized struct.
        if unsafe { libc::ioctl(self.raw(), io::UFFDIO_WAKE as _, &mut r) } != 0 {
            return Err(UffdError { op: "UFFDIO_WAKE", errno: errno() });
        }
        Ok(())
    }

    /// Read pending messages into `buf` (blocking unless the fd is non-blocking). Returns how
    /// many were read; 0 when none are pending on a non-blocking fd.
    pub(crate) fn read_msgs(&self, buf: &mut [g::uffd_msg]) -> Result<usize, UffdError> {
        loop {
            // SAFETY: buf is writable for its whole length in bytes.
            let n = unsafe { libc::read(self.raw(), buf.as_mut_ptr().cast(), std::mem::size_of_val(buf)) };
            if n >= 0 {
                return Ok(n as usize / std::mem::size_of::<g::uffd_msg>());
            }
            match errno() {
                libc::EINTR => continue,
                libc::EAGAIN => return Ok(0),
                e => return Err(UffdError { op: "read(uffd)", errno: e }),
            }
        }
    }
}

/// A zeroed message buffer element.
pub(crate) fn empty_msg() -> g::uffd_msg {
    // SAFETY: uffd_msg is plain old data; all-zero is a valid value.
    unsafe { std::mem::zeroed() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ioctl_numbers_match_the_kernel_headers() {
        assert_eq!(iowr(g::_UFFDIO_ZEROPAGE, std::mem::size_of::<g::uffdio_zeropage>()), io::UFFDIO_ZEROPAGE);
        assert_eq!(
            iowr(g::_UFFDIO_WRITEPROTECT, std::mem::size_of::<g::uffdio_writeprotect>()),
            io::UFFDIO_WRITEPROTECT
        );
        assert_eq!(iowr(g::_UFFDIO_REGISTER, std::mem::size_of::<g::uffdio_register>()), io::UFFDIO_REGISTER);
        assert_eq!(USERFAULTFD_IOC_NEW, 0xaa00);
    }

    #[test]
    fn decodes_events() {
        let mut m = empty_msg();
        m.event = g::UFFD_EVENT_UNMAP as u8;
        m.arg.remove = g::uffd_msg__bindgen_ty_1__bindgen_ty_4 { start: 0x1000, end: 0x3000 };
        assert_eq!(decode(&m), Event::Unmap { start: 0x1000, end: 0x3000 });
        m.event = g::UFFD_EVENT_REMOVE as u8;
        assert_eq!(decode(&m), Event::Remove { start: 0x1000, end: 0x3000 });
        m.event = g::UFFD_EVENT_REMAP as u8;
        m.arg.remap = g::uffd_msg__bindgen_ty_1__bindgen_ty_3 { from: 1, to: 2, len: 3 };
        assert_eq!(decode(&m), Event::Remap { from: 1, to: 2, len: 3 });
        m.event = g::UFFD_EVENT_FORK as u8;
        m.arg.fork = g::uffd_msg__bindgen_ty_1__bindgen_ty_2 { ufd: 7 };
        assert_eq!(decode(&m), Event::Fork { uffd: 7 });
        m.event = 0x77;
        assert_eq!(decode(&m), Event::Unknown(0x77));
    }
}
