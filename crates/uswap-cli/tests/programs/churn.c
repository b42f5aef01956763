#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
#include <stdint.h>
#include <sys/mman.h>
/*
 * churn LIMIT: ten rounds, each through every way a program gives memory back: malloc/free of
 * 2x the limit, an anonymous mmap of 2x the limit with madvise(MADV_DONTNEED or MADV_FREE) of
 * half of it, mremap to 3x (moving), munmap, and a buffer grown by realloc to the limit.
 * Every byte written is verified; prints "bad=N" (N mismatches).
 */
static void fill(uint8_t *p, size_t n, uint64_t s) { for (size_t i = 0; i < n; i += 8) *(uint64_t *)(p + i) = (i / 4096) * 2654435761u ^ s; }
static size_t checkat(uint8_t *p, size_t off, size_t n, uint64_t s) { size_t bad = 0; for (size_t i = off; i < off + n; i += 8) bad += *(uint64_t *)(p + i) != ((i / 4096) * 2654435761u ^ s); return bad; }
static size_t check(uint8_t *p, size_t n, uint64_t s) { return checkat(p, 0, n, s); }
int main(int argc, char **argv) {
    size_t lim = strtoull(argv[1], 0, 0), bad = 0;
    for (int r = 0; r < 10; r++) {
        uint8_t *a = malloc(2 * lim); fill(a, 2 * lim, r); bad += check(a, 2 * lim, r); free(a);
        uint8_t *m = mmap(0, 2 * lim, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        fill(m, 2 * lim, r + 100); bad += check(m, 2 * lim, r + 100);
        madvise(m, lim, r % 2 ? MADV_DONTNEED : MADV_FREE);
        for (size_t i = 0; i < lim && r % 2; i += 4096) bad += m[i] != 0;
        m = mremap(m, 2 * lim, 3 * lim, MREMAP_MAYMOVE);
        bad += checkat(m, lim, lim, r + 100);
        fill(m, 3 * lim, r + 200); bad += check(m, 3 * lim, r + 200);
        munmap(m, 3 * lim);
        char *q = 0; for (size_t n = 4096; n <= lim; n *= 2) { q = realloc(q, n); memset(q, r, n); } bad += (size_t)(q[lim - 1] != r); free(q);
    }
    printf("bad=%zu\n", bad);
    return bad != 0;
}
