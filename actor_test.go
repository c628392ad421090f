package rivet_test

import (
	"strings"
	"testing"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/workflow"
)

// A definition a node could not serve as written is refused when the
// registry is built, with the reason, rather than misbehaving at run time.
func TestSetupRefusesDefinitionsItCouldNotServe(t *testing.T) {
	queue := rivet.Queues{"jobs": rivet.QueueOf[int]()}
	cases := []struct {
		name string
		defs []rivet.Definition
		want string // in the error; "" for none
	}{
		{"queues without a workflow", []rivet.Definition{rivet.Actor[struct{}]{Name: "inbox", Queues: queue}},
			"declares queues but has no Run"},
		{"queues with a workflow", []rivet.Definition{rivet.Actor[struct{}]{Name: "inbox", Queues: queue,
			Run: func(*workflow.Ctx[struct{}]) error { return nil }}}, ""},
		{"no queues, no workflow", []rivet.Definition{rivet.Actor[struct{}]{Name: "plain"}}, ""},
		{"two of one name", []rivet.Definition{rivet.Actor[struct{}]{Name: "a"}, rivet.Actor[int]{Name: "a"}},
			`two actors named "a"`},
		{"bad queue name", []rivet.Definition{rivet.Actor[struct{}]{Name: "a", Queues: rivet.Queues{"a/b": rivet.QueueOf[int]()},
			Run: func(*workflow.Ctx[struct{}]) error { return nil }}}, "queue name"},
	}
	for _, c := range cases {
		_, err := rivet.Setup(c.defs...)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: got %v, want an error saying %q", c.name, err, c.want)
		}
	}
}
