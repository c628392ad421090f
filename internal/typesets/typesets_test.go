package typesets

import (
	"reflect"
	"testing"
)

func TestDifferences(t *testing.T) {
	got := Differences(map[string][]string{
		"a": {"counter"},
		"b": {"counter", "order"},
		"c": {"counter", "order", "zeta"},
		"d": {},
	})
	want := []Diff{
		{Type: "counter", On: []string{"a", "b", "c"}, NotOn: []string{"d"}},
		{Type: "order", On: []string{"b", "c"}, NotOn: []string{"a", "d"}},
		{Type: "zeta", On: []string{"c"}, NotOn: []string{"a", "b", "d"}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Differences = %+v, want %+v", got, want)
	}
	if s := Format(got[1:2]); s != "order on b, c, not on a, d" {
		t.Errorf("Format = %q", s)
	}
	if d := Differences(map[string][]string{"a": {"x", "y"}, "b": {"y", "x"}}); d != nil {
		t.Errorf("same types: %+v, want none", d)
	}
	if m := Missing([]string{"order", "counter", "zeta"}, []string{"counter"}); !reflect.DeepEqual(m, []string{"order", "zeta"}) {
		t.Errorf("Missing = %q", m)
	}
}

func TestListIsCutAfterEight(t *testing.T) {
	if s := List([]string{"a", "b"}); s != "a, b" {
		t.Errorf("List of 2 = %q", s)
	}
	if s := List([]string{"a", "b", "c", "d", "e", "f", "g", "h", "i", "j"}); s != "a, b, c, d, e, f, g, h and 2 more" {
		t.Errorf("List of 10 = %q", s)
	}
}
