#!/bin/bash
# nicechild.sh N [COMM]: renice the threads of the BGSAVE child (the redis-server whose parent is redis-server)
for p in $(pgrep -x redis-server); do pp=$(awk '{print $4}' /proc/$p/stat); if [ "$(cat /proc/$pp/comm 2>/dev/null)" = redis-server ]; then for t in /proc/$p/task/*; do if [ -z "$2" ] || [ "$(cat $t/comm)" = "$2" ]; then renice -n $1 -p $(basename $t) >/dev/null; fi; done; fi; done
