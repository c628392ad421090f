package rivet_test

import (
	"strings"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
)

// ownDefinition is a Definition of one's own, not an Actor[S]: its Spec
// is whatever it returns.
type ownDefinition struct{ idle time.Duration }

func (d ownDefinition) Spec() (*rivet.Spec, error) {
	sp, err := rivet.Actor[struct{}]{Name: "own"}.Spec()
	if err != nil {
		return nil, err
	}
	sp.IdleTimeout = d.idle
	return sp, nil
}

// Setup refuses a negative IdleTimeout of any Definition, not only of an
// Actor[S] (whose Spec refuses it): the runtime read it as the default.
func TestSetupRefusesANegativeIdleTimeoutOfAnyDefinition(t *testing.T) {
	if _, err := rivet.Setup(ownDefinition{idle: -time.Second}); err == nil || !strings.Contains(err.Error(), "actor own: IdleTimeout is negative") {
		t.Errorf("Setup of a Definition whose Spec has IdleTimeout -1s: %v; want it refused as negative", err)
	}
	if _, err := rivet.Setup(ownDefinition{idle: time.Second}); err != nil {
		t.Errorf("Setup of a Definition whose Spec has IdleTimeout 1s: %v", err)
	}
}
