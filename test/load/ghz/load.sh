#!/usr/bin/env bash
# make load: builds messagehub, runs the native load tool (test/load, which
# starts its own hub per scenario) and the ghz scenarios of run.sh against a
# hub started here on loopback with a temporary data dir, then prints the
# ghz table. Reports are kept in $LOAD_OUT (default: a temporary folder,
# printed at the end).
#
# Settings (environment): GHZ, GHZ_N, GHZ_C, GHZ_Z, GHZ_EMPTY_Z (see run.sh),
# LOAD_DURATION (each native scenario's measured phase, default 5s),
# LOAD_SCENARIOS (native scenarios, default all; "none" skips the tool).
set -euo pipefail
cd "$(dirname "$0")/../../.."

export MESSAGEHUB_HTTP_ADDR=${MESSAGEHUB_HTTP_ADDR:-127.0.0.1:0}
work=$(mktemp -d "${TMPDIR:-/tmp}/messagehub-load-XXXXXX")
out=${LOAD_OUT:-$work/reports}
mkdir -p "$out"
pid=
cleanup() {
  if [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  fi
  rm -rf "$work/data" "$work/messagehub"
}
trap cleanup EXIT

echo "== building messagehub" >&2
go build -o "$work/messagehub" ./cmd/messagehub

scenarios=${LOAD_SCENARIOS:-all}
if [[ "$scenarios" != none ]]; then
  echo "== native load tool: $scenarios, ${LOAD_DURATION:-5s} each" >&2
  go run ./test/load -spawn -server-bin "$work/messagehub" -scenario "$scenarios" \
    -duration "${LOAD_DURATION:-5s}" -json | tee "$out/native.txt"
fi

echo "== starting a hub for ghz" >&2
"$work/messagehub" --grpc-addr 127.0.0.1:0 --http-addr 127.0.0.1:0 --data-dir "$work/data" \
  2>"$work/hub.log" &
pid=$!
addr=
for _ in $(seq 600); do
  addr=$(sed -n 's/.*"msg":"listening".*"grpc_addr":"\([^"]*\)".*/\1/p' "$work/hub.log" | head -n1)
  [[ -n "$addr" ]] && break
  kill -0 "$pid" 2>/dev/null || { cat "$work/hub.log" >&2; exit 1; }
  sleep 0.1
done
[[ -n "$addr" ]] || { echo "the hub did not start" >&2; cat "$work/hub.log" >&2; exit 1; }
echo "hub on $addr" >&2

test/load/ghz/run.sh "$addr" "$out"

echo
echo "ghz ($(nproc) CPUs, n=${GHZ_N:-20000}, c=${GHZ_C:-50}; client and hub on one machine):"
status=0
go run ./test/load/ghz/summary "$out"/save-single.json "$out"/peek-new.json "$out"/dequeue.json "$out"/peek-empty.json || status=$?
echo
echo "reports: $out" >&2
exit "$status"
