#!/usr/bin/env python3
# cpu.py PID...: print "pid tid comm ticks" for every thread of the given processes and their children
import os, sys
def kids(p):
    out=[]
    try:
        for t in os.listdir(f'/proc/{p}/task'):
            try: out += open(f'/proc/{p}/task/{t}/children').read().split()
            except OSError: pass
    except OSError: pass
    return out
seen=set(); todo=list(sys.argv[1:])
while todo:
    p=todo.pop()
    if p in seen: continue
    seen.add(p); todo += kids(p)
    try: tids=os.listdir(f'/proc/{p}/task')
    except OSError: continue
    for t in tids:
        try:
            s=open(f'/proc/{p}/task/{t}/stat').read()
            comm=s[s.index('(')+1:s.rindex(')')]; f=s[s.rindex(')')+2:].split()
            print(p,t,comm.replace(' ','_'),int(f[11])+int(f[12]))
        except OSError: pass
