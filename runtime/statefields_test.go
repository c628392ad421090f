package runtime_test

import (
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/runtime"
)

type profileV1 struct {
	Name string `json:"name"`
	Age  int    `json:"age"`
}

type profileV2 struct {
	Name  string `json:"name"`
	Years int    `json:"years"`
}

func profileActor[S any](set func(*S)) rivet.Actor[S] {
	return rivet.Actor[S]{
		Name: "profile",
		Actions: rivet.Actions[S]{
			"set": rivet.Action0(func(c *rivet.ActionCtx[S]) (bool, error) { set(c.State); return true, nil }),
			"get": rivet.Query(func(c *rivet.ActionCtx[S]) (S, error) { return *c.State, nil }),
		},
	}
}

// A field renamed in the state's type (age -> years) leaves the stored
// values under the old name: a load skips them, and the actor's next
// commit deletes them for good. The node warns when it loads such a state,
// naming the fields, once a minute per actor type (every actor of the type
// has them), and says nothing of states that match their type.
func TestALoadOfAStateWithFieldsItsTypeLacksWarns(t *testing.T) {
	e := newEnv(t, counterReg(t, profileActor(func(s *profileV1) { s.Name, s.Age = "ada", 36 })), nil)
	for _, k := range []string{"a", "b"} {
		callJSON(t, e.host, "profile", k, "set")
	}
	// A restart with the same type loads the states quietly.
	core, logs := observer.New(zap.WarnLevel)
	e.cfg.Logger = zap.New(core)
	e.restart()
	callJSON(t, e.host, "profile", "a", "get")
	if n := logs.Len(); n != 0 {
		t.Fatalf("%d warnings loading a state that matches its type: %v", n, logs.All())
	}

	e.reg = counterReg(t, profileActor(func(s *profileV2) { s.Years++ }))
	core, logs = observer.New(zap.WarnLevel)
	e.cfg.Logger = zap.New(core)
	e.restart()
	if got := callJSON(t, e.host, "profile", "a", "get"); got != `{"name":"ada","years":0}` {
		t.Fatalf("get = %s", got)
	}
	warned := logs.FilterMessageSnippet("does not declare").All()
	if len(warned) != 1 {
		t.Fatalf("%d warnings after the first load, want 1: %v", len(warned), logs.All())
	}
	if f, ok := warned[0].ContextMap()["fields"].([]any); !ok || len(f) != 1 || f[0] != "age" {
		t.Fatalf("warning's fields = %#v, want [age]", warned[0].ContextMap()["fields"])
	}
	// Every actor of the type has them: the next load within the minute
	// is counted, not logged.
	callJSON(t, e.host, "profile", "b", "get")
	if n := len(logs.FilterMessageSnippet("does not declare").All()); n != 1 {
		t.Fatalf("%d warnings after a second actor's load, want still 1", n)
	}
	// Both loads are counted, for the metric a deploy's alert reads.
	if got := e.host.UnknownStateFieldLoads(); len(got) != 1 || got["profile"] != 2 {
		t.Fatalf("loads with unknown fields %v, want profile: 2", got)
	}
}

// callJSON calls action on the actor name/key, creating it if missing,
// and returns its result.
func callJSON(t *testing.T, h *runtime.Host, name, key, action string) string {
	t.Helper()
	out, err := call(t, h, name, key, action, true)
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}
