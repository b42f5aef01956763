//! The SIGSYS handler of SIGBUS fault mode: a system call trapped by [`super::seccomp`]'s
//! filter is re-issued here once the user memory it names is resident.
//!
//! The handler reads the call from the signal's context (number from `si_syscall`, arguments
//! from the registers), touches every page of a managed region that the call will read or
//! write ([`prefault`]: a missing page raises SIGBUS in this thread, served in place by the
//! pager's handler), issues the call from this library's text ([`raw`], which the filter lets
//! through), and puts its result in the context's `rax`; returning resumes the program after
//! its `syscall` instruction. A call that still fails with `EFAULT` while one of its buffers
//! lies in a managed region (an eviction took a page between the touch and the call, or the
//! reconciler adopted the buffer's mapping during the call) is prefaulted and issued again, a
//! bounded number of times.
//!
//! Two calls are not re-issued as they are:
//! - `rt_sigprocmask` that blocks: applied to the mask the program returns to (the context's
//!   `uc_sigmask`, which `sigreturn` restores), without SIGBUS and SIGSYS, whose delivery
//!   while blocked kills the process (the kernel forces a synchronous signal's default
//!   action). glibc blocks all signals around `clone` in `pthread_create` and `posix_spawn`.
//! - `rt_sigaction` that changes SIGBUS's or SIGSYS's action from a `vfork` child (a process
//!   id other than ours, sharing our memory): glibc's `posix_spawn` child resets every handler
//!   to the default before `exec`, and would kill itself at its next fault; the change is
//!   reported done and not made. In the process itself the change is made (the pager's own
//!   handler restores the default action to let a fault outside its regions kill the process).
//!
//! Locking: none of its own. The faults it takes are served as any fault of this thread; it
//! allocates nothing and calls no interposed symbol (the rules of `docs/design.md`, "Deadlock
//! freedom", for fault handlers).

use super::raw::raw;
use std::sync::atomic::{AtomicI32, Ordering};
use uswap_pager::prefault;

/// The id of the process whose memory this is (updated in fork children).
static PID: AtomicI32 = AtomicI32::new(0);

/// Times a call that fails with `EFAULT` on a managed buffer is prefaulted and issued again.
const MAX_RETRIES: u32 = 64;

/// Largest string (a path, an argument of `execve`) prefaulted, and entries of an argument
/// vector.
const MAX_STR: usize = 128 << 10;
/// Bytes of one buffer prefaulted: a larger `read` or `write` meets a missing page past them
/// and returns short (what it moved), as a call interrupted part way does; the program's
/// next call moves the rest.
const MAX_BUF: u64 = 32 << 20;
const MAX_VEC: usize = 1 << 16;

/// Whether the handler and the filter are installed (SIGBUS fault mode).
pub(super) static ON: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Install the SIGSYS handler (before the filter: from then on a change of SIGSYS's action
/// from libc is trapped).
pub(super) fn install() -> Result<(), String> {
    extern "C" fn child() {
        PID.store(getpid(), Ordering::Relaxed);
    }
    PID.store(getpid(), Ordering::Relaxed);
    // SAFETY: registering a handler that only stores the new pid.
    unsafe { libc::pthread_atfork(None, None, Some(child)) };
    // SAFETY: a sigaction with our handler; the real sigaction installs glibc's restorer.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_sigsys as *const () as usize;
        // NODEFER: a trapped call inside a fault served under this handler (the pager's own
        // futex waits) must trap again rather than find SIGSYS blocked.
        // ONSTACK: on the thread's alternate stack (`altstack`), as a fault on the thread's own
        // stack leaves no room there for the signal frame.
        sa.sa_flags = libc::SA_SIGINFO | libc::SA_NODEFER | libc::SA_ONSTACK;
        libc::sigemptyset(&mut sa.sa_mask);
        if crate::gate::real_sigaction(libc::SIGSYS, &sa, std::ptr::null_mut()) != 0 {
            return Err(format!("sigaction(SIGSYS): {}", std::io::Error::last_os_error()));
        }
    }
    Ok(())
}

fn getpid() -> i32 {
    // SAFETY: no arguments.
    unsafe { raw(libc::SYS_getpid, [0; 6]) as i32 }
}

extern "C" fn on_sigsys(_sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    // SAFETY: errno slot of this thread; the kernel passes a valid siginfo and ucontext.
    unsafe {
        let errno = *libc::__errno_location();
        // `si_code` SYS_SECCOMP (1); `_sigsys` is { void *call_addr; int syscall; u32 arch }
        // at offset 16 of the siginfo.
        let code = (*info).si_code;
        let uc = &mut *(ctx as *mut libc::ucontext_t);
        if code != 1 {
            // A SIGSYS sent by kill or raised by a filter not ours: the default action.
            // The kernel's `struct sigaction`: handler, flags, restorer, mask.
            let dfl = [libc::SIG_DFL as u64, 0, 0, 0];
            raw(libc::SYS_rt_sigaction, [libc::SIGSYS as u64, dfl.as_ptr() as u64, 0, 8, 0, 0]);
            raw(
                libc::SYS_tgkill,
                [getpid() as u64, raw(libc::SYS_gettid, [0; 6]) as u64, libc::SIGSYS as u64, 0, 0, 0],
            );
            return;
        }
        let nr = *(info as *const u8).add(24).cast::<i32>() as libc::c_long;
        let g = &uc.uc_mcontext.gregs;
        let a = [libc::REG_RDI, libc::REG_RSI, libc::REG_RDX, libc::REG_R10, libc::REG_R8, libc::REG_R9]
            .map(|r| g[r as usize] as u64);
        let r = match nr {
            libc::SYS_rt_sigprocmask => {
                // A thread glibc starts sets its mask first: give it its stack now, and pin its
                // thread control block.
                super::altstack::ensure(Some(&mut *uc));
                super::tcb::pin_this_thread();
                sigprocmask(uc, a)
            }
            libc::SYS_rt_sigaction => sigaction(a),
            _ => call(nr, a),
        };
        uc.uc_mcontext.gregs[libc::REG_RAX as usize] = r;
        *libc::__errno_location() = errno;
    }
}

/// Issue `nr` with its buffers resident, retrying after `EFAULT` on a managed buffer.
///
/// # Safety
/// - `a` are the arguments the program passed to `nr`.
unsafe fn call(nr: libc::c_long, a: [u64; 6]) -> i64 {
    // SAFETY: the program's arguments; prefault touches managed memory only.
    let mut managed = unsafe { buffers(nr, a) };
    let mut tries = 0;
    loop {
        // SAFETY: the program's call, re-issued unchanged.
        let r = unsafe { raw(nr, a) };
        if r != -(libc::EFAULT as i64) || tries >= MAX_RETRIES {
            return r;
        }
        // Look again (and prefault again): a buffer no region held before the call may have
        // been adopted during it (an adopter publishes its region before it registers the
        // range, so a page the call found registered is in a region by now).
        // SAFETY: as above.
        let now = unsafe { buffers(nr, a) };
        if !managed && !now {
            return r;
        }
        managed = now;
        tries += 1;
    }
}

/// `rt_sigprocmask(how, set, old, size)`: applied to the mask the program returns to, never
/// blocking SIGBUS or SIGSYS.
///
/// # Safety
/// - `uc` is the trapped thread's context and `a` its arguments.
unsafe fn sigprocmask(uc: &mut libc::ucontext_t, a: [u64; 6]) -> i64 {
    let (how, set, old, size) = (a[0], a[1], a[2], a[3]);
    let mut want: u64 = 0;
    // SAFETY: 8 bytes of the program's `set`, read through the kernel (a bad pointer fails).
    if size != 8 || !unsafe { copy_in(set, (&mut want as *mut u64).cast(), 8) } {
        // Let the kernel report the error on the program's own arguments.
        // SAFETY: the program's call.
        return unsafe { raw(libc::SYS_rt_sigprocmask, a) };
    }
    // Never blocked: SIGBUS and SIGSYS (fatal while blocked), SIGKILL and SIGSTOP (the kernel
    // ignores them in a mask).
    let keep = [libc::SIGBUS, libc::SIGSYS, libc::SIGKILL, libc::SIGSTOP].iter().fold(0u64, |m, &s| m | 1 << (s - 1));
    // SAFETY: a sigset_t starts with the 64-bit mask of signals 1-64.
    let cur = unsafe { &mut *(&mut uc.uc_sigmask as *mut libc::sigset_t).cast::<u64>() };
    // The program's mask before the call is the one it returns to, not this handler's.
    // SAFETY: `prev` is 8 bytes of ours; `old` is the program's, written through the kernel.
    if old != 0 && !unsafe { copy_out(old, (&*cur as *const u64).cast(), 8) } {
        return -(libc::EFAULT as i64);
    }
    match how as i32 {
        libc::SIG_BLOCK => *cur |= want & !keep,
        libc::SIG_SETMASK => *cur = want & !keep,
        _ => return -(libc::EINVAL as i64),
    }
    0
}

/// `rt_sigaction(sig, act, old, size)` that sets an action. A handler runs on the thread's
/// alternate stack (`SA_ONSTACK` added): the kernel writes the signal frame below the
/// interrupted stack pointer otherwise, and where that page of a managed stack is swapped out
/// it cannot (a kernel access to a missing page fails in this mode) and kills the process
/// with SIGSEGV; a JVM takes a SIGSEGV at every implicit null check and safepoint poll, with
/// handlers that do not ask for `SA_ONSTACK`. SIGBUS's and SIGSYS's action is made in this
/// process, reported done and not made in a `vfork` child.
///
/// # Safety
/// - `a` are the trapped call's arguments.
unsafe fn sigaction(a: [u64; 6]) -> i64 {
    let sig = a[0] as i32;
    if (sig == libc::SIGBUS || sig == libc::SIGSYS) && getpid() != PID.load(Ordering::Relaxed) {
        if a[2] == 0 {
            return 0;
        }
        // SAFETY: the old action only: the kernel writes it to the program's `old`.
        return unsafe { raw(libc::SYS_rt_sigaction, [a[0], 0, a[2], a[3], 0, 0]) };
    }
    // The kernel's `struct sigaction`: handler, flags, restorer, mask (`a[3]` bytes, 8 here).
    let mut act = [0u64; 4];
    // SAFETY: `act` is 32 writable bytes of this stack.
    if a[3] != 8 || !unsafe { copy_in(a[1], act.as_mut_ptr().cast(), 32) } {
        // SAFETY: the program's call (the kernel reports its bad argument).
        return unsafe { call(libc::SYS_rt_sigaction, a) };
    }
    if act[0] != libc::SIG_DFL as u64 && act[0] != libc::SIG_IGN as u64 {
        act[1] |= libc::SA_ONSTACK as u64;
    }
    // SAFETY: the program's call with its action copied to this stack; `old` is the program's
    // (prefaulted by `call`).
    unsafe { call(libc::SYS_rt_sigaction, [a[0], act.as_ptr() as u64, a[2], a[3], 0, 0]) }
}

/// Copy `len` bytes of our memory at `src` to `dst` through the kernel (a bad `src` fails
/// instead of faulting here).
///
/// # Safety
/// - `dst` is valid for writes of `len` bytes.
unsafe fn copy_in(src: u64, dst: *mut u8, len: usize) -> bool {
    if uswap_pager::overlaps_region(src as usize, src as usize + len) {
        // SAFETY: managed memory is mapped; touching it makes it resident.
        unsafe { prefault(src as *const u8, len, false) };
    }
    // SAFETY: `dst` is ours and writable (the caller's obligation); the kernel checks `src`.
    unsafe { vm_copy(libc::SYS_process_vm_readv, dst.cast(), src, len) }
}

/// Copy `len` bytes from `src` to our memory at `dst` through the kernel.
///
/// # Safety
/// - `src` is valid for reads of `len` bytes.
unsafe fn copy_out(dst: u64, src: *const u8, len: usize) -> bool {
    // SAFETY: `src` is readable (the caller's obligation); the kernel checks `dst`.
    unsafe { vm_copy(libc::SYS_process_vm_writev, src.cast_mut(), dst, len) }
}

/// `process_vm_readv` or `process_vm_writev` (`nr`) of one iovec each side between `local`
/// and this process's `remote`; true if all `len` bytes moved.
///
/// # Safety
/// - `local` is valid for `len` bytes in the direction `nr` uses it.
unsafe fn vm_copy(nr: libc::c_long, local: *mut u8, remote: u64, len: usize) -> bool {
    let local = libc::iovec { iov_base: local.cast(), iov_len: len };
    let remote = libc::iovec { iov_base: remote as *mut _, iov_len: len };
    // SAFETY: one iovec each side, in this process; the caller vouches for `local`.
    let r = unsafe { raw(nr, [getpid() as u64, &local as *const _ as u64, 1, &remote as *const _ as u64, 1, 0]) };
    r == len as i64
}

/// A `T` of our memory at `addr` (None: not readable).
fn read<T: Copy>(addr: u64) -> Option<T> {
    let mut v = std::mem::MaybeUninit::<T>::uninit();
    // SAFETY: v has room for a T; every T read here is plain data.
    unsafe { copy_in(addr, v.as_mut_ptr().cast(), std::mem::size_of::<T>()).then(|| v.assume_init()) }
}

/// Which way the kernel moves a buffer's bytes.
#[derive(Clone, Copy)]
enum Dir {
    /// The kernel reads it.
    In,
    /// The kernel writes it (touched for write: a clean page mapped read-only would fault).
    Out,
}

/// The buffers of call `nr`: makes those in managed regions resident. Returns whether any of
/// them is managed (only then is an `EFAULT` worth a retry).
///
/// # Safety
/// - `a` are the arguments the program passed to `nr`.
unsafe fn buffers(nr: libc::c_long, a: [u64; 6]) -> bool {
    use Dir::{In, Out};
    let mut m = Touch { managed: false };
    match nr {
        libc::SYS_read | libc::SYS_pread64 | libc::SYS_getdents64 => m.buf(a[1], a[2], Out),
        libc::SYS_getrandom => m.buf(a[0], a[1], Out),
        libc::SYS_write | libc::SYS_pwrite64 => m.buf(a[1], a[2], In),
        libc::SYS_readv | libc::SYS_preadv | libc::SYS_preadv2 => m.iov(a[1], a[2], Out),
        libc::SYS_writev | libc::SYS_pwritev | libc::SYS_pwritev2 => m.iov(a[1], a[2], In),
        libc::SYS_recvfrom => {
            m.buf(a[1], a[2], Out);
            m.sockaddr_out(a[4], a[5]);
        }
        libc::SYS_sendto => {
            m.buf(a[1], a[2], In);
            m.buf(a[4], a[5], In);
        }
        libc::SYS_recvmsg => m.msghdr(a[1], Out),
        libc::SYS_sendmsg => m.msghdr(a[1], In),
        libc::SYS_recvmmsg | libc::SYS_sendmmsg => {
            let dir = if nr == libc::SYS_recvmmsg { Out } else { In };
            let size = std::mem::size_of::<libc::mmsghdr>() as u64;
            m.buf(a[1], a[2].saturating_mul(size), Out);
            for i in 0..a[2].min(1024) {
                m.msghdr(a[1] + i * size, dir);
            }
        }
        libc::SYS_epoll_wait | libc::SYS_epoll_pwait => m.buf(a[1], a[2].saturating_mul(12), Out),
        libc::SYS_epoll_ctl => m.buf(a[3], 12, In),
        libc::SYS_poll | libc::SYS_ppoll => m.buf(a[0], a[1].saturating_mul(8), Out),
        libc::SYS_select | libc::SYS_pselect6 => {
            for &s in &a[1..4] {
                m.buf(s, a[0].div_ceil(8), Out);
            }
            m.buf(a[4], 16, Out);
        }
        libc::SYS_futex => {
            m.buf(a[0], 4, Out);
            // uaddr2 of the requeue and wake-op operations.
            if matches!(a[1] as u32 & !(128 | 256), 4 | 5 | 11 | 12) {
                m.buf(a[4], 4, Out);
            }
        }
        libc::SYS_open | libc::SYS_access | libc::SYS_unlink | libc::SYS_mkdir | libc::SYS_rmdir | libc::SYS_chdir => {
            m.str(a[0])
        }
        libc::SYS_chmod | libc::SYS_chown | libc::SYS_lchown | libc::SYS_truncate => m.str(a[0]),
        libc::SYS_openat
        | libc::SYS_faccessat
        | libc::SYS_faccessat2
        | libc::SYS_unlinkat
        | libc::SYS_mkdirat
        | libc::SYS_fchmodat
        | libc::SYS_fchownat => m.str(a[1]),
        libc::SYS_stat | libc::SYS_lstat => {
            m.str(a[0]);
            m.buf(a[1], std::mem::size_of::<libc::stat>() as u64, Out);
        }
        libc::SYS_fstat => m.buf(a[1], std::mem::size_of::<libc::stat>() as u64, Out),
        libc::SYS_newfstatat => {
            m.str(a[1]);
            m.buf(a[2], std::mem::size_of::<libc::stat>() as u64, Out);
        }
        libc::SYS_statx => {
            m.str(a[1]);
            m.buf(a[4], 256, Out);
        }
        libc::SYS_statfs => {
            m.str(a[0]);
            m.buf(a[1], std::mem::size_of::<libc::statfs>() as u64, Out);
        }
        libc::SYS_fstatfs => m.buf(a[1], std::mem::size_of::<libc::statfs>() as u64, Out),
        libc::SYS_readlink => {
            m.str(a[0]);
            m.buf(a[1], a[2], Out);
        }
        libc::SYS_readlinkat => {
            m.str(a[1]);
            m.buf(a[2], a[3], Out);
        }
        libc::SYS_rename | libc::SYS_link | libc::SYS_symlink => {
            m.str(a[0]);
            m.str(a[1]);
        }
        libc::SYS_renameat | libc::SYS_renameat2 | libc::SYS_linkat => {
            m.str(a[1]);
            m.str(a[3]);
        }
        libc::SYS_symlinkat => {
            m.str(a[0]);
            m.str(a[2]);
        }
        libc::SYS_utimensat => {
            m.str(a[1]);
            m.buf(a[2], 32, In);
        }
        libc::SYS_getcwd => m.buf(a[0], a[1], Out),
        libc::SYS_execve => {
            m.str(a[0]);
            m.strv(a[1]);
            m.strv(a[2]);
        }
        libc::SYS_execveat => {
            m.str(a[1]);
            m.strv(a[2]);
            m.strv(a[3]);
        }
        libc::SYS_connect | libc::SYS_bind => m.buf(a[1], a[2], In),
        libc::SYS_accept | libc::SYS_accept4 | libc::SYS_getsockname | libc::SYS_getpeername => {
            m.sockaddr_out(a[1], a[2])
        }
        libc::SYS_getsockopt => {
            m.buf(a[4], 4, Out);
            if let Some(n) = read::<u32>(a[4]) {
                m.buf(a[3], n as u64, Out);
            }
        }
        libc::SYS_setsockopt => m.buf(a[3], a[4], In),
        libc::SYS_socketpair => m.buf(a[3], 8, Out),
        libc::SYS_pipe | libc::SYS_pipe2 => m.buf(a[0], 8, Out),
        libc::SYS_wait4 => {
            m.buf(a[1], 4, Out);
            m.buf(a[3], std::mem::size_of::<libc::rusage>() as u64, Out);
        }
        libc::SYS_waitid => {
            m.buf(a[2], std::mem::size_of::<libc::siginfo_t>() as u64, Out);
            m.buf(a[4], std::mem::size_of::<libc::rusage>() as u64, Out);
        }
        libc::SYS_nanosleep => {
            m.buf(a[0], 16, In);
            m.buf(a[1], 16, Out);
        }
        libc::SYS_clock_nanosleep => {
            m.buf(a[2], 16, In);
            m.buf(a[3], 16, Out);
        }
        libc::SYS_uname => m.buf(a[0], std::mem::size_of::<libc::utsname>() as u64, Out),
        libc::SYS_sysinfo => m.buf(a[0], std::mem::size_of::<libc::sysinfo>() as u64, Out),
        libc::SYS_getrlimit => m.buf(a[1], 16, Out),
        libc::SYS_prlimit64 => {
            m.buf(a[2], 16, In);
            m.buf(a[3], 16, Out);
        }
        libc::SYS_getrusage => m.buf(a[1], std::mem::size_of::<libc::rusage>() as u64, Out),
        libc::SYS_times => m.buf(a[0], std::mem::size_of::<libc::tms>() as u64, Out),
        libc::SYS_sched_getaffinity => m.buf(a[2], a[1], Out),
        libc::SYS_sched_setaffinity => m.buf(a[2], a[1], In),
        libc::SYS_rt_sigaction => {
            m.buf(a[1], 32, In);
            m.buf(a[2], 32, Out);
        }
        _ => {}
    }
    m.managed
}

/// Touches the managed parts of a call's buffers.
struct Touch {
    managed: bool,
}

impl Touch {
    /// `[addr, addr + len)`.
    fn buf(&mut self, addr: u64, len: u64, dir: Dir) {
        if addr == 0 || len == 0 {
            return;
        }
        let (a, len) = (addr as usize, len.min(MAX_BUF) as usize);
        if !uswap_pager::overlaps_region(a, a.saturating_add(len)) {
            return;
        }
        self.managed = true;
        // SAFETY: prefault touches the parts of the range that lie in managed regions, which
        // are mapped memory of this process.
        unsafe { prefault(a as *const u8, len, matches!(dir, Dir::Out)) };
    }

    /// A NUL-terminated string at `addr`, page by page until its NUL.
    fn str(&mut self, addr: u64) {
        let mut a = addr as usize;
        let end = a.saturating_add(MAX_STR);
        while a != 0 && a < end && uswap_pager::manages_page(a) {
            self.managed = true;
            let page_end = (a | (uswap_pager::PAGE_SIZE - 1)) + 1;
            // SAFETY: `a` is in a managed region (mapped); touching it makes its page resident.
            unsafe { prefault(a as *const u8, 1, false) };
            // SAFETY: the rest of the page is mapped memory of the same region; a concurrent
            // eviction only makes a byte fault again, served here.
            let s = unsafe { std::slice::from_raw_parts(a as *const u8, page_end - a) };
            if s.contains(&0) {
                return;
            }
            a = page_end;
        }
    }

    /// A NULL-terminated vector of strings (`argv`, `envp`).
    fn strv(&mut self, addr: u64) {
        if addr == 0 {
            return;
        }
        for i in 0..MAX_VEC as u64 {
            let at = addr + 8 * i;
            if uswap_pager::manages_page(at as usize) {
                self.managed = true;
            }
            match read::<u64>(at) {
                Some(0) | None => return,
                Some(s) => self.str(s),
            }
        }
    }

    /// An iovec array of `cnt` entries at `addr`, and the buffers it names.
    fn iov(&mut self, addr: u64, cnt: u64, dir: Dir) {
        let size = std::mem::size_of::<libc::iovec>() as u64;
        self.buf(addr, cnt.saturating_mul(size), Dir::In);
        for i in 0..cnt.min(1024) {
            let Some(v) = read::<libc::iovec>(addr + i * size) else { return };
            self.buf(v.iov_base as u64, v.iov_len as u64, dir);
        }
    }

    /// A `msghdr` at `addr`: its name, its iovecs and its control data.
    fn msghdr(&mut self, addr: u64, dir: Dir) {
        let size = std::mem::size_of::<libc::msghdr>() as u64;
        self.buf(addr, size, Dir::Out);
        let Some(h) = read::<libc::msghdr>(addr) else { return };
        self.buf(h.msg_name as u64, h.msg_namelen as u64, dir);
        self.iov(h.msg_iov as u64, h.msg_iovlen as u64, dir);
        self.buf(h.msg_control as u64, h.msg_controllen as u64, dir);
    }

    /// An address the kernel writes (`addr`) with its length (`len`, read and written).
    fn sockaddr_out(&mut self, addr: u64, len: u64) {
        self.buf(len, 4, Dir::Out);
        if let Some(n) = read::<u32>(len) {
            self.buf(addr, n as u64, Dir::Out);
        }
    }
}
