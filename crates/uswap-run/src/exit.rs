//! The exit statuses of `uswap` itself (the program's own status passes through `uswap run`
//! unchanged; `uswap run --help` lists them all), and [`CliError`], the error a command ends
//! with.
//!
//! Locking: none (constants and plain values).

/// Bad usage or bad configuration (clap uses 2 as well), or a program uswap cannot page.
pub(crate) const USAGE: u8 = 2;

/// userfaultfd is not permitted to this user.
pub(crate) const NO_UFFD: u8 = 1;

/// The program is not executable (as a shell reports it).
pub(crate) const NOT_EXECUTABLE: u8 = 126;

/// The program was not found (as a shell reports it).
pub(crate) const NOT_FOUND: u8 = 127;

/// An error that ends the command with a message and an exit code.
#[derive(Debug)]
pub struct CliError {
    /// What went wrong, for the user.
    pub msg: String,
    /// 2 for usage/configuration errors, 1 for failures while running.
    pub code: u8,
}

impl CliError {
    /// A failure while running (exit 1).
    pub fn fail(msg: impl Into<String>) -> Self {
        CliError { msg: msg.into(), code: 1 }
    }
    /// A usage or configuration error (exit 2).
    pub fn usage(msg: impl Into<String>) -> Self {
        CliError { msg: msg.into(), code: USAGE }
    }
    /// The process exit code.
    pub fn exit_code(&self) -> u8 {
        self.code
    }
}

impl std::fmt::Display for CliError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.msg)
    }
}

/// Result of a command.
pub type CliResult = Result<(), CliError>;
