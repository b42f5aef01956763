#!/usr/bin/env bash
# The pager's modules must form layers (docs/design.md, Pager, "Layers"): each module of
# crates/uswap-pager/src imports only modules below it, so the graph of `crate::<module>` uses
# (comments left out; the crate root lib.rs, which holds the `Pager` type every layer works on,
# left out) has no cycle. A module is a file `x.rs` or a directory `x/` with a `mod.rs` (the
# files of `x/` count as `x` either way); inside a directory module the files form layers of
# their own too (`super::y` and `crate::x::y` uses). Prints the edges and fails naming the
# modules of a cycle.
set -euo pipefail
cd "$(dirname "$0")/.."
src=crates/uswap-pager/src

# Module names a file's code uses: `crate::x`, the `x` of `use crate::{x, y::z}`, or with a
# prefix (`crate::fault::` or `super::`) the names after it.
uses() { # file prefix-regex
  P=$2 perl -0777 -ne '
    my $p = $ENV{P};
    s{//[^\n]*}{}g;
    while (/$p(\w+)/g) { print "$1\n" }
    while (/$p\{([^}]*(?:\{[^}]*\}[^}]*)*)\}/g) {
      my $g = $1; $g =~ s/\{[^}]*\}//g;
      for (split /,/, $g) { print "$1\n" if /^\s*(\w+)/ }
    }' "$1" | sort -u
}

# check DIR LABEL PREFIX: the files of DIR (x.rs and x/) as modules, edges through PREFIX.
check() {
  local dir=$1 label=$2 prefix=$3 mods m f d edges out
  mods=$( (cd "$dir" && ls ./*.rs 2>/dev/null | sed 's|^\./||; s|\.rs$||'; \
           for x in */; do if [ -f "$x/mod.rs" ]; then echo "${x%/}"; fi; done) | grep -vx -e lib -e mod | sort -u)
  declare -A is_mod=()
  for m in $mods; do is_mod[$m]=1; done
  edges=$(for m in $mods; do
    for f in "$dir/$m.rs" "$dir/$m"/*.rs; do
      [ -f "$f" ] || continue
      uses "$f" "$prefix" | while read -r d; do
        if [ "$d" != "$m" ] && [ -n "${is_mod[$d]:-}" ]; then echo "$m $d"; fi
      done
    done
  done | sort -u)
  echo "layers: module edges of $label (importer imported):"
  printf '%s\n' "$edges" | sed '/^$/d; s/^/  /'
  # Every module as a self-edge too, so modules without imports still appear.
  if ! out=$( { printf '%s\n' "$edges"; for m in $mods; do echo "$m $m"; done; } | sed '/^$/d' | tsort 2>&1 >/dev/null); then :; fi
  if [ -n "$out" ]; then
    echo "layers: the module graph of $label has a cycle:" >&2
    printf '%s\n' "$out" | sed 's/^tsort: //; s/^-: //' >&2
    exit 1
  fi
}

check "$src" "$src" 'crate::'
for d in "$src"/*/; do
  name=$(basename "$d")
  [ -f "$d/mod.rs" ] || [ -f "$src/$name.rs" ] || continue
  check "$d" "$src/$name" "(?:super::|crate::${name}::)"
done
echo "layers: ok"
