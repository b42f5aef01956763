import multiprocessing as mp, hashlib, sys
def work(args):
    seed, n = args
    data = [str((seed * 2654435761 + i * 40503) % 1000003) * 3 for i in range(n)]
    data.sort()
    return hashlib.sha256("".join(data).encode()).hexdigest()
if __name__ == "__main__":
    mp.set_start_method("spawn")
    big = [i * i for i in range(3_000_000)]   # parent holds ~100 MB
    with mp.Pool(2) as p:
        out = p.map(work, [(s, 600_000) for s in range(6)])
    print(sum(big) % 1000007, hashlib.sha256("".join(out).encode()).hexdigest())
