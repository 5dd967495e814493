#!/usr/bin/env bash
# ghz scenarios against a running MessageHub, by server reflection.
#
#   test/load/ghz/run.sh ADDR OUTDIR
#
# Writes one ghz JSON report per scenario into OUTDIR (save-single.json,
# peek-new.json, dequeue.json, peek-empty.json). Every run is bounded in count
# (-n; ghz ignores -n when -z or -x is given, so those are not combined with
# it) and in time: each ghz process gets at most GHZ_Z and is then
# interrupted, which makes it stop and still write its report; peek-empty is
# bounded by -z alone. Ids of a run start with a random prefix, so runs
# against one hub do not collide.
#
# Settings (environment): GHZ (the ghz binary), GHZ_N (calls per count-bounded
# scenario, default 20000), GHZ_C (concurrent workers, 50), GHZ_Z (time bound,
# 60s), GHZ_EMPTY_Z (duration of peek-empty, 10s), GHZ_TOKEN (a bearer token, when the hub runs with --auth jwt; Save
# then needs the domain role and Peek/Dequeue the actor role, so with auth
# run the scenarios separately with fitting tokens).
set -euo pipefail

addr=${1:?usage: run.sh ADDR OUTDIR}
out=${2:?usage: run.sh ADDR OUTDIR}
GHZ=${GHZ:-ghz}
n=${GHZ_N:-20000}
c=${GHZ_C:-50}
z=${GHZ_Z:-60s}
mkdir -p "$out"

# 8 hex digits shared by every id of this run.
run=$(od -An -N4 -tx1 /dev/urandom | tr -d ' \n')
# Recipient i and the bundle id its peek asks for: one recipient per request
# number, so each peek cuts a new bundle and each dequeue finds one.
recipient="${run}-0000-4000-8000-{{printf \"%012d\" .RequestNumber}}"
bundle="${run}-0001-4000-8000-{{printf \"%012d\" .RequestNumber}}"

common=(--insecure --format json --connections 1)
if [[ -n "${GHZ_TOKEN:-}" ]]; then
  common+=(--metadata "{\"authorization\":\"Bearer ${GHZ_TOKEN}\"}")
fi

ghz_run() { # name call data-template extra-args...
  local name=$1 call=$2 data=$3
  shift 3
  echo "ghz: $name ($call)" >&2
  # ghz templates a data file as it is (-d must be plain JSON before
  # templating, which actions with quotes are not).
  printf '%s' "$data" >"$out/$name.data.tmpl"
  # ghz exits 1 when calls failed; the report says how many, so go on.
  timeout --signal=INT --kill-after=10s "$z" "$GHZ" "${common[@]}" --call "messagehub.v1.MessageHub.$call" -D "$out/$name.data.tmpl" \
    -o "$out/$name.json" "$@" "$addr" || echo "ghz: $name reported errors" >&2
}

# 1. Save, one notification per call, each to its own recipient.
ghz_run save-single Save \
  '{"notifications":[{"id":"{{newUUID}}","recipient":"'"$recipient"'","origin":"DOMAIN_TIME_SERIES","contentType":"TimeSeries","supportsBundling":true,"weight":1}]}' \
  -n "$n" -c "$c"

# 2. Peek: recipient i has one notification, so every call cuts a new
#    one-notification bundle with the id the request names.
ghz_run peek-new Peek '{"recipient":"'"$recipient"'","bundleId":"'"$bundle"'"}' -n "$n" -c "$c"

# 3. Dequeue each of those bundles once.
ghz_run dequeue Dequeue '{"recipient":"'"$recipient"'","bundleId":"'"$bundle"'"}' -n "$n" -c "$c"

# 4. Peek of a recipient with nothing pending (the commonest call of an idle
#    actor), for a fixed time.
ghz_run peek-empty Peek '{"recipient":"{{newUUID}}"}' -z "${GHZ_EMPTY_Z:-10s}" --duration-stop=wait -c "$c"
