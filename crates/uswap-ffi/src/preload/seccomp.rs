//! The seccomp filter of SIGBUS fault mode: it traps the system calls that libc and the
//! dynamic loader make with user buffers, so that [`super::sigsys`] makes those buffers
//! resident before the kernel touches them.
//!
//! In SIGBUS mode the kernel fails a system call that meets a missing managed page with
//! `EFAULT` instead of waiting for the pager; the calls a program makes through the PLT are
//! interposed (`io.rs`), but the ones libc makes internally (stdio's `read` into its buffer,
//! `opendir`'s `getdents64`, a contended mutex's `futex`) are not. The filter traps, by
//! instruction pointer, the calls issued from the text of libc and of the loader, and only
//! those that take a user pointer ([`TRAPPED`]; `futex` only for the operations that read or
//! write its words, `rt_sigaction` only when it sets an action, `rt_sigprocmask` only when it
//! would block). Every other call, and every call from
//! elsewhere (the preload's own raw calls, which re-issue the trapped ones), runs untouched.
//!
//! A filter lasts for the life of the process and of what it `exec`s, and cannot be removed:
//! it names this process's address ranges, which a new image does not share (its libc is
//! mapped elsewhere), so it traps nothing there; the new image installs its own.
//!
//! Locking: none (built and installed once, at the library's start).

/// The system calls trapped from libc's and the loader's text (x86-64 numbers), besides the
/// three with conditions (`futex`, `rt_sigaction`, `rt_sigprocmask`).
pub(super) const TRAPPED: &[libc::c_long] = &[
    libc::SYS_read,
    libc::SYS_write,
    libc::SYS_pread64,
    libc::SYS_pwrite64,
    libc::SYS_readv,
    libc::SYS_writev,
    libc::SYS_preadv,
    libc::SYS_pwritev,
    libc::SYS_preadv2,
    libc::SYS_pwritev2,
    libc::SYS_recvfrom,
    libc::SYS_sendto,
    libc::SYS_recvmsg,
    libc::SYS_sendmsg,
    libc::SYS_recvmmsg,
    libc::SYS_sendmmsg,
    libc::SYS_getdents64,
    libc::SYS_epoll_wait,
    libc::SYS_epoll_pwait,
    libc::SYS_epoll_ctl,
    libc::SYS_poll,
    libc::SYS_ppoll,
    libc::SYS_select,
    libc::SYS_pselect6,
    libc::SYS_open,
    libc::SYS_openat,
    libc::SYS_stat,
    libc::SYS_lstat,
    libc::SYS_fstat,
    libc::SYS_newfstatat,
    libc::SYS_statx,
    libc::SYS_statfs,
    libc::SYS_fstatfs,
    libc::SYS_access,
    libc::SYS_faccessat,
    libc::SYS_faccessat2,
    libc::SYS_readlink,
    libc::SYS_readlinkat,
    libc::SYS_unlink,
    libc::SYS_unlinkat,
    libc::SYS_mkdir,
    libc::SYS_mkdirat,
    libc::SYS_rmdir,
    libc::SYS_rename,
    libc::SYS_renameat,
    libc::SYS_renameat2,
    libc::SYS_link,
    libc::SYS_linkat,
    libc::SYS_symlink,
    libc::SYS_symlinkat,
    libc::SYS_chdir,
    libc::SYS_chmod,
    libc::SYS_fchmodat,
    libc::SYS_chown,
    libc::SYS_lchown,
    libc::SYS_fchownat,
    libc::SYS_truncate,
    libc::SYS_utimensat,
    libc::SYS_getcwd,
    libc::SYS_execve,
    libc::SYS_execveat,
    libc::SYS_connect,
    libc::SYS_bind,
    libc::SYS_accept,
    libc::SYS_accept4,
    libc::SYS_getsockname,
    libc::SYS_getpeername,
    libc::SYS_getsockopt,
    libc::SYS_setsockopt,
    libc::SYS_socketpair,
    libc::SYS_pipe,
    libc::SYS_pipe2,
    libc::SYS_wait4,
    libc::SYS_waitid,
    libc::SYS_nanosleep,
    libc::SYS_clock_nanosleep,
    libc::SYS_getrandom,
    libc::SYS_uname,
    libc::SYS_sysinfo,
    libc::SYS_getrlimit,
    libc::SYS_prlimit64,
    libc::SYS_getrusage,
    libc::SYS_times,
    libc::SYS_sched_getaffinity,
    libc::SYS_sched_setaffinity,
];

/// `futex` operations that touch no user word (private futexes are keyed by address).
const FUTEX_WAKE: u32 = 1;
const FUTEX_REQUEUE: u32 = 3;
const FUTEX_WAKE_BITSET: u32 = 10;
/// `FUTEX_CMD_MASK`: the operation without `FUTEX_PRIVATE_FLAG` and `FUTEX_CLOCK_REALTIME`.
const FUTEX_CMD_MASK: u32 = !(128 | 256);

const AUDIT_ARCH_X86_64: u32 = 0xc000_003e;
const SECCOMP_RET_ALLOW: u32 = 0x7fff_0000;
const SECCOMP_RET_TRAP: u32 = 0x0003_0000;
const SECCOMP_SET_MODE_FILTER: libc::c_ulong = 1;
const SECCOMP_FILTER_FLAG_TSYNC: libc::c_ulong = 1;

// Offsets in `struct seccomp_data`: nr, arch, instruction_pointer, args[6].
const OFF_NR: u32 = 0;
const OFF_ARCH: u32 = 4;
const OFF_IP: u32 = 8;
const fn off_arg(i: u32) -> u32 {
    16 + 8 * i
}

// Classic BPF opcodes.
const LD_W_ABS: u16 = 0x20; // BPF_LD | BPF_W | BPF_ABS
const JEQ_K: u16 = 0x15; // BPF_JMP | BPF_JEQ | BPF_K
const JGE_K: u16 = 0x35; // BPF_JMP | BPF_JGE | BPF_K
const AND_K: u16 = 0x54; // BPF_ALU | BPF_AND | BPF_K
const RET_K: u16 = 0x06; // BPF_RET | BPF_K

/// A text range `[lo, hi)` whose system calls are trapped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Range {
    pub lo: u64,
    pub hi: u64,
}

/// A filter program under construction; jumps are forward and short (each test skips over a
/// fixed number of instructions), so no offset exceeds the 8 bits classic BPF gives it.
struct Prog {
    ins: Vec<libc::sock_filter>,
}

impl Prog {
    fn op(&mut self, code: u16, jt: u8, jf: u8, k: u32) {
        self.ins.push(libc::sock_filter { code, jt, jf, k });
    }
    fn ld(&mut self, off: u32) {
        self.op(LD_W_ABS, 0, 0, off);
    }
    fn ret(&mut self, k: u32) {
        self.op(RET_K, 0, 0, k);
    }
    /// `if A == k { ret action }`.
    fn eq_ret(&mut self, k: u32, action: u32) {
        self.op(JEQ_K, 0, 1, k);
        self.ret(action);
    }
    /// Trap when the 64-bit argument `i` is not 0 (the accumulator is clobbered).
    fn trap_if_arg_nonzero(&mut self, i: u32) {
        self.ld(off_arg(i));
        self.op(JEQ_K, 1, 0, 0);
        self.ret(SECCOMP_RET_TRAP);
        self.ld(off_arg(i) + 4);
        self.op(JEQ_K, 1, 0, 0);
        self.ret(SECCOMP_RET_TRAP);
    }
}

/// The filter's instructions for `ranges` (each within one 4 GiB-aligned window, so the
/// instruction pointer's high word is compared for equality).
pub(super) fn program(ranges: &[Range]) -> Vec<libc::sock_filter> {
    let mut p = Prog { ins: Vec::new() };
    p.ld(OFF_ARCH);
    p.op(JEQ_K, 1, 0, AUDIT_ARCH_X86_64);
    p.ret(SECCOMP_RET_ALLOW);
    // The x32 ABI's numbers carry bit 30: never ours.
    p.ld(OFF_NR);
    p.op(JGE_K, 0, 1, 0x4000_0000);
    p.ret(SECCOMP_RET_ALLOW);
    // Instruction pointer in one of the ranges, or allow. Each range is 6 instructions: high
    // word equal, low word in [lo, hi); a match jumps past the remaining ranges and the
    // final allow.
    let n = ranges.len();
    for (i, r) in ranges.iter().enumerate() {
        let rest = ((n - 1 - i) * 6 + 1) as u8; // the other ranges and the allow after them
        p.ld(OFF_IP + 4);
        p.op(JEQ_K, 0, 4, (r.lo >> 32) as u32);
        p.ld(OFF_IP);
        p.op(JGE_K, 0, 2, r.lo as u32);
        p.op(JGE_K, 1, 0, r.hi as u32);
        // Matched: jump over the remaining ranges and the allow (ja is `jeq 0` both ways).
        p.op(JGE_K, rest, rest, 0);
    }
    p.ret(SECCOMP_RET_ALLOW);
    // From libc or the loader: by number.
    p.ld(OFF_NR);
    for &nr in TRAPPED {
        p.eq_ret(nr as u32, SECCOMP_RET_TRAP);
    }
    // futex: trap unless the operation touches no word.
    p.op(JEQ_K, 0, 8, libc::SYS_futex as u32);
    p.ld(off_arg(1));
    p.op(AND_K, 0, 0, FUTEX_CMD_MASK);
    p.eq_ret(FUTEX_WAKE, SECCOMP_RET_ALLOW);
    // (the two tests below end in a return either way)
    p.op(JEQ_K, 2, 0, FUTEX_REQUEUE);
    p.op(JEQ_K, 1, 0, FUTEX_WAKE_BITSET);
    p.ret(SECCOMP_RET_TRAP);
    p.ret(SECCOMP_RET_ALLOW);
    // rt_sigaction(any signal, act != NULL): trapped (see `sigsys::sigaction`).
    p.ld(OFF_NR);
    p.op(JEQ_K, 0, 7, libc::SYS_rt_sigaction as u32);
    p.trap_if_arg_nonzero(1);
    p.ret(SECCOMP_RET_ALLOW);
    // rt_sigprocmask(how != SIG_UNBLOCK, set != NULL): trapped (see `sigsys::sigprocmask`).
    p.ld(OFF_NR);
    p.op(JEQ_K, 0, 9, libc::SYS_rt_sigprocmask as u32);
    p.ld(off_arg(0));
    p.op(JEQ_K, 6, 0, libc::SIG_UNBLOCK as u32);
    p.trap_if_arg_nonzero(1);
    p.ret(SECCOMP_RET_ALLOW);
    p.ret(SECCOMP_RET_ALLOW);
    p.ins
}

/// The executable ranges of libc and of the dynamic loader in this process.
pub(super) fn libc_and_loader_text() -> Vec<Range> {
    unsafe extern "C" fn each(
        info: *mut libc::dl_phdr_info,
        _size: libc::size_t,
        out: *mut libc::c_void,
    ) -> libc::c_int {
        // SAFETY: dl_iterate_phdr passes a valid info for the duration of the call, and `out`
        // is the Vec we passed.
        let (info, out) = unsafe { (&*info, &mut *out.cast::<Vec<Range>>()) };
        let name = if info.dlpi_name.is_null() {
            &[][..]
        } else {
            // SAFETY: a NUL-terminated name owned by the loader.
            unsafe { std::ffi::CStr::from_ptr(info.dlpi_name) }.to_bytes()
        };
        let file = name.rsplit(|&c| c == b'/').next().unwrap_or(name);
        if !(file.starts_with(b"libc.so") || file.starts_with(b"ld-linux")) {
            return 0;
        }
        for i in 0..info.dlpi_phnum as usize {
            // SAFETY: dlpi_phdr has dlpi_phnum entries.
            let ph = unsafe { &*info.dlpi_phdr.add(i) };
            if ph.p_type == libc::PT_LOAD && ph.p_flags & libc::PF_X != 0 {
                let lo = info.dlpi_addr + ph.p_vaddr;
                out.push(Range { lo, hi: lo + ph.p_memsz });
            }
        }
        0
    }
    let mut out: Vec<Range> = Vec::new();
    // SAFETY: the callback only reads what the loader passes and appends to `out`.
    unsafe { libc::dl_iterate_phdr(Some(each), (&mut out as *mut Vec<Range>).cast()) };
    out
}

/// Install the filter over `ranges` on every thread of the process. Without
/// `CAP_SYS_ADMIN` the process first sets `no_new_privs` (which the kernel requires for it):
/// set-user-ID programs it starts then run without their privileges.
pub(super) fn install(ranges: &[Range]) -> Result<(), String> {
    if ranges.is_empty() || ranges.iter().any(|r| r.lo >> 32 != (r.hi - 1) >> 32 || r.hi as u32 == 0) {
        return Err(format!("cannot filter system calls from libc's text at {ranges:x?}"));
    }
    let ins = program(ranges);
    let prog = libc::sock_fprog { len: ins.len() as u16, filter: ins.as_ptr().cast_mut() };
    let set = || {
        // SAFETY: seccomp(2) with a valid program that outlives the call.
        unsafe { libc::syscall(libc::SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC, &prog) }
    };
    let mut r = set();
    if r != 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EACCES) {
        // SAFETY: prctl(PR_SET_NO_NEW_PRIVS, 1) has no pointer arguments.
        if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } == 0 {
            r = set();
        }
    }
    if r != 0 {
        return Err(format!("seccomp filter: {}", std::io::Error::last_os_error()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Run the program on one `seccomp_data`, as the kernel's classic BPF does.
    fn run(ins: &[libc::sock_filter], nr: i64, ip: u64, args: [u64; 6]) -> u32 {
        let mut data = [0u8; 64];
        data[0..4].copy_from_slice(&(nr as u32).to_le_bytes());
        data[4..8].copy_from_slice(&AUDIT_ARCH_X86_64.to_le_bytes());
        data[8..16].copy_from_slice(&ip.to_le_bytes());
        for (i, a) in args.iter().enumerate() {
            data[16 + 8 * i..24 + 8 * i].copy_from_slice(&a.to_le_bytes());
        }
        let (mut a, mut pc) = (0u32, 0usize);
        loop {
            let x = ins[pc];
            pc += 1;
            match x.code {
                LD_W_ABS => a = u32::from_le_bytes(data[x.k as usize..x.k as usize + 4].try_into().unwrap()),
                AND_K => a &= x.k,
                JEQ_K => pc += if a == x.k { x.jt } else { x.jf } as usize,
                JGE_K => pc += if a >= x.k { x.jt } else { x.jf } as usize,
                RET_K => return x.k,
                c => panic!("opcode {c:#x}"),
            }
        }
    }

    const LIBC: Range = Range { lo: 0x7f12_3450_0000, hi: 0x7f12_3466_0000 };
    const LD: Range = Range { lo: 0x7f12_3500_1000, hi: 0x7f12_3502_8000 };

    #[test]
    fn only_buffer_calls_from_libc_or_the_loader_trap() {
        let ins = program(&[LIBC, LD]);
        let (trap, allow) = (SECCOMP_RET_TRAP, SECCOMP_RET_ALLOW);
        let at = |r: Range| [r.lo, r.lo + 0x1234, r.hi - 1];
        for ip in at(LIBC).into_iter().chain(at(LD)) {
            for &nr in TRAPPED {
                assert_eq!(run(&ins, nr, ip, [0; 6]), trap, "nr {nr} at {ip:#x}");
            }
            assert_eq!(run(&ins, libc::SYS_close, ip, [0; 6]), allow);
            assert_eq!(run(&ins, libc::SYS_mmap, ip, [0; 6]), allow);
            assert_eq!(run(&ins, libc::SYS_clone, ip, [0; 6]), allow);
            assert_eq!(run(&ins, libc::SYS_rt_sigreturn, ip, [0; 6]), allow);
            // futex: waits and the PI operations trap, wakes do not (private flag or not).
            for (op, want) in [
                (0, trap),
                (128, trap),
                (9, trap),
                (6, trap),
                (5, trap),
                (1, allow),
                (129, allow),
                (3, allow),
                (10, allow),
                (138, allow),
            ] {
                assert_eq!(run(&ins, libc::SYS_futex, ip, [0x1000, op, 0, 0, 0, 0]), want, "futex op {op}");
            }
            // rt_sigaction: a call that sets an action, of any signal; not a mere read.
            let act = 0x7ffd_0000_1000;
            for sig in [libc::SIGBUS, libc::SIGSYS, libc::SIGSEGV, libc::SIGINT] {
                assert_eq!(run(&ins, libc::SYS_rt_sigaction, ip, [sig as u64, act, 0, 8, 0, 0]), trap);
                assert_eq!(run(&ins, libc::SYS_rt_sigaction, ip, [sig as u64, 1 << 32, 0, 8, 0, 0]), trap);
                assert_eq!(run(&ins, libc::SYS_rt_sigaction, ip, [sig as u64, 0, act, 8, 0, 0]), allow);
            }
            // rt_sigprocmask: only a call that may block.
            for how in [libc::SIG_BLOCK, libc::SIG_SETMASK] {
                assert_eq!(run(&ins, libc::SYS_rt_sigprocmask, ip, [how as u64, act, 0, 8, 0, 0]), trap);
                assert_eq!(run(&ins, libc::SYS_rt_sigprocmask, ip, [how as u64, 0, act, 8, 0, 0]), allow);
            }
            assert_eq!(run(&ins, libc::SYS_rt_sigprocmask, ip, [libc::SIG_UNBLOCK as u64, act, 0, 8, 0, 0]), allow);
        }
        // Outside the ranges (the preload's own re-issue, the program's raw calls): never.
        for ip in [LIBC.lo - 1, LIBC.hi, LD.hi, 0x5555_5555_0000, LIBC.lo + (1 << 32), 0x1_0000] {
            for &nr in TRAPPED.iter().chain(&[libc::SYS_futex, libc::SYS_rt_sigaction, libc::SYS_rt_sigprocmask]) {
                assert_eq!(run(&ins, nr, ip, [0, 0, 0x1000, 0, 0, 0]), allow, "nr {nr} at {ip:#x}");
            }
        }
    }

    #[test]
    fn libc_text_is_found() {
        let r = libc_and_loader_text();
        let getppid = libc::getppid as *const () as usize as u64;
        assert!(r.iter().any(|r| (r.lo..r.hi).contains(&getppid)), "{r:x?} vs getppid at {getppid:x}");
        assert!(r.len() >= 2, "libc and the loader: {r:x?}");
    }
}
