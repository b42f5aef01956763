#!/usr/bin/env bash
# The README's test command: every unit, property, concurrency and end-to-end test. A runtime the
# end-to-end tests need but cannot find is a failure here, not a skip (install.sh installs them).
set -euo pipefail
cd "$(dirname "$0")/.."
export USWAP_REQUIRE_RUNTIMES=1
# CI runs as root on a kernel with userfaultfd: a pager test that cannot open one fails here
# instead of printing SKIPPED and passing.
export USWAP_REQUIRE_UFFD=1
cargo test --workspace --locked
