#!/usr/bin/env bash
# Install what a fresh machine of the project's kind (Debian) may lack: the Rust components used
# by the checks, a C compiler for zstd-sys, and the runtimes the end-to-end tests and
# `uswap bench programs` run (Python, Node.js, a JDK, SQLite, Redis, gdb for the stacks of a
# hung program, xz, Perl, GNU coreutils). Idempotent: installs only what is missing; prints
# what it does.
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

# command -> Debian package providing it.
pkgs=()
need() { command -v "$1" >/dev/null 2>&1 || pkgs+=("$2"); }
need cc gcc
need make make
need gdb gdb
need redis-server redis-server
need redis-benchmark redis-tools
need redis-cli redis-tools
need sqlite3 sqlite3
need xz xz-utils
need perl perl
need python3 python3
need node nodejs
need java default-jre-headless
need javac default-jdk-headless
need awk mawk
need sha256sum coreutils
# runuser: an end-to-end test runs a process as nobody (a program that drops privileges).
need runuser util-linux
# Go: the end-to-end tests build a Go program (which `uswap run` refuses); machines of this
# project's kind have it in /usr/local/go, elsewhere Debian's package provides it.
if ! command -v go >/dev/null 2>&1 && [ ! -x /usr/local/go/bin/go ]; then pkgs+=(golang-go); fi
# libc.a: the end-to-end tests link static programs (refused as the program; found and
# counted when a shell starts one).
if ! command -v cc >/dev/null 2>&1 || [ "$(cc -print-file-name=libc.a)" = libc.a ]; then pkgs+=(libc6-dev); fi
if [ ${#pkgs[@]} -gt 0 ]; then
  # Unique, in order.
  mapfile -t pkgs < <(printf '%s\n' "${pkgs[@]}" | awk '!seen[$0]++')
  echo "install: installing ${pkgs[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${pkgs[@]}"
  # The Debian package starts a redis-server service where an init system runs; the tests start
  # their own servers on free ports of 127.0.0.1.
  if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
    systemctl disable --now redis-server >/dev/null 2>&1 || true
  fi
fi
echo "install: $(cargo --version), $(rustc --version)"
for t in python3 node java redis-server sqlite3 gdb xz perl go; do
  printf 'install: %-13s %s\n' "$t" "$(command -v "$t")"
done
