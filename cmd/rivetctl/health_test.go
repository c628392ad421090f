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
	addr := lis.Addr().String()

	rivetctl(t, addr, "health").want(t, 0, "serving\n")
	rivetctl(t, addr, "-o", "json", "health").want(t, 0, `{"serving":true}`+"\n")
	hs.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	rivetctl(t, addr, "health").wantErr(t, 1, "rivetctl: "+addr+" is not serving")
	rivetctl(t, addr, "-o", "json", "health").
		wantErr(t, 1, `{"error":{"code":"UNAVAILABLE","message":"`+addr+` is not serving"},"exit":1}`)
}
