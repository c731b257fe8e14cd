#!/usr/bin/env bash
# The micro-benchmarks of the hot paths (crates/mesh-microbench): each operation run once
# under Valgrind's Callgrind, its result checked, its count of instructions printed (per
# message too, for the benchmarks that put a batch through). No broker, and the counts do
# not depend on the machine's load. See docs/BENCHMARKS.md.
#
# Needs cargo and valgrind (installed from Debian's packages when missing, as root). The
# harness's runner, `gungraun-runner`, is installed at exactly the version of the `gungraun`
# library in Cargo.lock, once per machine, beside cargo's own caches
# ($CARGO_HOME/mesh-tools, or $MESH_TOOLS_DIR): a new target dir does not build it again.
#
# Extra arguments go to the harness (e.g. a filter: `bash scripts/microbench.sh '*::window::*'`).
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '== %s %s\n' "$(date +%T)" "$*"; }

if ! command -v valgrind >/dev/null 2>&1; then
  if [ "$(id -u)" != 0 ]; then
    echo "missing valgrind: install it (Debian: apt-get install valgrind) or run this script as root" >&2
    exit 1
  fi
  log "installing valgrind"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq valgrind >/dev/null
fi

version=$(awk '/^name = "gungraun"$/ { getline; gsub(/^version = "|"$/, ""); print; exit }' Cargo.lock)
if [ -z "$version" ]; then
  echo "no gungraun in Cargo.lock" >&2
  exit 1
fi
tools="${MESH_TOOLS_DIR:-${CARGO_HOME:-$HOME/.cargo}/mesh-tools}/gungraun-runner-$version"
if ! [ -x "$tools/bin/gungraun-runner" ]; then
  log "installing gungraun-runner $version into $tools (once per machine)"
  # Built in a temporary dir that cargo removes (not in the target dir, which would keep
  # half a GiB of the runner's build).
  env -u CARGO_TARGET_DIR cargo install --locked --quiet --version "=$version" --root "$tools" \
    gungraun-runner
fi

# The `bench` profile: the workspace's release settings. A benchmark whose id ends in `_xN`
# puts N messages through: its count per message is printed below its total. Each count is
# bounded by its line in crates/mesh-microbench/baseline.tsv plus a tolerance (a hard limit
# in the harness: a count above it fails the run); the counts are printed last in that
# file's format, to paste there when a change moves one on purpose.
PATH="$tools/bin:$PATH" cargo bench --quiet -p mesh-microbench --bench hot_paths -- "$@" |
  awk '
    { print }
    /^hot_paths::/ {
      batch = match($0, /_x[0-9]+:/) ? substr($0, RSTART + 2, RLENGTH - 3) + 0 : 0
      n = split($1, path, "::"); id = $2; sub(/:.*/, "", id); key = path[n] "::" id
    }
    /^  Instructions:/ {
      split($2, counts, "|")
      lines = lines key "\t" counts[1] "\n"
      if (batch > 0)
        printf "  %-44s%11d\n", "Instructions per message (of " batch "):", counts[1] / batch + 0.5
    }
    END { printf "\nThe counts as lines of crates/mesh-microbench/baseline.tsv:\n%s", lines }
  '
