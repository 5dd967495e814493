#!/bin/sh
# Ingest side by side: PostgreSQL 15 (durable: fsync=on,
# synchronous_commit=on) and MessageHub (embedded store, over gRPC, spawned by
# the load tool), the same two workloads, in one run on one machine:
#   save-spread: Saves of 1,000 over 100 recipients (10 each), 4 writers
#   save-single: Saves of 1, 64 callers
# PostgreSQL runs as a private cluster on 127.0.0.1 in a temporary directory,
# stopped and removed at the end. Needs PostgreSQL's server binaries
# (Debian: apt-get install postgresql; PGBIN defaults to /usr/lib/postgresql/15/bin).
# As root, the cluster runs as the user "postgres".
#
#   test/load/postgres/run.sh [duration, default 5s]
set -eu
DURATION=${1:-5s}
PGBIN=${PGBIN:-/usr/lib/postgresql/15/bin}
ROOT=$(cd "$(dirname "$0")/../../.." && pwd)
TMP=$(mktemp -d)
PORT=${PGPORT:-55432}
as_pg() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
cleanup() {
	as_pg "$PGBIN/pg_ctl" -D "$TMP/pg" -m fast -w stop >/dev/null 2>&1 || true
	rm -rf "$TMP"
}
trap cleanup EXIT INT TERM
[ "$(id -u)" = 0 ] && chown postgres "$TMP"

# The build measured: the checkout's commit, "-dirty" with uncommitted changes.
echo "# $(date -u +%FT%TZ) $(git -C "$ROOT" describe --always --dirty 2>/dev/null || echo unknown) $(uptime)" >&2
(cd "$ROOT" && go build -o "$TMP/messagehub" ./cmd/messagehub && go build -o "$TMP/load" ./test/load)
(cd "$ROOT/test/load/postgres" && go build -o "$TMP/pgload" .)

as_pg "$PGBIN/initdb" -D "$TMP/pg" -U postgres -A trust >/dev/null
as_pg "$PGBIN/pg_ctl" -D "$TMP/pg" -l "$TMP/pg.log" -w \
	-o "-c listen_addresses=127.0.0.1 -p $PORT -k $TMP -c fsync=on -c synchronous_commit=on -c max_connections=100 -c shared_buffers=256MB" start >/dev/null
DSN="postgres://postgres@127.0.0.1:$PORT/postgres?sslmode=disable"

# Both clients run their garbage collector at GOGC=400, as the load tool
# does by itself: each takes less of the CPUs the servers need.
GOGC=${GOGC:-400} "$TMP/pgload" -dsn "$DSN" -scenario save-spread -duration "$DURATION"
GOGC=${GOGC:-400} "$TMP/pgload" -dsn "$DSN" -scenario save-single -duration "$DURATION"
L="$TMP/load -spawn -server-bin $TMP/messagehub -json -duration $DURATION"
$L -scenario save-batch -concurrency 4 -recipients 100 -spread | grep '^{'
$L -scenario save-single | grep '^{'
