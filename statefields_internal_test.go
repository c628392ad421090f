package rivet

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
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

// The shapes a state's type may have that change which names
// encoding/json decodes: embedded structs (by value, by pointer,
// unexported, one type embedded twice at one depth), names two embedded
// structs both promote at one depth (which it then decodes into
// neither), tags with and without a name, "-" and "-,", a tag name it
// does not take (a quote), a depth-0 field hiding a promoted one, names
// outside ASCII. Every field takes any JSON value, so that a decode that
// matched a name shows.
type fuzzTwice struct{ Twice any }

type fuzzStateA struct {
	fuzzTwice
	A      any
	Shared any
	Tagged any `json:"tagged"`
	Deep   any `json:"deep"`
}

type FuzzStateB struct {
	fuzzTwice
	B      any
	Shared any
}

type FuzzStateAny any

type fuzzState struct {
	fuzzStateA
	*FuzzStateB
	FuzzStateAny
	Name    any `json:"name,omitempty"`
	Renamed any `json:"new_name"`
	Skipped any `json:"-"`
	Dash    any `json:"-,"`
	Plain   any
	hidden  any
	Straße  any
	Quoted  any `json:"a'b"`
	Deep    any
	Micro   any `json:"µs"`
	Sigma   any `json:"σ"`
	Kelvin  any `json:"kelvin"`
	Long    any `json:"İd"`
}

// stateFields lists exactly the top-level names of a stored state that
// encoding/json skips when it decodes the state: a name it lists and
// encoding/json decodes is a false warning to a user; a name it misses
// and encoding/json skips is a field dropped for good by the next commit
// without the warning that is there to tell. Checked against what
// encoding/json does with each name of the document, and with name.
func FuzzStateFields(f *testing.F) {
	f.Add([]byte(`{"created":1,"TAGS":["x"],"level":2,"name":"n","new_name":3,"Renamed":4,"Skipped":5,"-":6,"plain":true,"hidden":7,"gone":{"deep":[1,2]}}`), "STRASSE")
	f.Add([]byte(` {"a":1,"shared":2,"b":3,"TAGGED":4,"deep":5,"fuzzstateany":6,"a'b":7,"quoted":8} `), "straße")
	f.Add([]byte(`{"µS":1,"ΜS":2,"Σ":3,"ς":4,"\u212aelvin":5,"i̇d":6,"name":7,"name":8}`), "ſ")
	f.Add([]byte(`[{"a":1}]`), "\xff")
	f.Add([]byte(`{"id":1,"İD":2,"ID":3,"i̇d":4}`), "İ")
	f.Add([]byte(`{"twice":1,"fuzzTwice":2}`), "Twice")
	f.Add([]byte(`{"a":1,"b":`), "")
	f.Add([]byte("{\"\x83\":0}"), "0") // a key that is not UTF-8 decodes as U+FFFD
	check := stateFields(reflect.TypeFor[fuzzState]())
	// decodes reports whether encoding/json puts the value of key
	// somewhere in a fuzzState.
	decodes := func(t *testing.T, key string) bool {
		k, _ := json.Marshal(key)
		var s fuzzState
		if err := json.Unmarshal([]byte(`{`+string(k)+`:1}`), &s); err != nil {
			t.Fatalf("decode of %q: %v", key, err)
		}
		return !reflect.ValueOf(s).IsZero()
	}
	f.Fuzz(func(t *testing.T, data []byte, name string) {
		docs := [][]byte{data}
		if k, err := json.Marshal(name); err == nil {
			docs = append(docs, []byte(`{`+string(k)+`:[{"x":null}],"zz":2}`))
		}
		for _, doc := range docs {
			unknown := check(doc)
			var keys map[string]json.RawMessage
			if json.Unmarshal(doc, &keys) != nil {
				continue // not an object: no decode to compare with
			}
			dec := json.NewDecoder(bytes.NewReader(doc))
			dec.Token()
			var all []string
			for dec.More() {
				tok, _ := dec.Token()
				key := tok.(string)
				var skip json.RawMessage
				dec.Decode(&skip)
				all = append(all, key)
				if listed, skipped := slices.Contains(unknown, key), !decodes(t, key); listed != skipped {
					t.Errorf("%s: stateFields lists %q: %v; encoding/json skips it: %v", doc, key, listed, skipped)
				}
			}
			for _, key := range unknown {
				if !slices.Contains(all, key) {
					t.Errorf("%s: stateFields lists %q, which it does not have", doc, key)
				}
			}
		}
	})
}

type nestedItem struct {
	SKU   string          `json:"sku"`
	Price *nestedPrice    `json:"price"`
	At    time.Time       `json:"at"`
	Extra any             `json:"extra"`
	Raw   json.RawMessage `json:"raw"`
}

type nestedPrice struct {
	Cents int `json:"cents"`
}

type nestedTree struct {
	Label    string       `json:"label"`
	Children []nestedTree `json:"children"`
}

type nestedState struct {
	stateBase
	Profile struct {
		FullName string `json:"full_name"`
	} `json:"profile"`
	Items []nestedItem           `json:"items"`
	ByID  map[string]*nestedItem `json:"by_id"`
	Grid  [][]nestedPrice        `json:"grid"`
	Tree  nestedTree             `json:"tree"`
	Own   stateCustom            `json:"own"`
}

// A field renamed inside a nested struct (a struct's, or a slice's or a
// map's elements) is dropped by the next commit as a top-level one is:
// it was dropped without the warning, which looked at the top level only.
func TestStateFieldsListsNestedFieldsByPath(t *testing.T) {
	f := stateFields(reflect.TypeFor[nestedState]())
	stored := `{"created":1,"tags":null,"gone":{"x":1},
		"profile":{"name":"bob","FULL_NAME":"b"},
		"items":[{"sku":"a","price":{"cents":1,"currency":"EUR"},"at":"2026-01-01T00:00:00Z","extra":{"any":1},"raw":{"any":2}},{"sku":"b","qty":2,"price":null},{"qty":3}],
		"by_id":{"k":{"s\u006bu":"a","price":{"amount":1}},"j":null},
		"grid":[[{"cents":1,"old":2}],[]],
		"tree":{"label":"r","children":[{"label":"c","children":[{"name":"deep"}]}]},
		"own":{"anything":1}}`
	var s nestedState
	if err := json.Unmarshal([]byte(stored), &s); err != nil {
		t.Fatal(err)
	}
	want := []string{"gone", "profile.name", "items[].price.currency", "items[].qty", "by_id.*.price.amount", "grid[][].old", "tree.children[].children[].name"}
	if got := f([]byte(stored)); !slices.Equal(got, want) {
		t.Fatalf("unknown fields = %q, want %q", got, want)
	}
	var many strings.Builder
	many.WriteString(`{"items":[`)
	for i := range 100 {
		if i > 0 {
			many.WriteByte(',')
		}
		fmt.Fprintf(&many, `{"f%d":1}`, i)
	}
	many.WriteString(`]}`)
	if got := f([]byte(many.String())); len(got) != maxUnknownFields {
		t.Fatalf("%d unknown fields listed, want the first %d", len(got), maxUnknownFields)
	}
}

type recNode struct {
	Label string    `json:"label"`
	Kids  []recNode `json:"kids"`
	ByKey map[string]recNode
}

type recSliceFirst struct {
	Trees []recNode `json:"trees"`
}

type recBoth struct {
	A []recNode `json:"a"`
	B recNode   `json:"b"`
	M map[string][]recNode
}

// A recursive type met through a slice or a map first was not looked
// into past its first level, and with two ways to it (A and B), which
// fields were checked depended on the order a map gave its type's fields
// in, so that two nodes could disagree.
func TestStateFieldsLooksIntoARecursiveTypeMetThroughASliceFirst(t *testing.T) {
	doc := []byte(`{"trees":[{"label":"x","kids":[{"label":"y","gone":1,"ByKey":{"k":{"old":1}}}]}],
		"a":[{"kids":[{"gone":1}]}],"b":{"kids":[{"gone":2}]},"m":{"k":[{"kids":[{"gone":3}]}]}}`)
	var v1 recSliceFirst
	var v2 recBoth
	if json.Unmarshal(doc, &v1) != nil || json.Unmarshal(doc, &v2) != nil {
		t.Fatal("does not decode")
	}
	if got, want := stateFields(reflect.TypeFor[recSliceFirst]())(doc), []string{"a", "b", "m", "trees[].kids[].gone", "trees[].kids[].ByKey.*.old"}; !slices.Equal(got, want) {
		t.Fatalf("unknown fields = %q, want %q", got, want)
	}
	want := []string{"trees", "a[].kids[].gone", "b.kids[].gone", "m.*[].kids[].gone"}
	for i := range 200 {
		if got := stateFields(reflect.TypeFor[recBoth]())(doc); !slices.Equal(got, want) {
			t.Fatalf("shape %d: unknown fields = %q, want %q", i, got, want)
		}
	}
}

// Renamed fields of a list's elements filled the list of names before a
// renamed top-level field was met, which then went unnamed.
func TestStateFieldsListsTopLevelFieldsFirst(t *testing.T) {
	var b strings.Builder
	b.WriteString(`{"items":[`)
	for i := range 40 {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"f%d":1}`, i)
	}
	b.WriteString(`],"balance":100,"items2":[{"x":1}]}`)
	got := stateFields(reflect.TypeFor[nestedState]())([]byte(b.String()))
	if len(got) != maxUnknownFields || got[0] != "balance" || got[1] != "items2" || got[2] != "items[].f0" || got[len(got)-1] != fmt.Sprintf("items[].f%d", maxUnknownFields-3) {
		t.Fatalf("unknown fields = %q, want the top-level ones first, then the first nested ones, %d in all", got, maxUnknownFields)
	}
}

// money stores a field its decode does not read ("display"): nothing is
// lost, as its MarshalJSON writes it again.
type money struct {
	Cents int `json:"cents"`
}

func (m money) MarshalJSON() ([]byte, error) {
	return fmt.Appendf(nil, `{"cents":%d,"display":"%d.%02d EUR"}`, m.Cents, m.Cents/100, m.Cents%100), nil
}

type shop struct {
	Price  money   `json:"price"`
	Prices []money `json:"prices"`
}

// A type that encodes itself stores keys its fields need not name: they
// were listed as dropped, a false warning on every load.
func TestStateFieldsDoesNotLookIntoATypeThatEncodesItself(t *testing.T) {
	stored, err := json.Marshal(shop{Price: money{150}, Prices: []money{{1}}})
	if err != nil {
		t.Fatal(err)
	}
	var s shop
	if err := json.Unmarshal(stored, &s); err != nil {
		t.Fatal(err)
	}
	if got := stateFields(reflect.TypeFor[shop]())(stored); len(got) != 0 {
		t.Fatalf("unknown fields of %s = %q, want none", stored, got)
	}
	if stateFields(reflect.TypeFor[money]()) != nil {
		t.Fatal("a state type that encodes itself gets a check: its own rules apply")
	}
}

type chain struct {
	Next *chain `json:"next"`
	V    int    `json:"v"`
}

type chainState struct {
	Head *chain `json:"head"`
}

// deepChain is a chain's JSON depth levels deep, with a renamed field at
// its end.
func deepChain(depth int) []byte {
	var b bytes.Buffer
	b.WriteString(`{"head":`)
	for range depth {
		b.WriteString(`{"v":1,"next":`)
	}
	b.WriteString(`{"old":1}`)
	b.WriteString(strings.Repeat("}", depth+1))
	return b.Bytes()
}

// A path string was made for each value descended into: a deep state's
// load cost its depth squared (a 9000-deep chain: 250 ms and 220 MB).
func TestStateFieldsMakesAPathForAListedFieldOnly(t *testing.T) {
	const depth = 9000
	doc := deepChain(depth)
	var s chainState
	if err := json.Unmarshal(doc, &s); err != nil {
		t.Fatal(err)
	}
	f := stateFields(reflect.TypeFor[chainState]())
	var got []string
	allocs := testing.AllocsPerRun(5, func() { got = f(doc) })
	if want := "head" + strings.Repeat(".next", depth) + ".old"; len(got) != 1 || got[0] != want {
		t.Fatalf("unknown fields = %.80q..., want one, %.80q...", got, want)
	}
	if allocs > 100 {
		t.Fatalf("%v allocations for a %d-deep chain: one per level?", allocs, depth)
	}
}

func BenchmarkStateFieldsDeepChain(b *testing.B) {
	doc := deepChain(9000)
	f := stateFields(reflect.TypeFor[chainState]())
	b.ReportAllocs()
	b.SetBytes(int64(len(doc)))
	for b.Loop() {
		f(doc)
	}
}
