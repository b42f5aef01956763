/* threads NTHREADS BYTES: NTHREADS threads each malloc BYTES/NTHREADS in blocks of varying size
 * (4 KiB to 1 MiB, so both the heap and large blocks are used), fill them with their own
 * pattern (seed = thread index + 1) and verify every word right away; after all threads have
 * written, each verifies its neighbour's data again (by then most of it is swapped out).
 * Prints one line per thread: mismatches and hash for both passes, then a total line.
 * Exit status 0 when nothing mismatched. */
#include "pattern.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#define MAXT 64

struct th {
    int idx;
    uint64_t seed;
    uint64_t pages;
    uint64_t nblocks;
    uint64_t **blocks;
    uint64_t *block_pages;
    uint64_t bad[2];
    uint64_t hash[2];
};

static struct th T[MAXT];
static int nthreads;
static pthread_barrier_t bar;

/* Verify thread t's data against its pattern; returns mismatches, stores the hash. */
static uint64_t verify(const struct th *t, uint64_t *hash) {
    uint64_t bad = 0, h = FNV_OFFSET, p = 0;
    for (uint64_t b = 0; b < t->nblocks; b++)
        for (uint64_t j = 0; j < t->block_pages[b]; j++, p++) {
            uint64_t pb = check_page(t->blocks[b] + j * PAGE_WORDS, t->seed, p, &h);
            if (pb && bad == 0)
                fprintf(stderr, "threads: data of thread %d: page %llu: %llu wrong words\n", t->idx,
                        (unsigned long long)p, (unsigned long long)pb);
            bad += pb;
        }
    *hash = h;
    return bad;
}

static void *run(void *arg) {
    struct th *t = arg;
    uint64_t left = t->pages, n = 0;
    t->blocks = malloc(sizeof(*t->blocks) * (t->pages + 1));
    t->block_pages = malloc(sizeof(*t->block_pages) * (t->pages + 1));
    if (!t->blocks || !t->block_pages) {
        perror("malloc");
        exit(3);
    }
    while (left) {
        uint64_t want = 1 + (mix64(t->seed * 1000 + n) % 256); /* 1..256 pages */
        if (want > left) want = left;
        t->blocks[n] = malloc(want * PAGE_BYTES);
        if (!t->blocks[n]) {
            perror("malloc");
            exit(3);
        }
        t->block_pages[n++] = want;
        left -= want;
    }
    t->nblocks = n;
    uint64_t p = 0;
    for (uint64_t b = 0; b < t->nblocks; b++)
        for (uint64_t j = 0; j < t->block_pages[b]; j++, p++) fill_page(t->blocks[b] + j * PAGE_WORDS, t->seed, p);
    t->bad[0] = verify(t, &t->hash[0]);
    pthread_barrier_wait(&bar);
    /* Every thread has written everything: check the neighbour's data. */
    struct th *o = &T[(t->idx + 1) % nthreads];
    o->bad[1] = verify(o, &o->hash[1]);
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: threads NTHREADS BYTES\n");
        return 2;
    }
    nthreads = atoi(argv[1]);
    uint64_t bytes = strtoull(argv[2], NULL, 0);
    if (nthreads < 1 || nthreads > MAXT || bytes % ((uint64_t)nthreads * PAGE_BYTES)) {
        fprintf(stderr, "threads: bad arguments\n");
        return 2;
    }
    pthread_barrier_init(&bar, NULL, (unsigned)nthreads);
    pthread_t tid[MAXT];
    for (int i = 0; i < nthreads; i++) {
        T[i].idx = i;
        T[i].seed = (uint64_t)i + 1;
        T[i].pages = bytes / nthreads / PAGE_BYTES;
        if (pthread_create(&tid[i], NULL, run, &T[i])) {
            fprintf(stderr, "threads: pthread_create failed\n");
            return 3;
        }
    }
    for (int i = 0; i < nthreads; i++) pthread_join(tid[i], NULL);
    uint64_t total = 0;
    for (int i = 0; i < nthreads; i++) {
        printf("thread %d: %llu pages in %llu blocks: pass 1 mismatches %llu hash %016llx, pass 2 mismatches %llu hash %016llx\n",
               i, (unsigned long long)T[i].pages, (unsigned long long)T[i].nblocks, (unsigned long long)T[i].bad[0],
               (unsigned long long)T[i].hash[0], (unsigned long long)T[i].bad[1], (unsigned long long)T[i].hash[1]);
        total += T[i].bad[0] + T[i].bad[1];
        for (uint64_t b = 0; b < T[i].nblocks; b++) free(T[i].blocks[b]);
        free(T[i].blocks);
        free(T[i].block_pages);
    }
    printf("total mismatches %llu\n", (unsigned long long)total);
    return total != 0;
}
