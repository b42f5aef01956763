#!/usr/bin/env bash
# Exhaustive interleaving checks of the small lock-free kernels (crossbeam's ci/*-loom.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
# The engine's (crates/uswap) and the pager's (crates/uswap-pager) models: tests/loom_*.rs.
found=0
for pkg in uswap uswap-pager; do
  tests=$(ls "crates/$pkg/tests/" 2>/dev/null | sed -n 's/^\(loom_[a-z_]*\)\.rs$/\1/p')
  for t in $tests; do
    found=1
    RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=2 CARGO_TARGET_DIR=target/loom \
      cargo test --release --locked -p "$pkg" --test "$t"
  done
done
if [ "$found" = 0 ]; then echo "loom: no loom tests"; fi
