#!/usr/bin/env bash
# A highly available PostgreSQL 15 on loopback, for failover tests and for
# trying Feed against one by hand: etcd 3.4 (v3 API), three PostgreSQL
# nodes managed by Patroni 3.0 (synchronous_mode, pg_rewind, a crashed
# primary fails over at once), and HAProxy routing to the primary with
# Patroni's `GET /primary` check.
#
#   cluster.sh check                  exit 0 when everything needed is installed
#   cluster.sh start DIR              bootstrap a cluster with its data in DIR
#   cluster.sh stop DIR               stop it (replicas first) and remove DIR
#   cluster.sh leader DIR             print the leader's name (pg1, pg2 or pg3)
#   cluster.sh wait DIR               wait until a leader and two streaming replicas
#   cluster.sh switchover DIR         a planned switchover (as patronictl's)
#   cluster.sh kill DIR               SIGKILL the leader's postmaster
#   cluster.sh haproxy DIR 'COMMAND'  a command on HAProxy's admin socket
#
# Ports (environment, defaults in brackets): PG_PORT [15432] and the next
# two for the nodes, REST_PORT [18008] and the next two for Patroni's REST
# API, HAPROXY_PORT [15000] (sessions shut down when a node is marked down,
# backend `cut`) and the next one (sessions kept, backend `keep`),
# ETCD_PORT [12379] and the next one (peer). `start` writes them to
# DIR/env, which the other subcommands read. Run as root, PostgreSQL and
# Patroni run as user postgres. Debian: apt-get install patroni
# etcd-server etcd-client haproxy python3-etcd postgresql-15.
set -euo pipefail

PG_BIN=${PG_BIN:-/usr/lib/postgresql/15/bin}
PY=/usr/bin/python3
NODES=(pg1 pg2 pg3)

die() { echo "cluster.sh: $*" >&2; exit 1; }

# Runs a command as postgres when started as root.
as_pg() {
  if [ "$(id -u)" = 0 ]; then
    setpriv --reuid=postgres --regid=postgres --init-groups -- env HOME="$DIR" "$@"
  else
    "$@"
  fi
}

# The same prefix as a list, for a command started in the background
# (whose pid is then the command's own).
AS_PG=()
if [ "$(id -u)" = 0 ]; then
  AS_PG=(setpriv --reuid=postgres --regid=postgres --init-groups --)
fi

check() {
  local missing=()
  for b in patroni patronictl etcd etcdctl haproxy; do
    command -v "$b" >/dev/null 2>&1 || missing+=("$b")
  done
  [ -x "$PG_BIN/postgres" ] || missing+=("$PG_BIN/postgres")
  $PY -c 'import etcd' >/dev/null 2>&1 || missing+=(python3-etcd)
  if [ "$(id -u)" = 0 ] && ! id postgres >/dev/null 2>&1; then missing+=("user postgres"); fi
  if [ ${#missing[@]} -gt 0 ]; then
    echo "missing: ${missing[*]}"
    return 1
  fi
}

load() {
  [ -f "$DIR/env" ] || die "$DIR holds no cluster"
  # shellcheck disable=SC1091
  . "$DIR/env"
}

port_of() { # node -> PostgreSQL port
  echo $((PG_PORT + ${1#pg} - 1))
}

rest_of() { # node -> REST port
  echo $((REST_PORT + ${1#pg} - 1))
}

# Polls `cond` (a command) every 0.2 s up to $1 seconds.
wait_until() {
  local limit=$1 what=$2
  shift 2
  local end=$((SECONDS + limit))
  until "$@"; do
    [ $SECONDS -lt $end ] || die "timed out after ${limit}s waiting for $what"
    sleep 0.2
  done
}

cluster_json() {
  local n
  for n in "${NODES[@]}"; do
    if curl -fsS --max-time 2 "http://127.0.0.1:$(rest_of "$n")/cluster" 2>/dev/null; then
      return 0
    fi
  done
  return 1
}

leader() {
  cluster_json | $PY -c '
import json, sys
for m in json.load(sys.stdin)["members"]:
    if m["role"] == "leader" and m["state"] == "running":
        print(m["name"]); break
else:
    sys.exit(1)'
}

# A running leader that takes writes, a synchronous standby, and two
# streaming replicas.
healthy() {
  local l
  l=$(leader 2>/dev/null) || return 1
  curl -fsS --max-time 2 -o /dev/null "http://127.0.0.1:$(rest_of "$l")/primary" || return 1
  cluster_json | $PY -c '
import json, sys
ms = json.load(sys.stdin)["members"]
ok = [m for m in ms if m["role"] in ("replica", "sync_standby") and m["state"] in ("running", "streaming")]
sync = [m for m in ms if m["role"] == "sync_standby"]
sys.exit(0 if len(ok) == 2 and sync else 1)'
}

node_config() { # node
  local n=$1
  cat <<EOF
scope: feed
namespace: /feed/
name: $n
log:
  level: INFO
restapi:
  listen: 127.0.0.1:$(rest_of "$n")
  connect_address: 127.0.0.1:$(rest_of "$n")
etcd3:
  hosts: 127.0.0.1:$ETCD_PORT
bootstrap:
  dcs:
    ttl: 10
    loop_wait: 1
    retry_timeout: 4
    maximum_lag_on_failover: 1048576
    primary_start_timeout: 0
    synchronous_mode: true
    postgresql:
      use_pg_rewind: true
      use_slots: true
      parameters:
        wal_log_hints: 'on'
        max_connections: 200
        max_wal_senders: 10
        max_replication_slots: 10
        wal_keep_size: 128MB
        hot_standby: 'on'
  initdb:
    - encoding: UTF8
    - auth: trust
postgresql:
  listen: 127.0.0.1:$(port_of "$n")
  connect_address: 127.0.0.1:$(port_of "$n")
  data_dir: $DIR/$n
  bin_dir: $PG_BIN
  pgpass: $DIR/$n.pgpass
  authentication:
    superuser: {username: postgres, password: postgres}
    replication: {username: replicator, password: replicator}
    rewind: {username: rewinder, password: rewinder}
  pg_hba:
    - local all all trust
    - host all all 127.0.0.1/32 trust
    - host replication all 127.0.0.1/32 trust
  parameters:
    unix_socket_directories: '$DIR'
    shared_buffers: 64MB
    logging_collector: 'on'
    log_directory: '$DIR/$n.log.d'
    log_min_messages: warning
EOF
}

start_patroni() { # node
  local n=$1
  HOME="$DIR" "${AS_PG[@]}" setsid patroni "$DIR/$n.yml" >"$DIR/$n.patroni.log" 2>&1 </dev/null &
  echo $! >"$DIR/$n.patroni.pid"
}

haproxy_config() {
  local n
  cat <<EOF
global
  maxconn 2000
  stats socket $DIR/haproxy.sock mode 600 level admin
defaults
  mode tcp
  timeout connect 2s
  timeout client 30m
  timeout server 30m
  timeout check 2s
listen cut
  bind 127.0.0.1:$HAPROXY_PORT
  option httpchk GET /primary
  http-check expect status 200
  default-server inter 1s fall 2 rise 1 on-marked-down shutdown-sessions
EOF
  for n in "${NODES[@]}"; do
    echo "  server $n 127.0.0.1:$(port_of "$n") check port $(rest_of "$n")"
  done
  cat <<EOF
listen keep
  bind 127.0.0.1:$((HAPROXY_PORT + 1))
  option httpchk GET /primary
  http-check expect status 200
  default-server inter 1s fall 2 rise 1
EOF
  for n in "${NODES[@]}"; do
    echo "  server $n 127.0.0.1:$(port_of "$n") check port $(rest_of "$n")"
  done
}

start() {
  check >/dev/null || die "$(check)"
  mkdir -p "$DIR"
  cat >"$DIR/env" <<EOF
PG_PORT=${PG_PORT:-15432}
REST_PORT=${REST_PORT:-18008}
HAPROXY_PORT=${HAPROXY_PORT:-15000}
ETCD_PORT=${ETCD_PORT:-12379}
EOF
  load
  if [ "$(id -u)" = 0 ]; then chown postgres: "$DIR"; fi
  chmod 700 "$DIR"

  setsid etcd --name feed --data-dir "$DIR/etcd" \
    --listen-client-urls "http://127.0.0.1:$ETCD_PORT" \
    --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
    --listen-peer-urls "http://127.0.0.1:$((ETCD_PORT + 1))" \
    --initial-advertise-peer-urls "http://127.0.0.1:$((ETCD_PORT + 1))" \
    --initial-cluster "feed=http://127.0.0.1:$((ETCD_PORT + 1))" \
    >"$DIR/etcd.log" 2>&1 < /dev/null &
  echo $! >"$DIR/etcd.pid"
  wait_until 30 etcd etcdctl --endpoints "127.0.0.1:$ETCD_PORT" endpoint health >/dev/null 2>&1

  local n
  for n in "${NODES[@]}"; do
    node_config "$n" >"$DIR/$n.yml"
    if [ "$(id -u)" = 0 ]; then chown postgres: "$DIR/$n.yml"; fi
  done
  # The first node bootstraps; the others copy it.
  start_patroni pg1
  wait_until 60 "pg1 to bootstrap" curl -fs --max-time 1 -o /dev/null "http://127.0.0.1:$(rest_of pg1)/primary"
  start_patroni pg2
  start_patroni pg3

  haproxy_config >"$DIR/haproxy.cfg"
  haproxy -D -f "$DIR/haproxy.cfg" -p "$DIR/haproxy.pid" >"$DIR/haproxy.log" 2>&1
  wait_until 90 "two streaming replicas" healthy
}

# Stops a pid (from a file) with SIGTERM, waiting up to $2 seconds, then SIGKILL.
stop_pid() {
  local file=$1 limit=$2 pid
  [ -f "$file" ] || return 0
  pid=$(cat "$file")
  kill -TERM "$pid" 2>/dev/null || return 0
  local end=$((SECONDS + limit))
  while kill -0 "$pid" 2>/dev/null && [ $SECONDS -lt $end ]; do sleep 0.2; done
  kill -KILL "$pid" 2>/dev/null || true
}

# A node's postmaster (and so its backends) by the pid it wrote.
kill_postmaster() { # node signal
  local pidfile="$DIR/$1/postmaster.pid"
  [ -f "$pidfile" ] || return 0
  kill "-$2" "$(head -1 "$pidfile")" 2>/dev/null || true
}

stop() {
  [ -f "$DIR/env" ] || { rm -rf "$DIR"; return 0; }
  load
  local l n
  l=$(leader 2>/dev/null) || l=""
  # Replicas first: a leader stopped first hands its lock to a replica.
  for n in "${NODES[@]}"; do
    [ "$n" = "$l" ] || stop_pid "$DIR/$n.patroni.pid" 30 &
  done
  wait
  [ -z "$l" ] || stop_pid "$DIR/$l.patroni.pid" 30
  for n in "${NODES[@]}"; do kill_postmaster "$n" KILL; done
  stop_pid "$DIR/haproxy.pid" 5
  stop_pid "$DIR/etcd.pid" 10
  rm -rf "$DIR"
}

# What `patronictl switchover --leader L --force` asks of the leader's REST
# API, without its Python start-up (seconds on a busy machine).
switchover() {
  load
  local l
  l=$(leader) || die "no leader"
  curl -sS --max-time 60 -XPOST -d "{\"leader\": \"$l\"}" \
    "http://127.0.0.1:$(rest_of "$l")/switchover" >"$DIR/switchover.log" 2>&1 \
    || die "switchover failed: $(cat "$DIR/switchover.log")"
  grep -q "Successfully" "$DIR/switchover.log" || die "switchover failed: $(cat "$DIR/switchover.log")"
  wait_until 60 "a new leader" new_leader "$l"
}

new_leader() { # old
  local l
  l=$(leader 2>/dev/null) || return 1
  [ "$l" != "$1" ] && curl -fsS --max-time 1 -o /dev/null "http://127.0.0.1:$(rest_of "$l")/primary"
}

kill_leader() {
  load
  local l
  l=$(leader) || die "no leader"
  kill_postmaster "$l" KILL
  echo "$l"
}

haproxy_cmd() {
  load
  $PY - "$DIR/haproxy.sock" "$1" <<'EOF'
import socket, sys
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
s.sendall(sys.argv[2].encode() + b"\n")
out = b""
while chunk := s.recv(65536):
    out += chunk
sys.stdout.write(out.decode())
EOF
}

cmd=${1:-}
DIR=${2:-}
case "$cmd" in
  check) check ;;
  start | stop | leader | wait | switchover | kill | haproxy)
    [ -n "$DIR" ] || die "usage: cluster.sh $cmd DIR"
    DIR=$(realpath -m "$DIR")
    case "$cmd" in
      start) start ;;
      stop) stop ;;
      leader) load; leader ;;
      wait) load; wait_until "${3:-120}" "a healthy cluster" healthy ;;
      switchover) switchover ;;
      kill) kill_leader ;;
      haproxy) haproxy_cmd "${3:?a command}" ;;
    esac
    ;;
  *) sed -n '2,24p' "$0" >&2; exit 2 ;;
esac
