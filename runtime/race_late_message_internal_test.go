package runtime

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/storage"
	"github.com/rivet-go/rivet/workflow"
)

type lateRaceState struct {
	Winner string `json:"winner"`
}

// lateRace races a one-second timeout against a bid.
var lateRace = rivet.Actor[lateRaceState]{
	Name:   "lateRace",
	Queues: rivet.Queues{"bids": rivet.QueueOf[int]()},
	Run: func(c *workflow.Ctx[lateRaceState]) error {
		winner, _, err := workflow.Race(c, "r", []workflow.RaceBranch[lateRaceState, string]{
			{Name: "timeout", Run: func(c *workflow.Ctx[lateRaceState]) (string, error) {
				return "timeout", c.Sleep("nap", time.Second)
			}},
			{Name: "bid", Run: func(c *workflow.Ctx[lateRaceState]) (string, error) {
				_, err := workflow.Next[int](c, "take", workflow.NextOptions{Names: []string{"bids"}})
				return "bid", err
			}},
		})
		if err != nil {
			return err
		}
		return c.Step("rec", func(s *workflow.StepCtx[lateRaceState]) error { s.State.Winner = winner; return nil })
	},
}

// A node that takes over a race after its timeout's deadline passed (the
// previous node went away while the race waited) decides it as it would
// have gone on time, by when the bid was sent: a bid sent after the
// deadline loses to the timeout and stays queued, one sent before it wins.
// The bid is in storage when the node loads the actor, so only its key is
// in memory (the host learns its time as it takes it).
func TestANodeTakingOverALateRaceRanksTheMessageByWhenItWasSent(t *testing.T) {
	t.Parallel()
	reg, err := rivet.Setup(lateRace)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		sent   time.Duration // from the deadline
		winner string
		queued int
	}{
		{"sent after the deadline", 300 * time.Millisecond, "timeout", 1},
		{"sent before the deadline", -700 * time.Millisecond, "bid", 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			store := storage.NewMemory()
			defer store.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			ref := Ref{Name: "lateRace", Key: []string{"k"}}
			h, stop := memHostOn(t, reg, store)
			if _, _, err := h.GetOrCreate(ctx, ref, nil); err != nil {
				t.Fatal(err)
			}
			prefix := storage.ActorPrefix(h.loaded(ref).part, ref.Name, storage.EncodeKey(ref.Key))
			var nap workflow.Entry
			for until := time.Now().Add(20 * time.Second); nap.Deadline.IsZero(); time.Sleep(5 * time.Millisecond) {
				if time.Now().After(until) {
					t.Fatal("the race's timeout never recorded its deadline")
				}
				kvs, err := store.List(ctx, prefix+storage.WorkflowSuffix, storage.ListOptions{})
				if err != nil {
					t.Fatal(err)
				}
				for _, kv := range kvs {
					if strings.HasSuffix(kv.Key, "/nap") {
						if err := json.Unmarshal(kv.Value, &nap); err != nil {
							t.Fatal(err)
						}
					}
				}
			}
			if err := stop(ctx); err != nil {
				t.Fatal(err)
			}
			// The bid, queued while no node ran the actor.
			sent := nap.Deadline.Add(c.sent)
			msg, _ := json.Marshal(queueMessage{Body: json.RawMessage(`7`), CreatedAt: sent.UnixMilli()})
			if err := store.Commit(ctx, storage.Txn{Ops: []storage.Op{storage.Put(queueKey(prefix, 1, "bids"), msg)}}); err != nil {
				t.Fatal(err)
			}
			for time.Now().Before(sent.Add(200 * time.Millisecond)) {
				time.Sleep(10 * time.Millisecond) // the clock must pass both times first
			}
			h, _ = memHostOn(t, reg, store)
			var ins Inspection
			for until := time.Now().Add(20 * time.Second); ins.WorkflowStatus != WorkflowCompleted; time.Sleep(10 * time.Millisecond) {
				if time.Now().After(until) {
					t.Fatalf("the workflow did not end: %+v", ins)
				}
				if ins, err = h.Inspect(ctx, ref); err != nil {
					t.Fatal(err)
				}
			}
			// Read again: a read from storage that raced with the new
			// activation (not active yet when it began) may see the end
			// with the state from before it (the reads are not one).
			if ins, err = h.Inspect(ctx, ref); err != nil {
				t.Fatal(err)
			}
			var st lateRaceState
			if err := json.Unmarshal(ins.State, &st); err != nil {
				t.Fatal(err)
			}
			if st.Winner != c.winner {
				t.Errorf("winner %q, want %q", st.Winner, c.winner)
			}
			qs := queuedKeys(t, store, prefix)
			if len(qs) != c.queued {
				t.Errorf("%d message(s) queued, want %d", len(qs), c.queued)
			}
		})
	}
}
