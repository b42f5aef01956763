#!/usr/bin/env bash
# The pager's modules must form layers (docs/design.md, Pager, "Layers"): each module of
# crates/uswap-pager/src imports only modules below it, so the graph of `crate::<module>` uses
# (comments left out; the crate root lib.rs, which holds the `Pager` type every layer works on,
# left out) has no cycle. Prints the edges and fails naming the modules of a cycle.
set -euo pipefail
cd "$(dirname "$0")/.."
src=crates/uswap-pager/src
mods=$(cd "$src" && ls ./*.rs | sed 's|^\./||; s|\.rs$||' | grep -vx lib)
declare -A is_mod
for m in $mods; do is_mod[$m]=1; done
edges=$(for f in $src/*.rs; do
  m=$(basename "$f" .rs)
  [ "$m" = lib ] && continue
  # Code only: drop `//` comments, then find `crate::x` and the `x` of `use crate::{x, y::z}`.
  perl -0777 -ne '
    s{//[^\n]*}{}g;
    while (/crate::(\w+)/g) { print "$1\n" }
    while (/crate::\{([^}]*(?:\{[^}]*\}[^}]*)*)\}/g) {
      my $g = $1; $g =~ s/\{[^}]*\}//g;
      for (split /,/, $g) { print "$1\n" if /^\s*(\w+)/ }
    }' "$f" | sort -u | while read -r d; do
      if [ "$d" != "$m" ] && [ -n "${is_mod[$d]:-}" ]; then echo "$m $d"; fi
    done
done)
echo "layers: module edges (importer imported):"
printf '%s\n' "$edges" | sed 's/^/  /'
# Every module as a self-edge too, so modules without imports still appear.
if ! out=$( { printf '%s\n' "$edges"; for m in $mods; do echo "$m $m"; done; } | tsort 2>&1 >/dev/null); then :; fi
if [ -n "$out" ]; then
  echo "layers: the module graph of $src has a cycle:" >&2
  printf '%s\n' "$out" | sed 's/^tsort: //; s/^-: //' >&2
  exit 1
fi
echo "layers: ok"
