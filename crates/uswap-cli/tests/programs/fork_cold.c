/* fork_cold ROUNDS BYTES: fork after everything from start-up has gone cold.
 *
 * A thread is started and joined first (glibc keeps its stack in a cache, so a child's next
 * pthread_create reuses it and reaches the loader through a lazily bound call), then BYTES of
 * pattern data are written and read back (far over the limit: what the loader allocated at
 * start-up is the oldest memory and is swapped out), then the program forks ROUNDS times, with
 * pressure in between. Each child reads a sample of pages, starts a thread of its own and exits
 * with the number of wrong words. A child that cannot start its pager hangs here: the test
 * has a deadline and prints the stacks. Prints one line per round and "ok" at the end. */
#include "pattern.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static uint64_t *mem;
static uint64_t npages;

static void *idle(void *arg) { return arg; }

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: fork_cold ROUNDS BYTES\n");
        return 2;
    }
    int rounds = atoi(argv[1]);
    npages = strtoull(argv[2], NULL, 0) / PAGE_BYTES;
    pthread_t t;
    if (pthread_create(&t, NULL, idle, NULL) || pthread_join(t, NULL)) {
        fprintf(stderr, "fork_cold: pthread\n");
        return 3;
    }
    mem = malloc(npages * PAGE_BYTES);
    if (!mem) return 3;
    uint64_t bad = 0;
    for (int r = 0; r < rounds; r++) {
        uint64_t seed = 10 + r;
        bad += fill_and_check_all(mem, npages, seed);
        fflush(stdout);
        pid_t c = fork();
        if (c < 0) {
            perror("fork");
            return 3;
        }
        if (c == 0) {
            uint64_t cb = 0, h = FNV_OFFSET;
            for (uint64_t p = 0; p < npages; p += 7) cb += check_page(mem + p * PAGE_WORDS, seed, p, &h);
            pthread_t ct;
            if (pthread_create(&ct, NULL, idle, NULL) || pthread_join(ct, NULL)) _exit(100);
            _exit(cb != 0);
        }
        int st;
        if (waitpid(c, &st, 0) != c) return 3;
        printf("round %d: child exit %d\n", r, WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st));
        if (!WIFEXITED(st) || WEXITSTATUS(st)) bad++;
    }
    printf(bad ? "mismatches %llu\n" : "ok\n", (unsigned long long)bad);
    return bad != 0;
}
