# multiprocessing with the fork start method: the parent has a 300 MB dict and pool threads;
# workers read parts of it (copy-on-write) and build lists of their own.
import multiprocessing as mp, sys, hashlib
N = int(sys.argv[1]) if len(sys.argv) > 1 else 2_000_000
data = {i: ("v%d" % i) * 3 for i in range(N)}
def work(k):
    s = 0
    acc = []
    for i in range(k, N, 97):
        s += len(data[i])
        acc.append(data[i][:4])
    return s, hashlib.sha256("".join(acc).encode()).hexdigest()[:16]
if __name__ == "__main__":
    mp.set_start_method("fork")
    with mp.Pool(2) as p:
        r = p.map(work, range(40))
    print(sum(x for x, _ in r), hashlib.sha256("".join(h for _, h in r).encode()).hexdigest()[:16])
