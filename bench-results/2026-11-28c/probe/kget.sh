#!/bin/bash
PORT=7398
CG=/sys/fs/cgroup/memory/kg$$
swapoff /dev/zram0 2>/dev/null; echo 1 > /sys/block/zram0/reset
echo lz4 > /sys/block/zram0/comp_algorithm; echo 8G > /sys/block/zram0/disksize
mkswap /dev/zram0 >/dev/null; swapon /dev/zram0
mkdir $CG; echo 128M > $CG/memory.limit_in_bytes; echo 60 > $CG/memory.swappiness
rm -rf /tmp/uswap-probe-kdir; mkdir -p /tmp/uswap-probe-kdir
sh -c "echo \$\$ > $CG/cgroup.procs; exec /usr/bin/redis-server --bind 127.0.0.1 --port $PORT --save '' --dir /tmp/uswap-probe-kdir" >/tmp/uswap-probe-kredis.log 2>&1 &
RP=$!
for i in $(seq 50); do redis-cli -p $PORT ping >/dev/null 2>&1 && break; sleep 0.2; done
python3 "$(dirname "$0")/load.py" 402653 $PORT
redis-benchmark -p $PORT -t get -n 100000 -r 402653 -c 8 -q >/dev/null 2>&1
if [ -n "$PERF" ]; then perf record -a -g -o /tmp/uswap-probe-kperf.data -- sleep 6 >/dev/null 2>&1 & fi
redis-benchmark -p $PORT -t get -n 300000 -r 402653 -c 8 -q 2>&1 | tr '\r' '\n' | tail -2
wait %2 2>/dev/null
redis-cli -p $PORT shutdown nosave >/dev/null 2>&1; wait $RP
sleep 0.5; rmdir $CG; swapoff /dev/zram0; echo 1 > /sys/block/zram0/reset
