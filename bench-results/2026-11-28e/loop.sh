#!/bin/bash
# loop.sh N LIMIT: cargo build under uswap N times; on a hang, dump every thread's stack
cd /tmp/sweep/cb
for i in $(seq 1 $1); do
  rm -rf target; t0=$(date +%s)
  timeout -s KILL 300 /work/main/target/release/uswap run --limit $2 -- cargo build --offline -q --release > ../u.out.cargo 2> ../u.err.cargo & W=$!
  while kill -0 $W 2>/dev/null && [ $(( $(date +%s) - t0 )) -lt 70 ]; do sleep 2; done
  if kill -0 $W 2>/dev/null; then
    echo "run $i: HANG"
    for p in $(pgrep -f "rustc|build-script|cargo build" | grep -v "^$W\$"); do
      echo "== $p $(cat /proc/$p/comm)"; for t in /proc/$p/task/*; do echo "   $(basename $t) $(cat $t/comm) $(awk '{print $3}' $t/stat) $(cat $t/wchan)"; done
    done > ../hang5.txt 2>&1
    for p in $(pgrep -f "rustc|cargo build|build-script"); do [ "$(cat /proc/$p/comm)" = uswap ] && continue; echo "=== gdb $p $(cat /proc/$p/comm)"; timeout 60 gdb -p $p -batch -ex "thread apply all bt 24" 2>/dev/null | grep -E "^#|^Thread" | cut -c1-170; done >> ../hang5.txt 2>&1
    kill -9 $W; wait $W; break
  else
    wait $W; echo "run $i: rc=$? $(( $(date +%s) - t0 )) s $(./target/release/cb) warnings=$(grep -c 'may hang' ../u.err.cargo)"
  fi
done
