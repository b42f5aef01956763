#!/usr/bin/env bash
# Exhaustive interleaving checks of the small lock-free kernels (crossbeam's ci/*-loom.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
tests=$(ls crates/uswap/tests/ 2>/dev/null | sed -n 's/^\(loom_[a-z_]*\)\.rs$/\1/p')
if [ -z "$tests" ]; then echo "loom: no loom tests"; exit 0; fi
for t in $tests; do
  RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=2 CARGO_TARGET_DIR=target/loom \
    cargo test --release --locked -p uswap --test "$t"
done
