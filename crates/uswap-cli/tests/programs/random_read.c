/* Threads that read a buffer at random, and move parts of it through a pipe with read(2)
 * and write(2) (system calls whose buffers may be swapped out), then print checksums and the
 * process's seccomp mode. Usage: random_read MIB THREADS READS. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static unsigned char *buf;
static size_t size;
static long reads;
static uint64_t sums[64];

static void *worker(void *arg) {
    long id = (long)arg;
    uint64_t x = 88172645463325252ULL ^ (uint64_t)(id * 7919 + 1), s = 0;
    int p[2];
    if (pipe(p) != 0)
        abort();
    unsigned char *back = malloc(65536);
    for (long i = 0; i < reads; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        size_t off = x % (size - 65536);
        s += buf[off];
        if (i % 1000 == 0) {
            /* A swapped-out source and a fresh destination, through the kernel. */
            if (write(p[1], buf + off, 65536) != 65536 || read(p[0], back, 65536) != 65536)
                abort();
            if (memcmp(back, buf + off, 65536) != 0)
                abort();
            s += back[x % 65536];
        }
    }
    free(back);
    close(p[0]);
    close(p[1]);
    sums[id] = s;
    return 0;
}

int main(int argc, char **argv) {
    if (argc != 4)
        return 2;
    size = (size_t)atol(argv[1]) << 20;
    int nt = atoi(argv[2]);
    reads = atol(argv[3]);
    if (nt < 1 || nt > 64)
        return 2;
    buf = malloc(size);
    for (size_t i = 0; i < size; i += 4096) {
        memset(buf + i, (int)((i / 4096) & 0xff), 4096);
        buf[i] = (unsigned char)((i >> 12) * 31);
    }
    pthread_t th[64];
    for (long i = 0; i < nt; i++)
        pthread_create(&th[i], 0, worker, (void *)i);
    uint64_t total = 0;
    for (int i = 0; i < nt; i++) {
        pthread_join(th[i], 0);
        total += sums[i];
    }
    char line[256];
    int mode = -1;
    FILE *f = fopen("/proc/self/status", "r");
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, "Seccomp:", 8) == 0)
            mode = atoi(line + 8);
    if (f)
        fclose(f);
    printf("sum %llu\nseccomp %d\n", (unsigned long long)total, mode);
    return 0;
}
