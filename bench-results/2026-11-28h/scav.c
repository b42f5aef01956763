#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <sys/syscall.h>
/* scav HEAP_MB CHUNK_PAGES SECONDS [MUTATORS [raw]]: mutators (2 by default) write and check chunks of a heap while a scavenger
 * thread gives free chunks back with madvise(MADV_DONTNEED) (as Go's scavenger does), through
 * libc or, with "raw", as a raw system call (as the Go runtime does); a chunk taken again after
 * that must read as zeros. Prints bad counts; exit 1 if any. Build: cc -O2 -pthread scav.c -o scav */
enum { FREE_DIRTY = 0, BUSY = 1, LIVE = 2, SCAVENGED = 3 };
static size_t nchunks, cpages;
static uint8_t *heap;
static _Atomic int *state;
static uint32_t *ver;
static atomic_long bad_zero, bad_data, ops, scav;
static volatile int stop;
static int raw;
static uint64_t rnd(uint64_t *s) { *s ^= *s << 13; *s ^= *s >> 7; *s ^= *s << 17; return *s; }
static void fillc(size_t c, uint32_t v) {
  uint64_t *p = (uint64_t *)(heap + c * cpages * 4096);
  for (size_t i = 0; i < cpages * 512; i += 64) p[i] = (uint64_t)c << 32 | v;
}
static long checkc(size_t c, uint32_t v) {
  uint64_t *p = (uint64_t *)(heap + c * cpages * 4096); long b = 0;
  for (size_t i = 0; i < cpages * 512; i += 64) b += p[i] != ((uint64_t)c << 32 | v);
  return b;
}
static long zeroc(size_t c) {
  uint64_t *p = (uint64_t *)(heap + c * cpages * 4096); long b = 0;
  for (size_t i = 0; i < cpages * 512; i++) b += p[i] != 0;
  return b;
}
static void *mutator(void *arg) {
  uint64_t s = (uintptr_t)arg * 7919 + 1;
  while (!stop) {
    size_t c = rnd(&s) % nchunks;
    int st = atomic_load(&state[c]);
    if (st == BUSY) continue;
    if (!atomic_compare_exchange_strong(&state[c], &st, BUSY)) continue;
    if (st == SCAVENGED) { long z = zeroc(c); if (z) { atomic_fetch_add(&bad_zero, z); fprintf(stderr, "chunk %zu not zero after DONTNEED (%ld words)\n", c, z); } }
    if (st == LIVE) { long b = checkc(c, ver[c]); if (b) { atomic_fetch_add(&bad_data, b); fprintf(stderr, "chunk %zu lost data (%ld)\n", c, b); } }
    if (st == LIVE && rnd(&s) % 4 == 0) { atomic_store(&state[c], FREE_DIRTY); continue; }  /* free it */
    ver[c]++; fillc(c, ver[c]);
    atomic_fetch_add(&ops, 1);
    atomic_store(&state[c], LIVE);
  }
  return 0;
}
static void *scavenger(void *arg) {
  uint64_t s = 99;
  while (!stop) {
    size_t c = rnd(&s) % nchunks;
    int st = FREE_DIRTY;
    if (!atomic_compare_exchange_strong(&state[c], &st, BUSY)) continue;
    if (raw) syscall(SYS_madvise, heap + c * cpages * 4096, cpages * 4096, MADV_DONTNEED);
    else madvise(heap + c * cpages * 4096, cpages * 4096, MADV_DONTNEED);
    atomic_fetch_add(&scav, 1);
    atomic_store(&state[c], SCAVENGED);
  }
  return 0;
}
int main(int argc, char **argv) {
  size_t mb = atoi(argv[1]); cpages = atoi(argv[2]); int secs = atoi(argv[3]); int nm = argc > 4 ? atoi(argv[4]) : 2;
  raw = argc > 5 && !strcmp(argv[5], "raw");
  if (nm < 1 || nm > 8) nm = 2;
  nchunks = (mb << 20) / (cpages * 4096);
  heap = mmap(0, nchunks * cpages * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  state = calloc(nchunks, sizeof *state); ver = calloc(nchunks, 4);
  for (size_t c = 0; c < nchunks; c++) { ver[c] = 1; fillc(c, 1); state[c] = LIVE; }
  pthread_t t[9];
  for (int i = 0; i < nm; i++) pthread_create(&t[i], 0, mutator, (void *)(uintptr_t)(i + 1));
  pthread_create(&t[nm], 0, scavenger, 0);
  sleep(secs); stop = 1;
  for (int i = 0; i <= nm; i++) pthread_join(t[i], 0);
  printf("ops=%ld scavenged=%ld bad_zero=%ld bad_data=%ld\n", (long)ops, (long)scav, (long)bad_zero, (long)bad_data);
  return bad_zero || bad_data;
}
