#!/bin/bash
# ubgcpu.sh: redis under uswap run (or KERNEL=1: in a memcg over zram); GET load; BGSAVE;
# prints the save's seconds, GETs/s during it, and CPU ticks per thread over the save.
PORT=7399
D=$(dirname "$(readlink -f "$0")")
U=${U:-/work/main/target/release/uswap}
rm -rf /tmp/uswap-probe-udir; mkdir -p /tmp/uswap-probe-udir
if [ -n "$KERNEL" ]; then
  swapoff /dev/zram0 2>/dev/null; echo 1 > /sys/block/zram0/reset; echo lz4 > /sys/block/zram0/comp_algorithm; echo 4G > /sys/block/zram0/disksize; mkswap /dev/zram0 >/dev/null; swapon /dev/zram0
  CG=/sys/fs/cgroup/memory/uswapprobe; rmdir $CG 2>/dev/null; mkdir $CG; echo 128M > $CG/memory.limit_in_bytes
  bash -c "echo \$\$ > $CG/tasks; exec /usr/bin/redis-server --bind 127.0.0.1 --port $PORT --save '' --dir /tmp/uswap-probe-udir" >/tmp/uswap-probe-uredis.log 2>&1 &
else
  $U run --limit 128M $EXTRA --stats /tmp/uswap-probe-stats.json -- /usr/bin/redis-server --bind 127.0.0.1 --port $PORT --save '' --dir /tmp/uswap-probe-udir >/tmp/uswap-probe-uredis.log 2>&1 &
fi
RP=$!
for i in $(seq 50); do redis-cli -p $PORT ping >/dev/null 2>&1 && break; sleep 0.2; done
python3 $D/../../2026-11-28c/probe/load.py 402653 $PORT >/dev/null
redis-benchmark -p $PORT -t get -n 2000000 -r 402653 -c 8 -q >/dev/null 2>&1 &
BP=$!
if [ -n "$BEFORE" ]; then eval "$BEFORE"; fi
sleep 2
SP=$(pgrep -f "redis-server.*$PORT" | head -1)
c0=$(redis-cli -p $PORT info stats | grep total_commands_processed | tr -d '\r' | cut -d: -f2); t0=$(date +%s.%N)
python3 $D/cpu.py $SP $BP > /tmp/cpu0
redis-cli -p $PORT bgsave >/dev/null
if [ -n "$PERF" ]; then perf record -a -g -o /tmp/uswap-probe-perf.data -- sleep 8 >/dev/null 2>&1 & fi
sleep 0.3
python3 $D/cpu.py $SP > /tmp/cpuc0
if [ -n "$AFTER" ]; then eval "$AFTER"; fi
while redis-cli -p $PORT info persistence | grep -q 'rdb_bgsave_in_progress:1'; do python3 $D/cpu.py $SP > /tmp/cpuc1; sleep 0.1; done
c1=$(redis-cli -p $PORT info stats | grep total_commands_processed | tr -d '\r' | cut -d: -f2); t1=$(date +%s.%N)
python3 $D/cpu.py $SP $BP > /tmp/cpu1
echo "bgsave $(echo "$t1 - $t0" | bc) s, GETs/s during: $(echo "($c1 - $c0) / ($t1 - $t0)" | bc)"
python3 - <<'P'
a={};[a.__setitem__((l.split()[0],l.split()[1],l.split()[2]),int(l.split()[3])) for l in open('/tmp/cpu0')]
b={};[b.__setitem__((l.split()[0],l.split()[1],l.split()[2]),int(l.split()[3])) for l in open('/tmp/cpu1')]
c0={};[c0.__setitem__((l.split()[0],l.split()[1],l.split()[2]),int(l.split()[3])) for l in open('/tmp/cpuc0')]
c1={};[c1.__setitem__((l.split()[0],l.split()[1],l.split()[2]),int(l.split()[3])) for l in open('/tmp/cpuc1')]
for k in sorted(b):
    d=b[k]-a.get(k,0)
    if d>5: print('  server/bench', k, d)
for k in sorted(c1):
    if k not in a:
        d=c1[k]-c0.get(k,0)
        if d>5: print('  child', k, d, '(from 0.3 s)')
P
kill $BP 2>/dev/null; wait $BP 2>/dev/null
redis-cli -p $PORT shutdown nosave >/dev/null 2>&1; wait $RP
if [ -n "$KERNEL" ]; then rmdir $CG; swapoff /dev/zram0; echo 1 > /sys/block/zram0/reset; fi
