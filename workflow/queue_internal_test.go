package workflow

import (
	"encoding/json"
	"reflect"
	"slices"
	"testing"
)

// queuesOf picks, for a receive without names, the queues of its type
// (pointers or not) and the untyped ones; every queue (nil) for an open
// type or one no queue declares.
func TestQueuesOfAReceiveWithoutNames(t *testing.T) {
	type checkout struct{ Item string }
	type confirm struct{ OK bool }
	type other struct{}
	types := map[string]reflect.Type{
		"checkout": reflect.TypeFor[checkout](),
		"confirm":  reflect.TypeFor[*confirm](),
		"raw":      reflect.TypeFor[json.RawMessage](),
		"any":      reflect.TypeFor[any](),
		"unmade":   nil, // a QueueType not made by QueueOf
	}
	for _, c := range []struct {
		t    reflect.Type
		want []string
	}{
		{reflect.TypeFor[checkout](), []string{"any", "checkout", "raw", "unmade"}},
		{reflect.TypeFor[*checkout](), []string{"any", "checkout", "raw", "unmade"}},
		{reflect.TypeFor[confirm](), []string{"any", "confirm", "raw", "unmade"}},
		{reflect.TypeFor[other](), nil},
		{reflect.TypeFor[json.RawMessage](), nil},
		{reflect.TypeFor[*json.RawMessage](), nil},
		{reflect.TypeFor[any](), nil},
	} {
		if got := queuesOf(c.t, types); !slices.Equal(got, c.want) {
			t.Errorf("queuesOf(%v) = %v, want %v", c.t, got, c.want)
		}
	}
	if got := queuesOf(reflect.TypeFor[checkout](), nil); got != nil {
		t.Errorf("queuesOf without the types = %v, want every queue (nil)", got)
	}
}
