/* The shape of a Redis hang: threads that fault on swapped-out memory while they
 * hold their allocator's lock, while the pager evicts (and sets up its compressed pool for the
 * first time) to make room.
 *
 * Each thread builds a linked list of NODES nodes of 16..1040 bytes with malloc (glibc's
 * allocator; its arena lock is taken inside every call), walks it (the early nodes are swapped
 * out by then), then frees every other node and reallocates the rest to another size (malloc
 * and free touch chunk headers and free lists in cold, swapped-out memory while holding the
 * arena lock), and checks every byte. A program-level mutex is also held across the walks, as
 * an allocator of the program's own would be.
 *
 * Usage: alloc_storm THREADS NODES.  Prints one line per thread and "ok".
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct node {
    struct node *next;
    uint32_t len, seed;
    unsigned char data[];
};

static pthread_mutex_t big = PTHREAD_MUTEX_INITIALIZER;
static long nodes;
static int failed;

static uint64_t mix(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    return x ^ (x >> 33);
}

static struct node *make(uint32_t seed) {
    uint32_t len = 16 + (uint32_t)(mix(seed) % 1025);
    struct node *n = malloc(sizeof *n + len);
    if (!n) {
        perror("malloc");
        exit(1);
    }
    n->next = NULL;
    n->len = len;
    n->seed = seed;
    for (uint32_t i = 0; i < len; i++) n->data[i] = (unsigned char)(mix(seed + i) >> 7);
    return n;
}

static long check(struct node *n) {
    long bad = 0;
    for (uint32_t i = 0; i < n->len; i++) bad += n->data[i] != (unsigned char)(mix(n->seed + i) >> 7);
    return bad;
}

static void *worker(void *arg) {
    long t = (long)arg;
    struct node head = {0}, *tail = &head;
    for (long i = 0; i < nodes; i++) {
        tail->next = make((uint32_t)(t * 10000019 + i));
        tail = tail->next;
    }
    long bad = 0, kept = 0;
    pthread_mutex_lock(&big);
    for (struct node *n = head.next; n; n = n->next) bad += check(n);
    pthread_mutex_unlock(&big);
    /* Free every other node; give the rest a new size (and new bytes). */
    struct node *prev = &head;
    long i = 0;
    for (struct node *n = head.next; n; i++) {
        struct node *next = n->next;
        if (i % 2) {
            prev->next = next;
            free(n);
        } else {
            struct node *m = make(n->seed ^ 0x5a5a5a5aU);
            m->next = next;
            prev->next = m;
            free(n);
            prev = m;
            kept++;
        }
        n = next;
    }
    pthread_mutex_lock(&big);
    for (struct node *n = head.next; n; n = n->next) bad += check(n);
    pthread_mutex_unlock(&big);
    for (struct node *n = head.next; n;) {
        struct node *next = n->next;
        free(n);
        n = next;
    }
    printf("thread %ld: %ld nodes, %ld kept, %ld bad bytes\n", t, nodes, kept, bad);
    if (bad) failed = 1;
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s THREADS NODES\n", argv[0]);
        return 2;
    }
    int threads = atoi(argv[1]);
    nodes = atol(argv[2]);
    pthread_t th[64];
    if (threads < 1 || threads > 64) return 2;
    for (long t = 0; t < threads; t++) pthread_create(&th[t], NULL, worker, (void *)t);
    for (int t = 0; t < threads; t++) {
        pthread_join(th[t], NULL);
        fflush(stdout);
    }
    puts(failed ? "FAILED" : "ok");
    return failed;
}
