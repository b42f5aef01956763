/* cold_tree BYTES SECONDS: the tree's limit goes to the process that uses its memory.
 *
 * The parent forks two children and waits for both. The *holder* writes BYTES of pattern data
 * (seed 1), says so on a pipe and sleeps until the cycler is done: its memory is the coldest
 * in the tree. The *cycler* then writes BYTES of its own (seed 2) and reads one word of every
 * page, pass after pass, for SECONDS. Two working sets of BYTES do not fit under a limit of
 * about 1.6 × BYTES, one does: a tree that reclaims the coldest memory first takes the holder's
 * pages and the cycler's passes stop faulting; a tree that shares the limit in proportion to
 * what each holds leaves the cycler under BYTES, and a cyclic pass over more than fits misses
 * on every page. The test reads the cycler's swap-ins from its statistics.
 *
 * Then both check every page they wrote. Prints "holder: mismatches N hash H", "cycler PID:
 * passes P mismatches N hash H"; exit status 0 when both matched. */
#include "pattern.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static uint64_t npages;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static uint64_t *fill(uint64_t seed) {
    uint64_t *mem = malloc(npages * PAGE_BYTES);
    if (!mem) {
        perror("malloc");
        exit(3);
    }
    for (uint64_t p = 0; p < npages; p++) fill_page(mem + p * PAGE_WORDS, seed, p);
    return mem;
}

static uint64_t check(const uint64_t *mem, uint64_t seed, uint64_t *h) {
    uint64_t bad = 0;
    *h = FNV_OFFSET;
    for (uint64_t p = 0; p < npages; p++) bad += check_page(mem + p * PAGE_WORDS, seed, p, h);
    return bad;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: cold_tree BYTES SECONDS\n");
        return 2;
    }
    npages = strtoull(argv[1], NULL, 0) / PAGE_BYTES;
    double seconds = atof(argv[2]);
    int ready[2], done[2];
    if (pipe(ready) || pipe(done)) {
        perror("pipe");
        return 3;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    pid_t holder = fork();
    if (holder == 0) {
        close(ready[0]);
        close(done[1]);
        uint64_t *mem = fill(1);
        char c = 'r';
        if (write(ready[1], &c, 1) != 1) return 4;
        /* Idle until the cycler closes its end. */
        while (read(done[0], &c, 1) > 0) {
        }
        uint64_t h, bad = check(mem, 1, &h);
        printf("holder: mismatches %llu hash %016llx\n", (unsigned long long)bad, (unsigned long long)h);
        exit(bad != 0);
    }
    close(ready[1]);
    pid_t cycler = fork();
    if (cycler == 0) {
        close(done[0]);
        char c;
        if (read(ready[0], &c, 1) != 1) return 4;
        uint64_t *mem = fill(2);
        volatile uint64_t sink = 0;
        uint64_t passes = 0;
        double end = now() + seconds;
        while (now() < end) {
            for (uint64_t p = 0; p < npages; p++) sink += ((volatile uint64_t *)mem)[p * PAGE_WORDS + (p & 511)];
            passes++;
        }
        uint64_t h, bad = check(mem, 2, &h);
        printf("cycler %d: passes %llu mismatches %llu hash %016llx\n", (int)getpid(), (unsigned long long)passes,
               (unsigned long long)bad, (unsigned long long)h);
        close(done[1]);
        exit(bad != 0);
    }
    close(ready[0]);
    close(done[0]);
    close(done[1]);
    int status, failed = 0;
    for (int i = 0; i < 2; i++) {
        if (wait(&status) < 0) {
            perror("wait");
            return 3;
        }
        failed |= !WIFEXITED(status) || WEXITSTATUS(status) != 0;
    }
    return failed;
}
