//go:build unix

// Package cputime reads the CPU time this process has used, for the
// benchmarks that report CPU per call or per step: a figure the load of
// other processes on the machine changes far less than a rate.
package cputime

import (
	"syscall"
	"time"
)

// Process is the user and system CPU time this process has used.
func Process() (time.Duration, error) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, err
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), nil
}
