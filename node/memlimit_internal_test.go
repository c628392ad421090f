package node

import (
	"errors"
	"runtime/debug"
	"testing"

	"github.com/KimMachineGun/automemlimit/memlimit"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// keepMemoryLimit puts the process's memory limit back after a test that
// sets it: it is the whole test binary's.
func keepMemoryLimit(t *testing.T) int64 {
	prev := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(prev) })
	return prev
}

func TestMemoryLimitFollowsTheContainers(t *testing.T) {
	start := keepMemoryLimit(t)
	t.Setenv("GOMEMLIMIT", "")
	t.Setenv("AUTOMEMLIMIT", "")
	for _, tc := range []struct {
		name     string
		ratio    string
		provider memlimit.Provider
		want     int64
		logged   string
	}{
		{"container limit", "", memlimit.Limit(1 << 30), 1 << 30 * 8 / 10, "memory limit: GOMEMLIMIT set from the container's"},
		{"another ratio", "0.5", memlimit.Limit(1 << 30), 1 << 29, "memory limit: GOMEMLIMIT set from the container's"},
		{"bad ratio", "2", memlimit.Limit(1 << 30), start, "memory limit: none set: AUTOMEMLIMIT is neither off nor a ratio in (0, 1]"},
		{"no limit", "", func() (uint64, error) { return 0, memlimit.ErrNoLimit }, start, ""},
		{"no cgroup", "", func() (uint64, error) { return 0, errors.New("no cgroup here") }, start, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			debug.SetMemoryLimit(start)
			if tc.ratio != "" {
				t.Setenv("AUTOMEMLIMIT", tc.ratio)
			}
			core, logs := observer.New(zapcore.InfoLevel)
			setMemoryLimit(zap.New(core), tc.provider)
			got := debug.SetMemoryLimit(-1)
			// memlimit rounds the ratio's product down to a byte.
			if d := got - tc.want; d < -1 || d > 1 {
				t.Errorf("GOMEMLIMIT = %d bytes, want %d", got, tc.want)
			}
			if tc.logged == "" {
				if n := logs.Len(); n != 0 {
					t.Errorf("logged %d lines at INFO or above, want none: %v", n, logs.All())
				}
				return
			}
			if n := logs.FilterMessage(tc.logged).Len(); n != 1 {
				t.Errorf("logged %q %d times, want once: %v", tc.logged, n, logs.All())
			}
		})
	}
}

func TestMemoryLimitKeepsGOMEMLIMITAndAUTOMEMLIMITOff(t *testing.T) {
	keepMemoryLimit(t)
	const preset = 3 << 30
	container := memlimit.Limit(1 << 30)
	for _, env := range [][2]string{{"GOMEMLIMIT", "3GiB"}, {"AUTOMEMLIMIT", "off"}} {
		t.Run(env[0], func(t *testing.T) {
			t.Setenv("GOMEMLIMIT", "")
			t.Setenv("AUTOMEMLIMIT", "")
			t.Setenv(env[0], env[1])
			debug.SetMemoryLimit(preset) // as the runtime read GOMEMLIMIT at its start
			setMemoryLimit(zap.NewNop(), container)
			if got := debug.SetMemoryLimit(-1); got != preset {
				t.Errorf("with %s=%s GOMEMLIMIT became %d bytes, want it kept at %d", env[0], env[1], got, preset)
			}
		})
	}
}
