package runtime

import "testing"

// An action's state is in storage when its caller gets the reply, with the
// host still running (rivet-semantics.md, "State is durable before a
// reply"; the original throttles saves to one a second): a crash right
// after the reply loses nothing. A restart (a graceful stop) would not
// show this, since a stop could save what a turn left in memory.
func TestAnActionsStateIsStoredBeforeItsReply(t *testing.T) {
	e := newFoldEnv(t, foldActor(1, func(int) bool { return true }, 0))
	e.create()
	e.waitState(`{"n":1}`)
	for _, c := range []struct {
		add        int
		reply, key string
	}{{5, "6", `{"n":6}`}, {1, "7", `{"n":7}`}} {
		if got := e.call("add", c.add); got != c.reply {
			t.Fatalf("add %d: %s, want %s", c.add, got, c.reply)
		}
		if got := e.stateKey(); got != c.key {
			t.Fatalf("after the reply to add %d, storage holds %s, want %s", c.add, got, c.key)
		}
	}
}
