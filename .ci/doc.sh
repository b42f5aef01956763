#!/usr/bin/env bash
# The documentation of every item, private ones included (the next engineer reads them), builds
# without a warning: a broken intra-doc link fails (one to a private item resolves: it is documented).
set -euo pipefail
cd "$(dirname "$0")/.."
RUSTDOCFLAGS="-D warnings -A rustdoc::private-intra-doc-links" cargo doc --workspace --no-deps --document-private-items --locked
echo "doc: ok"
