package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/client"
	"github.com/rivet-go/rivet/workflow"
)

// history shows the rivet kind a step's error matched when it was
// recorded, which is what the workflow's code tests it against
// (errors.Is(err, rivet.ErrUnknownAction)): it showed only the code, and
// a bare sentinel, wrapped, showed neither (a user trial). -o json (the
// client's HistoryEntry) carries it as error_rivet_kind; an error that
// matched no kind shows none, and the table leaves a UserError's kind
// ("user") out beside its code (-o json keeps it).
func TestHistoryShowsTheRivetKindOfAStepsError(t *testing.T) {
	type st struct{}
	noRetries := func(name string) workflow.StepOptions {
		return workflow.StepOptions{Name: name, MaxRetries: workflow.NoRetries}
	}
	reg, err := rivet.Setup(rivet.Actor[st]{
		Name: "kinds",
		Run: func(ctx *workflow.Ctx[st]) error {
			steps := []struct {
				name string
				body func(*workflow.StepCtx[st]) (int, error)
			}{
				{"call-unknown", func(s *workflow.StepCtx[st]) (int, error) {
					return rivet.Call[int](s.Context(), s.Client().GetOrCreate("other", "k"), "nope")
				}},
				{"wrapped", func(*workflow.StepCtx[st]) (int, error) {
					return 0, fmt.Errorf("look up the order: %w", rivet.ErrNotFound)
				}},
				{"user", func(*workflow.StepCtx[st]) (int, error) {
					return 0, rivet.UserError("card_declined", "the card was declined", nil)
				}},
				{"plain", func(*workflow.StepCtx[st]) (int, error) {
					return 0, fmt.Errorf("disk full")
				}},
			}
			for _, s := range steps {
				if _, _, err := workflow.TryStepOpts(ctx, noRetries(s.name), s.body); err != nil {
					return err
				}
			}
			return nil
		},
	}, rivet.Actor[st]{
		Name:    "other",
		Actions: rivet.Actions[st]{"ping": rivet.Query(func(*rivet.ActionCtx[st]) (int, error) { return 1, nil })},
	})
	if err != nil {
		t.Fatal(err)
	}
	addr := startNodeOf(t, reg)
	if r := rivetctl(t, addr, "create", "kinds", "k"); r.code != 0 {
		t.Fatalf("create: %+v", r)
	}
	var r result
	for deadline := time.Now().Add(30 * time.Second); ; {
		r = rivetctl(t, addr, "history", "kinds", "k")
		if r.code == 0 && strings.HasPrefix(r.stdout, "workflow  completed\n") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the workflow did not complete:\n%s (%+v)", r.stdout, r)
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, want := range []string{
		"error (unknown_action, rivet kind actor.unknown_action): ",
		"error (rivet kind actor.not_found): look up the order: actor not found",
		"error (card_declined): the card was declined",
		"error: disk full",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("history does not show %q:\n%s", want, r.stdout)
		}
	}
	// A UserError's code says its kind: the table leaves "user" out.
	if strings.Contains(r.stdout, "rivet kind user") {
		t.Errorf("history shows a UserError's kind beside its code:\n%s", r.stdout)
	}

	r = rivetctl(t, addr, "-o", "json", "history", "kinds", "k")
	var h client.History
	if err := json.Unmarshal([]byte(r.stdout), &h); r.code != 0 || err != nil {
		t.Fatalf("history -o json: exit %d, %v:\n%s", r.code, err, r.stdout)
	}
	got := map[string]string{}
	for _, e := range h.Entries {
		got[e.Path] = e.ErrorRivetKind
	}
	want := map[string]string{"call-unknown": "actor.unknown_action", "wrapped": "actor.not_found", "user": "user", "plain": ""}
	for path, kind := range want {
		if k, ok := got[path]; !ok || k != kind {
			t.Errorf("-o json entry %s: error_rivet_kind %q (listed: %v), want %q", path, k, ok, kind)
		}
	}
	if !strings.Contains(r.stdout, `"error_rivet_kind":"actor.unknown_action"`) {
		t.Errorf("-o json does not name the field error_rivet_kind:\n%s", r.stdout)
	}
}
