#!/bin/bash
# k.sh NAME LIMIT CMD... : run in a memcg v1 at LIMIT with zram lz4 swap
name=$1; lim=$2; shift 2
CG=/sys/fs/cgroup/memory/ksw$$
swapoff /dev/zram0 2>/dev/null; echo 1 > /sys/block/zram0/reset
echo lz4 > /sys/block/zram0/comp_algorithm; echo 8G > /sys/block/zram0/disksize
mkswap /dev/zram0 >/dev/null; swapon /dev/zram0
mkdir $CG; echo $lim > $CG/memory.limit_in_bytes; echo 60 > $CG/memory.swappiness
t0=$(date +%s.%N)
timeout -s KILL 300 sh -c "echo \$\$ > $CG/cgroup.procs; exec \"\$@\"" sh "$@" > k.out.$name 2> k.err.$name
rc=$?
t1=$(date +%s.%N)
echo "$name kernel rc=$rc $(echo "$t1 - $t0" | bc) s  maxusage=$(( $(cat $CG/memory.max_usage_in_bytes)/1048576 ))M"
sleep 0.3; rmdir $CG; swapoff /dev/zram0; echo 1 > /sys/block/zram0/reset
