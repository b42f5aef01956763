/* hold MIB SECONDS MODE: MIB MiB of memory with the pattern of seed 1 (pattern.h).
 *
 * MODE "hold": written once, left alone for SECONDS, then checked. MODE "cycle": written and
 * read back in full passes until SECONDS have gone by (pass k writes seed k + 1), so the whole
 * block is the working set. MODE "shared": as "hold", in shared anonymous memory
 * (MAP_SHARED|MAP_ANONYMOUS, which no pager manages). The test links it statically for one process of the tree (which
 * then runs without the pager) and dynamically for another.
 *
 * Prints "MODE: passes N mismatches M hash H" (H over the last pass's pages). Exit status 0
 * when nothing mismatched. */
#define _GNU_SOURCE
#include "pattern.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/mman.h>
#include <unistd.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: hold MIB SECONDS hold|cycle|shared\n");
        return 2;
    }
    uint64_t pages = strtoull(argv[1], NULL, 10) * 256;
    double secs = atof(argv[2]);
    int cycle = strcmp(argv[3], "cycle") == 0;
    uint64_t *mem;
    if (strcmp(argv[3], "shared") == 0) {
        mem = mmap(NULL, pages * PAGE_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        if (mem == MAP_FAILED) {
            perror("mmap");
            return 1;
        }
    } else if (!(mem = malloc(pages * PAGE_BYTES))) {
        perror("malloc");
        return 1;
    }
    double end = now() + secs;
    uint64_t passes = 0, bad = 0, h = FNV_OFFSET, seed = 1;
    do {
        seed = passes + 1;
        for (uint64_t p = 0; p < pages; p++) fill_page(mem + p * PAGE_WORDS, seed, p);
        if (!cycle) {
            double left = end - now();
            if (left > 0) usleep((useconds_t)(left * 1e6));
        }
        h = FNV_OFFSET;
        for (uint64_t p = 0; p < pages; p++) bad += check_page(mem + p * PAGE_WORDS, seed, p, &h);
        passes++;
    } while (cycle && now() < end);
    printf("%s: passes %llu seed %llu mismatches %llu hash %016llx\n", argv[3], (unsigned long long)passes,
           (unsigned long long)seed, (unsigned long long)bad, (unsigned long long)h);
    return bad != 0;
}
