//! (config: being written; see docs/design.md)
