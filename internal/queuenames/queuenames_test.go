package queuenames

import "testing"

func TestCheckNamesTheQueueAndTheActorsSorted(t *testing.T) {
	queues := map[string]int{"orders": 0, "cancel": 0}
	if err := Check("shop", []string{"orders", "cancel"}, queues); err != nil {
		t.Fatalf("declared names: %v", err)
	}
	if err := Check("shop", []string{"orders", "ordres"}, queues); err == nil || err.Error() != `actor shop has no queue "ordres" (it has cancel, orders)` {
		t.Fatalf("a misspelt name: %v", err)
	}
	if err := Check("shop", []string{"x"}, map[string]int{}); err == nil || err.Error() != `actor shop has no queue "x" (it has none)` {
		t.Fatalf("an actor without queues: %v", err)
	}
}
