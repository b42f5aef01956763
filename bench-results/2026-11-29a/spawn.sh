#!/usr/bin/env bash
# Per-process overhead of `uswap run`: the time of 300 subshells (fork + exit, timed by bash)
# and of 200 subprocess.run of /bin/true (vfork + exec, timed by Python), natively and under
# `uswap run --limit 64M` with each binary given, interleaved, ROUNDS rounds (the runner's own
# start and summary are not in the figures). Usage: spawn.sh ROUNDS USWAP...
set -u
rounds=$1; shift
sh='s=$EPOCHREALTIME; for i in $(seq 300); do ( : ); done; echo "$EPOCHREALTIME - $s" | bc'
py='import subprocess, time
t = time.time()
for i in range(200): subprocess.run(["/bin/true"])
print("%.3f" % (time.time() - t))'
for r in $(seq "$rounds"); do
  echo "round $r native fork300 $(bash -c "$sh") exec200 $(python3 -c "$py")"
  for b in "$@"; do
    echo "round $r $b fork300 $("$b" run --limit 64M -- bash -c "$sh" 2>/dev/null) exec200 $("$b" run --limit 64M -- python3 -c "$py" 2>/dev/null)"
  done
done
