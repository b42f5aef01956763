#!/bin/bash
# idle.sh USWAP_BINARY LABEL: CPU ticks over 8 s of the runner and of the uswap-scan thread
# while a Python process holding 100 MiB sleeps under `uswap run --limit 1G`.
B=$1
(setsid $B run --limit 1G -q -- /usr/bin/python3.11 -c "import time; a=bytearray(100<<20); time.sleep(12)" &)
sleep 2
R=$(pgrep -f "$B run --limit 1G -q -- /usr/bin/python3.11" | head -1)
P=$(pgrep -f "^/usr/bin/python3.11 -c import time" | head -1)
scan() { for t in /proc/$P/task/*; do [ "$(cat $t/comm)" = uswap-scan ] && awk '{print $14+$15}' $t/stat; done; }
a=$(awk '{print $14+$15}' /proc/$R/stat); s0=$(scan)
sleep 8
b=$(awk '{print $14+$15}' /proc/$R/stat); s1=$(scan)
echo "$2: runner $((b-a)) ticks, scan thread $((s1-s0)) ticks in 8 s"
sleep 3
