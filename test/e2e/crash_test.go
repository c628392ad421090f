package e2e

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/rivet-go/rivet/examples/exampleapi"
)

// inspectState reads an actor's committed state with `rivetctl inspect`,
// which never activates the actor: a workflow that progresses while only
// this is called was woken by its stored wakeup, not by a request.
func inspectState(t *testing.T, n *nodeProc, actor, key string, into any) (workflowStatus string, ok bool) {
	t.Helper()
	out, _, code := n.rivetctl("-o", "json", "inspect", actor, key)
	if code != 0 {
		return "", false
	}
	var ins struct {
		State          json.RawMessage `json:"state"`
		WorkflowStatus string          `json:"workflow_status"`
	}
	if json.Unmarshal([]byte(out), &ins) != nil || json.Unmarshal(ins.State, into) != nil {
		return "", false
	}
	return ins.WorkflowStatus, true
}

// waitHistory waits until `rivetctl history` shows an entry whose path
// contains path with the given status.
func waitHistory(t *testing.T, n *nodeProc, actor, key, path, status string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		out, _, code := n.rivetctl("-o", "json", "history", actor, key)
		if code == 0 {
			var h struct {
				Entries []struct{ Path, Status string }
			}
			if json.Unmarshal([]byte(out), &h) == nil {
				for _, e := range h.Entries {
					if strings.Contains(e.Path, path) && e.Status == status {
						return
					}
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("history of %s %s has no %s entry %s within %v: %s\n%s", actor, key, status, path, within, out, n.log())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Reminders sleeping when the node is killed fire after the restart, each
// exactly once, none before its time, none lost.
func TestRemindersSurviveKill9(t *testing.T) {
	n := newNode(t)
	n.start()
	base := time.Now()
	texts := []string{"first", "second", "third"}
	for i, text := range texts {
		at := base.Add(time.Duration(2+i) * time.Second).UnixMilli()
		if _, errOut, code := n.rivetctl("send", "reminderActor", "main", "reminders", fmt.Sprintf(`{"text":%q,"at":%d}`, text, at)); code != 0 {
			t.Fatal(errOut)
		}
	}
	waitHistory(t, n, "reminderActor", "main", "wait-until-reminder", "pending", 10*time.Second)
	n.kill()
	n.start()
	deadline := time.Now().Add(30 * time.Second)
	var st struct{ Fired []string }
	for {
		if _, ok := inspectState(t, n, "reminderActor", "main", &st); ok && len(st.Fired) >= len(texts) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("fired %v within 30s of the restart\n%s", st.Fired, n.log())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if fmt.Sprint(st.Fired) != fmt.Sprint(texts) {
		t.Fatalf("fired %v, want each of %v exactly once, in order", st.Fired, texts)
	}
	if time.Since(base) < 4*time.Second {
		t.Fatalf("the last reminder fired %v after the sends, before its time", time.Since(base))
	}
	// Settle: nothing fires twice later.
	time.Sleep(500 * time.Millisecond)
	inspectState(t, n, "reminderActor", "main", &st)
	if len(st.Fired) != len(texts) {
		t.Fatalf("fired %v after settling", st.Fired)
	}
}

// An auction killed while its race sleeps expires after the restart; its
// list-item call (committed before the kill) is not repeated, and its
// finalize call happens once.
func TestAuctionExpiresAcrossKill9(t *testing.T) {
	api := exampleapi.NewTestServer(nil)
	defer api.Close()
	n := newNode(t)
	n.env = []string{exampleapi.EnvVar + "=" + api.URL, "EXAMPLES_AUCTION_TIMEOUT=3s"}
	n.start()
	if _, errOut, code := n.rivetctl("create", "auctionActor", "item-123"); code != 0 {
		t.Fatal(errOut)
	}
	waitHistory(t, n, "auctionActor", "item-123", "auction-timeout", "pending", 10*time.Second)
	waitHistory(t, n, "auctionActor", "item-123", "list-item", "completed", time.Second)
	n.kill()
	n.start()
	deadline := time.Now().Add(30 * time.Second)
	var st struct{ Result *string }
	for {
		if _, ok := inspectState(t, n, "auctionActor", "item-123", &st); ok && st.Result != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("auction not finished within 30s of the restart\n%s", n.log())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if *st.Result != "expired" {
		t.Fatalf("result = %s, want expired", *st.Result)
	}
	counts := map[string]int{}
	for _, p := range api.Posts() {
		counts[p.Path]++
	}
	if counts["/auctions/item-123"] != 1 || counts["/auctions/item-123/finalize"] != 1 {
		t.Fatalf("POSTs = %v, want list-item and finalize once each", counts)
	}
}

// Poll with backoff, killed between steps, carries on from where it was:
// attempts never go back and never skip, and the backoff follows the seed.
func TestPollBackoffContinuesAcrossKill9(t *testing.T) {
	n := newNode(t)
	n.start()
	if _, errOut, code := n.rivetctl("create", "pollBackoffActor", "main"); code != 0 {
		t.Fatal(errOut)
	}
	type pollState struct {
		Attempts  int    `json:"attempts"`
		BackoffMs int    `json:"backoffMs"`
		Status    string `json:"status"`
	}
	watch := func(until int, within time.Duration) []pollState {
		var seen []pollState
		deadline := time.Now().Add(within)
		for {
			var st pollState
			if _, ok := inspectState(t, n, "pollBackoffActor", "main", &st); ok {
				if len(seen) == 0 || seen[len(seen)-1] != st {
					seen = append(seen, st)
				}
				if st.Attempts >= until {
					return seen
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("attempts did not reach %d within %v: %v\n%s", until, within, seen, n.log())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	before := watch(2, 20*time.Second)
	n.kill()
	last := before[len(before)-1]
	n.start()
	after := watch(7, 40*time.Second)
	all := append(before, after...)
	for i := 1; i < len(all); i++ {
		if all[i].Attempts < all[i-1].Attempts || all[i].Attempts > all[i-1].Attempts+1 {
			t.Fatalf("attempts went from %d to %d across the states %v", all[i-1].Attempts, all[i].Attempts, all)
		}
	}
	if after[0].Attempts < last.Attempts {
		t.Fatalf("after the restart attempts = %d, before the kill %d", after[0].Attempts, last.Attempts)
	}
	for _, s := range all {
		// Between poll-target (attempts+1) and the next step the state
		// still shows the previous round's status, so the invariants are:
		// healthy has the backoff reset; retrying has it doubled.
		if s.Status == "healthy" && s.BackoffMs != 100 || s.Status == "retrying" && s.BackoffMs < 200 {
			t.Fatalf("inconsistent state %+v in %v", s, all)
		}
	}

	t.Logf("states across the kill: %v | %v", before, after)
}
