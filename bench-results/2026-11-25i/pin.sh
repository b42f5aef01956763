#!/bin/bash
# pin.sh MODE: run python-dict under uswap, pin threads per MODE after start
# USWAP=path/to/uswap DICT=crates/uswap-cli/src/bench/programs/scripts/dict.py pin.sh {none|same|one|rec|ev|pager|follow}
MODE=$1
PYTHONHASHSEED=0 ${USWAP:-uswap} run --limit 227M --stats pin-$MODE.json -- python3 ${DICT:-dict.py} 3000000 > pin-$MODE.out &
sleep 0.7
PID=$(pgrep -x python3 -n)
for t in /proc/$PID/task/*; do
  tid=${t##*/}; c=$(cat $t/comm)
  case "$MODE" in
    same) case "$c" in python3|uswap-uffd) taskset -pc 0 $tid >/dev/null;; *) taskset -pc 1 $tid >/dev/null;; esac;;
    one) taskset -pc 0 $tid >/dev/null;;
    none) ;;
    follow) ;;
    rec) case "$c" in uswap-kswapd|uswap-scan) taskset -pc 1 $tid >/dev/null;; esac;;
    ev) case "$c" in uswap-uffd) taskset -pc 0 $tid >/dev/null;; esac;;
    pager) case "$c" in uswap-uffd) taskset -pc 0 $tid >/dev/null;; uswap-kswapd|uswap-scan) taskset -pc 1 $tid >/dev/null;; esac;;
  esac
done
if [ $MODE = follow ]; then python3 $(dirname $0)/follow.py $PID 0.001 & fi
wait
python3 -c "import json;d=json.load(open('pin-$MODE.json'));print('$MODE', d['elapsed_s'], d['main']['faults']['total'])"
