/* fork_idle THREADS BYTES FORKS: fork while sleeping threads' descriptors are swapped out.
 *
 * THREADS threads each set 40 thread-specific values (more than glibc keeps in the thread
 * descriptor: the rest go to a block in the heap) and sleep. BYTES of pattern data are then
 * written and read back again and again, far over the limit, so the sleeping threads' stacks,
 * whose tops hold glibc's thread descriptors, and that heap block go cold and are swapped
 * out. Then the program forks FORKS times (with pressure in between). glibc's fork walks every
 * thread descriptor in the child, and clears its specific blocks, before any atfork handler
 * runs, so before a pager could be rebuilt there: the child must read the exact bytes. Each
 * child checks a sample of pages and exits with the number of wrong words. Prints the failed
 * children, the parent's wrong words and sleeping threads that lost their values, and "ok" when
 * all are 0. The threads' stacks have no guard page, so they are plain anonymous memory the
 * pager adopts (as a JVM's thread stacks are). The program first loads the C.UTF-8 locale, as
 * CPython does at start: glibc keeps its data in a heap block that also goes cold, and that
 * every new thread reads as it starts (__ctype_init), a fork child's pager threads included. */
#include "pattern.h"

#include <locale.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#define KEYS 40
static pthread_key_t keys[KEYS];
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int stop;
static uint64_t *mem;
static uint64_t npages;

static void *sleeper(void *arg) {
    for (int k = 0; k < KEYS; k++) pthread_setspecific(keys[k], arg);
    pthread_mutex_lock(&mu);
    while (!stop) pthread_cond_wait(&cv, &mu);
    pthread_mutex_unlock(&mu);
    for (int k = 0; k < KEYS; k++)
        if (pthread_getspecific(keys[k]) != arg) return (void *)1;
    return 0;
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: fork_idle THREADS BYTES FORKS\n");
        return 2;
    }
    int nthreads = atoi(argv[1]), forks = atoi(argv[3]);
    npages = strtoull(argv[2], 0, 0) / PAGE_BYTES;
    if (nthreads < 1 || nthreads > 64 || npages == 0 || forks < 1) return 2;
    if (!setlocale(LC_ALL, "C.UTF-8")) {
        fprintf(stderr, "fork_idle: no C.UTF-8 locale\n");
        return 2;
    }
    for (int k = 0; k < KEYS; k++) pthread_key_create(&keys[k], 0);
    /* No guard page: the stacks are plain anonymous memory, which the pager adopts. */
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setguardsize(&a, 0);
    pthread_attr_setstacksize(&a, 256 << 10);
    pthread_t t[64];
    for (int i = 0; i < nthreads; i++) pthread_create(&t[i], &a, sleeper, (void *)(uintptr_t)(i + 1));
    mem = malloc(npages * PAGE_BYTES);
    if (!mem) return 3;
    uint64_t bad = 0;
    int failed = 0;
    for (int f = 0; f < forks; f++) {
        bad += fill_and_check_all(mem, npages, f + 1);
        bad += fill_and_check_all(mem, npages, f + 100);
        fflush(stdout);
        pid_t c = fork();
        if (c < 0) {
            perror("fork");
            return 3;
        }
        if (c == 0) {
            uint64_t wrong = 0, s = 7 + f, h = FNV_OFFSET;
            for (int k = 0; k < 256; k++) {
                s = mix64(s);
                uint64_t p = s % npages;
                wrong += check_page(mem + p * PAGE_WORDS, f + 100, p, &h);
            }
            _exit(wrong > 255 ? 255 : (int)wrong);
        }
        int st;
        if (waitpid(c, &st, 0) != c) return 3;
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
            failed++;
            if (WIFEXITED(st))
                fprintf(stderr, "fork_idle: fork %d: child exit %d\n", f, WEXITSTATUS(st));
            else
                fprintf(stderr, "fork_idle: fork %d: child killed by signal %d\n", f, WTERMSIG(st));
        }
    }
    pthread_mutex_lock(&mu);
    stop = 1;
    pthread_cond_broadcast(&cv);
    pthread_mutex_unlock(&mu);
    uint64_t tbad = 0;
    for (int i = 0; i < nthreads; i++) {
        void *r;
        pthread_join(t[i], &r);
        tbad += r != 0;
    }
    printf("children failed %d\nparent mismatches %llu\nthreads with wrong keys %llu\n", failed,
           (unsigned long long)bad, (unsigned long long)tbad);
    if (!failed && !bad && !tbad) printf("ok\n");
    return 0;
}
