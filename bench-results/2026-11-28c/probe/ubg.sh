#!/bin/bash
# ubg.sh: redis under uswap run; GET load; BGSAVE; report GETs/s during BGSAVE and its time
PORT=7399
U=${U:-/work/main/target/release/uswap}
rm -rf /tmp/uswap-probe-udir /tmp/uswap-probe-ust; mkdir -p /tmp/uswap-probe-udir /tmp/uswap-probe-ust
$U run --limit 128M $EXTRA --stats /tmp/uswap-probe-ustats.json -- /usr/bin/redis-server --bind 127.0.0.1 --port $PORT --save '' --dir /tmp/uswap-probe-udir >/tmp/uswap-probe-uredis.log 2>&1 &
RP=$!
for i in $(seq 50); do redis-cli -p $PORT ping >/dev/null 2>&1 && break; sleep 0.2; done
python3 "$(dirname "$0")/load.py" 402653 $PORT >/dev/null
redis-benchmark -p $PORT -t get -n 2000000 -r 402653 -c 8 -q >/dev/null 2>&1 &
BP=$!
sleep 2
c0=$(redis-cli -p $PORT info stats | grep total_commands_processed | tr -d '\r' | cut -d: -f2); t0=$(date +%s.%N)
redis-cli -p $PORT bgsave >/dev/null
sleep 0.2
while redis-cli -p $PORT info persistence | grep -q 'rdb_bgsave_in_progress:1'; do sleep 0.05; done
c1=$(redis-cli -p $PORT info stats | grep total_commands_processed | tr -d '\r' | cut -d: -f2); t1=$(date +%s.%N)
echo "bgsave $(echo "$t1 - $t0" | bc) s, GETs/s during: $(echo "($c1 - $c0) / ($t1 - $t0)" | bc)"
kill $BP 2>/dev/null; wait $BP 2>/dev/null
redis-cli -p $PORT shutdown nosave >/dev/null 2>&1; wait $RP
