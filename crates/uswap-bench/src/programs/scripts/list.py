# Grows a list of N ints, then prints facts that depend on every element.
import sys

N = int(sys.argv[1])
x = [i * 3 for i in range(N)]
s = 0
for v in x:
    s = (s * 31 + v) % 1000000007
print(len(x), sum(x), x[N // 2], s)
