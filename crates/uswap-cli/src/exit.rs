//! The exit statuses of `uswap` itself (the program's own status passes through `uswap run`
//! unchanged; `uswap run --help` lists them all).
//!
//! Locking: none (constants).

/// Bad usage or bad configuration (clap uses 2 as well), or a program uswap cannot page.
pub const USAGE: u8 = 2;

/// userfaultfd is not permitted to this user.
pub const NO_UFFD: u8 = 1;

/// The program is not executable (as a shell reports it).
pub const NOT_EXECUTABLE: u8 = 126;

/// The program was not found (as a shell reports it).
pub const NOT_FOUND: u8 = 127;
