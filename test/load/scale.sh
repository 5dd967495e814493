#!/bin/sh
# Ingest as the backlog and the recipient count grow (issue 9). Builds the
# backlogs once (into $SCALE_DIR, default /tmp/messagehub-scale: about 1.4 GB
# for 10 M notifications, and as much again for a copy; the fill takes
# minutes), then for each one and each run: copies it, starts a hub on the
# copy (start-up time and RSS are reported) and measures Saves of 1,000 over
# 100 recipients with 4 writers and Saves of 1 with 64 callers. Backlogs and
# measurements take their recipients from one seed (-recipient-seed), so the
# saves go to recipients that hold a backlog: the first 100 (or 64) of those
# it was spread over.
# Prints one JSON object per measurement.
#
#   test/load/scale.sh [runs, default 3] [duration, default 5s]
set -eu
RUNS=${1:-3}
DURATION=${2:-5s}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
D=${SCALE_DIR:-/tmp/messagehub-scale}
mkdir -p "$D"
(cd "$ROOT" && go build -o "$D/messagehub" ./cmd/messagehub && go build -o "$D/load" ./test/load)
L="$D/load -spawn -server-bin $D/messagehub -json -prep-timeout 15m -recipient-seed 1"

# name notifications recipients
for set in "0 0 0" "1m-100 1000000 100" "1m-10k 1000000 10000" "10m-10k 10000000 10000"; do
	set -- $set
	[ "$1" = 0 ] && mkdir -p "$D/backlog-0" && continue
	[ -d "$D/backlog-$1" ] && continue
	mkdir "$D/backlog-$1.tmp"
	$L -data-dir "$D/backlog-$1.tmp" -scenario backlog -notifications "$2" -recipients "$3" | grep '^{' >&2
	mv "$D/backlog-$1.tmp" "$D/backlog-$1"
done

# The build measured: the checkout's commit, "-dirty" with uncommitted changes.
echo "# $(date -u +%FT%TZ) $(git -C "$ROOT" describe --always --dirty 2>/dev/null || echo unknown) $(uptime)" >&2
for run in $(seq "$RUNS"); do
	for set in 0 1m-100 1m-10k 10m-10k; do
		for s in "save-batch -spread -concurrency 4 -recipients 100" "save-single"; do
			# Each run on a fresh copy: measured in place, the 10 M backlog
			# grew by each run's saves (about 1.5 M), and from one use of
			# the script to the next, to twice its size.
			rm -rf "$D/run" && cp -a "$D/backlog-$set" "$D/run"
			$L -data-dir "$D/run" -duration "$DURATION" -scenario $s | grep '^{' |
				sed "s/^{/{\"backlog\":\"$set\",\"run\":$run,/"
		done
	done
done
rm -rf "$D/run"
