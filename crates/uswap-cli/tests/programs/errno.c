/* errno: every interposed call that succeeds must leave errno as it found it, as glibc's do.
 * Programs read errno after a later call that succeeded: PostgreSQL's postmaster checks
 * select()'s errno after a sigprocmask(), and shut down when the library's sigprocmask left
 * EINVAL there. Prints one line per call that changed errno, then "errno: N calls, M changed";
 * exit status 1 when any did. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define MARK 4242
static int calls, changed;

static void check(const char *what) {
    calls++;
    if (errno != MARK) {
        printf("%s changed errno to %d (%s)\n", what, errno, strerror(errno));
        changed++;
    }
    errno = MARK;
}

int main(void) {
    sigset_t all, old;
    sigfillset(&all);
    errno = MARK;
    if (sigprocmask(SIG_SETMASK, &all, &old) == 0) check("sigprocmask");
    if (pthread_sigmask(SIG_SETMASK, &old, NULL) == 0) check("pthread_sigmask");
    size_t len = 64 << 20;
    char *m = malloc(len);
    if (m) check("malloc");
    if (m) memset(m, 1, len);
    char *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p != MAP_FAILED) check("mmap");
    memset(p, 2, len);
    if (madvise(p, len / 2, MADV_DONTNEED) == 0) check("madvise");
    char *q = mremap(p, len, 2 * len, MREMAP_MAYMOVE);
    if (q != MAP_FAILED) check("mremap");
    char *r = mmap(NULL, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (r != MAP_FAILED) check("mmap PROT_NONE");
    if (mprotect(r, len, PROT_READ | PROT_WRITE) == 0) check("mprotect");
    int fd = open("/dev/zero", O_RDONLY);
    if (fd >= 0 && read(fd, r, len) == (ssize_t)len) check("read");
    if (munmap(q, 2 * len) == 0) check("munmap");
    free(m);
    check("free");
    printf("errno: %d calls, %d changed\n", calls, changed);
    return changed != 0;
}
