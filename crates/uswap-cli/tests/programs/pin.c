// Faults from one thread until the pager pins it beside its event thread, then checks that the
// pin stays the pager's business: sched_getaffinity reports the program's mask, and a thread
// (pthread_create), a vfork+execl child and a posix_spawn child each start with the program's
// mask, not the pin. Usage: pin MIB ALL, with ALL the CPUs the program may use. Prints
// "reported R thread T vfork V spawn S sum H" (each a CPU count) and exits 0, or says why not.
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <spawn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

// CPUs in a "Cpus_allowed_list:" value such as "0-1,3".
static int count_list(const char *s) {
    int n = 0;
    while (*s) {
        while (*s == ' ' || *s == '\t' || *s == ',') s++;
        if (*s < '0' || *s > '9') break;
        long a = strtol(s, (char **)&s, 10), b = a;
        if (*s == '-') b = strtol(s + 1, (char **)&s, 10);
        n += (int)(b - a + 1);
    }
    return n;
}

// The CPUs the calling thread may really run on (the kernel's word, which no wrapper sees).
static int real_cpus(void) {
    FILE *f = fopen("/proc/thread-self/status", "r");
    char line[512];
    int n = -1;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "Cpus_allowed_list:", 18)) n = count_list(line + 18);
    if (f) fclose(f);
    return n;
}

static void *thread_main(void *out) {
    *(int *)out = real_cpus();
    return NULL;
}

// What a child printed for its Cpus_allowed_list (grep's output on the pipe).
static int child_cpus(int fd) {
    char buf[512];
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return -1;
    buf[n] = 0;
    char *c = strchr(buf, ':');
    return c ? count_list(c + 1) : -1;
}

static unsigned char *mem;
static size_t pages;
static uint64_t rng = 88172645463325252ull;

static uint64_t next(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

// Touch random pages (each page holds its index in its first word, checked) until the calling
// thread is pinned to one CPU, for at most 30 s. Returns 1 when pinned.
static int fault_until_pinned(void) {
    double end = now() + 30;
    while (now() < end) {
        for (int i = 0; i < 4096; i++) {
            size_t p = next() % pages;
            uint64_t *w = (uint64_t *)(mem + p * 4096);
            if (w[0] != p) {
                printf("page %zu holds %llu\n", p, (unsigned long long)w[0]);
                exit(4);
            }
            w[1]++;
        }
        if (real_cpus() == 1) return 1;
    }
    return 0;
}

int main(int argc, char **argv) {
    if (argc != 3) return 2;
    size_t bytes = (size_t)atol(argv[1]) << 20;
    int all = atoi(argv[2]);
    if (all < 2) {
        printf("needs two CPUs or more (has %d): the pager pins nothing on one\n", all);
        return 2;
    }
    pages = bytes / 4096;
    mem = malloc(bytes);
    for (size_t p = 0; p < pages; p++) ((uint64_t *)(mem + p * 4096))[0] = p;

    if (!fault_until_pinned()) { printf("never pinned (1)\n"); return 3; }
    cpu_set_t s;
    CPU_ZERO(&s);
    sched_getaffinity(0, sizeof s, &s);
    int reported = CPU_COUNT(&s);
    int thread = -1;
    pthread_t t;
    pthread_create(&t, NULL, thread_main, &thread);
    pthread_join(t, NULL);

    if (!fault_until_pinned()) { printf("never pinned (2)\n"); return 3; }
    int fds[2];
    if (pipe(fds)) return 5;
    pid_t c = vfork();
    if (c == 0) {
        dup2(fds[1], 1);
        execl("/bin/grep", "grep", "Cpus_allowed_list", "/proc/self/status", (char *)NULL);
        _exit(127);
    }
    close(fds[1]);
    int vforked = child_cpus(fds[0]);
    waitpid(c, NULL, 0);

    if (!fault_until_pinned()) { printf("never pinned (3)\n"); return 3; }
    if (pipe(fds)) return 5;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
    char *args[] = {"grep", "Cpus_allowed_list", "/proc/self/status", NULL};
    if (posix_spawn(&c, "/bin/grep", &fa, NULL, args, environ)) return 5;
    close(fds[1]);
    int spawned = child_cpus(fds[0]);
    waitpid(c, NULL, 0);

    uint64_t sum = 0;
    for (size_t p = 0; p < pages; p++) {
        uint64_t *w = (uint64_t *)(mem + p * 4096);
        if (w[0] != p) { printf("page %zu holds %llu\n", p, (unsigned long long)w[0]); return 4; }
        sum += w[1];
    }
    printf("reported %d thread %d vfork %d spawn %d of %d\n", reported, thread, vforked, spawned, all);
    return sum == 0 ? 6 : 0;
}
