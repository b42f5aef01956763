import hashlib
def work(seed, n):
    data = [str((seed * 2654435761 + i * 40503) % 1000003) * 3 for i in range(n)]
    data.sort()
    return hashlib.sha256("".join(data).encode()).hexdigest()
print([work(s, 600_000) for s in range(3)][-1])
