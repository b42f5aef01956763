//! The pool's configuration: [`PoolConfig`] and the choices it names (the [`Compressor`], what
//! to do with an [`Incompressible`] unit, the [`FolioMode`] of large folios).
//!
//! Locking: none (plain values, fixed when the pool is made).

/// Compression algorithm.
#[derive(Copy, Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub enum Compressor {
    /// LZ4 block format (liblz4).
    Lz4,
    /// zstd at the given level (1 recommended).
    Zstd {
        /// Compression level.
        level: i32,
    },
}

/// What to do with a unit that does not compress below the threshold.
#[derive(Copy, Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub enum Incompressible {
    /// Keep it raw in the pool (zswap since v6.18 with writeback; zram's "huge" pages).
    StoreRaw,
    /// Reject it to the next tier.
    Reject,
    /// `Reject` when a tier outside RAM follows the pool, else `StoreRaw`: what a `--tiers`
    /// string means when it does not say (resolved by [`crate::config::TiersConfig::parse`];
    /// a pool given it unresolved stores raw). Where the pool is charged to a limit, a raw
    /// page in it frees nothing: reclaim storing incompressible pages there has to evict
    /// another page for every one it stored, until writeback empties the pool.
    Auto,
}

/// How a large folio is compressed. In every mode a folio is one object (one allocation,
/// one contiguous slot range, one store and one load); the modes differ in the compression
/// units inside it.
#[derive(Copy, Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub enum FolioMode {
    /// The whole folio is one compression unit (best ratio; a 4 KiB swap-in of page `k` of
    /// it decodes pages `0..=k`).
    Whole,
    /// Each 4 KiB page is its own unit, packed into one object (a 4 KiB swap-in decodes one
    /// page; the ratio of 4 KiB compression).
    PerPage,
    /// Each 16 KiB of the folio is its own unit, packed into one object: a 4 KiB swap-in
    /// decodes at most 16 KiB, at a ratio close to whole-folio compression (the default).
    Block16K,
}

impl FolioMode {
    /// log2 of the pages per unit inside an object (`None`: the whole folio).
    pub(super) fn unit_shift(self) -> Option<u64> {
        match self {
            FolioMode::Whole => None,
            FolioMode::PerPage => Some(0),
            FolioMode::Block16K => Some(2),
        }
    }
}

/// Configuration of a pool.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct PoolConfig {
    /// Algorithm.
    pub compressor: Compressor,
    /// Largest pool size in bytes of RAM (0 = unlimited).
    pub max_bytes: u64,
    /// Once full, accept stores again below this percent of `max_bytes` (zswap default 90).
    pub accept_percent: u8,
    /// A unit is stored compressed only if it compresses to at most this percent of its size.
    pub threshold_percent: u8,
    /// Policy for units above the threshold.
    pub incompressible: Incompressible,
    /// Large-folio compression unit.
    pub folio_mode: FolioMode,
    /// Secondary algorithm for `ZPool::recompress` (zram's
    /// `recomp_algorithm`), normally zstd at a high level; None: recompression off.
    pub recompress: Option<Compressor>,
}

impl Default for PoolConfig {
    fn default() -> Self {
        PoolConfig {
            compressor: Compressor::Lz4,
            max_bytes: 0,
            accept_percent: 90,
            threshold_percent: 75,
            incompressible: Incompressible::StoreRaw,
            // 16 KiB units: a 4 KiB swap-in decodes at most 4 pages instead of up to 16, for a
            // little more RAM per large folio than one unit (BENCHMARKS.md).
            folio_mode: FolioMode::Block16K,
            recompress: None,
        }
    }
}
