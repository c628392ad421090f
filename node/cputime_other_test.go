//go:build !unix

package node_test

import (
	"testing"
	"time"
)

// processCPU is not measured here: CPU per call reads 0.
func processCPU(*testing.B) time.Duration { return 0 }
