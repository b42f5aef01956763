/*
 * region.c: the uswap C ABI end to end, using only <uswap.h>.
 *
 * A pager with a 16 MiB limit (64 KiB folios, tiers "zero,lz4") and a region 4x the limit: the
 * pattern written over it must page out and come back byte for byte. Also shows an error path,
 * discard, evict, the statistics (struct and JSON) and freeing the pager before its region.
 *
 * Build (from crates/uswap-ffi, after `cargo build -p uswap-ffi`):
 *     cc -std=c11 -O2 -Wall -Wextra -Iinclude examples/c/region.c -o region \
 *        -L../../target/debug -luswap_ffi -Wl,-rpath,$PWD/../../target/debug
 * tests/c_example.rs does this and runs it.
 *
 * Exit status: 0 on success, 1 on any failure or mismatch, 77 (the automake "skipped" code) when
 * this process may not use userfaultfd.
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "uswap.h"

#define MIB ((size_t)1 << 20)
#define LIMIT (16 * MIB)
#define FOLIO ((size_t)64 << 10)
#define REGION (4 * LIMIT)

static int failures;

static void fail(const char *what) {
    fprintf(stderr, "FAIL: %s (uswap_last_error: \"%s\")\n", what, uswap_last_error());
    failures++;
}

/*
 * The byte expected at offset i. Each 4 KiB page starts with its page number (8 bytes, little
 * endian), so a page served at the wrong address or a stale page is caught; the rest is runs of
 * 256 equal bytes, which lz4 compresses far below the limit (the "zero,lz4" tiers keep
 * everything in RAM: incompressible data would not fit under it).
 */
static uint8_t pattern(size_t i) {
    size_t page = i >> 12, in = i & 4095;
    if (in < 8)
        return (uint8_t)((uint64_t)page >> (8 * in));
    return (uint8_t)(page * 7 + (in >> 8) + 1);
}

/* Compares [from, to) with the pattern; returns the number of bytes that differ. */
static size_t verify(const uint8_t *mem, size_t from, size_t to) {
    size_t bad = 0;
    for (size_t i = from; i < to; i++) {
        uint8_t want = pattern(i);
        if (mem[i] != want) {
            if (bad < 5)
                fprintf(stderr, "mismatch at offset %zu: expected 0x%02x, found 0x%02x\n", i, want,
                        mem[i]);
            bad++;
        }
    }
    return bad;
}

int main(void) {
    printf("uswap %s\n", uswap_version());

    /* Error paths. No call has failed on this thread yet: the last error is empty. */
    if (uswap_last_error()[0] != '\0')
        fail("uswap_last_error is not empty before any error");
    if (uswap_config_default(NULL) != USWAP_ERR_INVALID)
        fail("uswap_config_default(NULL) did not return USWAP_ERR_INVALID");
    UswapConfig cfg;
    if (uswap_config_default(&cfg) != USWAP_OK) {
        fail("uswap_config_default");
        return 1;
    }
    cfg.folio_size = 12345;
    UswapPager *bad = uswap_pager_new(&cfg);
    if (bad != NULL) {
        fail("uswap_pager_new accepted folio_size 12345");
        uswap_pager_free(bad);
    } else if (uswap_last_error()[0] == '\0') {
        fail("uswap_pager_new failed without a message");
    } else if (uswap_last_status() != USWAP_ERR_INVALID) {
        fail("uswap_pager_new(folio_size=12345) did not report USWAP_ERR_INVALID");
    } else {
        printf("error path: uswap_pager_new(folio_size=12345) -> NULL: %s\n", uswap_last_error());
    }

    /* The pager. */
    cfg.limit_bytes = LIMIT;
    cfg.folio_size = FOLIO;
    cfg.tiers = "zero,lz4";
    UswapPager *pager = uswap_pager_new(&cfg);
    if (pager == NULL) {
        if (uswap_last_status() == USWAP_ERR_UNAVAILABLE) {
            printf("SKIPPED: userfaultfd is not available to this process: %s\n",
                   uswap_last_error());
            return 77;
        }
        fail("uswap_pager_new");
        return 1;
    }

    UswapRegion *region = uswap_map(pager, REGION);
    if (region == NULL) {
        fail("uswap_map");
        uswap_pager_free(pager);
        return 1;
    }
    uint8_t *mem = uswap_region_ptr(region);
    size_t len = uswap_region_len(region);
    if (mem == NULL || len < REGION || len % FOLIO != 0) {
        fprintf(stderr, "FAIL: region %p of %zu bytes for %zu requested\n", (void *)mem, len,
                (size_t)REGION);
        return 1;
    }

    /* Write the whole region (4x the limit: it pages out as it goes), then read it all back. */
    for (size_t i = 0; i < REGION; i++)
        mem[i] = pattern(i);
    size_t bad_bytes = verify(mem, 0, REGION);
    if (bad_bytes != 0) {
        fprintf(stderr, "FAIL: %zu of %zu bytes differ after the round trip\n", bad_bytes,
                (size_t)REGION);
        failures++;
    }

    UswapStats st;
    if (uswap_stats(pager, &st) != USWAP_OK) {
        fail("uswap_stats");
        memset(&st, 0, sizeof st);
    }
    if (st.evicted_pages == 0)
        fail("no page was evicted although the region is 4x the limit");
    if (st.swapped_in_pages == 0)
        fail("no page was swapped in although the region is 4x the limit");
    if (st.limit_bytes != LIMIT)
        fail("uswap_stats reports another limit");

    /* Discard the first folio (reads as zeros), evict the rest, check it again. */
    if (uswap_discard(region, 0, FOLIO) != USWAP_OK)
        fail("uswap_discard");
    for (size_t i = 0; i < FOLIO; i++) {
        if (mem[i] != 0) {
            fprintf(stderr, "FAIL: byte %zu is 0x%02x after uswap_discard\n", i, mem[i]);
            failures++;
            break;
        }
    }
    int64_t evicted = uswap_evict(region);
    if (evicted < 0)
        fail("uswap_evict");
    if (verify(mem, FOLIO, REGION) != 0) {
        fprintf(stderr, "FAIL: the region differs after uswap_evict\n");
        failures++;
    }

    /* The statistics as JSON: ask for the length, then fill a buffer of that size. */
    int64_t jlen = uswap_stats_json(pager, NULL, 0);
    if (jlen <= 0) {
        fail("uswap_stats_json(NULL, 0)");
    } else {
        char *json = malloc((size_t)jlen + 1);
        if (json == NULL || uswap_stats_json(pager, json, (size_t)jlen + 1) != jlen ||
            json[0] != '{' || strlen(json) != (size_t)jlen)
            fail("uswap_stats_json");
        free(json);
    }

    /* The region keeps the pager alive: free the pager first, the region still works. */
    uswap_pager_free(pager);
    if (verify(mem, REGION - FOLIO, REGION) != 0) {
        fprintf(stderr, "FAIL: the region differs after uswap_pager_free\n");
        failures++;
    }
    if (uswap_unmap(region) != USWAP_OK)
        fail("uswap_unmap");

    if (failures != 0) {
        fprintf(stderr, "region: %d failure(s)\n", failures);
        return 1;
    }
    printf("region: ok: %zu bytes verified (4x the %zu-byte limit, %zu KiB folios); "
           "%llu pages evicted, %llu swapped in, %llu faults (%llu swap-ins), %lld evicted by "
           "uswap_evict\n",
           (size_t)REGION, (size_t)LIMIT, FOLIO >> 10, (unsigned long long)st.evicted_pages,
           (unsigned long long)st.swapped_in_pages, (unsigned long long)st.faults,
           (unsigned long long)st.faults_swapin, (long long)evicted);
    return 0;
}
