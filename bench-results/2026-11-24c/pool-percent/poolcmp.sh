#!/bin/bash
for prog in gcc python-list sqlite node-objects pipeline java-hashmap sort python-dict redis; do
  for pp in 15 8; do
    USWAP_POOL_PERCENT=$pp timeout 400 /tmp/fx/uswap-main bench programs --only $prog --compare none --timeout 150 --json > /tmp/fx/pool-$prog-$pp.json 2>/dev/null
    python3 -c "
import json,sys;d=json.load(open('/tmp/fx/pool-$prog-$pp.json'))
for p in d['programs']: print('$prog', $pp, p.get('native_s'), p.get('uswap_s'), p.get('correct'), (p.get('uswap_peak_rss_bytes') or 0)>>20, p.get('limit_bytes',0)>>20, p.get('uswap_outcome'))" 
  done
done
