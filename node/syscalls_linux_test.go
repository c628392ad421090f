package node_test

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"testing"
)

// processWrites is the number of write system calls this process has
// made (syscw in /proc/self/io). Over loopback most of a call's transport
// cost is in its writes: each one runs the TCP stack for both ends and
// wakes the reader.
func processWrites(b *testing.B) uint64 {
	f, err := os.Open("/proc/self/io")
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "syscw: "); ok {
			n, err := strconv.ParseUint(v, 10, 64)
			if err != nil {
				b.Fatal(err)
			}
			return n
		}
	}
	b.Fatal("no syscw in /proc/self/io")
	return 0
}
