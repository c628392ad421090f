package main

import "testing"

// members shows what tells builds apart: rivet's version and commit for
// a rivet binary; a user's binary's own module, version and commit, and
// rivet's version under it.
func TestShortBuildKeepsWhatTellsBuildsApart(t *testing.T) {
	for build, want := range map[string]string{
		"rivet (devel) 4cea5441f3c2+dirty 2026-12-05T18:57:56Z go1.26.8": "(devel) 4cea5441f3c2+dirty",
		"rivet v0.9.0 go1.26.8": "v0.9.0 go1.26.8",
		"example.com/shop v1.2.0 abcdef012345 2026-12-06T10:00:00Z rivet v0.9.0 go1.26.8":                 "example.com/shop v1.2.0 abcdef012345 rivet v0.9.0",
		"example.com/shop rivet v0.0.0-00010101000000-000000000000 => ../rivet go1.26.8":                  "example.com/shop rivet v0.0.0-00010101000000-000000000000 => ../rivet",
		"example.com/shop (devel) abcdef012345+dirty 2026-12-06T10:00:00Z rivet v0.9.0 => ../.. go1.26.8": "example.com/shop (devel) abcdef012345+dirty rivet v0.9.0 => ../..",
	} {
		if got := shortBuild(build); got != want {
			t.Errorf("shortBuild(%q) = %q, want %q", build, got, want)
		}
	}
}
