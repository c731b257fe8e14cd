#!/usr/bin/env bash
# The whole test suite, with what it needs brought up first (scripts/prepare-tests.sh:
# RabbitMQ with the management plugin, PostgreSQL, the tools of the deploy/, partition and
# browser tests; each installed and started only when missing).
#
# Without arguments, the test binaries run side by side (see below); extra arguments go to
# `cargo test`, which runs them one at a time (e.g. `bash scripts/test.sh -p meshbus-amqp`).
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '== %s %s\n' "$(date +%T)" "$*"; }

bash scripts/prepare-tests.sh

# With arguments: `cargo test --workspace` with them, as cargo runs it (one binary at a time).
if [ $# -gt 0 ]; then
  log "cargo test --workspace $*"
  cargo test --workspace "$@"
  exit
fi

# Without: the same tests, their binaries run MESH_TEST_JOBS at a time (3 by default). Every
# test isolates itself (its own vhost, database, private node, temporary dir; ports drawn
# for private nodes are locked across processes), and most of a binary's time is spent
# waiting on brokers, so binaries run side by side. Each binary runs as cargo runs it, in its
# package's directory; its output is printed whole when it ends. Then the doctests.
jobs="${MESH_TEST_JOBS:-3}"
if ! [[ "$jobs" =~ ^[1-9][0-9]?$ ]]; then
  echo "MESH_TEST_JOBS must be a whole number from 1 to 99, not '$jobs'" >&2
  exit 2
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

log "cargo test --workspace --no-run"
cargo test --workspace --no-run --message-format=json-render-diagnostics |
  jq -r 'select(.reason == "compiler-artifact" and .profile.test and .executable != null)
    | [.executable, (.manifest_path | rtrimstr("/Cargo.toml")), .target.src_path] | @tsv' \
  >"$work/binaries"

# Runs one test binary; prints its output whole, under a line that says how it ended.
run_binary() {
  local exe=$2 dir=$3 src=$4 out="$work/$1.out" started status
  started=$(date +%s)
  status=0
  (cd "$dir" && "$exe") >"$out" 2>&1 || status=$?
  local verdict="passed"
  [ "$status" = 0 ] || verdict="FAILED (exit status $status)"
  {
    log "${src#"$PWD"/} ($(basename "$exe")): $verdict in $(($(date +%s) - started)) s"
    cat "$out"
  } | flock "$work/print" cat
  return "$status"
}

# The slowest binaries first (scripts/slow-tests), the others in cargo's order after them.
awk -F'\t' -v root="$PWD/" '
  NR == FNR { if ($0 !~ /^#/ && NF) rank[$0] = NR; next }
  {
    src = index($3, root) == 1 ? substr($3, length(root) + 1) : $3
    print ((src in rank) ? rank[src] : 1000 + FNR) "\t" $0
  }' scripts/slow-tests "$work/binaries" | sort -n -k1,1 | cut -f2- >"$work/ordered"

log "running $(wc -l <"$work/ordered") test binaries, $jobs at a time"
failed=0
running=0
index=0
while IFS=$'\t' read -r exe dir src; do
  if [ "$running" -ge "$jobs" ]; then
    wait -n || failed=$((failed + 1))
    running=$((running - 1))
  fi
  index=$((index + 1))
  run_binary "$index" "$exe" "$dir" "$src" &
  running=$((running + 1))
done <"$work/ordered"
while [ "$running" -gt 0 ]; do
  wait -n || failed=$((failed + 1))
  running=$((running - 1))
done
if [ "$failed" -gt 0 ]; then
  log "$failed test binaries FAILED (see their lines above)"
  exit 1
fi

log "cargo test --workspace --doc"
cargo test --workspace --doc
