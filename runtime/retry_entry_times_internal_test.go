package runtime

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/rivet-go/rivet/workflow"
)

// randomHistory makes a history of steps, gates and removed markers (some
// recording no time, some sharing the place of the entry after them, some
// with no place), loops, joins, races and try blocks, nested at random.
func randomHistory(r *rand.Rand) []workflow.Entry {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var out []workflow.Entry
	var fill func(scope string, tryPlaces []int, depth int)
	at := func() time.Time {
		if r.IntN(4) == 0 {
			return time.Time{}
		}
		return t0.Add(time.Duration(r.IntN(50)) * time.Millisecond)
	}
	fill = func(scope string, tryPlaces []int, depth int) {
		path := func(name string) string {
			if scope == "" {
				return name
			}
			return scope + "/" + name
		}
		seq := 0
		for i := range 1 + r.IntN(5) {
			seq++
			if r.IntN(5) == 0 {
				seq-- // shares the next one's place, as a gate a replay put before it
			}
			place := seq
			if r.IntN(8) == 0 {
				place = 0 // a build before places
			}
			name := fmt.Sprintf("e%d", i)
			switch k := r.IntN(9); {
			case depth < 3 && k == 0: // a loop
				out = append(out, workflow.Entry{Path: path(name), Seq: place, TryPlaces: tryPlaces, Kind: workflow.KindLoop, Status: workflow.StatusPending, Time: at()})
				for it := range 1 + r.IntN(3) {
					fill(path(name)+fmt.Sprintf("/~%d", it), nil, depth+1)
				}
			case depth < 3 && (k == 1 || k == 2): // a join or race
				kind := workflow.KindJoin
				if k == 2 {
					kind = workflow.KindRace
				}
				out = append(out, workflow.Entry{Path: path(name), Seq: place, TryPlaces: tryPlaces, Kind: kind, Status: workflow.StatusPending, Time: at(),
					Branches: map[string]workflow.Branch{"b1": {Status: workflow.StatusPending}, "b2": {Status: workflow.StatusPending}}})
				fill(path(name)+"/b1", nil, depth+1)
				fill(path(name)+"/b2", nil, depth+1)
			case depth < 3 && k == 3: // a try block: no entry, its entries record its place
				fill(path(name), append([]int{place}, tryPlaces...), depth+1)
			case k == 4:
				out = append(out, workflow.Entry{Path: path(name), Seq: place, TryPlaces: tryPlaces, Kind: workflow.KindVersionCheck, Status: workflow.StatusCompleted, Version: 1, Latest: 2})
			case k == 5:
				out = append(out, workflow.Entry{Path: path(name), Seq: place, TryPlaces: tryPlaces, Kind: workflow.KindRemoved, Status: workflow.StatusCompleted, RemovedKind: workflow.KindStep})
			default:
				out = append(out, workflow.Entry{Path: path(name), Seq: place, TryPlaces: tryPlaces, Kind: workflow.KindStep, Status: workflow.StatusCompleted, Time: at()})
			}
		}
	}
	fill("", nil, 0)
	return out
}

// entryTimes answers as entryTime does, for every entry of every shape of
// history, with the places and without.
func TestEntryTimesAnswersAsEntryTime(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for n := range 3000 {
		entries := randomHistory(r)
		byPath := make(map[string]*workflow.Entry, len(entries))
		for i := range entries {
			byPath[entries[i].Path] = &entries[i]
		}
		for _, places := range []map[string]int{historyPlaces(entries), nil} {
			times := newEntryTimes(byPath, places)
			for i := range entries {
				e := &entries[i]
				if want, got := entryTime(byPath, places, e), times.at(e); !got.Equal(want) {
					for _, o := range entries {
						t.Logf("%s seq %d try %v %s time %v place %d", o.Path, o.Seq, o.TryPlaces, o.Kind, o.Time.Format("05.000"), places[o.Path])
					}
					t.Fatalf("history %d: entry %s: %v, want %v", n, e.Path, got, want)
				}
			}
		}
	}
}

// A retry from an early entry of a join of long loops deletes about as
// many entries of the other branch as the history holds, placing each by
// its time (the branches ran concurrently); the gate first in each
// iteration records none, and its time was that of the entries before it,
// looked for in a pass over the whole history for each gate: 16,000
// entries took 3 s in the actor's turn, growing with the square (about
// 40 s at the 60,000 here); by the scopes of each gate, about 0.2 s.
func TestARetryInAJoinOfLongLoopsIsPlannedQuickly(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	const n = 60000
	entries := []workflow.Entry{{Path: "j", Seq: 1, Kind: workflow.KindJoin, Status: workflow.StatusPending,
		Branches: map[string]workflow.Branch{"b1": {Status: workflow.StatusPending}, "b2": {Status: workflow.StatusPending}}}}
	for _, b := range []string{"b1", "b2"} {
		entries = append(entries, workflow.Entry{Path: "j/" + b + "/l", Seq: 1, Kind: workflow.KindLoop, Status: workflow.StatusPending, Time: t0})
		for i := range n / 2 {
			e := workflow.Entry{Path: fmt.Sprintf("j/%s/l/~%d/s%d", b, i/4, i%4+1), Seq: i%4 + 1, Kind: workflow.KindStep, Status: workflow.StatusCompleted, Time: t0.Add(time.Duration(2*i+1) * time.Millisecond)}
			if i%4 == 0 {
				e.Kind, e.Time = workflow.KindVersionCheck, time.Time{} // a gate first in each iteration
			}
			entries = append(entries, e)
		}
	}
	start := time.Now()
	trees, _, err := retryTrees(entries, "j/b1/l/~1/s2", "")
	took := time.Since(start)
	if err != nil || len(trees) < n-20 {
		t.Fatalf("retry from j/b1/l/~1/s2 deletes %d trees (%v), want about %d", len(trees), err, n)
	}
	if took > 10*time.Second {
		t.Fatalf("planning the retry of %d entries took %v", n, took)
	}
}
