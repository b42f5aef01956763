#!/bin/bash
# kernrun.sh LIMIT CMD...: run CMD in a v1 memory cgroup with LIMIT over zram (lz4) swap; restore after.
set -u
LIM=$1; shift
CG=/sys/fs/cgroup/memory/kr$$
swapoff /dev/zram0 2>/dev/null; echo 1 > /sys/block/zram0/reset
echo lz4 > /sys/block/zram0/comp_algorithm; echo 8G > /sys/block/zram0/disksize
mkswap /dev/zram0 >/dev/null; swapon /dev/zram0
mkdir $CG; echo $LIM > $CG/memory.limit_in_bytes; echo 60 > $CG/memory.swappiness 2>/dev/null
s=$(date +%s.%N)
sh -c "echo \$\$ > $CG/cgroup.procs; exec \"\$@\"" sh "$@"
rc=$?
e=$(echo "$(date +%s.%N) - $s"|bc)
echo "kernel: rc=$rc ${e}s oom=$(grep oom_kill $CG/memory.oom_control | awk '{print $2}') maxusage=$(($(cat $CG/memory.max_usage_in_bytes)>>20))M" >&2
rmdir $CG; swapoff /dev/zram0; echo 1 > /sys/block/zram0/reset
