package node_test

import (
	"testing"
	"time"

	"github.com/rivet-go/rivet/internal/cputime"
)

// processCPU is the user and system CPU time this process has used.
func processCPU(b *testing.B) time.Duration {
	d, err := cputime.Process()
	if err != nil {
		b.Fatal(err)
	}
	return d
}
