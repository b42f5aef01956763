/* Linked with -static by the test: `uswap run` must refuse it (the LD_PRELOAD library would
 * never be loaded, so its memory would be neither paged nor limited). */
#include <stdio.h>

int main(void) {
    puts("hello from a static program");
    return 0;
}
