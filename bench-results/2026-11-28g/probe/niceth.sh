#!/bin/bash
# niceth.sh COMM N: renice every thread named COMM of every redis-server process to N
for p in $(pgrep -x redis-server); do for t in /proc/$p/task/*; do [ "$(cat $t/comm)" = "$1" ] && renice -n $2 -p $(basename $t) >/dev/null; done; done
