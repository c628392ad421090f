package node

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/client"
	"github.com/rivet-go/rivet/storage/etcdstore/etcdtest"
	"github.com/rivet-go/rivet/workflow"
)

// qhState is what a qhWorker took: the bodies of queue "work" and how many
// of its batch receives timed out.
type qhState struct {
	Got   []int `json:"got"`
	Empty int   `json:"empty"`
}

// qhWorker takes batches of up to 4 messages of queue "work" only (never
// of "other"), with a short timeout, records them in a step and completes
// each with twice its body.
var qhWorker = rivet.Actor[qhState]{
	Name:   "qhworker",
	Queues: rivet.Queues{"work": rivet.QueueOf[int](), "other": rivet.QueueOf[int]()},
	Run: func(c *workflow.Ctx[qhState]) error {
		return c.Loop("l", func(lc *workflow.Ctx[qhState]) error {
			ms, err := workflow.NextBatch[int](lc, "take", workflow.NextOptions{Names: []string{"work"}, Count: 4, Timeout: 100 * time.Millisecond, Completable: true})
			if err != nil {
				return err
			}
			if err := lc.Step("rec", func(s *workflow.StepCtx[qhState]) error {
				if len(ms) == 0 {
					s.State.Empty++
				}
				for _, m := range ms {
					s.State.Got = append(s.State.Got, m.Body)
				}
				return nil
			}); err != nil {
				return err
			}
			if len(ms) > 0 {
				// Taken, recorded, not completed yet: a window for the
				// node's end.
				if err := lc.Sleep("pause", 30*time.Millisecond); err != nil {
					return err
				}
			}
			for _, m := range ms {
				if err := m.Complete(m.Body * 2); err != nil {
					return err
				}
			}
			return nil
		})
	},
	Actions: rivet.Actions[qhState]{"get": rivet.Query(func(c *rivet.ActionCtx[qhState]) (qhState, error) { return *c.State, nil })},
}

// Keyed senders wait, through another node, for the completions of a
// workflow whose node is restarted, crashed and restarted at once, and
// crashed for good (the other node takes the actor over): every message of
// "work" is taken exactly once, every completion a sender hears is its own
// message's, a keyed retry never queues a second copy, and the batch
// receive filtered on "work" leaves every message of "other" queued.
func TestQueueMessagesSurviveRestartsAndCrashesOfTheirNode(t *testing.T) {
	t.Parallel()
	const (
		parts = 8
		works = 60
		other = 10
	)
	reg, err := rivet.Setup(qhWorker)
	if err != nil {
		t.Fatal(err)
	}
	endpoints := etcdtest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	config := func(id string, join []string) Config {
		cfg := ClusterConfigForTest(t, id, endpoints, "/queue-restart-test/", parts, join)
		cfg.LeaseTTL = 2 * time.Second
		return cfg
	}
	a := StartForTest(t, ctx, config("a", nil), reg)
	bcfg := config("b", []string{a.GossipAddr()})
	b := StartForTest(t, ctx, bcfg, reg)
	awaitCond(t, ctx, "a and b to share the partitions", sharing(parts, a, b))
	ref, _ := ownedRef(t, b, "qhworker", "w")
	c, err := client.New(a.GRPCAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	h := c.Actor("qhworker", ref.Key...)
	get := func() (qhState, error) { return rivet.Call[qhState](ctx, h, "get") }
	if _, err := get(); err != nil {
		t.Fatal(err)
	}

	start := time.Now()
	send := func(q string, body int, wait bool) (client.SendResult, error) {
		var last error
		for range 500 {
			res, err := h.SendWith(ctx, q, body, client.SendOptions{IdempotencyKey: fmt.Sprintf("%s-%d", q, body), Wait: wait, Timeout: 20 * time.Second})
			if err == nil {
				return res, nil
			}
			last = err
			if ctx.Err() != nil {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		return client.SendResult{}, fmt.Errorf("send %s %d: %v", q, body, last)
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	errs := make(chan error, works+other)
	var mu sync.Mutex
	completed := map[int]int{}
	for i := range works {
		wg.Go(func() {
			time.Sleep(time.Duration(i) * 80 * time.Millisecond)
			res, err := send("work", i, true)
			switch {
			case err != nil:
				errs <- err
			case res.Status == client.SendCompleted && string(res.Response) != fmt.Sprint(2*i):
				errs <- fmt.Errorf("work %d (message %d) completed with %s", i, res.MessageID, res.Response)
			case res.Status == client.SendCompleted:
				mu.Lock()
				completed[i]++
				mu.Unlock()
			case res.Status != client.SendEnqueued:
				errs <- fmt.Errorf("work %d: %+v", i, res)
			}
		})
	}
	wg.Go(func() {
		for i := range other {
			if _, err := send("other", 1000+i, false); err != nil {
				errs <- err
			}
			time.Sleep(100 * time.Millisecond)
		}
	})

	progress := func(what string) {
		t.Helper()
		t.Logf("%v: %s", time.Since(start).Round(time.Millisecond), what)
		// A call whose peer stream broke as b went is not retried (it is
		// no read): looked at again.
		var s0 qhState
		awaitCond(t, ctx, what+": a first look", func() bool {
			var err error
			s0, err = get()
			return err == nil
		})
		awaitCond(t, ctx, what, func() bool {
			s, err := get()
			return err == nil && (len(s.Got) >= min(len(s0.Got)+8, works))
		})
	}
	restart := func() {
		bcfg.GossipAddr = b.GossipAddr()
		b = StartForTest(t, ctx, bcfg, reg)
	}
	progress("progress before b restarts")
	sctx, scancel := context.WithTimeout(ctx, 30*time.Second)
	if err := b.Stop(sctx); err != nil {
		t.Fatal(err)
	}
	scancel()
	restart()
	progress("progress after b restarted")
	crash(ctx, b)
	restart()
	progress("progress after b crashed and restarted")
	crash(ctx, b)
	progress("progress on a after b crashed")

	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	var s qhState
	awaitCond(t, ctx, "every message of work taken, and a receive timed out since", func() bool {
		s, err = get()
		return err == nil && len(s.Got) >= works && s.Empty > 0
	})
	want := make([]int, works)
	for i := range want {
		want[i] = i
	}
	if got := slices.Sorted(slices.Values(s.Got)); !slices.Equal(got, want) {
		t.Errorf("messages of work taken: %v\nwant each of 0..%d once", got, works-1)
	}
	for i, n := range completed {
		if n != 1 {
			t.Errorf("work %d completed %d times", i, n)
		}
	}
	t.Logf("%d of %d waiting sends heard their completion, %d receives timed out", len(completed), works, s.Empty)
	in, err := h.NoCreate().Inspect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	depth := map[string]uint64{}
	for _, q := range in.Queues {
		depth[q.Queue] = q.Depth
	}
	if depth["other"] != other || depth["work"] != 0 {
		t.Errorf("queue depths %v, want other %d (never received) and work 0", depth, other)
	}
	// The workflow took it and completed it, across the restarts and
	// crashes: the duplicate gets its completion, kept with its key, at
	// once.
	res, err := h.SendWith(ctx, "work", 0, client.SendOptions{IdempotencyKey: "work-0", Wait: true, Timeout: 5 * time.Second})
	if err != nil || !res.Duplicate || res.Status != client.SendCompleted || string(res.Response) != "0" {
		t.Errorf("work 0 sent again with its key: %+v (response %s), %v; want the duplicate, completed with 0", res, res.Response, err)
	}
}

// qhTimeoutState is what a qhTimeout saw: the messages of its timed-out
// batch receive, as the run after the gate got them.
type qhTimeoutState struct {
	After []int `json:"after"`
	Done  bool  `json:"done"`
}

// qhTimeout receives a batch from queue "a" with a timeout, records what it
// got, and then waits on queue "go" only, without recording anything
// more, before it records the batch again.
var qhTimeout = rivet.Actor[qhTimeoutState]{
	Name:   "qhtimeout",
	Queues: rivet.Queues{"a": rivet.QueueOf[int](), "go": rivet.QueueOf[int]()},
	Run: func(c *workflow.Ctx[qhTimeoutState]) error {
		ms, err := workflow.NextBatch[int](c, "first", workflow.NextOptions{Names: []string{"a"}, Count: 5, Timeout: 300 * time.Millisecond})
		if err != nil {
			return err
		}
		bodies := []int{}
		for _, m := range ms {
			bodies = append(bodies, m.Body)
		}
		if _, err := workflow.Next[int](c, "gate", workflow.NextOptions{Names: []string{"go"}}); err != nil {
			return err
		}
		return c.Step("rec", func(s *workflow.StepCtx[qhTimeoutState]) error {
			s.State.After, s.State.Done = bodies, true
			return nil
		})
	},
	Actions: rivet.Actions[qhTimeoutState]{"get": rivet.Query(func(c *rivet.ActionCtx[qhTimeoutState]) (qhTimeoutState, error) { return *c.State, nil })},
}

// A batch receive that timed out, whose timeout nothing committed after it
// (the workflow went on to wait on another queue, so the record waits for
// the next commit), still times out when the node restarts and replays it
// with a message of its queue that came after its deadline (known then
// only by its key); that message stays queued, and the receive on "go"
// takes none of "a"'s.
func TestATimedOutBatchReceiveReplaysTimedOutAfterARestart(t *testing.T) {
	reg, err := rivet.Setup(qhTimeout)
	if err != nil {
		t.Fatal(err)
	}
	endpoints := etcdtest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfg := ClusterConfigForTest(t, "a", endpoints, "/queue-timeout-test/", 4, nil)
	n := StartForTest(t, ctx, cfg, reg)
	dialN := func() *client.Client {
		c, err := client.New(n.GRPCAddr())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	h := dialN().Actor("qhtimeout", "t")
	if _, err := h.Info(ctx); err != nil {
		t.Fatal(err)
	}
	waitsOnGo := func() bool {
		in, err := h.NoCreate().Inspect(ctx)
		return err == nil && slices.Equal(in.WorkflowWakeQueues, []string{"go"})
	}
	awaitCond(t, ctx, "the workflow to wait on go", waitsOnGo)
	if _, err := h.Enqueue(ctx, "a", 7); err != nil {
		t.Fatal(err)
	}
	sctx, scancel := context.WithTimeout(ctx, 30*time.Second)
	defer scancel()
	if err := n.Stop(sctx); err != nil {
		t.Fatal(err)
	}
	n = StartForTest(t, ctx, cfg, reg)
	h = dialN().Actor("qhtimeout", "t")
	if _, err := h.Enqueue(ctx, "go", 1); err != nil {
		t.Fatal(err)
	}
	var s qhTimeoutState
	awaitCond(t, ctx, "the workflow's end", func() bool {
		s, err = rivet.Call[qhTimeoutState](ctx, h, "get")
		return err == nil && s.Done
	})
	if len(s.After) != 0 {
		t.Errorf("the timed-out batch receive replayed with %v, want none", s.After)
	}
	in, err := h.NoCreate().Inspect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range in.Queues {
		if q.Queue == "a" && q.Depth != 1 || q.Queue == "go" && q.Depth != 0 {
			t.Errorf("queue %s holds %d messages", q.Queue, q.Depth)
		}
	}
}
