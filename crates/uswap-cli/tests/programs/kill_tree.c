/* kill_tree BYTES ROUNDS: processes of one tree killed at any instant leave the rest correct.
 *
 * The parent fills BYTES with seed 1. Each round it forks a child that overwrites pages
 * p % 3 == round % 3 with seed 10 + round and verifies its whole view again and again; the
 * parent lets it run for a pseudo-random 0-150 ms (0: killed while its pager restarts after the
 * fork) and SIGKILLs it, in the middle of whatever it is doing (a fault, an eviction, a
 * write), then verifies its own view (seed 1 everywhere but its own writes: pages p % 4 == 1
 * with seed 2 written after round 1). Every fifth child is left to finish: it verifies once
 * more and exits 0. Under a limit shared by the tree, the dead children's share must come back
 * to the survivors.
 *
 * Prints one line per check: who, the number of wrong words, the hash of what was read; a
 * killed child prints nothing after its start. Exit status 0 when every check matched. */
#include "pattern.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static uint64_t *mem;
static uint64_t npages;

static uint64_t seed_of(uint64_t p, int parent_wrote, int child_round) {
    if (child_round >= 0 && p % 3 == (uint64_t)(child_round % 3)) return 10 + (uint64_t)child_round;
    if (parent_wrote && p % 4 == 1) return 2;
    return 1;
}

static uint64_t check(int parent_wrote, int child_round, uint64_t *hash) {
    uint64_t bad = 0, h = FNV_OFFSET;
    for (uint64_t p = 0; p < npages; p++) bad += check_page(mem + p * PAGE_WORDS, seed_of(p, parent_wrote, child_round), p, &h);
    *hash = h;
    return bad;
}

static void sleep_ms(long ms) {
    struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&t, &t) != 0) {}
}

int main(int argc, char **argv) {
    if (argc < 3) return 2;
    uint64_t bytes = strtoull(argv[1], 0, 0);
    int rounds = atoi(argv[2]);
    npages = bytes / PAGE_BYTES;
    mem = mmap(0, npages * PAGE_BYTES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mem == MAP_FAILED) return 3;
    for (uint64_t p = 0; p < npages; p++) fill_page(mem + p * PAGE_WORDS, 1, p);
    int failed = 0, parent_wrote = 0;
    uint64_t rng = 12345;
    for (int r = 0; r < rounds; r++) {
        fflush(stdout);
        pid_t c = fork();
        if (c < 0) return 4;
        if (c == 0) {
            for (uint64_t p = (uint64_t)(r % 3); p < npages; p += 3) fill_page(mem + p * PAGE_WORDS, 10 + (uint64_t)r, p);
            uint64_t h, bad = 0;
            for (int i = 0; i < 3; i++) bad += check(parent_wrote, r, &h);
            printf("child %d: mismatches %llu hash %016llx\n", r, (unsigned long long)bad, (unsigned long long)h);
            fflush(stdout);
            _exit(bad != 0);
        }
        rng = mix64(rng);
        if (r % 5 != 4) {
            long ms = (long)(rng % 151);
            if (ms > 0) sleep_ms(ms);
            kill(c, SIGKILL);
        }
        int st = 0;
        waitpid(c, &st, 0);
        if (r % 5 == 4 && !(WIFEXITED(st) && WEXITSTATUS(st) == 0)) failed = 1;
        if (r == 1) {
            for (uint64_t p = 1; p < npages; p += 4) fill_page(mem + p * PAGE_WORDS, 2, p);
            parent_wrote = 1;
        }
        uint64_t h, bad = check(parent_wrote, -1, &h);
        printf("parent after round %d: mismatches %llu hash %016llx\n", r, (unsigned long long)bad, (unsigned long long)h);
        if (bad) failed = 1;
    }
    /* Long enough for a survivor's reaper to free the killed children's slots (once a second). */
    sleep_ms(1500);
    return failed;
}
