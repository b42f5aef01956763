// records.go: a Go program's heap as services keep it: a map from string keys to pointers to
// records that hold strings and slices (so the garbage collector traces every object), built,
// then read back at random; prints a checksum. Usage: records N
package main

import (
	"fmt"
	"os"
	"strconv"
)

type record struct {
	id    int
	name  string
	tags  []string
	score float64
}

func main() {
	n, err := strconv.Atoi(os.Args[1])
	if err != nil || n < 1 {
		fmt.Fprintln(os.Stderr, "usage: records N")
		os.Exit(2)
	}
	m := make(map[string]*record)
	for i := 0; i < n; i++ {
		k := "key-" + strconv.Itoa(i)
		m[k] = &record{
			id:    i,
			name:  k + "/" + strconv.Itoa(i*31%977),
			tags:  []string{"t" + strconv.Itoa(i%13), "u" + strconv.Itoa(i%29)},
			score: float64(i%1000) / 8,
		}
	}
	// Read every record once, in an order unrelated to insertion (a stride coprime to n).
	stride := 7919
	for n%stride == 0 {
		stride += 2
	}
	var sum float64
	var chars, ids int
	j := 0
	for i := 0; i < n; i++ {
		r := m["key-"+strconv.Itoa(j)]
		sum += r.score
		chars += len(r.name) + len(r.tags[0]) + len(r.tags[1])
		ids ^= r.id * 2654435761 % 1000003
		j = (j + stride) % n
	}
	fmt.Printf("%d records, score sum %.3f, %d chars, id hash %d\n", len(m), sum, chars, ids)
}
