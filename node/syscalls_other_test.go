//go:build !linux

package node_test

import "testing"

// processWrites is not measured here: writes per call read 0.
func processWrites(*testing.B) uint64 { return 0 }
