#!/bin/bash
# uswap: start redis under uswap run, load, GET phase with perf
PORT=7399
U=${U:-/work/main/target/release/uswap}
rm -rf /tmp/uswap-probe-udir; mkdir -p /tmp/uswap-probe-udir
$U run --limit 128M --stats /tmp/uswap-probe-ustats.json -- /usr/bin/redis-server --bind 127.0.0.1 --port $PORT --save '' --dir /tmp/uswap-probe-udir >/tmp/uswap-probe-uredis.log 2>&1 &
RP=$!
for i in $(seq 50); do redis-cli -p $PORT ping >/dev/null 2>&1 && break; sleep 0.2; done
python3 "$(dirname "$0")/load.py" 402653 $PORT
redis-benchmark -p $PORT -t get -n 100000 -r 402653 -c 8 -q >/dev/null 2>&1
if [ -n "$PERF" ]; then perf record -a -g -o /tmp/uswap-probe-perf.data -- sleep 6 >/dev/null 2>&1 & fi
redis-benchmark -p $PORT -t get -n 300000 -r 402653 -c 8 -q 2>&1 | tr '\r' '\n' | tail -2
wait %2 2>/dev/null
redis-cli -p $PORT shutdown nosave >/dev/null 2>&1; wait $RP
