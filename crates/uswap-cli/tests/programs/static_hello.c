/* Linked with -static by a test: `uswap run` must refuse it (the LD_PRELOAD library would
 * never be loaded, so its memory would be neither paged nor limited). Built with
 * -fsanitize=address by another: refused too (the sanitizer's runtime must load first). */
#include <stdio.h>

int main(void) {
    puts("hello from a static program");
    return 0;
}
