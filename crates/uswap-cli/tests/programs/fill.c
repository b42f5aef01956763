/* fill MIB random|text: fill MIB MiB, page by page, with data that does not compress
 * (random) or compresses about 3:1 (text: runs of a few letters), then read it all back twice
 * against the same generator.
 *
 * Prints "fill: MIB MiB MODE mismatches M" and exits 0 when nothing mismatched. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t next(uint64_t *x) {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return *x;
}

/* Page `pg`'s bytes: a generator seeded by the page number, so a check needs no copy. */
static void page(unsigned char *p, size_t pg, int text) {
    uint64_t x = (pg + 1) * 0x9E3779B97F4A7C15ull | 1;
    if (!text) {
        for (size_t i = 0; i < 4096; i += 8) {
            uint64_t v = next(&x);
            memcpy(p + i, &v, 8);
        }
        return;
    }
    for (size_t i = 0; i < 4096;) {
        uint64_t v = next(&x);
        size_t run = 4 + (v & 15);
        for (size_t j = 0; j < run && i < 4096; j++) p[i++] = 'a' + ((v >> 8) & 3);
    }
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: fill MIB random|text\n");
        return 2;
    }
    size_t mib = strtoul(argv[1], NULL, 10), pages = mib << 8;
    int text = strcmp(argv[2], "text") == 0;
    unsigned char *m = malloc(pages * 4096), want[4096];
    if (!m) return 1;
    for (size_t pg = 0; pg < pages; pg++) page(m + pg * 4096, pg, text);
    size_t bad = 0;
    for (int pass = 0; pass < 2; pass++)
        for (size_t pg = 0; pg < pages; pg++) {
            page(want, pg, text);
            bad += memcmp(want, m + pg * 4096, 4096) != 0;
        }
    printf("fill: %zu MiB %s mismatches %zu\n", mib, argv[2], bad);
    return bad != 0;
}
