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
}
