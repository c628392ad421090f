package rivet

import (
	"encoding/json"
	"reflect"
	"slices"
	"testing"
)

type stateBase struct {
	Created int `json:"created"`
	Tags    []string
}

type stateCustom struct{ v int }

func (s *stateCustom) UnmarshalJSON([]byte) error { return nil }

type stateFull struct {
	stateBase
	*StateExtra
	Name    string `json:"name,omitempty"`
	Renamed int    `json:"new_name"`
	Skipped int    `json:"-"`
	Dash    int    `json:"-,"`
	Plain   bool
	hidden  int
}

type StateExtra struct {
	Level int `json:"level"`
}

// The fields a stored state's JSON has and its type does not declare,
// matched as encoding/json matches them on decode.
func TestStateFieldsListsWhatADecodeSkips(t *testing.T) {
	f := stateFields(reflect.TypeFor[stateFull]())
	stored := `{"created":1,"TAGS":["x"],"level":2,"name":"n","new_name":3,"Renamed":4,"Skipped":5,"-":6,"plain":true,"hidden":7,"gone":{"deep":[1,2]}}`
	// It decodes, as a state whose type lost fields does.
	var s stateFull
	if err := json.Unmarshal([]byte(stored), &s); err != nil {
		t.Fatal(err)
	}
	got := f([]byte(stored))
	if want := []string{"Renamed", "Skipped", "hidden", "gone"}; !slices.Equal(got, want) {
		t.Fatalf("unknown fields = %q, want %q", got, want)
	}
	for _, data := range []string{`{"created":1,"name":"n"}`, `{}`, `null`, ``, ` {"plain": false} `} {
		if got := f([]byte(data)); len(got) != 0 {
			t.Fatalf("unknown fields of %s = %q, want none", data, got)
		}
	}
	if stateFields(reflect.TypeFor[stateCustom]()) != nil || stateFields(reflect.TypeFor[map[string]int]()) != nil || stateFields(reflect.TypeFor[int]()) != nil {
		t.Fatal("a type that decodes itself, or is not a struct, gets a check: its own rules apply")
	}
}
