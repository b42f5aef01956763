#!/bin/bash
# stacks.sh PATTERN: per-thread wchan and gdb backtraces of every process matching PATTERN
for pid in $(pgrep -f "$1"); do
  echo "== $pid $(cat /proc/$pid/comm)"
  for t in /proc/$pid/task/*; do echo "   $(basename $t) $(cat $t/comm) $(awk '{print $3}' $t/stat) $(cat $t/wchan)"; done
done
for pid in $(pgrep -f "$1"); do
  echo "=== gdb $pid"; timeout 30 gdb -p $pid -batch -ex "thread apply all bt 25" 2>/dev/null | grep -E "^#|^Thread" | cut -c1-200
done
