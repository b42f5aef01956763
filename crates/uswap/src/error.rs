//! Error types of the engine. Every fallible path returns one of these; nothing panics on bad
//! input (an out-of-range or double-freed entry is an error, not a crash).

use thiserror::Error;

/// Errors from the swap space, the swap cache and the engine.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum SwapError {
    /// No naturally aligned free range of this order; the caller may split and retry.
    #[error("no free swap range of order {order}")]
    NoSpace { order: u8 },
    /// The entry is outside the swap space.
    #[error("swap entry {0:#x} is out of range")]
    OutOfRange(u64),
    /// The entry is not in use (free, or freed twice).
    #[error("swap entry {0:#x} is not in use")]
    NotInUse(u64),
    /// The entry is not the first slot of a folio of the given size, or the range is mixed.
    #[error("swap entry {entry:#x} is not a valid order-{order} folio")]
    BadFolio { entry: u64, order: u8 },
    /// A buffer had the wrong length for the folio.
    #[error("buffer of {len} bytes does not match a folio of order {order}")]
    BadLength { len: usize, order: u8 },
    /// The group is over its limit and the store was refused.
    #[error("group {0} is over its limit")]
    GroupLimit(u16),
    /// A tier failed; the page stays where it was.
    #[error("tier error: {0}")]
    Tier(#[from] TierError),
    /// Invalid configuration.
    #[error("invalid configuration: {0}")]
    Config(String),
}

/// Errors from a storage tier.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum TierError {
    /// This tier does not take the page (full, over its limit, incompressible by policy);
    /// try the next tier.
    #[error("rejected by tier")]
    Reject,
    /// An I/O error: what was being done, the message, and the `errno` when the system gave
    /// one (0 otherwise), which tells a full or read-only filesystem from a failing device.
    #[error("I/O error during {op}: {msg}")]
    Io { op: &'static str, msg: String, errno: i32 },
    /// The data read back failed authentication or decompression: it is never returned.
    #[error("corrupt data in {tier} at handle {handle:#x}")]
    Corrupt { tier: String, handle: u64 },
    /// The handle does not name stored data.
    #[error("bad handle {0:#x}")]
    BadHandle(u64),
}

impl TierError {
    /// Build an I/O error from a `std::io::Error`.
    pub(crate) fn io(op: &'static str, e: &std::io::Error) -> Self {
        TierError::Io { op, msg: e.to_string(), errno: e.raw_os_error().unwrap_or(0) }
    }
}
