package runtime_test

import (
	"testing"
	"time"

	"github.com/rivet-go/rivet/placement"
	"github.com/rivet-go/rivet/runtime"
	"github.com/rivet-go/rivet/storage"
)

// A partition claimed while the lease's local deadline has passed, a
// renewal late but on its way (a slow etcd: the watchdog sees the renewal
// and drops nothing), has its wakeups loaded all the same: the claim is
// held, and once served its sleeping workflow wakes at its time. (They
// were skipped as "not owned", and the load counted as done: the workflow
// slept until something else touched the actor.)
func TestWakeupsOfAPartitionClaimedWhileARenewalIsLateAreLoaded(t *testing.T) {
	t.Parallel()
	e := newEnv(t, counterReg(t, sleeper), nil)
	h2, own2 := secondHost(t, e)
	ref := runtime.Ref{Name: "sleeper", Key: []string{"late"}}
	p := placement.Partition("sleeper", storage.EncodeKey(ref.Key), testPartitions)
	if _, _, err := e.host.GetOrCreate(ctx(t), ref, nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the sleep to be recorded", 10*time.Second, func() bool {
		h, err := e.host.History(ctx(t), ref)
		return err == nil && len(h.Entries) > 0 && h.Entries[0].Path == "nap"
	})
	if err := e.host.Handoff(ctx(t), p); err != nil {
		t.Fatal(err)
	}
	// n2's lease is past its local deadline, its next renewal on its way.
	own2.ExpireLocally()
	if got, err := own2.Claim(ctx(t), []uint32{p}); err != nil || len(got) != 1 {
		t.Fatalf("claim: %v, %v", got, err)
	}
	waitFor(t, "the renewal to come", 10*time.Second, func() bool { return own2.Owns(p) })
	if _, lost := own2.LeaseStats(); lost != 0 {
		t.Fatalf("n2 lost its lease %d time(s); the test wants a late renewal, not a loss", lost)
	}
	waitFor(t, "the sleeper to wake on n2, with no request", 15*time.Second, func() bool {
		ins, err := h2.Inspect(ctx(t), ref)
		return err == nil && string(ins.State) == `{"woke":true}`
	})
}
