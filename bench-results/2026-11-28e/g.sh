#!/bin/bash
# g.sh LABEL LIMIT [ENV=V ...] : g++ tmpl under uswap; prints time and swap figures
lab=$1; L=$2; shift 2
env "$@" timeout 300 /work/main/target/release/uswap run --limit $L --stats /tmp/sweep/g-$lab.json -- g++ -O2 -c tmpl.cpp -o tmpl-u.o >/dev/null 2>&1
python3 -c "
import json;d=json.load(open('/tmp/sweep/g-$lab.json'));p=d['other_processes'][0]
r=p['reclaim']
print('$lab', d['elapsed_s'], 'pswpin',p['swap']['pswpin'],'pswpout',p['swap']['pswpout'],'res',p['memory']['resident_bytes']>>20,'pool',p['memory']['pool_bytes']>>20,'sc',p['memory']['swap_cache_bytes']>>20, 'flt',p['faults']['total'],'scflt',p['faults']['swap_cache'],'demoted',r['demoted_pages'],'act',r['workingset_activate'])"
