#!/usr/bin/env bash
# The API documentation builds without a warning (a broken or private intra-doc link fails).
set -euo pipefail
cd "$(dirname "$0")/.."
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --locked
echo "doc: ok"
