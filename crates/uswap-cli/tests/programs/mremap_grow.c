/* mremap_grow ROUNDS: mappings that grow in place over a range of their own that was just
 * unmapped, through a raw mremap system call, as glibc's realloc of a large chunk issues it
 * (no interposed symbol sees that call, and the kernel sends no event for an in-place growth).
 *
 * Each round maps 2 x 512 KiB, fills both halves, unmaps the upper half, grows the mapping back
 * to 1 MiB in place (flags 0: never moved) and fills the new upper half, which must read as
 * zeros first. At the end every mapping is checked again. Prints
 * "mremap_grow: ROUNDS rounds, mismatches M, sum S" and exits 0 when nothing mismatched. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#define HALF (512 << 10)

/* mremap(2) issued here, not through libc's wrapper (which uswap's library interposes). */
static void *raw_mremap(void *old, size_t old_len, size_t new_len, long flags) {
    long r;
    register long r10 __asm__("r10") = flags;
    __asm__ volatile("syscall"
                     : "=a"(r)
                     : "0"((long)SYS_mremap), "D"(old), "S"(old_len), "d"(new_len), "r"(r10)
                     : "rcx", "r11", "memory");
    return (void *)r;
}

static uint64_t word(size_t round, size_t i) { return (round + 1) * 0x9E3779B97F4A7C15ull ^ i; }

int main(int argc, char **argv) {
    size_t rounds = argc > 1 ? strtoul(argv[1], NULL, 10) : 32;
    uint64_t **maps = calloc(rounds, sizeof *maps);
    size_t words = HALF / 8, bad = 0, retries = 0;
    uint64_t sum = 0;
    for (size_t r = 0; r < rounds; r++) {
        uint64_t *m = mmap(NULL, 2 * HALF, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m == MAP_FAILED) return perror("mmap"), 2;
        for (size_t i = 0; i < 2 * words; i++) m[i] = ~word(r, i);
        if (munmap(m + words, HALF) != 0) return perror("munmap"), 2;
        if (raw_mremap(m, HALF, 2 * HALF, 0) != m) {
            /* Something was mapped into the freed half meanwhile: this round again. */
            munmap(m, HALF);
            if (++retries > 1000) return fprintf(stderr, "mremap never grew in place\n"), 2;
            r--;
            continue;
        }
        for (size_t i = words; i < 2 * words; i++) {
            bad += m[i] != 0;
            m[i] = word(r, i);
        }
        maps[r] = m;
    }
    for (size_t r = 0; r < rounds; r++)
        for (size_t i = 0; i < 2 * words; i++) {
            uint64_t want = i < words ? ~word(r, i) : word(r, i);
            bad += maps[r][i] != want;
            sum += maps[r][i];
        }
    printf("mremap_grow: %zu rounds, mismatches %zu, sum %llu\n", rounds, bad, (unsigned long long)sum);
    return bad != 0;
}
