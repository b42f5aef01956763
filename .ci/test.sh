#!/usr/bin/env bash
# The README's test command: every unit, property, concurrency and end-to-end test.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo test --workspace --locked
