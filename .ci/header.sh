#!/usr/bin/env bash
# The committed C header (crates/uswap-ffi/include/uswap.h) must match what cbindgen generates
# from crates/uswap-ffi/src/capi.rs. To fix a failure: USWAP_BLESS=1 cargo test -p uswap-ffi --test header
set -euo pipefail
cd "$(dirname "$0")/.."
cargo test --locked -p uswap-ffi --test header
echo "header: ok"
