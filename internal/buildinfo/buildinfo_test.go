package buildinfo

import (
	"runtime/debug"
	"testing"
)

func TestDescribeSaysRivetsVersionAndTheCommit(t *testing.T) {
	for _, c := range []struct {
		name string
		bi   debug.BuildInfo
		want string
	}{
		{"a rivet binary in a checkout", debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: module, Version: "(devel)"},
			Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "4cea5441f3c2a1b2c3d4"}, {Key: "vcs.time", Value: "2026-12-05T18:57:56Z"}, {Key: "vcs.modified", Value: "true"}}},
			"rivet (devel) 4cea5441f3c2+dirty 2026-12-05T18:57:56Z go1.26.8"},
		{"a user's binary", debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "example.com/shop", Version: "v1.2.0"},
			Deps: []*debug.Module{{Path: "go.uber.org/zap", Version: "v1.27.0"}, {Path: module, Version: "v0.9.0"}}},
			"example.com/shop v1.2.0 rivet v0.9.0 go1.26.8"},
		{"a user's binary on a local copy", debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "example.com/shop"},
			Deps: []*debug.Module{{Path: module, Version: "v0.0.0-00010101000000-000000000000", Replace: &debug.Module{Path: "../rivet"}}}},
			"example.com/shop rivet v0.0.0-00010101000000-000000000000 => ../rivet go1.26.8"},
		{"a user's binary built in its checkout", debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "example.com/shop", Version: "(devel)"},
			Deps:     []*debug.Module{{Path: module, Version: "v0.9.0"}},
			Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "abcdef0123456789"}, {Key: "vcs.time", Value: "2026-12-06T10:00:00Z"}}},
			"example.com/shop (devel) abcdef012345 2026-12-06T10:00:00Z rivet v0.9.0 go1.26.8"},
	} {
		if got := describe(&c.bi); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}
