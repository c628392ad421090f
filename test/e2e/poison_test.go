package e2e

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// A step whose body kills its node (SIGKILL) at every attempt counts each
// such attempt, its node's crash ending it: with MaxRetries 1 the node
// dies twice, and after the second restart the step is exhausted and the
// workflow failed, its history saying how its attempts ended. Before,
// every start of the node ran the step again as attempt 1, and died.
func TestAStepThatKillsItsNodeEachTimeEndsExhausted(t *testing.T) {
	n := newNode(t)
	n.bin = chaosNodeBinary(t)
	n.start()
	// The node may die before it answers: the create committed first.
	_, _, _ = n.rivetctl("create", "poison", "p1")
	kills := 0
	deadline := time.Now().Add(3 * time.Minute)
	for {
		select {
		case <-n.done:
			n.cmd = nil
			kills++
			if kills > 4 {
				t.Fatalf("the node died %d times: the step is retried past its retries; log:\n%s", kills, n.log())
			}
			addr := n.launch()
			select {
			case a := <-addr:
				n.grpcAddr = a
			case <-n.done:
				// Killed before it served: counted at the loop's top.
				continue
			case <-time.After(60 * time.Second):
				t.Fatalf("node did not serve within 60s; log:\n%s", n.log())
			}
			continue
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("the workflow did not fail within 3 minutes (%d kills); log:\n%s", kills, n.log())
		}
		out, _, code := n.rivetctl("-o", "json", "history", "poison", "p1")
		if code != 0 {
			continue // dying, or not served yet
		}
		var h struct {
			Entries []struct {
				Path, Status, Error string
				Attempts            int
			}
		}
		if json.Unmarshal([]byte(out), &h) != nil || len(h.Entries) != 1 || h.Entries[0].Status != "exhausted" {
			continue
		}
		e := h.Entries[0]
		if e.Attempts != 2 || !strings.Contains(e.Error, "attempt 2 ended without its outcome recorded") {
			t.Fatalf("history %+v; want the step exhausted after 2 attempts, the last ended with its node", h.Entries)
		}
		break
	}
	if kills != 2 {
		t.Fatalf("the node died %d times, want 2 (attempt 1, attempt 2)", kills)
	}
	var st struct{}
	if status, ok := inspectState(t, n, "poison", "p1", &st); !ok || status != "failed" {
		t.Fatalf("workflow status %q (read %v), want failed", status, ok)
	}
}
