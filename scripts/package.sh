#!/usr/bin/env bash
# Packages every published crate (`cargo package`), then checks that each compiles from its
# package, against the packaged forms of the workspace crates it depends on: what a user
# gets from crates.io, with nothing the workspace has and the packages lack (a file left
# out, a path only the workspace resolves, a dev-only crate).
#
# `cargo package`'s own verification builds each package as a workspace of its own, so the
# dependencies are compiled again for every set of features, in full: minutes. Here the
# packages are unpacked side by side as one workspace, each patched in for its crates.io
# name, and checked (`cargo check`: the compiler's front end, no code generation) in one
# pass, the dependencies once.
#
# The .crate files are left in $CARGO_TARGET_DIR/package (target/package without it).
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(meshbus-amqprs meshbus-core meshbus-files meshbus-memory meshbus-amqp meshbus-admin meshbus meshbus-logs meshbus-audit
  meshbus-contract meshbus-outbox meshbus-saga meshbus-console meshbus-cli)
version=$(awk -F'"' '/^version = "/ { print $2; exit }' Cargo.toml)
target_dir="${CARGO_TARGET_DIR:-$PWD/target}"
out="$target_dir/package"
unpacked="$out/unpacked"

rm -f "$out"/meshbus*.crate
cargo package --no-verify "${packages[@]/#/--package=}"

# One workspace of the unpacked packages, each standing in for its crates.io name, resolved
# against the workspace's lock file (the same dependency versions as every other build).
rm -rf "$unpacked"
mkdir -p "$unpacked"
{
  echo '[workspace]'
  echo 'resolver = "2"'
  echo 'members = ['
  printf '  "%s",\n' "${packages[@]/%/-$version}"
  echo ']'
  echo
  echo '[patch.crates-io]'
  for package in "${packages[@]}"; do
    # Now as their times: cargo sets every file of a package to one time in 2006, which
    # would leave a previous run's check of a changed crate looking fresh.
    tar -xzmf "$out/$package-$version.crate" -C "$unpacked"
    printf '%s = { path = "%s-%s" }\n' "$package" "$package" "$version"
  done
} >"$unpacked/Cargo.toml"
cp Cargo.lock "$unpacked/"
cargo check --manifest-path "$unpacked/Cargo.toml" --workspace
