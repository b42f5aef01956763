#!/bin/bash
# usage: kern.sh LIMIT_MB cmd...  (zram lz4 + memcg v1), restores after
set -e
L=$1; shift
echo 1 > /sys/block/zram0/reset
echo lz4 > /sys/block/zram0/comp_algorithm
echo 8G > /sys/block/zram0/disksize
mkswap /dev/zram0 >/dev/null; swapon /dev/zram0
CG=/sys/fs/cgroup/memory/fxk; mkdir -p $CG
echo $((L<<20)) > $CG/memory.limit_in_bytes
echo 60 > $CG/memory.swappiness || true
( echo $BASHPID > $CG/cgroup.procs; exec "$@" ) || true
swapoff /dev/zram0; echo 1 > /sys/block/zram0/reset
rmdir $CG
