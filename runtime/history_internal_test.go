package runtime

import (
	"slices"
	"sort"
	"testing"
)

// History lists a loop's iterations by number, scope by scope, as a reader
// expects (its keys sort ~10 before ~2).
func TestHistoryPathsSortByScopeAndIterationNumber(t *testing.T) {
	got := []string{"work/~10/step", "work", "work/~2/step", "a", "work/~2", "work/~10", "work/~9/step", "work/~x", "steps", "work/~1/step/inner"}
	sort.SliceStable(got, func(i, j int) bool { return pathLess(got[i], got[j]) })
	want := []string{"a", "steps", "work", "work/~1/step/inner", "work/~2", "work/~2/step", "work/~9/step", "work/~10", "work/~10/step", "work/~x"}
	if !slices.Equal(got, want) {
		t.Fatalf("order:\n got %v\nwant %v", got, want)
	}
	// A strict weak order over odd segments too (sort needs one): no
	// cycle, nothing less than itself.
	odd := []string{"~9", "~10", "~1a", "~01", "~1", "a", "", "~", "b/~2", "b/~10", "b"}
	for _, x := range odd {
		if pathLess(x, x) {
			t.Errorf("%q < itself", x)
		}
		for _, y := range odd {
			for _, z := range odd {
				if pathLess(x, y) && pathLess(y, z) && !pathLess(x, z) {
					t.Errorf("not transitive: %q < %q < %q but not %q < %q", x, y, z, x, z)
				}
			}
		}
	}
}
