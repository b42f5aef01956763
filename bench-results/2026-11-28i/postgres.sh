#!/bin/sh
# run.sh DIR: a fresh cluster in DIR, a 2M-row table, an index, a sort bigger than work_mem, checksums
set -e
B=/usr/lib/postgresql/15/bin
D=$1
rm -rf $D; $B/initdb -D $D -A trust -U postgres >/dev/null
$B/postgres -D $D -k $D -c listen_addresses='' -c shared_buffers=128MB -c work_mem=64MB -c maintenance_work_mem=128MB -c fsync=off -c max_parallel_workers_per_gather=1 >$D/log 2>&1 &
PGPID=$!
for i in $(seq 1 100); do $B/pg_isready -q -h $D && break; sleep 0.2; done
P="$B/psql -h $D -U postgres -qAt -v ON_ERROR_STOP=1"
$P -c "create table t as select i, md5(i::text) as h, (i::bigint*7919)%1000003 as k from generate_series(1,2000000) i"
$P -c "create index on t(h)"
$P -c "select count(*), sum(k), md5(string_agg(h, '' order by h)) from t"
$P -c "select md5(string_agg(k::text, ',' order by k, i)) from (select * from t order by h limit 500000) s"
$P -c "select k % 100, count(*), sum(i) from t group by 1 order by 1" | md5sum
kill -INT $PGPID; wait $PGPID || true
