#!/usr/bin/env bash
# Brings up what the tests need, installing (Debian packages) and starting only what is
# missing; a running service is used as it is and never restarted: RabbitMQ on
# 127.0.0.1:5672 (guest/guest) with the management plugin, the rabbitmq-server binary for
# the private nodes and clusters the fault tests start on other ports, PostgreSQL on
# 127.0.0.1:5432 (trust auth for local TCP and a database `test`, set up by
# scripts/prepare-postgres.sh when missing) for the audit store's tests, docker compose (or
# Debian's docker-compose) and systemd-analyze for the tests of deploy/, iproute2 and the
# right to create network namespaces for the partition tests, Chromium and chromedriver for
# the console's browser tests, groff for the man pages, jq for the scripts, Node with
# AsyncAPI's npm packages and Python's pika for the contract's test of AsyncAPI's tools.
#
# The README's test command (scripts/test.sh) runs it first; CI runs it once before its
# lanes, so no two package installs ever run at once.
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

# The contract's test of AsyncAPI's own tools (crates/mesh-contract/tests/official_tools.rs):
# Node with the npm packages locked in tests/asyncapi (@asyncapi/parser, @asyncapi/modelina),
# installed there by `npm ci` again only when the lock changed, and Python's pika.
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  apt_install nodejs npm
fi
lock_sum=$(sha256sum tests/asyncapi/package-lock.json | cut -d' ' -f1)
stamp=tests/asyncapi/node_modules/.mesh-lock-sha256
if [ "$(cat "$stamp" 2>/dev/null)" != "$lock_sum" ]; then
  log "installing the AsyncAPI tools (npm ci in tests/asyncapi)"
  # No install scripts: the packages need none to run.
  (cd tests/asyncapi && npm ci --no-audit --no-fund --ignore-scripts --loglevel=error)
  echo "$lock_sum" >"$stamp"
fi
if ! python3 -c 'import pika' >/dev/null 2>&1; then
  log "installing pika"
  python3 -m pip install --quiet 'pika>=1.3,<2' || apt_install python3-pika
fi

# The test script and scripts/features.sh read cargo's JSON output.
command -v jq >/dev/null 2>&1 || apt_install jq
log "what the tests need is installed and running"
