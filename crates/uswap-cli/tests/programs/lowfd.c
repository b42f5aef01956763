/* lowfd: a single-threaded program counts on the lowest free descriptor number, as shells do
 * for `echo x >> file` (close(1), dup2(fd, 1), write(1)): no thread of a preloaded library may
 * take that number meanwhile. For SECONDS (argv[1], default 3) it frees number 1 and waits a
 * little (a window for any other thread's open), then checks that open() gives 1, and that a
 * write through a dup2'ed 1 reaches its file; every 50 ms a fork child does the same for 20 ms.
 * Prints "lowfd: N rounds, M wrong" (parent and children summed); exit status 1 when any was
 * wrong. Output goes to standard error (standard output is the number under test). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

static void spin_us(int us) {
    double end = now() + us / 1e6;
    while (now() < end) {
    }
}

/* Rounds for `secs` seconds; returns the number wrong, *rounds the count. */
static long rounds_for(double secs, int file, long *rounds) {
    struct stat want;
    fstat(file, &want);
    long wrong = 0;
    double end = now() + secs;
    while (now() < end) {
        (*rounds)++;
        close(1);
        spin_us(20);
        int g = open("/dev/null", O_RDONLY);
        if (g != 1) {
            dprintf(2, "lowfd: open gave %d where 1 was the lowest free number\n", g);
            wrong++;
        }
        if (g >= 0)
            close(g);
        spin_us(20);
        if (dup2(file, 1) != 1) {
            dprintf(2, "lowfd: dup2: %s\n", strerror(errno));
            wrong++;
            continue;
        }
        struct stat st;
        if (write(1, "x", 1) != 1) {
            dprintf(2, "lowfd: write to the dup2'ed 1: %s\n", strerror(errno));
            wrong++;
        } else if (fstat(1, &st) != 0 || st.st_ino != want.st_ino) {
            dprintf(2, "lowfd: number 1 is not the file dup2 put there\n");
            wrong++;
        }
    }
    return wrong;
}

int main(int argc, char **argv) {
    double secs = argc > 1 ? atof(argv[1]) : 3;
    char path[] = "/tmp/lowfd.XXXXXX";
    int file = mkstemp(path);
    if (file < 0) {
        perror("mkstemp");
        return 2;
    }
    unlink(path);
    /* Some memory of the program's own, for the library to look after. */
    size_t n = 16 << 20;
    char *mem = malloc(n);
    memset(mem, 1, n);
    long rounds = 0, wrong = 0, forks = 0;
    double end = now() + secs;
    while (now() < end) {
        int pipefd[2];
        if (pipe(pipefd) != 0) {
            perror("pipe");
            return 2;
        }
        pid_t c = fork();
        if (c == 0) {
            close(pipefd[0]);
            long r = 0, w = rounds_for(0.02, file, &r);
            long both[2] = {r, w};
            if (write(pipefd[1], both, sizeof both) != sizeof both)
                _exit(3);
            _exit(0);
        }
        close(pipefd[1]);
        forks++;
        wrong += rounds_for(0.05, file, &rounds);
        long both[2] = {0, 0};
        if (read(pipefd[0], both, sizeof both) != sizeof both) {
            dprintf(2, "lowfd: a fork child sent no counts\n");
            wrong++;
        }
        close(pipefd[0]);
        rounds += both[0];
        wrong += both[1];
        int status;
        if (waitpid(c, &status, 0) != c || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            dprintf(2, "lowfd: a fork child failed\n");
            wrong++;
        }
    }
    dprintf(2, "lowfd: %ld rounds, %ld wrong, %ld forks, memory %d\n", rounds, wrong, forks, mem[n - 1]);
    return wrong ? 1 : 0;
}
