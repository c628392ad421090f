package client

import (
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
)

// A connection to a node that left the table is closed at once if idle,
// and only as its last call or stream ends if not: closing it under them
// would cut off calls that may have run.
func TestARetiredConnectionClosesAfterItsLastUse(t *testing.T) {
	dial := func() *grpc.ClientConn {
		c, err := grpc.NewClient("127.0.0.1:1", grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	busy, idle, kept := dial(), dial(), dial()
	defer kept.Close()
	r := newRouter(nil, nil, 0)
	r.conns = map[string]*grpc.ClientConn{"busy": busy, "idle": idle, "kept": kept}
	r.inUse[busy] = 2

	r.mu.Lock()
	closeNow := r.dropConns(map[string]bool{"kept": true})
	r.mu.Unlock()
	if len(closeNow) != 1 || closeNow[0] != idle {
		t.Fatalf("to close now: %v, want the idle connection alone", closeNow)
	}
	idle.Close()
	if len(r.conns) != 1 || r.conns["kept"] != kept {
		t.Fatalf("connections left: %v", r.conns)
	}
	r.done(busy)
	if busy.GetState() == connectivity.Shutdown {
		t.Fatal("closed with a use left")
	}
	r.done(busy)
	if busy.GetState() != connectivity.Shutdown {
		t.Fatalf("still %v after its last use", busy.GetState())
	}
	if len(r.inUse) != 0 || len(r.retired) != 0 {
		t.Fatalf("bookkeeping left: %v, %v", r.inUse, r.retired)
	}

	// Two connections to one address retired in use (its node left,
	// came back, left again): closing the client closes both.
	c1, c2 := dial(), dial()
	r.conns = map[string]*grpc.ClientConn{"x": c1}
	r.inUse[c1] = 1
	r.mu.Lock()
	r.dropConns(nil)
	r.conns["x"] = c2
	r.inUse[c2] = 1
	r.dropConns(nil)
	r.mu.Unlock()
	r.close()
	if c1.GetState() != connectivity.Shutdown || c2.GetState() != connectivity.Shutdown {
		t.Fatalf("after close: %v and %v, want both shut down", c1.GetState(), c2.GetState())
	}
}
