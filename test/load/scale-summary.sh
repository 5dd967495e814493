#!/bin/sh
# Medians per backlog of scale.sh's JSON lines (stdin), as the TSV scale.gp
# plots: label, batch notifications/s, batch p99 ms, single saves/s, single
# p99 ms, start-up s (median over both scenarios' hubs), RSS at start MiB.
jq -rs '
  def med: sort | .[(length-1)/2|floor];
  def name: {"0":"empty","1m-100":"1 M, 100 rcpt","1m-10k":"1 M, 10k rcpt","10m-10k":"10 M, 10k rcpt"}[.];
  group_by(.backlog) | sort_by({"0":0,"1m-100":1,"1m-10k":2,"10m-10k":3}[.[0].backlog]) | .[] |
  (map(select(.scenario=="save-batch"))) as $b | (map(select(.scenario=="save-single"))) as $s |
  [(.[0].backlog|name),
   ($b|map(.metrics.notifications_per_s)|med|floor), ($b|map(.metrics.latency_p99_ms)|med),
   ($s|map(.metrics.requests_per_s)|med|floor), ($s|map(.metrics.latency_p99_ms)|med),
   (map(.metrics.hub_startup_s)|med), (map(.metrics.hub_rss_start_mib)|med)] | @tsv'
