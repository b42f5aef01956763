# Builds a dict of N str -> str, checks every entry, prints its size, the number of bad entries
# and a SHA-256 over all items in insertion order.
import hashlib
import sys

N = int(sys.argv[1])


def val(i):
    return "value-%d-%s" % (i * 7919 % 1000003, "x" * (i % 13))


d = {}
for i in range(N):
    d["key%08d" % i] = val(i)
bad = sum(1 for i in range(N) if d["key%08d" % i] != val(i))
h = hashlib.sha256()
for k, v in d.items():
    h.update(k.encode())
    h.update(b"=")
    h.update(v.encode())
    h.update(b"\n")
print(len(d), bad, h.hexdigest())
