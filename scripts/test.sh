#!/usr/bin/env bash
# The whole test suite, with what it needs brought up first: RabbitMQ on 127.0.0.1:5672
# (guest/guest) with the management plugin, the rabbitmq-server binary for the private
# nodes and clusters the fault tests start on other ports, and PostgreSQL on
# 127.0.0.1:5432 (trust auth for local TCP and a database `test`, set up by
# scripts/prepare-postgres.sh when missing) for the audit store's tests. Each is
# installed (Debian packages) and started only if it is missing; a running one is used as
# it is and never restarted. The tests of deploy/ need docker compose (or Debian's
# docker-compose) and systemd-analyze, and the console's browser tests Chromium and
# chromedriver, installed the same way.
#
# Without arguments, the test binaries run side by side (see below); extra arguments go to
# `cargo test`, which runs them one at a time (e.g. `bash scripts/test.sh -p meshbus-amqp`).
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '== %s %s\n' "$(date +%T)" "$*"; }

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

wait_port() {
  local port=$1 what=$2
  for _ in $(seq 1 120); do
    port_open "$port" && return 0
    sleep 1
  done
  echo "$what did not open port $port" >&2
  return 1
}

apt_install() {
  if [ "$(id -u)" != 0 ]; then
    echo "missing $*: install it (Debian: apt-get install $*) or run this script as root" >&2
    exit 1
  fi
  log "installing $*"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

command -v rabbitmq-server >/dev/null 2>&1 || apt_install rabbitmq-server

if ! port_open 5672; then
  log "starting RabbitMQ"
  rabbitmq-server -detached
  wait_port 5672 RabbitMQ
fi

# The management API lists bindings and arguments (stale-binding removal, topology checks).
if ! port_open 15672; then
  log "enabling the management plugin"
  rabbitmq-plugins enable rabbitmq_management >/dev/null
  wait_port 15672 "the management plugin"
fi

command -v pg_ctlcluster >/dev/null 2>&1 || apt_install postgresql

# The CLI's tests render the man pages `mesh man` writes, as `man` would.
command -v groff >/dev/null 2>&1 || apt_install groff-base

if ! port_open 5432; then
  log "starting PostgreSQL"
  for version in /etc/postgresql/*; do
    pg_ctlcluster --skip-systemctl-redirect "$(basename "$version")" main start || true
  done
  wait_port 5432 PostgreSQL
fi
# The tests log in over TCP without a password and use a database named `test`: a fresh
# Debian server has neither, a prepared one is left as it is.
bash scripts/prepare-postgres.sh

# The tests of deploy/ (mesh-deploy-check) resolve the compose file and verify the systemd
# unit: docker compose (the plugin, or Debian's docker-compose; no container engine is
# needed) and systemd-analyze.
if ! docker compose version >/dev/null 2>&1 && ! command -v docker-compose >/dev/null 2>&1; then
  apt_install --no-install-recommends docker-compose
fi
command -v systemd-analyze >/dev/null 2>&1 || apt_install systemd

# The partition tests put private RabbitMQ nodes in network namespaces of their own
# (iproute2's `ip netns`, veth links), which needs root or CAP_SYS_ADMIN and CAP_NET_ADMIN.
command -v ip >/dev/null 2>&1 || apt_install iproute2
probe="mesh-probe-$$"
if ! ip netns add "$probe" 2>"/tmp/$probe.err"; then
  echo "cannot create a network namespace ($(cat "/tmp/$probe.err")): the partition tests" \
    "need root (or CAP_SYS_ADMIN and CAP_NET_ADMIN); run the tests as root" >&2
  rm -f "/tmp/$probe.err"
  exit 1
fi
ip netns del "$probe"
rm -f "/tmp/$probe.err"

# The console's browser tests (crates/mesh-console/tests/browser.rs) drive a headless
# Chromium through chromedriver.
if [ ! -x /usr/bin/chromium ] || [ ! -x /usr/bin/chromedriver ]; then
  apt_install chromium chromium-driver
fi

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
command -v jq >/dev/null 2>&1 || apt_install jq
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

log "running $(wc -l <"$work/binaries") test binaries, $jobs at a time"
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
done <"$work/binaries"
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
