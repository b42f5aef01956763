#!/usr/bin/env bash
# Install what a fresh machine of the project's kind may lack: the Rust components used by the
# checks, and a C compiler for zstd-sys. Idempotent; prints what it does.
set -euo pipefail
if ! command -v cargo >/dev/null 2>&1; then
  if [ -x "$HOME/.cargo/bin/cargo" ]; then export PATH="$HOME/.cargo/bin:$PATH"; else
    echo "install: cargo not found and no rustup toolchain on this machine" >&2; exit 1; fi
fi
for c in rustfmt clippy; do
  if ! rustup component list --installed 2>/dev/null | grep -q "^$c"; then
    echo "install: adding rust component $c"; rustup component add "$c"
  fi
done
if ! command -v cc >/dev/null 2>&1; then
  echo "install: installing a C compiler"; apt-get update -qq && apt-get install -y -qq gcc
fi
echo "install: $(cargo --version), $(rustc --version)"
