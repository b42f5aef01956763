// gohold MIB SECS: a Go program that fills MIB MiB of heap in 1 MiB slices, sleeps SECS
// seconds, reads one byte a page back and prints their sum. `uswap run` refuses Go programs
// (the Go runtime's own madvise calls go unseen) and runs one found in its tree without the
// pager, counted against the limit (tests/run_e2e.rs).
package main

import (
	"fmt"
	"os"
	"strconv"
	"time"
)

func main() {
	mib, err1 := strconv.Atoi(os.Args[1])
	secs, err2 := strconv.Atoi(os.Args[2])
	if err1 != nil || err2 != nil {
		fmt.Fprintln(os.Stderr, "usage: gohold MIB SECS")
		os.Exit(2)
	}
	bufs := make([][]byte, mib)
	for i := range bufs {
		b := make([]byte, 1<<20)
		for j := 0; j < len(b); j += 4096 {
			b[j] = byte(i + j/4096)
		}
		bufs[i] = b
	}
	time.Sleep(time.Duration(secs) * time.Second)
	sum := 0
	for _, b := range bufs {
		for j := 0; j < len(b); j += 4096 {
			sum += int(b[j])
		}
	}
	fmt.Printf("gohold: %d MiB, sum %d\n", mib, sum)
}
