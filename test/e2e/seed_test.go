package e2e

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/rivet-go/rivet/examples/exampleapi"
)

// The seed's scenarios as a user runs them: a node hosting the examples,
// with their HTTP API, driven with rivetctl only.
func TestSeedScenariosWithRivetctl(t *testing.T) {
	api := exampleapi.NewTestServer(map[string]int{"/users": 3, "/orders": 5, "/revenue": 7, "/invoices": 11})
	defer api.Close()
	n := newNode(t)
	n.env = []string{exampleapi.EnvVar + "=" + api.URL}
	n.start()

	seedScenarios(t, func() *nodeProc { return n })

	if err := n.stop(); err != nil {
		t.Fatalf("SIGTERM: %v\n%s", err, n.log())
	}
}

// waitState runs `rivetctl call ACTOR KEY getState` until it prints want
// (compared as JSON).
func waitState(t *testing.T, n *nodeProc, actor, key string, within time.Duration, want string) {
	t.Helper()
	var exp any
	if err := json.Unmarshal([]byte(want), &exp); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(within)
	for {
		out, errOut, code := n.rivetctl("call", actor, key, "getState")
		var got any
		if code == 0 && json.Unmarshal([]byte(out), &got) == nil && reflect.DeepEqual(got, exp) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s %s getState = %q (stderr %q, exit %d), want %s within %v; node log:\n%s", actor, key, out, errOut, code, want, within, n.log())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// seedScenarios runs each seed pattern's scenario with rivetctl, each
// command against the node pick returns (on a cluster, a different one each
// time, so most calls are forwarded).
func seedScenarios(t *testing.T, pick func() *nodeProc) {
	t.Helper()
	send := func(actor, key, queue, body string) {
		t.Helper()
		n := pick()
		if out, errOut, code := n.rivetctl("send", actor, key, queue, body); code != 0 {
			t.Fatalf("rivetctl send %s %s %s: %q (stderr %q, exit %d)", actor, key, queue, out, errOut, code)
		}
	}

	// Timers: the reminder fires after its time.
	sent := time.Now()
	send("reminderActor", "main", "reminders", fmt.Sprintf(`{"text":"send weekly report","at":%d}`, sent.Add(time.Second).UnixMilli()))
	waitState(t, pick(), "reminderActor", "main", 15*time.Second, `{"fired":["send weekly report"]}`)
	if since := time.Since(sent); since < time.Second {
		t.Fatalf("reminder fired after %v, before its time", since)
	}

	// Scatter-gather across actors: 2 to three shards, each ×10.
	send("scatterGatherActor", "main", "scatter", `{"input":2}`)
	waitState(t, pick(), "scatterGatherActor", "main", 15*time.Second, `{"lastSum":60}`)

	// Coordinator -> worker RPC.
	send("coordinatorActor", "main", "task", `{"taskId":"t1","workerId":"w1","value":21}`)
	waitState(t, pick(), "coordinatorActor", "main", 15*time.Second, `{"lastTaskId":"t1","lastResult":42}`)

	// Join: the dashboard reads the node's EXAMPLES_API_URL.
	send("dashboardActor", "main", "refresh", `{}`)
	waitState(t, pick(), "dashboardActor", "main", 15*time.Second, `{"summary":{"users":3,"orders":5,"revenue":7}}`)

	// Timeouts and retries: the charge is saved.
	send("timeoutActor", "main", "charge", `{"orderId":"o1"}`)
	waitState(t, pick(), "timeoutActor", "main", 15*time.Second, `{"lastChargeId":"charge-o1"}`)

	// Race: a bid sells the item before the 24 h expiry.
	send("auctionActor", "item-123", "bids", `{"amount":100}`)
	waitState(t, pick(), "auctionActor", "item-123", 15*time.Second, `{"result":"sold"}`)

	// Fan-out / fan-in: 3 + 5 + 11.
	send("fanInOutActor", "main", "refresh", `{}`)
	waitState(t, pick(), "fanInOutActor", "main", 15*time.Second, `{"total":19}`)

	// Child orchestration: three children, each ×3.
	send("orchestratorActor", "main", "batch", `{"payload":2}`)
	waitState(t, pick(), "orchestratorActor", "main", 15*time.Second, `{"lastTotal":18}`)

	// Timeout + fallback: the primary takes 500 ms, the timeout 200 ms.
	send("timeoutFallbackActor", "main", "request", `{}`)
	waitState(t, pick(), "timeoutFallbackActor", "main", 15*time.Second, `{"lastSource":"fallback","lastValue":"fallback"}`)

	// Poll + backoff: healthy at the third attempt, backoff reset.
	deadline := time.Now().Add(20 * time.Second)
	for {
		out, _, code := pick().rivetctl("call", "pollBackoffActor", "main", "getState")
		var st struct {
			Attempts  int
			BackoffMs int
			Status    string
		}
		if code == 0 && json.Unmarshal([]byte(out), &st) == nil && st.Attempts >= 3 && st.Status == "healthy" && st.BackoffMs == 100 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("pollBackoffActor did not become healthy: %s", out)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// Its loop never ends: an operator cancels it, and every node then
	// says so.
	if out, errOut, code := pick().rivetctl("workflow", "cancel", "pollBackoffActor", "main", "--reason", "done polling"); code != 0 ||
		(out != "workflow cancelled (it was sleeping)" && out != "workflow cancelled (it was running)") {
		t.Fatalf("rivetctl workflow cancel: %q (stderr %q, exit %d)", out, errOut, code)
	}
	for range 2 {
		n := pick()
		out, errOut, code := n.rivetctl("history", "pollBackoffActor", "main")
		if code != 0 || !strings.HasPrefix(out, "workflow  cancelled\nerror     cancelled: done polling\n") {
			t.Fatalf("history after the cancel: %q (stderr %q, exit %d)", out, errOut, code)
		}
	}
}
