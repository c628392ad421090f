package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/client"
)

// workGate is chaosnode's effect server for completer: every POST of
// "<ask>/work" is counted, and those of an ask it holds wait until the ask
// is released (or the caller goes: a killed node's connection closes).
type workGate struct {
	*httptest.Server
	mu    sync.Mutex
	hits  map[string]int
	holds map[string]chan struct{}
}

func newWorkGate(held ...string) *workGate {
	g := &workGate{hits: map[string]int{}, holds: map[string]chan struct{}{}}
	for _, id := range held {
		g.holds[id] = make(chan struct{})
	}
	g.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, _, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/effects/"), "/")
		g.mu.Lock()
		g.hits[id]++
		hold := g.holds[id]
		g.mu.Unlock()
		if hold != nil {
			select {
			case <-hold:
			case <-r.Context().Done():
				return
			}
		}
	}))
	return g
}

func (g *workGate) count(id string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.hits[id]
}

// releaseAll releases every ask still held: a test that fails before it
// released one must not hang in Close, which waits for the held requests.
func (g *workGate) releaseAll() {
	g.mu.Lock()
	defer g.mu.Unlock()
	for id, hold := range g.holds {
		if hold != nil {
			close(hold)
			g.holds[id] = nil
		}
	}
}

func (g *workGate) release(id string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	close(g.holds[id])
	g.holds[id] = nil
}

// A sender waiting for a workflow's completion of its message, when the
// node that owns the actor is killed (SIGKILL) while the workflow is in a
// step between taking a message and completing it, is never answered with
// a completion that is not its message's, and does not wait past its
// deadline: it gets the completion, `enqueued`, or a retryable UNAVAILABLE.
// Nothing is lost or done twice: the actor's new owner finishes the taken
// message and then the queued one, each once. A resend with the same
// idempotency key after the failover queues nothing and gets its message's
// completion: it waits for it, for the taken message (whose first sender's
// wait broke with the node) as for the one still queued, and a resend
// after the completions gets them at once (kept with their keys).
func TestAWaitingSendOutlivesAKill9OfTheActorsNode(t *testing.T) {
	gate := newWorkGate("a1")
	defer func() {
		gate.releaseAll()
		gate.Close()
	}()
	bin := chaosNodeBinary(t)
	c := newClusterWith(t, 3, func(i int, n *nodeProc) {
		n.bin = bin
		n.env = []string{"CHAOS_EFFECTS_URL=" + gate.URL}
	}, "--lease-ttl", "3s")
	ids := []string{"node1", "node2", "node3"}
	tab := c.waitBalanced(0, ids, 60*time.Second)
	defer func() {
		if t.Failed() {
			t.Log(c.logs())
		}
	}()
	// Not the etcd leader, whose death adds an election to the failover.
	victim := 2
	if c.etcdLeader() == "node3" {
		victim = 1
	}
	vid := ids[victim]
	key := ownersOf(tab).key(t, "completer", "w", func(o string) bool { return o == vid })
	t.Logf("completer %s lives on %s, the victim", key, vid)
	const survivor = 0 // node1: never the victim
	// One sender reaches the victim itself (its connection breaks; the
	// client goes on to the next address), one goes through a survivor
	// (its forward to the victim breaks).
	direct, err := client.New(c.nodes[victim].grpcAddr + "," + c.nodes[survivor].grpcAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer direct.Close()
	cl, err := client.New(c.nodes[survivor].grpcAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx := context.Background()

	type answer struct {
		res     client.SendResult
		err     error
		elapsed time.Duration
	}
	// The node's wait ends before the caller's context, so that a wait
	// that runs out is the node's answer, not the caller's deadline.
	const wait, deadline = 30 * time.Second, 40 * time.Second
	send := func(c *client.Client, id string) answer {
		sctx, cancel := context.WithTimeout(ctx, deadline)
		defer cancel()
		start := time.Now()
		res, err := c.Actor("completer", key).SendWith(sctx, "asks", map[string]string{"id": id},
			client.SendOptions{Wait: true, Timeout: wait, IdempotencyKey: id})
		return answer{res, err, time.Since(start)}
	}
	// check fails the test unless a is a right answer to a send of id
	// whose sender may have lost its connection to the message's node.
	check := func(what, id string, a answer) {
		t.Helper()
		t.Logf("%s: %+v (response %s), %v, after %v", what, a.res, a.res.Response, a.err, a.elapsed)
		switch {
		case a.err != nil:
			if !errors.Is(a.err, rivet.ErrUnavailable) {
				t.Errorf("%s: %v, want a completion, enqueued or UNAVAILABLE", what, a.err)
			}
		case a.res.Status == client.SendCompleted:
			if want := fmt.Sprintf(`{"id":%q}`, id); string(a.res.Response) != want {
				t.Errorf("%s was completed with %s, want %s", what, a.res.Response, want)
			}
		case a.res.Status != client.SendEnqueued:
			t.Errorf("%s: status %q", what, a.res.Status)
		}
	}
	receive := func(what string, ch chan answer) answer {
		t.Helper()
		select {
		case a := <-ch:
			return a
		case <-time.After(deadline + 10*time.Second):
			t.Fatalf("%s was not answered 10 s after its deadline", what)
			return answer{}
		}
	}
	first := map[string]chan answer{"a1": make(chan answer, 1), "a2": make(chan answer, 1)}
	go func() { first["a1"] <- send(direct, "a1") }()
	// a1 is taken and its step runs on the victim, held.
	waitFor(t, "a1's step to run on "+vid, 30*time.Second, func() bool { return gate.count("a1") >= 1 })
	go func() { first["a2"] <- send(cl, "a2") }()
	// a2 waits in the queue: a1 is not completed yet.
	waitFor(t, "a2 to be queued", 30*time.Second, func() bool {
		in, err := cl.Actor("completer", key).Inspect(ctx)
		return err == nil && queueDepth(in, "asks") == 1
	})

	c.nodes[victim].kill()

	// The new owner runs a1's step again (it was not recorded) and holds
	// there: a2 is still queued.
	waitFor(t, "a1's step to run again on the new owner", 30*time.Second, func() bool { return gate.count("a1") >= 2 })
	// The first send of a1 is not received before a1 is released: the
	// client retries it (its key makes it safe to) and the retry, a
	// duplicate, waits for a1's completion on the new owner.
	resend := func(id string) answer {
		t.Helper()
		for {
			a := send(cl, id)
			if !errors.Is(a.err, rivet.ErrUnavailable) {
				return a
			}
			// Still failing over: the client's own retries ran out.
			time.Sleep(100 * time.Millisecond)
		}
	}
	// a1 was taken and no sender waits for it any more, a2 is still
	// queued: the resends wait for their messages' completions.
	again := map[string]chan answer{"a1": make(chan answer, 1), "a2": make(chan answer, 1)}
	for id, ch := range again {
		go func() { ch <- resend(id) }()
	}
	select {
	case a := <-again["a1"]:
		t.Fatalf("a1 sent again was answered before a1 was released: %+v, %v", a.res, a.err)
	case a := <-again["a2"]:
		t.Fatalf("a2 sent again was answered before a1 was released: %+v, %v", a.res, a.err)
	case <-time.After(500 * time.Millisecond):
	}
	gate.release("a1")
	check("the first send of a1", "a1", receive("the first send of a1", first["a1"]))
	wantDuplicate := func(what, id string, a answer) {
		t.Helper()
		if want := fmt.Sprintf(`{"id":%q}`, id); a.err != nil || !a.res.Duplicate || a.res.Status != client.SendCompleted || string(a.res.Response) != want {
			t.Errorf("%s: %+v (response %s), %v; want its duplicate, completed with %s", what, a.res, a.res.Response, a.err, want)
		}
	}
	for _, id := range []string{"a1", "a2"} {
		wantDuplicate(id+" sent again after the failover", id, receive(id+" sent again", again[id]))
	}
	check("the first send of a2", "a2", receive("the first send of a2", first["a2"]))
	// Completed: sent again, each gets its completion at once, kept with
	// its key.
	for _, id := range []string{"a1", "a2"} {
		a := resend(id)
		wantDuplicate(id+" sent again after its completion", id, a)
		if a.elapsed > 5*time.Second {
			t.Errorf("%s sent again after its completion was answered after %v, want at once", id, a.elapsed)
		}
	}

	// Each ask finished once, in order, and nothing was queued twice.
	var st struct{ Done []string }
	waitFor(t, "both asks to be done", 30*time.Second, func() bool {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		err := callInto(cctx, cl, "completer", key, "getState", &st)
		return err == nil && len(st.Done) >= 2
	})
	if !slices.Equal(st.Done, []string{"a1", "a2"}) {
		t.Errorf("the asks were done as %v, want [a1 a2]", st.Done)
	}
	in, err := cl.Actor("completer", key).Inspect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if d := queueDepth(in, "asks"); d != 0 {
		t.Errorf("%d asks still queued, want none", d)
	}
}

func queueDepth(in client.Inspection, queue string) uint64 {
	for _, q := range in.Queues {
		if q.Queue == queue {
			return q.Depth
		}
	}
	return 0
}

func callInto(ctx context.Context, c *client.Client, actor, key, action string, into any) error {
	b, err := c.Actor(actor, key).Call(ctx, action)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, into)
}

// waitFor polls cond until it holds, failing the test after within.
func waitFor(t *testing.T, what string, within time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("no %s within %v", what, within)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
