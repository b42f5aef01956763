/* The data pattern shared by the end-to-end test programs (tests/run_e2e.rs computes the
 * same values in Rust, independently, to check what the programs print).
 *
 * Memory is seen as a sequence of logical pages of 512 64-bit words (4 KiB). Page `p` written
 * with seed `s` is, depending on a hash of (s, p): all zero (1 in 4), compressible (1 in 4: a
 * motif of 8 words repeated) or pseudo-random (2 in 4, does not compress).
 *
 * Hashes: a page's hash is FNV-1a over its words; a sequence of pages hashes to FNV-1a over
 * the page hashes. */
#ifndef USWAP_E2E_PATTERN_H
#define USWAP_E2E_PATTERN_H

#include <stddef.h>
#include <stdint.h>

#define PAGE_WORDS 512u
#define PAGE_BYTES 4096u
#define FNV_OFFSET 0xcbf29ce484222325ull
#define FNV_PRIME 0x100000001b3ull

/* splitmix64's finaliser. */
static inline uint64_t mix64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* 0: zero page, 1: compressible, 2: random. */
static inline int page_kind(uint64_t seed, uint64_t p) {
    switch (mix64(seed * 0x51afd7ed558ccd ^ p) & 3) {
    case 0: return 0;
    case 1: return 1;
    default: return 2;
    }
}

/* Word `i` of page `p` for `seed`. */
static inline uint64_t word_at(uint64_t seed, uint64_t p, uint64_t i) {
    switch (page_kind(seed, p)) {
    case 0: return 0;
    case 1: return mix64((seed << 48) ^ (p << 8) ^ (i & 7));
    default: return mix64((seed << 48) ^ (p << 12) ^ i ^ 0x800);
    }
}

static inline uint64_t fnv_step(uint64_t h, uint64_t w) { return (h ^ w) * FNV_PRIME; }

/* Write page `p` with `seed` at `dst` (PAGE_WORDS words). */
static inline void fill_page(volatile uint64_t *dst, uint64_t seed, uint64_t p) {
    for (uint64_t i = 0; i < PAGE_WORDS; i++) dst[i] = word_at(seed, p, i);
}

/* Check page `p` at `src` against `seed`: returns the number of wrong words and adds the
 * hash of what it read to *h. */
static inline uint64_t check_page(const volatile uint64_t *src, uint64_t seed, uint64_t p, uint64_t *h) {
    uint64_t bad = 0, ph = FNV_OFFSET;
    for (uint64_t i = 0; i < PAGE_WORDS; i++) {
        uint64_t w = src[i];
        bad += w != word_at(seed, p, i);
        ph = fnv_step(ph, w);
    }
    *h = fnv_step(*h, ph);
    return bad;
}

/* Write `npages` pages with `seed` from `mem` on, then read them all back: the wrong words. */
static inline uint64_t fill_and_check_all(uint64_t *mem, uint64_t npages, uint64_t seed) {
    for (uint64_t p = 0; p < npages; p++) fill_page(mem + p * PAGE_WORDS, seed, p);
    uint64_t bad = 0, h = FNV_OFFSET;
    for (uint64_t p = 0; p < npages; p++) bad += check_page(mem + p * PAGE_WORDS, seed, p, &h);
    return bad;
}

#endif
