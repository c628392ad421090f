package cluster

import (
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// waitTimeout bounds every wait for gossip to converge. Convergence takes
// well under a second on an idle machine; the margin is for a loaded 2-core
// CI machine under the race detector.
const waitTimeout = 20 * time.Second

// testLogger returns a logger that keeps everything in memory and prints
// it if the test fails; with CLUSTER_TEST_LOG set, it also prints it as it
// comes. Not zaptest: memberlist's goroutines may log shortly after
// Shutdown, after the test has ended, which zaptest treats as a bug.
func testLogger(t *testing.T, member string) *zap.Logger {
	core, logs := observer.New(zapcore.DebugLevel)
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		var b strings.Builder
		for _, e := range logs.All() {
			fmt.Fprintf(&b, "\n%s %-5s %s %s", e.Time.Format("15:04:05.000"), e.Level.CapitalString(), e.LoggerName, e.Message)
			for k, v := range e.ContextMap() {
				fmt.Fprintf(&b, " %s=%v", k, v)
			}
		}
		t.Logf("logs of member %s:%s", member, b.String())
	})
	if os.Getenv("CLUSTER_TEST_LOG") != "" {
		dev, err := zap.NewDevelopment()
		if err != nil {
			t.Fatal(err)
		}
		core = zapcore.NewTee(core, dev.Core())
	}
	return zap.New(core).With(zap.String("member", member))
}

// noLeaks fails the test if goroutines started during it outlive it. Call
// it first, so that its cleanup runs after the members' Stop. memberlist's
// Shutdown does not wait for its goroutines, hence the deadline loop.
func noLeaks(t *testing.T) {
	t.Helper()
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() {
		deadline := time.Now().Add(waitTimeout)
		for {
			err := goleak.Find(ignore)
			if err == nil {
				return
			}
			if time.Now().After(deadline) {
				t.Errorf("goroutines leaked: %v", err)
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
	})
}

// newTestMember starts a member with ProfileLocal on a free loopback port,
// Meta.GRPCAddr "grpc-<id>", after applying mod. Cleanup stops it.
func newTestMember(t *testing.T, id string, mod func(*Config)) *Cluster {
	t.Helper()
	cfg := DefaultLocalConfig()
	cfg.NodeID = id
	cfg.Meta = Meta{GRPCAddr: "grpc-" + id}
	cfg.Logger = testLogger(t, id)
	if mod != nil {
		mod(&cfg)
	}
	c, err := Start(cfg)
	if err != nil {
		t.Fatalf("start %s: %v", id, err)
	}
	t.Cleanup(func() { _ = c.Stop() })
	return c
}

func joining(seeds ...*Cluster) func(*Config) {
	return func(cfg *Config) {
		for _, s := range seeds {
			cfg.Join = append(cfg.Join, s.GossipAddr())
		}
	}
}

// waitUntil polls cond until it holds or waitTimeout passes.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting until %s", waitTimeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func ids(ms []Member) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.ID
	}
	return out
}

func find(ms []Member, id string) (Member, bool) {
	for _, m := range ms {
		if m.ID == id {
			return m, true
		}
	}
	return Member{}, false
}

// aliveAre reports whether c sees exactly the given members alive, each
// with the test's default Meta.
func aliveAre(c *Cluster, want ...string) bool {
	alive := c.Alive()
	if !slices.Equal(ids(alive), want) {
		return false
	}
	for _, m := range alive {
		if m.Meta.GRPCAddr != "grpc-"+m.ID {
			return false
		}
	}
	return true
}

// stateOn returns the state of member id as c sees it, "" if unknown.
func stateOn(c *Cluster, id string) State {
	m, _ := find(c.Members(), id)
	return m.State
}

// waitEvent reads c's events until one matches.
func waitEvent(t *testing.T, c *Cluster, what string, match func(Event) bool) Event {
	t.Helper()
	timeout := time.After(waitTimeout)
	for {
		select {
		case ev := <-c.Events():
			if match(ev) {
				return ev
			}
		case <-timeout:
			t.Fatalf("timed out after %v waiting for %s on %s", waitTimeout, what, c.LocalID())
		}
	}
}

func waitClosed(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(waitTimeout):
		t.Fatalf("timed out after %v waiting until %s", waitTimeout, what)
	}
}

// formCluster starts members a, b, c joined through a and waits until all
// see all.
func formCluster(t *testing.T) (a, b, c *Cluster) {
	t.Helper()
	a = newTestMember(t, "a", nil)
	b = newTestMember(t, "b", joining(a))
	c = newTestMember(t, "c", joining(a))
	for _, m := range []*Cluster{a, b, c} {
		waitUntil(t, m.LocalID()+" sees a, b, c alive", func() bool { return aliveAre(m, "a", "b", "c") })
	}
	return a, b, c
}

func TestThreeMembersFormCluster(t *testing.T) {
	noLeaks(t)
	a, b, c := formCluster(t)

	select {
	case <-a.Joined():
	default:
		t.Error("Joined of a member with no seeds is not closed")
	}
	waitClosed(t, b.Joined(), "b joined")
	waitClosed(t, c.Joined(), "c joined")

	byID := map[string]*Cluster{"a": a, "b": b, "c": c}
	for _, m := range []*Cluster{a, b, c} {
		for _, mem := range m.Members() {
			if mem.State != StateAlive {
				t.Errorf("%s sees %s %s", m.LocalID(), mem.ID, mem.State)
			}
			if want := byID[mem.ID].GossipAddr(); mem.GossipAddr != want {
				t.Errorf("%s sees %s at %s, want %s", m.LocalID(), mem.ID, mem.GossipAddr, want)
			}
		}
	}
	if strings.HasSuffix(a.GossipAddr(), ":0") {
		t.Errorf("GossipAddr %s does not tell the bound port", a.GossipAddr())
	}
	if a.LocalID() != "a" {
		t.Errorf("LocalID = %q", a.LocalID())
	}
}

func TestJoinRetriesUntilSeedStarts(t *testing.T) {
	noLeaks(t)
	// Find a free address, and free it again, for the seed to start on
	// later. The restart also checks that a member can rebind the address
	// of a stopped one.
	first := newTestMember(t, "seed", nil)
	addr := first.GossipAddr()
	if err := first.Stop(); err != nil {
		t.Fatal(err)
	}

	core, logs := observer.New(zapcore.DebugLevel)
	b := newTestMember(t, "b", func(cfg *Config) {
		cfg.Join = []string{addr}
		cfg.Logger = zap.New(core)
	})
	waitUntil(t, "b failed to join at least once", func() bool {
		return logs.FilterMessage("cannot join cluster yet; retrying").Len() > 0
	})
	select {
	case <-b.Joined():
		t.Fatal("b joined a seed that is not running")
	default:
	}

	seed := newTestMember(t, "seed", func(cfg *Config) { cfg.BindAddr = addr })
	waitClosed(t, b.Joined(), "b joined the late seed")
	waitUntil(t, "b sees b, seed", func() bool { return aliveAre(b, "b", "seed") })
	waitUntil(t, "seed sees b, seed", func() bool { return aliveAre(seed, "b", "seed") })
}

func TestSeedListMayNameSelf(t *testing.T) {
	noLeaks(t)
	a := newTestMember(t, "a", nil)
	// a restarted with a seed list that names only itself: it starts a
	// cluster, it does not wait for one.
	addr := a.GossipAddr()
	if err := a.Stop(); err != nil {
		t.Fatal(err)
	}
	a2 := newTestMember(t, "a", func(cfg *Config) { cfg.BindAddr = addr; cfg.Join = []string{addr} })
	select {
	case <-a2.Joined():
	default:
		t.Fatal("Joined not closed for a seed list naming only this member")
	}
	b := newTestMember(t, "b", func(cfg *Config) { cfg.Join = []string{addr} })
	waitClosed(t, b.Joined(), "b joined")
	waitUntil(t, "a sees a, b", func() bool { return aliveAre(a2, "a", "b") })
}

func TestLeaveIsSeenAsLeft(t *testing.T) {
	noLeaks(t)
	a, b, c := formCluster(t)
	addr := c.GossipAddr()

	start := time.Now()
	if err := c.Leave(10 * time.Second); err != nil {
		t.Fatalf("Leave: %v", err)
	}
	leaveTook := time.Since(start)
	for _, m := range []*Cluster{a, b} {
		waitUntil(t, m.LocalID()+" sees c left", func() bool { return stateOn(m, "c") == StateLeft })
		if !aliveAre(m, "a", "b") {
			t.Errorf("%s: Alive = %v after c left", m.LocalID(), ids(m.Alive()))
		}
	}
	t.Logf("Leave took %v; both others saw it left %v after it began", leaveTook, time.Since(start))
	ev := waitEvent(t, a, "c left", func(ev Event) bool { return ev.Kind == EventLeft && ev.Member.ID == "c" })
	if ev.Member.State != StateLeft || ev.Member.Meta.GRPCAddr != "grpc-c" {
		t.Errorf("left event: %+v", ev)
	}

	if err := c.Leave(time.Second); err != nil {
		t.Errorf("second Leave: %v", err)
	}
	if err := c.Stop(); err != nil {
		t.Errorf("Stop after Leave: %v", err)
	}
	if err := c.UpdateMeta(Meta{GRPCAddr: "x"}, time.Second); !errors.Is(err, ErrStopped) {
		t.Errorf("UpdateMeta after Leave = %v, want ErrStopped", err)
	}

	// The same member comes back on the same address.
	newTestMember(t, "c", func(cfg *Config) { cfg.BindAddr = addr; joining(a)(cfg) })
	for _, m := range []*Cluster{a, b} {
		waitUntil(t, m.LocalID()+" sees c back", func() bool { return aliveAre(m, "a", "b", "c") })
	}
}

func TestCrashIsSeenAsDead(t *testing.T) {
	noLeaks(t)
	a, b, c := formCluster(t)
	addr := c.GossipAddr()

	start := time.Now()
	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}
	for _, m := range []*Cluster{a, b} {
		waitUntil(t, m.LocalID()+" sees c dead", func() bool { return stateOn(m, "c") == StateDead })
		if !aliveAre(m, "a", "b") {
			t.Errorf("%s: Alive = %v after c died", m.LocalID(), ids(m.Alive()))
		}
	}
	t.Logf("both others declared c dead %v after it stopped", time.Since(start))
	ev := waitEvent(t, b, "c left", func(ev Event) bool { return ev.Kind == EventLeft && ev.Member.ID == "c" })
	if ev.Member.State != StateDead {
		t.Errorf("left event: %+v", ev)
	}
	if err := c.Stop(); err != nil {
		t.Errorf("second Stop: %v", err)
	}
	if err := c.Leave(time.Second); !errors.Is(err, ErrStopped) {
		t.Errorf("Leave after Stop = %v, want ErrStopped", err)
	}

	newTestMember(t, "c", func(cfg *Config) { cfg.BindAddr = addr; joining(a)(cfg) })
	for _, m := range []*Cluster{a, b} {
		waitUntil(t, m.LocalID()+" sees c back", func() bool { return aliveAre(m, "a", "b", "c") })
	}
}

func TestRestartBeforeDeclaredDead(t *testing.T) {
	noLeaks(t)
	a, b, c := formCluster(t)
	addr := c.GossipAddr()
	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}
	// The restarted process has a new incarnation counter, lower than the
	// one the others know; memberlist must still take its new metadata.
	newTestMember(t, "c", func(cfg *Config) {
		cfg.BindAddr = addr
		cfg.Meta.GRPCAddr = "grpc-c-2"
		joining(a)(cfg)
	})
	for _, m := range []*Cluster{a, b} {
		waitUntil(t, m.LocalID()+" sees restarted c", func() bool {
			mem, ok := find(m.Alive(), "c")
			return ok && mem.Meta.GRPCAddr == "grpc-c-2"
		})
	}
}

func TestUpdateMetaPropagates(t *testing.T) {
	noLeaks(t)
	a, b, c := formCluster(t)
	want := Meta{GRPCAddr: "10.0.0.1:6420", HTTPAddr: "10.0.0.1:6421"}
	if err := a.UpdateMeta(want, 10*time.Second); err != nil {
		t.Fatalf("UpdateMeta: %v", err)
	}
	for _, m := range []*Cluster{a, b, c} {
		waitUntil(t, m.LocalID()+" sees a's new meta", func() bool {
			mem, ok := find(m.Alive(), "a")
			return ok && mem.Meta == want
		})
	}
	waitEvent(t, b, "a updated", func(ev Event) bool {
		return ev.Kind == EventUpdated && ev.Member.ID == "a" && ev.Member.Meta == want
	})

	big := Meta{GRPCAddr: strings.Repeat("x", 600)}
	if err := a.UpdateMeta(big, time.Second); !errors.Is(err, ErrMetaTooLarge) {
		t.Errorf("UpdateMeta(600 bytes) = %v, want ErrMetaTooLarge", err)
	}
	if mem, _ := find(a.Members(), "a"); mem.Meta != want {
		t.Errorf("a's meta after a refused update = %+v", mem.Meta)
	}
}

func TestGossipKey(t *testing.T) {
	noLeaks(t)
	key := []byte("0123456789abcdef")
	withKey := func(k []byte, seeds ...*Cluster) func(*Config) {
		return func(cfg *Config) { cfg.GossipKey = k; joining(seeds...)(cfg) }
	}
	a := newTestMember(t, "a", withKey(key))
	b := newTestMember(t, "b", withKey(key, a))
	waitUntil(t, "a sees a, b", func() bool { return aliveAre(a, "a", "b") })
	waitUntil(t, "b sees a, b", func() bool { return aliveAre(b, "a", "b") })

	other := newTestMember(t, "other-key", withKey([]byte("fedcba9876543210fedcba9876543210"), a))
	plain := newTestMember(t, "no-key", joining(a))
	// A negative result needs a fixed wait: a few seconds is many join
	// attempts and push/pull rounds at ProfileLocal's pace.
	select {
	case <-other.Joined():
		t.Error("a member with another key joined")
	case <-plain.Joined():
		t.Error("a member without the key joined")
	case <-time.After(3 * time.Second):
	}
	for _, m := range []*Cluster{a, b} {
		if got := ids(m.Members()); !slices.Equal(got, []string{"a", "b"}) {
			t.Errorf("%s sees %v", m.LocalID(), got)
		}
	}
	if got := ids(other.Members()); !slices.Equal(got, []string{"other-key"}) {
		t.Errorf("other-key sees %v", got)
	}
}

func TestUnreadChannelsDoNotBlockGossip(t *testing.T) {
	noLeaks(t)
	const n, updates = 4, 30
	ms := []*Cluster{newTestMember(t, "m0", nil)}
	for i := 1; i < n; i++ {
		ms = append(ms, newTestMember(t, fmt.Sprintf("m%d", i), joining(ms[0])))
	}
	// Fill every Events buffer, so that each callback from here on takes
	// the overflow path. Nobody reads Changes either.
	for _, m := range ms {
		for range eventBuffer {
			m.view.emit(Event{})
		}
	}

	var wg sync.WaitGroup
	for _, m := range ms {
		wg.Go(func() {
			for i := range updates {
				meta := Meta{GRPCAddr: fmt.Sprintf("%s-v%d", m.LocalID(), i)}
				if err := m.UpdateMeta(meta, waitTimeout); err != nil {
					t.Errorf("%s UpdateMeta: %v", m.LocalID(), err)
					return
				}
			}
		})
	}
	wg.Wait()

	for _, m := range ms {
		waitUntil(t, m.LocalID()+" sees everyone's last meta", func() bool {
			alive := m.Alive()
			if len(alive) != n {
				return false
			}
			for _, mem := range alive {
				if mem.Meta.GRPCAddr != fmt.Sprintf("%s-v%d", mem.ID, updates-1) {
					return false
				}
			}
			return true
		})
		if m.Dropped() == 0 {
			t.Errorf("%s dropped no events from a full buffer", m.LocalID())
		}
	}

	// Failure detection still works with every channel full.
	if err := ms[n-1].Stop(); err != nil {
		t.Fatal(err)
	}
	for _, m := range ms[:n-1] {
		waitUntil(t, m.LocalID()+" sees the stopped member dead", func() bool {
			return len(m.Alive()) == n-1
		})
	}
}

func TestEventsDropOldest(t *testing.T) {
	noLeaks(t)
	a := newTestMember(t, "a", nil)
	// Alone, UpdateMeta waits for no broadcast: each call is one Updated
	// event, right away. With the Joined event of a itself, that is 301.
	const updates = 300
	for i := range updates {
		if err := a.UpdateMeta(Meta{GRPCAddr: fmt.Sprint(i)}, time.Second); err != nil {
			t.Fatal(err)
		}
	}
	const dropped = updates + 1 - eventBuffer
	if got := a.Dropped(); got != dropped {
		t.Errorf("Dropped = %d, want %d", got, dropped)
	}
	for i := dropped - 1; i < updates; i++ {
		ev := <-a.Events()
		if ev.Kind != EventUpdated || ev.Member.Meta.GRPCAddr != fmt.Sprint(i) {
			t.Fatalf("event %d = %+v, want update %d", i, ev, i)
		}
	}
	select {
	case ev := <-a.Events():
		t.Errorf("extra event %+v", ev)
	default:
	}

	// All those changes coalesce into one pending notification.
	select {
	case <-a.Changes():
	default:
		t.Fatal("no change notified")
	}
	select {
	case <-a.Changes():
		t.Error("second notification pending; want them coalesced")
	default:
	}
}

func TestStopInterruptsJoinInProgress(t *testing.T) {
	noLeaks(t)
	// A seed that accepts connections and never answers, like a host that
	// hangs: memberlist's join waits for its reply until the TCP timeout,
	// 10 s with ProfileLAN.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	accepted := make(chan net.Conn, 16)
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- conn
		}
	})
	defer func() {
		_ = ln.Close()
		wg.Wait()
		close(accepted)
		for conn := range accepted {
			_ = conn.Close()
		}
	}()

	m := newTestMember(t, "m", func(cfg *Config) {
		cfg.Profile = ProfileLAN
		cfg.Join = []string{ln.Addr().String()}
	})
	var conn net.Conn
	select {
	case conn = <-accepted:
	case <-time.After(waitTimeout):
		t.Fatal("the join never reached the seed")
	}
	defer conn.Close()

	start := time.Now()
	if err := m.Stop(); err != nil {
		t.Fatal(err)
	}
	// Well under the 10 s TCP timeout, with room for a loaded machine.
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("Stop took %v with a join in progress", took)
	}
}

func TestStartRejectsBadConfig(t *testing.T) {
	noLeaks(t)
	for _, tc := range []struct {
		name string
		mod  func(*Config)
		want error
		says string
	}{
		{"no node ID", func(c *Config) { c.NodeID = "" }, ErrInvalidConfig, "NodeID"},
		{"short gossip key", func(c *Config) { c.GossipKey = make([]byte, 10) }, ErrInvalidConfig, "GossipKey"},
		{"unspecified bind, no advertise", func(c *Config) { c.BindAddr = "0.0.0.0:0" }, ErrInvalidConfig, "--gossip-advertise-addr"},
		{"unspecified advertise", func(c *Config) { c.AdvertiseAddr = "0.0.0.0:7946" }, ErrInvalidConfig, "AdvertiseAddr"},
		{"bind without port", func(c *Config) { c.BindAddr = "127.0.0.1" }, ErrInvalidConfig, "BindAddr"},
		{"unknown profile", func(c *Config) { c.Profile = 7 }, ErrInvalidConfig, "Profile(7)"},
		{"meta too large", func(c *Config) { c.Meta.HTTPAddr = strings.Repeat("x", 500) }, ErrMetaTooLarge, "512"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultLocalConfig()
			cfg.NodeID = "a"
			tc.mod(&cfg)
			c, err := Start(cfg)
			if err == nil {
				_ = c.Stop()
				t.Fatal("Start accepted the config")
			}
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.says) {
				t.Errorf("Start: %v; want %v mentioning %q", err, tc.want, tc.says)
			}
		})
	}
}

func TestAdvertiseAddr(t *testing.T) {
	noLeaks(t)
	// A bare host advertises the bound port.
	a := newTestMember(t, "a", func(cfg *Config) { cfg.AdvertiseAddr = "127.0.0.1" })
	_, port, _ := net.SplitHostPort(a.GossipAddr())
	if !strings.HasPrefix(a.GossipAddr(), "127.0.0.1:") || port == "0" {
		t.Errorf("GossipAddr = %s", a.GossipAddr())
	}
	b := newTestMember(t, "b", func(cfg *Config) { cfg.BindAddr = "localhost:0"; joining(a)(cfg) })
	waitUntil(t, "a sees a, b", func() bool { return aliveAre(a, "a", "b") })
	if !strings.HasPrefix(b.GossipAddr(), "127.0.0.1:") {
		t.Errorf("localhost bound as %s", b.GossipAddr())
	}
}
