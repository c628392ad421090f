// Package buildinfo says which build of rivet a binary is, from what the
// Go toolchain stamps into it (the module's version, the commit it was
// built from): for `--version`, and the log line a node starts with, so
// that an operator can tell during a rolling upgrade which node runs which
// build.
package buildinfo

import (
	"runtime/debug"
	"strings"
)

const module = "github.com/rivet-go/rivet"

// String is the build: rivet's module version, the commit and its time
// when the toolchain stamped them (a build in a git checkout; "+dirty"
// for uncommitted changes), and the Go version, e.g.
// "rivet (devel) 4cea5441f3c2+dirty 2026-12-05T18:57:56Z go1.26.8". For a
// user's binary (rivet a dependency), the binary's module, its version
// and stamps come first: "example.com/shop v1.2.0 4cea5441f3c2
// 2026-12-05T18:57:56Z rivet v0.9.0 go1.26.8".
func String() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "rivet (unknown build)"
	}
	return describe(bi)
}

func describe(bi *debug.BuildInfo) string {
	version := bi.Main.Version
	var own []string // a user's binary: its module, version and stamps
	if bi.Main.Path != module {
		// A user's binary with rivet as a dependency: the binary's own
		// module first, with its version and the commit the toolchain
		// stamped (what an operator tells apart in a rolling deploy of
		// the user's code: a trial's nodes all said "rivet v0.0.0 =>
		// ../.."), then rivet's version.
		version = "(unknown)"
		for _, d := range bi.Deps {
			if d.Path == module {
				version = d.Version
				if d.Replace != nil {
					version += " => " + d.Replace.Path
				}
			}
		}
		own = append(own, bi.Main.Path)
		if bi.Main.Version != "" {
			own = append(own, bi.Main.Version)
		}
	}
	var rev, at, dirty string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			at = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "+dirty"
			}
		}
	}
	var stamps []string
	if rev != "" {
		stamps = append(stamps, rev[:min(12, len(rev))]+dirty)
	}
	if at != "" {
		stamps = append(stamps, at)
	}
	var parts []string
	if own != nil {
		// The stamps are the main module's: the user's.
		parts = append(append(own, stamps...), "rivet", version)
	} else {
		parts = append([]string{"rivet", version}, stamps...)
	}
	parts = append(parts, bi.GoVersion)
	return strings.Join(parts, " ")
}
