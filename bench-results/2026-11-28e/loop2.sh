#!/bin/bash
# loop2.sh N LIMIT: cargo build under uswap N times; count hangs (70 s), kill and continue
cd /tmp/sweep/cb
ok=0; hang=0
for i in $(seq 1 $1); do
  rm -rf target; t0=$(date +%s.%N)
  timeout -s KILL 70 /work/main/target/release/uswap run --limit $2 -- cargo build --offline -q --release > ../u.out.cargo 2> ../u.err.cargo
  rc=$?; t=$(echo "$(date +%s.%N) - $t0" | bc)
  pgrep -f "rustc|cargo build|build-script" | xargs -r kill -9 2>/dev/null
  if [ $rc = 0 ] && [ "$(./target/release/cb)" = '{"m":true,"n":3}' ]; then ok=$((ok+1)); echo "run $i ok $t s"; else hang=$((hang+1)); echo "run $i rc=$rc $t s"; fi
done
echo "ok=$ok hang=$hang"
