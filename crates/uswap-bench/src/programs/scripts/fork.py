# A list of N strs built by the parent, then checksummed by four workers that
# multiprocessing forks (start method "fork": they share the list copy-on-write, and each
# takes its own copy of every page whose objects' reference counts it touches). Prints N and
# a SHA-256 over the workers' digests, in order.
import hashlib
import multiprocessing as mp
import sys

N = int(sys.argv[1])
data = ["%d-%s" % (i * 7919 % 1000003, "y" * (i % 29)) for i in range(N)]


def work(k):
    h = hashlib.sha256()
    for i in range(k, N, 4):
        h.update(data[i].encode())
    return h.hexdigest()


if __name__ == "__main__":
    mp.set_start_method("fork")
    with mp.Pool(4) as p:
        digests = p.map(work, range(4))
    h = hashlib.sha256()
    for x in digests:
        h.update(x.encode())
    print(N, h.hexdigest())
