import numpy as np, hashlib, sys
n = int(sys.argv[1]) if len(sys.argv) > 1 else 60_000_000
rng = np.random.default_rng(42)
a = rng.standard_normal(n)            # n*8 bytes
b = np.sort(a)                        # another n*8
c = np.cumsum(b)                      # another
m = rng.standard_normal((1500, 1500))
p = m @ m.T                           # BLAS, threads
idx = rng.integers(0, n, size=n // 4) # random gather
g = a[idx].sum()
h = hashlib.sha256()
for x in (b[::1000], c[::1000], p[::10, ::10]):
    h.update(np.ascontiguousarray(x).tobytes())
print(h.hexdigest(), f"{g:.6f}", f"{c[-1]:.6f}")
