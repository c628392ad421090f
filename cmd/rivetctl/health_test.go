package main

import (
	"net"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// health answers in the form --output asks for: with json, a JSON value
// on stdout, and a node that does not serve is UNAVAILABLE (what a script
// retries), not UNKNOWN.
func TestHealthWithJSONOutput(t *testing.T) {
	addr, hs := healthServer(t)

	rivetctl(t, addr, "health").want(t, 0, "serving\n")
	rivetctl(t, addr, "-o", "json", "health").want(t, 0, `{"serving":true}`+"\n")
	hs.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	rivetctl(t, addr, "health").wantErr(t, 1, "rivetctl: "+addr+" is not serving")
	rivetctl(t, addr, "-o", "json", "health").
		wantErr(t, 1, `{"error":{"code":"UNAVAILABLE","message":"`+addr+` is not serving"},"exit":1}`)
}

// healthServer serves gRPC health alone on a loopback port.
func healthServer(t *testing.T) (string, *health.Server) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	hs := health.NewServer()
	healthpb.RegisterHealthServer(gs, hs)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = gs.Serve(lis)
	}()
	t.Cleanup(func() {
		gs.Stop()
		<-done
	})
	return lis.Addr().String(), hs
}

// health given several nodes (comma-separated, or --addr repeated) checks
// each of them: with one client over the list it answered "serving" for
// whichever node it reached, the first one down hidden (a cluster trial).
func TestHealthOfSeveralNodesChecksEach(t *testing.T) {
	up, _ := healthServer(t)
	down, hs := healthServer(t)
	rivetctl(t, up+","+down, "health").want(t, 0, up+"  serving\n"+down+"  serving\n")
	hs.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	r := rivetctlEnv(t, map[string]string{}, "--addr", up, "--addr", down, "health")
	if r.code != 1 || r.stdout != up+"  serving\n"+down+"  not serving\n" || r.stderr != "rivetctl: 1 of 2 nodes not serving: "+down+"\n" {
		t.Errorf("one node not serving: exit %d, stdout:\n%s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	// An empty one among them (an unset variable) is refused, not dropped
	// from the list unchecked.
	rivetctlEnv(t, map[string]string{}, "--addr", "", "--addr", up, "health").
		wantErr(t, 2, "rivetctl: --addr is empty (leave it out for $RIVET_ENDPOINT, else localhost:6420)")
	r = rivetctl(t, up+","+down, "-o", "json", "health")
	if want := `{"nodes":[{"addr":"` + up + `","serving":true},{"addr":"` + down + `","serving":false,"error":"not serving"}],"serving":false}` + "\n"; r.code != 1 || r.stdout != want {
		t.Errorf("-o json: exit %d, stdout %s, want %s", r.code, r.stdout, want)
	}
}
