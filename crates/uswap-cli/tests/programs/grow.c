/* grow MIB: a process that starts small and grows through small mallocs (glibc's brk heap,
 * which no interposed call sees), as a dormant process under `uswap run` does before its
 * pager starts.
 *
 * 1. writes 1 MiB of pattern in 4 KiB blocks (below any start threshold);
 * 2. forks a child, which does step 3 and exits with the number of mismatches, and waits for
 *    it (one process grows at a time);
 * 3. grows to MIB MiB in 4 KiB blocks, then checks every block twice, the first MiB included.
 *
 * Prints "grow: parent|child MIB MiB mismatches M" and exits 0 when nothing mismatched. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define BLOCK 4000 /* under glibc's mmap threshold: from the brk heap */

static uint64_t mix(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

static void fill(uint64_t *b, uint64_t seed, size_t i) {
    for (size_t w = 0; w < BLOCK / 8; w++) b[w] = (w & 1) ? mix(seed ^ (i << 20) ^ w) : (i << 8 | (w & 0xff));
}

static size_t check(uint64_t **blocks, size_t n, uint64_t seed) {
    uint64_t want[BLOCK / 8];
    size_t bad = 0;
    for (int pass = 0; pass < 2; pass++)
        for (size_t i = 0; i < n; i++) {
            fill(want, seed, i);
            bad += memcmp(want, blocks[i], BLOCK) != 0;
        }
    return bad;
}

static size_t grow(uint64_t **blocks, size_t from, size_t n, uint64_t seed) {
    for (size_t i = from; i < n; i++) {
        blocks[i] = malloc(BLOCK);
        if (!blocks[i]) {
            perror("malloc");
            exit(1);
        }
        fill(blocks[i], seed, i);
    }
    return check(blocks, n, seed);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: grow MIB\n");
        return 2;
    }
    size_t mib = strtoul(argv[1], NULL, 10);
    size_t n = mib * (1 << 20) / BLOCK, first = (1 << 20) / BLOCK;
    uint64_t **blocks = calloc(n, sizeof *blocks);
    if (!blocks) return 1;
    for (size_t i = 0; i < first; i++) {
        blocks[i] = malloc(BLOCK);
        fill(blocks[i], 1, i);
    }
    fflush(stdout);
    pid_t c = fork();
    if (c < 0) {
        perror("fork");
        return 1;
    }
    if (c == 0) {
        /* The child's own data from block `first` on; the first MiB is the parent's copy. */
        size_t bad = grow(blocks, first, n, 1);
        printf("grow: child %zu MiB mismatches %zu\n", mib, bad);
        fflush(stdout);
        _exit(bad != 0);
    }
    int st = 0;
    waitpid(c, &st, 0);
    size_t bad = grow(blocks, first, n, 1);
    printf("grow: parent %zu MiB mismatches %zu\n", mib, bad);
    return bad != 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0;
}
