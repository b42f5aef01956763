//! Storage tiers (being written; see docs/design.md).
