package cluster

import (
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
)

// A member that crashes and comes back under its name at another address
// (a rescheduled container) is taken back once the others have declared
// the old one dead, not only once they have forgotten it
// (GossipToTheDeadTime, 30 s on a LAN): meanwhile the others would leave
// it out of their rings while it counts itself in. The node rejoins the
// registered members it does not see every 5 s; the test does the same.
func TestAMemberBackAtANewAddressIsTakenBack(t *testing.T) {
	lan := func(cfg *Config) { cfg.Profile = ProfileLAN }
	a := newTestMember(t, "a", lan)
	b := newTestMember(t, "b", func(cfg *Config) { lan(cfg); joining(a)(cfg) })
	c := newTestMember(t, "c", func(cfg *Config) { lan(cfg); joining(a)(cfg) })
	for _, m := range []*Cluster{a, b, c} {
		waitUntil(t, m.LocalID()+" sees a, b, c", func() bool { return aliveAre(m, "a", "b", "c") })
	}
	if err := c.Stop(); err != nil { // a crash: no leave is sent
		t.Fatal(err)
	}
	crash := time.Now()
	c2 := newTestMember(t, "c", func(cfg *Config) { lan(cfg); joining(a)(cfg) }) // another port
	forgotten := memberlist.DefaultLANConfig().GossipToTheDeadTime
	lastJoin := time.Now()
	for {
		m, ok := find(a.Members(), "c")
		if ok && m.State == StateAlive && m.GossipAddr == c2.GossipAddr() {
			t.Logf("a sees c at its new address %v after the crash", time.Since(crash).Round(100*time.Millisecond))
			return
		}
		if time.Since(lastJoin) > 5*time.Second {
			_, _ = a.Join([]string{c2.GossipAddr()})
			lastJoin = time.Now()
		}
		if time.Since(crash) > forgotten {
			t.Fatalf("a still sees c as %+v %v after the crash: a member back at a new address waits until the old one is forgotten", m, time.Since(crash))
		}
		time.Sleep(50 * time.Millisecond)
	}
}
