#!/usr/bin/env bash
# A Citus cluster on loopback for Feed's Citus tier: a coordinator on
# 127.0.0.1:9700, workers on 9701 and 9702, and a spare worker on 9703 that
# the template does not register (a test adds it, as an operator adds a
# machine), each a PostgreSQL 15 of its
# own under $CITUS_ROOT (default /tmp/feed-citus), run as the postgres user,
# trust authentication on 127.0.0.1 only, no TLS, no fsync. Nothing here is
# for production.
#
#   cluster.sh install   put the Citus 13.2.2 build next to this script
#                        into this machine's PostgreSQL 15 (if it lacks it)
#   cluster.sh start     create (first time) and start the three nodes, and
#                        the template database feed_citus: the extension on
#                        every node, the workers registered (idempotent)
#   cluster.sh stop      stop the three nodes
#   cluster.sh check     exit 0 when every node holds the template
#   cluster.sh wipe      stop, then delete $CITUS_ROOT
#
# The coordinator also serves TLS with a self-signed X.509 v1 certificate,
# the kind Citus makes when it turns TLS on by itself, so that a test sees
# what Feed says of a URL without sslmode=disable; the other tests disable
# TLS in their URLs.
#
# Tests make a database per test with
# `CREATE DATABASE x TEMPLATE feed_citus` on each node (testkit's Citus
# backend). The build: Citus v13.2.2 from its sources, configured and made
# against PostgreSQL 15 with `build-pg15.20.patch` applied (15.20 declares
# a function that Citus's compatibility header also defines).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=${CITUS_ROOT:-/tmp/feed-citus}
bin=/usr/lib/postgresql/15/bin
ports=(9700 9701 9702 9703)
coordinator=${ports[0]}
# Registered in the template; the last port is the spare.
workers=(9701 9702)
template=feed_citus

as_postgres() {
  if [ "$(id -un)" = postgres ]; then
    "$@"
  else
    # Citus connects between nodes with libpq, which reads the home of the
    # environment it runs in: it must be postgres's own, not the caller's.
    setpriv --reuid=postgres --regid=postgres --init-groups -- \
      env HOME="$(getent passwd postgres | cut -d: -f6)" USER=postgres "$@"
  fi
}

sql() { # port database statement
  PGOPTIONS="-c client_min_messages=warning" as_postgres "$bin/psql" -X -q \
    -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$1" -U postgres -d "$2" -Atc "$3"
}

install() {
  if [ -f "$(pg_config --sharedir)/extension/citus.control" ]; then
    return 0
  fi
  local d
  d=$(mktemp -d)
  tar -xzf "$here/citus-13.2.2-pg15-amd64.tar.gz" -C "$d"
  cp -r "$d/lib/." "$(pg_config --pkglibdir)/"
  cp "$d/extension/"* "$(pg_config --sharedir)/extension/"
  rm -rf "$d"
}

node_dir() { echo "$root/node-$1"; }

init_node() { # port
  local dir
  dir=$(node_dir "$1")
  [ -f "$dir/PG_VERSION" ] && return 0
  as_postgres "$bin/initdb" -D "$dir" -U postgres --auth=trust --no-sync \
    -E UTF8 --locale=C.UTF-8 >"$root/initdb-$1.log"
  cat >>"$dir/postgresql.conf" <<EOF
listen_addresses = '127.0.0.1'
port = $1
unix_socket_directories = '$root/sockets'
# Which statements ran on one worker: citus_stat_statements.
shared_preload_libraries = 'citus,pg_stat_statements'
citus.stat_statements_track = 'all'
# Citus's default asks for TLS between nodes and makes a self-signed X.509
# v1 certificate, which rustls refuses; this cluster serves no TLS.
citus.node_conninfo = 'sslmode=prefer'
max_connections = 300
max_prepared_transactions = 300
shared_buffers = 64MB
wal_level = logical
fsync = off
synchronous_commit = off
full_page_writes = off
log_min_messages = warning
EOF
  printf 'local all all trust\nhost all all 127.0.0.1/32 trust\n' >"$dir/pg_hba.conf"
}

# A self-signed X.509 v1 certificate on the coordinator, and TLS on.
tls_on_coordinator() {
  local dir
  dir=$(node_dir "$coordinator")
  [ -f "$dir/server.crt" ] && return 0
  openssl req -new -newkey rsa:2048 -nodes -subj /CN=localhost \
    -keyout "$dir/server.key" -out "$dir/server.csr" 2>/dev/null
  # `x509 -req` without extensions signs a version 1 certificate.
  openssl x509 -req -in "$dir/server.csr" -signkey "$dir/server.key" -days 3650 \
    -out "$dir/server.crt" 2>/dev/null
  rm -f "$dir/server.csr"
  chown postgres:postgres "$dir/server.key" "$dir/server.crt"
  chmod 0600 "$dir/server.key"
  sql "$coordinator" postgres "ALTER SYSTEM SET ssl = on"
  sql "$coordinator" postgres "SELECT pg_reload_conf()" >/dev/null
}

start() {
  install
  mkdir -p "$root/sockets"
  chown postgres:postgres "$root" "$root/sockets"
  chmod 0700 "$root/sockets"
  local p
  for p in "${ports[@]}"; do
    init_node "$p"
    if ! as_postgres "$bin/pg_ctl" -D "$(node_dir "$p")" status >/dev/null 2>&1; then
      as_postgres "$bin/pg_ctl" -D "$(node_dir "$p")" -l "$root/node-$p.log" -w -t 60 start >/dev/null
    fi
  done
  tls_on_coordinator
  local fresh=()
  for p in "${ports[@]}"; do
    if [ "$(sql "$p" postgres "SELECT count(*) FROM pg_database WHERE datname = '$template'")" = 0 ]; then
      sql "$p" postgres "CREATE DATABASE $template"
      sql "$p" "$template" "CREATE EXTENSION citus"
      fresh+=("$p")
    fi
  done
  [ ${#fresh[@]} = 0 ] && return 0
  if [[ " ${fresh[*]} " == *" $coordinator "* ]]; then
    sql "$coordinator" "$template" "CREATE EXTENSION pg_stat_statements"
    sql "$coordinator" "$template" "SELECT citus_set_coordinator_host('127.0.0.1', $coordinator)" >/dev/null
    for p in "${workers[@]}"; do
      sql "$coordinator" "$template" "SELECT citus_add_node('127.0.0.1', $p)" >/dev/null
    done
  fi
  # A template must take no connections (Citus's maintenance daemon holds one).
  for p in "${fresh[@]}"; do
    sql "$p" postgres "ALTER DATABASE $template WITH ALLOW_CONNECTIONS false IS_TEMPLATE true"
    sql "$p" postgres "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE datname = '$template'" >/dev/null
  done
}

stop() {
  local p
  for p in "${ports[@]}"; do
    if [ -f "$(node_dir "$p")/postmaster.pid" ]; then
      as_postgres "$bin/pg_ctl" -D "$(node_dir "$p")" -m fast -w stop >/dev/null || true
    fi
  done
}

check() {
  local p
  for p in "${ports[@]}"; do
    [ "$(sql "$p" postgres "SELECT count(*) FROM pg_database WHERE datname = '$template'" 2>/dev/null)" = 1 ] || return 1
  done
}

case "${1:-}" in
  install) install ;;
  start) start && echo "citus: coordinator 127.0.0.1:$coordinator, workers ${workers[*]}, spare ${ports[-1]}" ;;
  stop) stop ;;
  check) check ;;
  wipe) stop; rm -rf "$root" ;;
  *) echo "usage: $0 install|start|stop|check|wipe" >&2; exit 2 ;;
esac
