package main

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/rivet-go/rivet/server/servertest"
)

// TestMain runs rivetctl's main instead of the tests when the test binary
// is started as a child with RIVETCTL_TEST_MAIN set, its arguments after
// "--": main's signal handling is tested in a process of its own.
func TestMain(m *testing.M) {
	if os.Getenv("RIVETCTL_TEST_MAIN") != "" {
		for i, a := range os.Args {
			if a == "--" {
				os.Args = append([]string{"rivetctl"}, os.Args[i+1:]...)
				break
			}
		}
		main()
		return
	}
	goleak.VerifyTestMain(m)
}

// A first interrupt lets a command finish what it must (--all-failed: the
// retries in flight, each up to --timeout); a second one stops rivetctl at
// once, as an impatient operator expects: it ignored every interrupt after
// the first.
func TestASecondInterruptStopsRivetctlAtOnce(t *testing.T) {
	inFlight := make(chan struct{}, 1)
	f := newFailedFleet([]string{"a", "b"}, func(ctx context.Context, _ string) (int, error) {
		select {
		case inFlight <- struct{}{}:
		default:
		}
		<-ctx.Done() // the child's --timeout, a minute
		return 0, ctx.Err()
	})
	addr := servertest.Start(t, f, servertest.Config{})
	cmd := exec.Command(os.Args[0], "-test.run", "^$", "--", "--addr", addr, "--timeout", "1m", "workflow", "retry", "charger", "--all-failed", "--concurrency", "1")
	cmd.Env = append(os.Environ(), "RIVETCTL_TEST_MAIN=1")
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-inFlight:
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("no retry reached the node within 30 s:\n%s", out.String())
	}
	_ = cmd.Process.Signal(os.Interrupt)
	select {
	case err := <-done:
		t.Fatalf("rivetctl ended on the first interrupt (%v), with a retry in flight:\n%s", err, out.String())
	case <-time.After(500 * time.Millisecond):
	}
	_ = cmd.Process.Signal(os.Interrupt)
	select {
	case err := <-done:
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGINT {
			t.Fatalf("rivetctl ended with %v on the second interrupt, want killed by it:\n%s", err, out.String())
		}
	case <-time.After(20 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("rivetctl still ran 20 s after a second interrupt:\n%s", out.String())
	}
}

// --version prints the build and calls no node.
func TestVersionPrintsTheBuild(t *testing.T) {
	r := rivetctlEnv(t, map[string]string{}, "--version")
	if r.code != 0 || !strings.HasPrefix(r.stdout, "rivet ") || !strings.Contains(r.stdout, "go1.") {
		t.Fatalf("exit %d, stdout %q, stderr %q: want 0 and the build", r.code, r.stdout, r.stderr)
	}
}
