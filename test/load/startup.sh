#!/bin/sh
# Start-up of a hub on a data directory that holds a backlog (issue 9), two
# ways: after a clean stop, when the id filter saved at Close is loaded, and
# after a crash (SIGKILL), when every stored id is read to build it. Each
# start is the load tool's hub_startup_s (from starting the process to its
# listening) of a 1 s save-single run; one JSON object per start.
#
#   test/load/startup.sh DATA_DIR [runs, default 3]
set -eu
DIR=$1
RUNS=${2:-3}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT INT TERM
(cd "$ROOT" && go build -o "$TMP/messagehub" ./cmd/messagehub && go build -o "$TMP/load" ./test/load)
L="$TMP/load -spawn -server-bin $TMP/messagehub -data-dir $DIR -scenario save-single -duration 1s -json"

echo "# $(date -u +%FT%TZ) $(uptime)" >&2
$L >/dev/null # a clean stop first, so that a filter is saved
for run in $(seq "$RUNS"); do
	$L | grep '^{' | sed "s/^{/{\"start\":\"after a clean stop\",\"run\":$run,/"
	# Crash: start a hub, kill it once it listens.
	"$TMP/messagehub" --grpc-addr 127.0.0.1:0 --http-addr 127.0.0.1:0 --data-dir "$DIR" >"$TMP/hub.log" 2>&1 &
	pid=$!
	until grep -q '"listening"' "$TMP/hub.log"; do sleep 0.1; done
	kill -KILL "$pid"
	wait "$pid" 2>/dev/null || true
	$L | grep '^{' | sed "s/^{/{\"start\":\"after a crash\",\"run\":$run,/"
done
