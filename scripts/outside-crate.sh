#!/usr/bin/env bash
# outside-crate.sh: checks tests/outside, a crate outside the workspace that depends on
# meshbus by path, the way a new user's crate does: with a lock of its own generated fresh
# (the newest versions compatible with mesh's requirements, not the workspace's Cargo.lock),
# `cargo check` only, RUSTFLAGS as they are. Fails when the check fails or when any warning
# comes from one of mesh's crates (a deprecation in a newer dependency, say).
#
# Reuses CARGO_TARGET_DIR when set (else tests/outside/target).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
outside=$root/tests/outside
manifest=$outside/Cargo.toml

rm -f "$outside/Cargo.lock"
cargo generate-lockfile --manifest-path "$manifest"

log=$(mktemp)
trap 'rm -f "$log"' EXIT
status=0
cargo check --manifest-path "$manifest" --color never 2>&1 | tee "$log" || status=$?
if [ "$status" -ne 0 ]; then
    echo "outside-crate: cargo check failed ($status)" >&2
    exit "$status"
fi
# A warning's location in one of mesh's crates, or cargo's count of a mesh crate's warnings
# ("warning: `meshbus-amqp` (lib) generated 2 warnings").
if grep -E -e "^ *--> .*crates/mesh[a-z0-9_-]*/" -e '^warning: `(meshbus|mesh)[a-z0-9_-]*` ' "$log" >&2; then
    echo "outside-crate: mesh's crates warn when built outside the workspace (above)" >&2
    exit 1
fi
echo "outside-crate: no warning from mesh's crates"
