# Plots the medians of test/load/scale.sh (see test/load/scale-summary.sh):
#   gnuplot -e "in='scale.tsv'; out='docs/scale.png'" test/load/scale.gp
# Columns: backlog label, batch notifications/s, batch p99 ms, single saves/s,
# single p99 ms, start-up s, RSS at start MiB.
set terminal pngcairo size 1100,760 font ",10"
set output out
set datafile separator "\t"
set style data linespoints
set grid ytics
set key top right
set multiplot layout 2,2 title "MessageHub ingest as the backlog and the recipients grow (embedded, over gRPC, 2 CPUs)"
set title "Saves of 1,000 over 100 recipients, 4 writers"
set ylabel "notifications/s"
set yrange [0:*]
plot in using 0:2:xtic(1) lw 2 pt 7 title "MessageHub"
set title "Saves of 1, 64 callers"
set ylabel "saves/s"
plot in using 0:4:xtic(1) lw 2 pt 7 title "MessageHub"
set title "p99 latency of a Save"
set ylabel "ms"
plot in using 0:3:xtic(1) lw 2 pt 7 title "Saves of 1,000", \
     in using 0:5:xtic(1) lw 2 pt 5 title "Saves of 1"
set title "Start-up and memory"
set ylabel "seconds"
set y2label "MiB"
set y2tics
set y2range [0:*]
plot in using 0:6:xtic(1) lw 2 pt 7 axes x1y1 title "start-up (s)", \
     in using 0:7:xtic(1) lw 2 pt 5 axes x1y2 title "RSS at start (MiB)"
unset multiplot
