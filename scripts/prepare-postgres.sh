#!/usr/bin/env bash
# Prepares a PostgreSQL server for the tests, as the README's test command promises: trust
# authentication for TCP logins from 127.0.0.1 and ::1, and a database named `test`. A fresh
# Debian server has neither (scram for TCP, no such database); a server that already has both
# is left as it is.
#
# It talks to the server over its Unix socket as the `postgres` superuser: as root it runs
# psql as the `postgres` system user (Debian's peer authentication lets that one in),
# otherwise as the calling user. The trust lines go first in the server's own hba file (the
# server names it), then the server reloads its configuration.
#
# Usage: bash scripts/prepare-postgres.sh [--port PORT] [--socket-dir DIR]
#   (defaults: 5432 and /var/run/postgresql, Debian's)
set -euo pipefail

port=5432
socket_dir=/var/run/postgresql
while [ $# -gt 0 ]; do
  case "$1" in
    --port) port=${2:?--port needs a value}; shift 2 ;;
    --socket-dir) socket_dir=${2:?--socket-dir needs a value}; shift 2 ;;
    *) echo "prepare-postgres.sh: unknown argument '$1' (see the usage at the top of the script)" >&2; exit 2 ;;
  esac
done
if ! [[ "$port" =~ ^[0-9]{1,5}$ ]]; then
  echo "prepare-postgres.sh: --port must be a port number, not '$port'" >&2
  exit 2
fi

# psql as the superuser over the socket; -X ignores a .psqlrc, -w never prompts.
as_superuser() {
  if [ "$(id -u)" = 0 ]; then
    runuser -u postgres -- psql -X -w -q -v ON_ERROR_STOP=1 -h "$socket_dir" -p "$port" -U postgres "$@"
  else
    psql -X -w -q -v ON_ERROR_STOP=1 -h "$socket_dir" -p "$port" -U postgres "$@"
  fi
}

# A TCP login as postgres, without a password, to the given database.
tcp_login() {
  PGPASSWORD='' PGPASSFILE=/dev/null psql -X -w -q -h 127.0.0.1 -p "$port" -U postgres -d "$1" -c 'select 1' >/dev/null 2>&1
}

if ! tcp_login postgres; then
  hba=$(as_superuser -d postgres -At -c 'show hba_file')
  if [ -z "$hba" ] || [ ! -f "$hba" ]; then
    echo "prepare-postgres.sh: the server on port $port did not name a readable hba file" >&2
    exit 1
  fi
  if [ ! -w "$hba" ]; then
    echo "prepare-postgres.sh: cannot write $hba: run this script as root or as the server's owner" >&2
    exit 1
  fi
  echo "prepare-postgres.sh: trust for TCP logins from 127.0.0.1 and ::1 (first lines of $hba)"
  {
    echo "# mesh tests (scripts/prepare-postgres.sh): trust for local TCP logins"
    echo "host all all 127.0.0.1/32 trust"
    echo "host all all ::1/128 trust"
    cat "$hba"
  } >"$hba.mesh-new"
  # Keep the file's owner and mode, then swap it in whole.
  chown --reference="$hba" "$hba.mesh-new"
  chmod --reference="$hba" "$hba.mesh-new"
  mv "$hba.mesh-new" "$hba"
  as_superuser -d postgres -c 'select pg_reload_conf()' >/dev/null
  # The reload is asynchronous: wait (bounded) until a TCP login gets in.
  for _ in $(seq 1 50); do
    tcp_login postgres && break
    sleep 0.2
  done
  if ! tcp_login postgres; then
    echo "prepare-postgres.sh: TCP logins to port $port still need a password after the reload (see $hba)" >&2
    exit 1
  fi
fi

if [ "$(as_superuser -d postgres -At -c "select count(*) from pg_database where datname = 'test'")" = 0 ]; then
  echo "prepare-postgres.sh: creating the database test"
  as_superuser -d postgres -c 'create database test'
fi
tcp_login test
