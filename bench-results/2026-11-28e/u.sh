#!/bin/bash
# u.sh NAME LIMIT CMD... : run under uswap with a timeout, print time and tail of stderr
name=$1; lim=$2; shift 2
t0=$(date +%s.%N)
timeout -s KILL 300 /work/main/target/release/uswap run --limit $lim -- "$@" > u.out.$name 2> u.err.$name
rc=$?
t1=$(date +%s.%N)
echo "$name rc=$rc $(echo "$t1 - $t0" | bc) s"
