/* fork_busy FORKS BYTES THREADS: fork again and again while other threads fault.
 *
 * BYTES of pattern data are written in 4 KiB malloc blocks (seed 1). THREADS threads then
 * read random pages and check them, and allocate and free small blocks in between (so they
 * hold malloc's arena locks at times, and fault while they do). Meanwhile the main thread
 * forks FORKS times; each child checks 64 random pages, allocates and frees, and exits with
 * the number of wrong words (at most 255). A fork whose copy caught the pager in the middle
 * of an operation left the child waiting for a lock nobody would release: the test has a
 * deadline and prints the stacks. Prints the failed children, the parent's full check, and
 * "ok" when both are 0. */
#include "pattern.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static uint64_t **pages;
static uint64_t npages;
static volatile int stop;

static uint64_t check_one(uint64_t p) {
    uint64_t h = FNV_OFFSET;
    return check_page(pages[p], 1, p, &h);
}

static void *reader(void *arg) {
    uint64_t s = (uint64_t)(uintptr_t)arg, bad = 0;
    while (!stop) {
        s = mix64(s);
        bad += check_one(s % npages);
        if ((s >> 40) % 16 == 0) {
            volatile char *x = malloc(64 + (s >> 20) % 8000);
            if (x) x[0] = 1;
            free((void *)x);
        }
    }
    return (void *)(uintptr_t)bad;
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: fork_busy FORKS BYTES THREADS\n");
        return 2;
    }
    int forks = atoi(argv[1]), nthreads = atoi(argv[3]);
    npages = strtoull(argv[2], 0, 0) / PAGE_BYTES;
    if (nthreads < 1 || nthreads > 16 || npages == 0) return 2;
    pages = malloc(npages * sizeof *pages);
    for (uint64_t p = 0; p < npages; p++) {
        pages[p] = malloc(PAGE_BYTES);
        if (!pages[p]) {
            perror("malloc");
            return 3;
        }
        fill_page(pages[p], 1, p);
    }
    pthread_t t[16];
    for (int i = 0; i < nthreads; i++) pthread_create(&t[i], 0, reader, (void *)(uintptr_t)(i + 1));
    int failed = 0;
    uint64_t s = 12345;
    for (int f = 0; f < forks; f++) {
        pid_t c = fork();
        if (c < 0) {
            perror("fork");
            return 3;
        }
        if (c == 0) {
            uint64_t bad = 0;
            for (int k = 0; k < 1024; k++) {
                s = mix64(s + (uint64_t)f);
                bad += check_one(s % npages);
            }
            free(malloc(1000));
            _exit(bad > 255 ? 255 : (int)bad);
        }
        int st;
        if (waitpid(c, &st, 0) != c || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
            fprintf(stderr, "fork_busy: child %d: status %#x\n", f, st);
            failed++;
        }
    }
    stop = 1;
    uint64_t bad = 0;
    for (int i = 0; i < nthreads; i++) {
        void *r;
        pthread_join(t[i], &r);
        bad += (uint64_t)(uintptr_t)r;
    }
    for (uint64_t p = 0; p < npages; p++) bad += check_one(p);
    printf("children failed %d\nparent mismatches %llu\n", failed, (unsigned long long)bad);
    if (failed || bad) return 1;
    printf("ok\n");
    return 0;
}
