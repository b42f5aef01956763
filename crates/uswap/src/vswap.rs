//! (vswap: being written; see docs/design.md)
