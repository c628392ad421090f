package main

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/rivet-go/rivet/client"
	"github.com/rivet-go/rivet/runtime"
	"github.com/rivet-go/rivet/server/servertest"
)

// history says which way each version gate went (the old path is version
// 1) and what a Removed placeholder stands in for; -o json carries them as
// version, latest and removed_kind.
func TestHistoryShowsVersionGates(t *testing.T) {
	f := servertest.NewFake()
	f.HistoryFunc = func(context.Context, runtime.Ref, runtime.HistoryOptions) (runtime.History, error) {
		return runtime.History{
			WorkflowStatus: "running",
			Entries: []runtime.HistoryEntry{
				{Path: "a", Kind: "step", Status: "completed", Attempts: 1},
				{Path: "add-c", Kind: "version_check", Status: "completed", Version: 1, Latest: 2},
				{Path: "fraud-check", Kind: "version_check", Status: "completed", Version: 3, Latest: 3},
				{Path: "old-step", Kind: "removed", Status: "completed", RemovedKind: "step"},
			},
		}, nil
	}
	addr := servertest.Start(t, f, servertest.Config{})

	rivetctl(t, addr, "history", "job", "j").want(t, 0, `workflow  running
PATH         KIND           STATUS     ATTEMPTS  OUTPUT / ERROR
a            step           completed  1         -
add-c        version_check  completed  0         version 1 (the old path; latest 2)
fraud-check  version_check  completed  0         version 3 (latest)
old-step     removed        completed  0         stands in for a step
`)

	r := rivetctl(t, addr, "-o", "json", "history", "job", "j")
	var h client.History
	if err := json.Unmarshal([]byte(r.stdout), &h); r.code != 0 || err != nil || len(h.Entries) != 4 {
		t.Fatalf("history -o json: exit %d, %v:\n%s", r.code, err, r.stdout)
	}
	if g := h.Entries[1]; g.Version != 1 || g.Latest != 2 {
		t.Errorf("add-c = %+v, want version 1 of latest 2", g)
	}
	if g := h.Entries[3]; g.RemovedKind != "step" {
		t.Errorf("old-step = %+v, want removed_kind step", g)
	}
}
