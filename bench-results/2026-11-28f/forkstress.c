// Threads fault on swapped memory while the main thread forks; each child checks pages.
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <pthread.h>
#include <unistd.h>
#include <sys/wait.h>
static size_t npages; static uint64_t **pages; static volatile int stop;
static uint64_t val(size_t pg, size_t i) { return i % 64 == 0 ? pg * 0x9E3779B97F4A7C15ull + i : pg; }
static int check(size_t pg) { uint64_t *p = pages[pg]; for (size_t i = 0; i < 512; i += 37) if (p[i] != val(pg, i)) return 0; return 1; }
static void *worker(void *a) {
    uint64_t s = (uintptr_t)a * 7919 + 1; long bad = 0;
    while (!stop) { s = s * 6364136223846793005ull + 1442695040888963407ull; size_t pg = (s >> 33) % npages;
        if (!check(pg)) { bad++; fprintf(stderr, "thread: page %zu wrong\n", pg); exit(3); }
        if ((s >> 20) % 64 == 0) { void *x = malloc(100 + (s >> 40) % 5000); free(x); } }
    return (void*)bad;
}
int main(int argc, char **argv) {
    size_t mb = argc > 1 ? atol(argv[1]) : 300; int forks = argc > 2 ? atoi(argv[2]) : 300;
    npages = mb * 256; pages = malloc(npages * sizeof *pages);
    for (size_t pg = 0; pg < npages; pg++) { pages[pg] = malloc(4096); for (size_t i = 0; i < 512; i++) pages[pg][i] = val(pg, i); }
    pthread_t t[3]; for (long i = 0; i < 3; i++) pthread_create(&t[i], 0, worker, (void*)(i + 1));
    uint64_t s = 12345;
    for (int f = 0; f < forks; f++) {
        pid_t c = fork();
        if (c == 0) { for (int k = 0; k < 200; k++) { s = s * 6364136223846793005ull + 1; if (!check((s >> 33) % npages)) _exit(4); }
            void *x = malloc(1000); free(x); _exit(0); }
        int st; waitpid(c, &st, 0);
        if (f % 100 == 0) fprintf(stderr, "fork %d\n", f);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) { fprintf(stderr, "child %d failed: %d\n", f, st); return 1; }
    }
    stop = 1; for (int i = 0; i < 3; i++) pthread_join(t[i], 0);
    printf("ok %d forks\n", forks); return 0;
}
