//! `uswap status` and `uswap top`: the live view of every `uswap run` tree of this user, in
//! every run directory (the data and its rendering are in [`crate::live`]). A stale tree (its
//! runner died and nothing ended it) is shown as such, then ended once nothing of it runs.
//!
//! Locking: none.

use crate::exit::{CliError, CliResult};
use crate::live;

/// `uswap status`.
#[derive(clap::Args, Debug)]
pub struct StatusArgs {
    /// One JSON object (`trees`: each with its command, limit, totals and processes).
    #[arg(long)]
    pub json: bool,
    /// Seconds between the two readings the rates (faults/s, swap-in and swap-out per
    /// second) are measured over; 0 reads once and shows no rates.
    #[arg(long, default_value_t = 1.0)]
    pub interval: f64,
    /// Also list the processes of each tree that ended (in --json they always are).
    #[arg(long)]
    pub all: bool,
}

/// `uswap top`.
#[derive(clap::Args, Debug)]
pub struct TopArgs {
    /// Seconds between refreshes.
    #[arg(long, default_value_t = 1.0)]
    pub interval: f64,
    /// Stop after this many refreshes (default: until interrupted).
    #[arg(long)]
    pub count: Option<u64>,
    /// Also list the processes of each tree that ended.
    #[arg(long)]
    pub all: bool,
}

/// Print to stdout; a closed pipe (`uswap status | head`) ends the output quietly.
fn out(text: &str) -> bool {
    use std::io::Write;
    let mut o = std::io::stdout().lock();
    o.write_all(text.as_bytes()).and_then(|()| o.flush()).is_ok()
}

fn interval(s: f64) -> Result<std::time::Duration, CliError> {
    if !(0.0..=3600.0).contains(&s) {
        return Err(CliError::usage(format!("--interval {s}: expected 0 to 3600 seconds")));
    }
    Ok(std::time::Duration::from_secs_f64(s))
}

/// The size (columns, rows) of the terminal on `fd`, if it is one that knows its size.
fn terminal_size(fd: i32) -> Option<(usize, usize)> {
    // SAFETY: zeroed winsize is valid storage.
    let mut ws: libc::winsize = unsafe { std::mem::zeroed() };
    // SAFETY: TIOCGWINSZ writes a winsize into `ws`.
    let r = unsafe { libc::ioctl(fd, libc::TIOCGWINSZ, &mut ws) };
    (r == 0 && ws.ws_col > 0 && ws.ws_row > 0).then_some((ws.ws_col as usize, ws.ws_row as usize))
}

/// The width the text view is drawn for: the terminal's on stdout, else 80 columns.
fn width() -> usize {
    terminal_size(libc::STDOUT_FILENO).map_or(80, |(c, _)| c)
}

/// Print the view once.
pub fn status(a: &StatusArgs) -> CliResult {
    let dt = interval(a.interval)?;
    let first = live::trees();
    let now = if dt.is_zero() || first.is_empty() {
        first.clone()
    } else {
        std::thread::sleep(dt);
        live::trees()
    };
    let prev = if dt.is_zero() { Vec::new() } else { first };
    let doc = live::with_rates(&prev, &now);
    if a.json {
        out(&format!("{doc:#}\n"));
    } else {
        out(&live::render(&doc, a.all, width()));
    }
    live::forget_stale(&now);
    Ok(())
}

/// Refresh the view until `q` is typed, stdout is closed, a signal ends it, or `--count`
/// refreshes. On a terminal the screen is cleared before each refresh and the view cut to its
/// height; keys are read from stdin: from a terminal one at a time without echo (the
/// terminal's settings are restored however top ends, a signal included), from a pipe or a
/// file until its end (then refreshing goes on; nothing waits on it).
pub fn top(a: &TopArgs) -> CliResult {
    let dt = interval(a.interval)?;
    if dt.is_zero() {
        return Err(CliError::usage("--interval must be above 0 for top"));
    }
    let tty = std::io::IsTerminal::is_terminal(&std::io::stdout());
    let mut keys = Keys::open();
    let mut prev = live::trees();
    let mut n = 0u64;
    loop {
        if keys.quit_within(dt) {
            return Ok(());
        }
        let now = live::trees();
        let size = terminal_size(libc::STDOUT_FILENO);
        let text = live::render(&live::with_rates(&prev, &now), a.all, size.map_or(80, |(c, _)| c));
        // On a terminal: home and clear, then the view, as many lines as fit.
        let ok = match size.filter(|_| tty) {
            Some((cols, rows)) => out(&format!("\x1b[H\x1b[2J{}", cut_to_rows(&text, rows, cols))),
            None => out(&format!("{text}\n")),
        };
        if !ok {
            return Ok(());
        }
        live::forget_stale(&now);
        prev = now;
        n += 1;
        if a.count.is_some_and(|c| n >= c) {
            return Ok(());
        }
    }
}

/// `text` in `rows - 1` lines (the last row stays free for the cursor): all of it when it fits,
/// else its first `rows - 2` and a line saying how many more there are.
fn cut_to_rows(text: &str, rows: usize, cols: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    if lines.len() < rows {
        return text.to_string();
    }
    let keep = rows.saturating_sub(2);
    let mut s: String = lines[..keep].iter().map(|l| format!("{l}\n")).collect();
    let more = format!("… {} more lines (uswap status shows them all)", lines.len() - keep);
    s.push_str(&more.chars().take(cols).collect::<String>());
    s.push('\n');
    s
}

/// Where `top` reads its keys.
enum Keys {
    /// The controlling terminal, in the foreground: one key at a time, no echo.
    Terminal(RawTerminal),
    /// A pipe or a file: read until its end.
    Stream,
    /// Nothing to read (the end of the input, a terminal top runs in the background of, an
    /// error).
    Done,
}

impl Keys {
    fn open() -> Keys {
        if !std::io::IsTerminal::is_terminal(&std::io::stdin()) {
            return Keys::Stream;
        }
        RawTerminal::enter().map_or(Keys::Done, Keys::Terminal)
    }

    /// Wait `dt`; true as soon as `q` is read.
    fn quit_within(&mut self, dt: std::time::Duration) -> bool {
        let deadline = std::time::Instant::now() + dt;
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return false;
            }
            if matches!(self, Keys::Done) {
                std::thread::sleep(left);
                return false;
            }
            let mut pfd = libc::pollfd { fd: libc::STDIN_FILENO, events: libc::POLLIN, revents: 0 };
            // Rounded up: a poll that ends a little early would spin.
            let ms = left.as_micros().div_ceil(1000).min(i32::MAX as u128) as i32;
            // SAFETY: poll(2) on one valid pollfd.
            let r = unsafe { libc::poll(&mut pfd, 1, ms) };
            if r < 0 {
                if std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
                    *self = Keys::Done;
                }
                continue;
            }
            if r == 0 {
                return false;
            }
            let mut buf = [0u8; 64];
            // SAFETY: read(2) into a buffer of its length.
            let got = unsafe { libc::read(libc::STDIN_FILENO, buf.as_mut_ptr().cast(), buf.len()) };
            match got {
                n if n > 0 => {
                    if buf[..n as usize].iter().any(|&b| b == b'q' || b == b'Q') {
                        return true;
                    }
                }
                0 => *self = Keys::Done,
                _ => {
                    let e = std::io::Error::last_os_error().raw_os_error();
                    if e != Some(libc::EINTR) && e != Some(libc::EAGAIN) {
                        *self = Keys::Done;
                    }
                }
            }
        }
    }
}

/// The terminal on stdin switched to reading key by key without echo (signals still come
/// from Ctrl-C, Ctrl-\\ and Ctrl-Z), and back when dropped, and in the handlers of the
/// signals that end or stop top: SIGINT, SIGTERM, SIGHUP and SIGQUIT restore the settings and
/// end top by the same signal, SIGTSTP restores them and stops it, SIGCONT sets key by key
/// again when top is in the foreground.
struct RawTerminal;

/// The terminal's settings before [`RawTerminal::enter`], and the ones it sets; read by the
/// signal handlers (a `OnceLock` read is an atomic load).
static SAVED: std::sync::OnceLock<(libc::termios, libc::termios)> = std::sync::OnceLock::new();

/// Whether a [`RawTerminal`] is live: the handlers change the terminal only while it is.
static RAW: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// The signals that end top and get the terminal's settings back first.
const ENDING: [libc::c_int; 4] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT];

impl RawTerminal {
    /// None unless stdin is the terminal of top's foreground process group (a background
    /// process that changed it would be stopped by SIGTTOU).
    fn enter() -> Option<RawTerminal> {
        // SAFETY: tcgetpgrp and getpgrp have no memory arguments.
        if unsafe { libc::tcgetpgrp(libc::STDIN_FILENO) != libc::getpgrp() } {
            return None;
        }
        // SAFETY: zeroed termios is valid storage for tcgetattr.
        let mut saved: libc::termios = unsafe { std::mem::zeroed() };
        // SAFETY: tcgetattr writes into `saved`.
        if unsafe { libc::tcgetattr(libc::STDIN_FILENO, &mut saved) } != 0 {
            return None;
        }
        let mut raw = saved;
        raw.c_lflag &= !(libc::ICANON | libc::ECHO);
        raw.c_cc[libc::VMIN] = 1;
        raw.c_cc[libc::VTIME] = 0;
        let (saved, raw) = *SAVED.get_or_init(|| (saved, raw));
        RAW.store(true, std::sync::atomic::Ordering::SeqCst);
        for s in ENDING.into_iter().chain([libc::SIGTSTP, libc::SIGCONT]) {
            handle(s, on_signal);
        }
        // SAFETY: tcsetattr with settings read from this terminal.
        if unsafe { libc::tcsetattr(libc::STDIN_FILENO, libc::TCSANOW, &raw) } != 0 {
            RAW.store(false, std::sync::atomic::Ordering::SeqCst);
            // SAFETY: as above.
            unsafe { libc::tcsetattr(libc::STDIN_FILENO, libc::TCSANOW, &saved) };
            return None;
        }
        Some(RawTerminal)
    }
}

impl Drop for RawTerminal {
    fn drop(&mut self) {
        RAW.store(false, std::sync::atomic::Ordering::SeqCst);
        if let Some((saved, _)) = SAVED.get() {
            // SAFETY: tcsetattr with the settings read at the start.
            unsafe { libc::tcsetattr(libc::STDIN_FILENO, libc::TCSANOW, saved) };
        }
    }
}

/// Install `f` for signal `s`.
fn handle(s: libc::c_int, f: extern "C" fn(libc::c_int)) {
    // SAFETY: a handler that calls only async-signal-safe functions (tcsetattr, tcgetpgrp,
    // getpgrp, sigaction, sigprocmask, raise).
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = f as *const () as usize;
        libc::sigemptyset(&mut sa.sa_mask);
        libc::sigaction(s, &sa, std::ptr::null_mut());
    }
}

extern "C" fn on_signal(sig: libc::c_int) {
    let Some((saved, raw)) = SAVED.get() else { return };
    let live = RAW.load(std::sync::atomic::Ordering::SeqCst);
    // SAFETY: async-signal-safe calls only, on stdin and this process's own signal state.
    unsafe {
        if sig == libc::SIGCONT {
            if live && libc::tcgetpgrp(libc::STDIN_FILENO) == libc::getpgrp() {
                libc::tcsetattr(libc::STDIN_FILENO, libc::TCSANOW, raw);
            }
            return;
        }
        if live {
            libc::tcsetattr(libc::STDIN_FILENO, libc::TCSANOW, saved);
        }
        // The default action, at once: the signal is blocked while its handler runs.
        let mut dfl: libc::sigaction = std::mem::zeroed();
        dfl.sa_sigaction = libc::SIG_DFL;
        libc::sigaction(sig, &dfl, std::ptr::null_mut());
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, sig);
        libc::sigprocmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
        libc::raise(sig);
        // Only SIGTSTP comes back here, when continued (SIGCONT has set key by key again).
        handle(sig, on_signal);
    }
}
