/* fork BYTES: copy-on-write across fork under the pager, both ways, two generations.
 *
 * The parent fills BYTES (half malloc, half an anonymous mmap) with seed 1 and verifies it,
 * then forks. After the fork the parent overwrites pages p % 5 == 0 with seed 2 and tells the
 * child (through a pipe) that it is done. The child then verifies that it still sees seed 1
 * everywhere, overwrites pages p % 7 == 3 with seed 3, verifies that, and forks a grandchild,
 * which verifies the child's view, overwrites pages p % 11 == 5 with seed 4 and verifies that.
 * The child verifies its view again after the grandchild exited, and the parent verifies its
 * own view after the child exited: nobody sees another process's writes.
 *
 * Each check prints one line: who, the step, the number of wrong words and the hash of what it
 * read. Exit status 0 when everything matched in every process. */
#include "pattern.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

static uint64_t *half[2];
static uint64_t npages, half_pages;

static uint64_t *page(uint64_t p) {
    return p < half_pages ? half[0] + p * PAGE_WORDS : half[1] + (p - half_pages) * PAGE_WORDS;
}

/* The seed of page p in a view: the last writer among those that apply. */
static uint64_t seed_of(uint64_t p, int parent_mod, int child_mod, int grandchild_mod) {
    uint64_t s = 1;
    if (parent_mod && p % 5 == 0) s = 2;
    if (child_mod && p % 7 == 3) s = 3;
    if (grandchild_mod && p % 11 == 5) s = 4;
    return s;
}

static void modify(uint64_t mod, uint64_t rem, uint64_t seed) {
    for (uint64_t p = rem; p < npages; p += mod) fill_page(page(p), seed, p);
}

static uint64_t check(const char *who, const char *step, int pm, int cm, int gm) {
    uint64_t bad = 0, h = FNV_OFFSET;
    for (uint64_t p = 0; p < npages; p++) {
        uint64_t pb = check_page(page(p), seed_of(p, pm, cm, gm), p, &h);
        if (pb && bad == 0)
            fprintf(stderr, "fork: %s: %s: page %llu: %llu wrong words\n", who, step, (unsigned long long)p,
                    (unsigned long long)pb);
        bad += pb;
    }
    printf("%s: %s: mismatches %llu hash %016llx\n", who, step, (unsigned long long)bad, (unsigned long long)h);
    fflush(stdout);
    return bad;
}

static int wait_status(pid_t pid) {
    int st;
    if (waitpid(pid, &st, 0) != pid) {
        perror("waitpid");
        return 100;
    }
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: fork BYTES\n");
        return 2;
    }
    uint64_t bytes = strtoull(argv[1], NULL, 0);
    if (bytes == 0 || bytes % (2 * PAGE_BYTES)) {
        fprintf(stderr, "fork: bad size\n");
        return 2;
    }
    npages = bytes / PAGE_BYTES;
    half_pages = npages / 2;
    half[0] = malloc(bytes / 2);
    half[1] = mmap(NULL, bytes / 2, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (!half[0] || half[1] == MAP_FAILED) {
        perror("allocate");
        return 3;
    }
    modify(1, 0, 1);
    uint64_t bad = check("parent", "before fork", 0, 0, 0);
    int go[2];
    if (pipe(go)) {
        perror("pipe");
        return 3;
    }
    fflush(stdout);
    pid_t child = fork();
    if (child < 0) {
        perror("fork");
        return 3;
    }
    if (child == 0) {
        char c;
        close(go[1]);
        if (read(go[0], &c, 1) != 1) {
            fprintf(stderr, "fork: child: no word from the parent\n");
            _exit(3);
        }
        bad = check("child", "inherited", 0, 0, 0);
        modify(7, 3, 3);
        bad += check("child", "own writes", 0, 1, 0);
        fflush(stdout);
        pid_t gc = fork();
        if (gc < 0) {
            perror("fork");
            _exit(3);
        }
        if (gc == 0) {
            bad = check("grandchild", "inherited", 0, 1, 0);
            modify(11, 5, 4);
            bad += check("grandchild", "own writes", 0, 1, 1);
            exit(bad != 0);
        }
        int st = wait_status(gc);
        printf("child: grandchild exit status %d\n", st);
        bad += check("child", "after grandchild", 0, 1, 0);
        exit(bad != 0 || st != 0);
    }
    close(go[0]);
    modify(5, 0, 2);
    if (write(go[1], "g", 1) != 1) perror("write");
    close(go[1]);
    int st = wait_status(child);
    printf("parent: child exit status %d\n", st);
    bad += check("parent", "after child", 1, 0, 0);
    free(half[0]);
    munmap(half[1], bytes / 2);
    return bad != 0 || st != 0;
}
