import os, sys, time
pid = int(sys.argv[1]); period = float(sys.argv[2])
tids = {}
for t in os.listdir(f"/proc/{pid}/task"):
    tids[open(f"/proc/{pid}/task/{t}/comm").read().strip()] = int(t)
main = pid
fd = os.open(f"/proc/{pid}/task/{main}/stat", os.O_RDONLY)
cur = -1; moves = 0
while True:
    try:
        s = os.pread(fd, 4096, 0).decode()
    except OSError:
        break
    if not s: break
    cpu = int(s.rsplit(")", 1)[1].split()[36])
    if cpu != cur:
        cur = cpu; moves += 1
        try:
            os.sched_setaffinity(tids["uswap-uffd"], {cpu})
            for n in ("uswap-kswapd", "uswap-scan", "uswap-recomp"):
                os.sched_setaffinity(tids[n], {1 - cpu})
        except OSError:
            break
    time.sleep(period)
print("moves", moves, file=sys.stderr)
