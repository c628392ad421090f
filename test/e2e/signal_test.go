package e2e

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/client"
)

// An operator who presses Ctrl-C again while a node stops (which can take
// its 20 s bound, here held by an action that ignores its context) expects
// the process to end at once: the second signal takes its default action.
// Before, the node kept its handler until Run returned, and the second
// signal was swallowed: the process exited 0 when the stop was done.
func TestASecondSignalEndsAStoppingNodeAtOnce(t *testing.T) {
	n := newNode(t)
	n.bin = chaosNodeBinary(t)
	n.start()
	cl, err := client.New(n.grpcAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	callDone := make(chan error, 1)
	go func() {
		_, err := rivet.Call[bool](ctx, cl.GetOrCreate("stubborn", "s"), "block")
		callDone <- err
	}()
	// The actor exists once the call reached it: its turn is in progress
	// (a minute, heedless of its context) when the stop begins.
	deadline := time.Now().Add(30 * time.Second)
	for {
		out, _, code := n.rivetctl("actors", "stubborn")
		if code == 0 && strings.Contains(out, "stubborn") && !strings.Contains(out, "no actors") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("stubborn was not created within 30s: %q", out)
		}
		time.Sleep(50 * time.Millisecond)
	}
	proc := n.cmd
	if err := proc.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(n.log(), `"msg":"stopping"`); {
		if time.Now().After(deadline) {
			t.Fatalf("the node did not log that it stops within 30s of SIGTERM; log:\n%s", n.log())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := proc.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-n.done:
	case <-time.After(60 * time.Second):
		t.Fatal("the node did not end within 60s of a second SIGTERM")
	}
	ws, ok := proc.ProcessState.Sys().(syscall.WaitStatus)
	if !ok || !ws.Signaled() || ws.Signal() != syscall.SIGTERM {
		t.Fatalf("the node ended with %v after a second SIGTERM during its stop; want it ended by the signal", proc.ProcessState)
	}
	n.cmd = nil
	// The call in progress learns that the node went, not a reply.
	select {
	case err := <-callDone:
		if err == nil {
			t.Fatal("the blocked call returned a reply from a node ended by a signal")
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the blocked call did not end within 60s of the node's end")
	}
}
