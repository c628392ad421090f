package server

import (
	"testing"

	rivetv1 "github.com/rivet-go/rivet/gen/rivet/v1"
)

// Every unary ActorService method that names an actor is forwarded to the
// actor's owner (Subscribe, a stream, is relayed by its handler): one left out of forwardedResponses would be served by
// whichever node the client called, which does not own the actor
// (UNAVAILABLE, or a wrong answer from a stale memory).
func TestEveryActorMethodIsForwarded(t *testing.T) {
	svc := rivetv1.File_rivet_v1_actor_proto.Services().ByName("ActorService")
	methods := svc.Methods()
	named := 0
	for i := range methods.Len() {
		m := methods.Get(i)
		full := "/" + string(svc.FullName()) + "/" + string(m.Name())
		_, forwarded := forwardedResponses[full]
		if m.Input().Fields().ByName("actor") == nil {
			if forwarded {
				t.Errorf("%s names no actor, yet is forwarded", full)
			}
			continue
		}
		named++
		if m.IsStreamingServer() {
			// A stream is relayed by its handler (Server.Subscribe),
			// not forwarded by the unary interceptor.
			if forwarded {
				t.Errorf("%s is a stream, yet listed for unary forwarding", full)
			}
			continue
		}
		if !forwarded {
			t.Errorf("%s names an actor and is not forwarded to its owner", full)
		}
	}
	if named < 10 {
		t.Fatalf("only %d ActorService methods name an actor: the check is looking at the wrong field", named)
	}
}
