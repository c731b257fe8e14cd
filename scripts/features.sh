#!/usr/bin/env bash
# Every feature of every published crate compiles: each crate with no features, with each
# feature alone, and with all of them (what `cargo hack --each-feature` does, without the
# install). A feature's code that only some build turns on (the SDK's `otlp`, say) is then
# compiled by CI whatever the workspace's own builds unify.
#
# `cargo check` only: the compiler's front end, each combination's artifacts kept apart in
# the target dir, so a second run checks only what changed.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v jq >/dev/null 2>&1; then
  echo "scripts/features.sh needs jq (Debian: apt-get install jq)" >&2
  exit 1
fi

log() { printf '== %s %s\n' "$(date +%T)" "$*"; }

# Published crates (no `publish = false`) that declare features, with those features.
cargo metadata --format-version 1 --no-deps |
  jq -r '.packages[] | select(.publish != [])
    | [.name, (.features | keys | map(select(. != "default")) | join(" "))] | @tsv' |
  while IFS=$'\t' read -r package features; do
    [ -n "$features" ] || continue
    log "$package: no features"
    cargo check -q -p "$package" --no-default-features
    for feature in $features; do
      log "$package: --features $feature alone"
      cargo check -q -p "$package" --no-default-features --features "$feature"
    done
    log "$package: --all-features"
    cargo check -q -p "$package" --all-features
  done
log "every feature of every published crate compiles"
