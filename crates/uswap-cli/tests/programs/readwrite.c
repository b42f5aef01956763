/* readwrite BUF_BYTES OTHER_BYTES IN OUT: copy file IN to file OUT through a buffer that is
 * swapped out whenever the kernel reads into it or writes from it.
 *
 * The buffer (BUF_BYTES, malloc) is filled with a pattern first. The file is copied in passes
 * of at most BUF_BYTES; before each read and before each write OTHER_BYTES of other memory
 * (an anonymous mmap) are written and read back, which pushes the buffer out. Chunks of
 * varying, odd sizes go in with read(), pread() and fread() in turn and out with write(),
 * pwrite() and writev() in turn, at unaligned offsets of the buffer.
 *
 * Prints the bytes copied, the passes, the calls of each kind and the mismatches found in the
 * other memory. Exit status 0 when the copy completed and nothing mismatched. */
#define _GNU_SOURCE
#include "pattern.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

static uint64_t *other;
static uint64_t other_pages, evictions, other_bad;

/* Write the other memory and read it back (a different seed each time). */
static void evict(void) {
    uint64_t seed = 100 + evictions++, h = FNV_OFFSET;
    for (uint64_t p = 0; p < other_pages; p++) fill_page(other + p * PAGE_WORDS, seed, p);
    for (uint64_t p = 0; p < other_pages; p++) other_bad += check_page(other + p * PAGE_WORDS, seed, p, &h);
}

static void die(const char *what) {
    fprintf(stderr, "readwrite: %s: %s\n", what, strerror(errno));
    exit(3);
}

/* Chunk size for call number n: about 4 MiB, never a multiple of the page size. */
static size_t chunk(uint64_t n) { return (4u << 20) - 4096 * (n % 5) + 1 + 97 * (n % 13); }

int main(int argc, char **argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: readwrite BUF_BYTES OTHER_BYTES IN OUT\n");
        return 2;
    }
    size_t bufsize = strtoull(argv[1], NULL, 0);
    uint64_t other_bytes = strtoull(argv[2], NULL, 0);
    other_pages = other_bytes / PAGE_BYTES;
    char *buf = malloc(bufsize);
    other = mmap(NULL, other_pages * PAGE_BYTES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (!buf || other == MAP_FAILED) die("allocate");
    for (uint64_t p = 0; p < bufsize / PAGE_BYTES; p++) fill_page((uint64_t *)buf + p * PAGE_WORDS, 7, p);
    int in = open(argv[3], O_RDONLY);
    if (in < 0) die(argv[3]);
    FILE *fin = fopen(argv[3], "rb");
    if (!fin) die(argv[3]);
    int out = open(argv[4], O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (out < 0) die(argv[4]);
    struct stat st;
    if (fstat(in, &st)) die("fstat");
    uint64_t size = (uint64_t)st.st_size, off = 0, passes = 0, calls = 0;
    uint64_t nread = 0, npread = 0, nfread = 0, nwrite = 0, npwrite = 0, nwritev = 0;
    while (off < size) {
        /* Start each pass at a different, unaligned place in the buffer. */
        size_t base = 1 + 4093 * (passes % 3);
        size_t n = size - off < bufsize - base ? size - off : bufsize - base;
        evict();
        for (size_t done = 0; done < n;) {
            size_t want = chunk(calls) < n - done ? chunk(calls) : n - done;
            char *dst = buf + base + done;
            ssize_t got;
            switch (calls++ % 3) {
            case 0:
                got = read(in, dst, want);
                nread++;
                break;
            case 1:
                got = pread(in, dst, want, (off_t)(off + done));
                npread++;
                break;
            default:
                if (fseeko(fin, (off_t)(off + done), SEEK_SET)) die("fseeko");
                got = (ssize_t)fread(dst, 1, want, fin);
                if (got == 0 && ferror(fin)) got = -1;
                nfread++;
                break;
            }
            if (got <= 0) die(got == 0 ? "unexpected end of file" : "read");
            done += (size_t)got;
            /* Keep read()'s file offset in step with the other calls. */
            if (lseek(in, (off_t)(off + done), SEEK_SET) < 0) die("lseek");
        }
        evict();
        for (size_t done = 0; done < n;) {
            size_t want = chunk(calls) < n - done ? chunk(calls) : n - done;
            const char *src = buf + base + done;
            ssize_t put;
            switch (calls++ % 3) {
            case 0:
                if (lseek(out, (off_t)(off + done), SEEK_SET) < 0) die("lseek");
                put = write(out, src, want);
                nwrite++;
                break;
            case 1:
                put = pwrite(out, src, want, (off_t)(off + done));
                npwrite++;
                break;
            default: {
                /* Two pieces, so the kernel walks an iovec array. */
                struct iovec iov[2] = {{(void *)src, want / 2}, {(void *)(src + want / 2), want - want / 2}};
                if (lseek(out, (off_t)(off + done), SEEK_SET) < 0) die("lseek");
                put = writev(out, iov, 2);
                nwritev++;
                break;
            }
            }
            if (put <= 0) die("write");
            done += (size_t)put;
        }
        off += n;
        passes++;
    }
    if (close(out)) die("close");
    fclose(fin);
    close(in);
    printf("copied %llu bytes in %llu passes: read %llu, pread %llu, fread %llu, write %llu, pwrite %llu, writev %llu; "
           "%llu evictions, other memory mismatches %llu\n",
           (unsigned long long)off, (unsigned long long)passes, (unsigned long long)nread, (unsigned long long)npread,
           (unsigned long long)nfread, (unsigned long long)nwrite, (unsigned long long)npwrite,
           (unsigned long long)nwritev, (unsigned long long)evictions, (unsigned long long)other_bad);
    free(buf);
    munmap(other, other_pages * PAGE_BYTES);
    return other_bad != 0;
}
