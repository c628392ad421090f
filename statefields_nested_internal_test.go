package rivet

import (
	"bytes"
	"encoding/json"
	"errors"
	"math/rand"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// The types of FuzzStateFieldsNested: nested structs by value, by
// pointer, in slices, arrays, maps (of string and of int keys), slices
// of slices, a recursive type met through a slice first and as a field,
// types that decode themselves, interfaces, names outside ASCII, a name
// two fields fold to alike (dup and DUP).
type nLeaf struct {
	X    any `json:"x"`
	Y    any
	Pad  any `json:"-"`
	priv any
}

type nCustom struct{ called bool }

func (c *nCustom) UnmarshalJSON([]byte) error { c.called = true; return nil }

type NEmb struct {
	E    any `json:"e"`
	Leaf nLeaf
}

type nEmbPtr struct{ P any }

type nTree struct {
	L    any     `json:"l"`
	Kids []nTree `json:"kids"`
}

type nState struct {
	NEmb
	*nEmbPtr
	Top    any                `json:"top"`
	One    nLeaf              `json:"one"`
	PtrOne *nLeaf             `json:"ptr"`
	List   []nLeaf            `json:"list"`
	Arr    [9]nLeaf           `json:"arr"`
	ByID   map[string]*nLeaf  `json:"by_id"`
	ByInt  map[int]nLeaf      `json:"by_int"`
	Nested map[string][]nLeaf `json:"nested"`
	Raw    json.RawMessage    `json:"raw"`
	Cust   nCustom            `json:"cust"`
	Iface  any                `json:"iface"`
	Trees  []nTree            `json:"trees"`
	Tree   nTree              `json:"tree"`
	Grid   [][]nLeaf          `json:"grid"`
	Straße any                `json:"straße"`
	Kelvin any                `json:"kelvin"`
	Quote  any                `json:"a'b"`
	Dup1   any                `json:"dup"`
	DUP    nLeaf
}

// oracleSet reports whether decoding put anything in v.
func oracleSet(v reflect.Value) bool {
	switch v.Kind() {
	case reflect.Interface:
		return !v.IsNil()
	case reflect.Pointer:
		return !v.IsNil() && oracleSet(v.Elem())
	case reflect.Struct:
		if v.Type() == reflect.TypeFor[nCustom]() {
			return v.Field(0).Bool()
		}
		for i := range v.NumField() {
			if oracleSet(v.Field(i)) {
				return true
			}
		}
		return false
	case reflect.Slice:
		if v.Type() == reflect.TypeFor[json.RawMessage]() {
			return v.Len() > 0
		}
		fallthrough
	case reflect.Array:
		for i := range v.Len() {
			if oracleSet(v.Index(i)) {
				return true
			}
		}
		return false
	case reflect.Map:
		for _, k := range v.MapKeys() {
			if oracleSet(v.MapIndex(k)) {
				return true
			}
		}
		return false
	}
	return !v.IsZero()
}

// oracleField asks encoding/json what it does with key in a struct of
// type t, by decoding {key:1} into one: known if it decodes the value
// (or refuses a number there), and next, the type of the field if that
// is one that takes an object or an array.
func oracleField(t reflect.Type, key string) (next reflect.Type, known bool) {
	k, _ := json.Marshal(key)
	v := reflect.New(t)
	err := json.Unmarshal([]byte("{"+string(k)+":1}"), v.Interface())
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) && te.Value == "number" {
		return te.Type, true
	}
	if err != nil {
		return nil, true
	}
	return nil, oracleSet(v.Elem())
}

// oracleContainer reports whether encoding/json refuses a number for a
// t: a struct, a slice, an array or a map it looks into.
func oracleContainer(t reflect.Type) bool {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	err := json.Unmarshal([]byte("1"), reflect.New(t).Interface())
	var te *json.UnmarshalTypeError
	return errors.As(err, &te) && te.Value == "number"
}

type oraclePath struct {
	path string
	top  bool
}

// oracle walks a document's tokens against t, and adds to out the path
// of each field encoding/json skips, as stateFields names it. An array's
// elements past its length, which a decode drops whole, are walked as
// the others, as stateFields does.
func oracle(t reflect.Type, dec *json.Decoder, path string, out *[]oraclePath) {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	tok, err := dec.Token()
	if err != nil {
		panic(err)
	}
	d, ok := tok.(json.Delim)
	if !ok {
		return
	}
	join := func(key string) string {
		if path == "" {
			return key
		}
		return path + "." + key
	}
	switch d {
	case '{':
		for dec.More() {
			kt, _ := dec.Token()
			key := kt.(string)
			switch {
			case t == nil:
				oracle(nil, dec, "", out)
			case t.Kind() == reflect.Struct:
				next, known := oracleField(t, key)
				if !known {
					*out = append(*out, oraclePath{join(key), path == ""})
					oracle(nil, dec, "", out)
				} else if next != nil && next.Kind() != reflect.Interface {
					oracle(next, dec, join(key), out)
				} else {
					oracle(nil, dec, "", out)
				}
			case t.Kind() == reflect.Map && oracleContainer(t.Elem()):
				oracle(t.Elem(), dec, path+".*", out)
			default:
				oracle(nil, dec, "", out)
			}
		}
		dec.Token()
	case '[':
		for dec.More() {
			if t != nil && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) && oracleContainer(t.Elem()) {
				oracle(t.Elem(), dec, path+"[]", out)
			} else {
				oracle(nil, dec, "", out)
			}
		}
		dec.Token()
	}
}

var oracleVocab = []string{"x", "X", "y", "Y", "pad", "Pad", "priv", "e", "E", "Leaf", "leaf", "LEAF", "p", "P", "top", "one", "ONE", "ptr", "list", "arr", "by_id", "by_int", "nested", "raw", "cust", "iface", "trees", "tree", "kids", "Kids", "l", "grid", "straße", "STRASSE", "\u212aelvin", "kelvin", "a'b", "dup", "DUP", "Dup", "gone", "old", "NEmb", "nEmbPtr", "Top", "a\"b", "ſ", "\xff", "1", "-2"}

// oracleDoc writes a random JSON value of keys of oracleVocab.
func oracleDoc(r *rand.Rand, depth int, b *bytes.Buffer) {
	n := r.Intn(10)
	if depth > 5 {
		n = 0
	}
	switch {
	case n < 3:
		b.WriteString([]string{"1", "null", `"s"`, "true", `"q\"\\"`}[r.Intn(5)])
	case n < 7:
		b.WriteString(strings.Repeat(" ", r.Intn(2)) + "{")
		for i := range r.Intn(4) {
			if i > 0 {
				b.WriteString(",")
			}
			k := oracleVocab[r.Intn(len(oracleVocab))]
			kb, _ := json.Marshal(k)
			switch {
			case k == "\xff":
				kb = []byte("\"\xff\"")
			case r.Intn(4) == 0 && !strings.Contains(strconv.QuoteToASCII(k), `\x`):
				kb = []byte(strconv.QuoteToASCII(k)) // \u escapes
			}
			b.Write(kb)
			b.WriteString(" : ")
			oracleDoc(r, depth+1, b)
		}
		b.WriteString("}")
	default:
		b.WriteString("[")
		for i := range r.Intn(4) {
			if i > 0 {
				b.WriteString(", ")
			}
			oracleDoc(r, depth+1, b)
		}
		b.WriteString("]")
	}
}

// stateFields lists the paths, nested ones included, of the fields of a
// stored state that encoding/json skips, as a walk of its tokens that
// asks encoding/json about each key finds them: a path it lists that a
// decode reads is a false warning; a path it misses is a field dropped
// without one. Not compared: what is under "dup"/"DUP", two names that
// fold alike, which stateFields does not look into. Over the cap, the
// paths it lists are some of those, the top-level ones first.
func FuzzStateFieldsNested(f *testing.F) {
	f.Add([]byte(`{"trees":[{"l":1,"kids":[{"l":2,"gone":1}]}],"tree":{"kids":[{"kids":[{"old":1}]}]}}`), int64(1))
	f.Add([]byte(`{"list":[{"x":1,"gone":2}],"arr":[{"Y":1,"old":1}],"by_id":{"k":{"PAD":1},"j":null},"by_int":{"1":{"leaf":1}},"nested":{"a":[{"priv":1}]}}`), int64(2))
	f.Add([]byte(`{"grid":[[{"x":1,"gone":1}],[]],"NEmb":{"x":1},"leaf":{"gone":1},"e":1,"p":1,"ptr":{"\u212a":1},"one":{"\xff":1}}`), int64(3))
	f.Add([]byte(`{"raw":{"gone":1},"cust":{"gone":1},"iface":{"gone":1},"DUP":{"gone":1},"dup":1}`), int64(4))
	check := stateFields(reflect.TypeFor[nState]())
	f.Fuzz(func(t *testing.T, data []byte, seed int64) {
		var gen bytes.Buffer
		oracleDoc(rand.New(rand.NewSource(seed)), 0, &gen)
		for _, doc := range [][]byte{data, gen.Bytes()} {
			var s nState
			if json.Unmarshal(doc, &s) != nil {
				continue
			}
			var want []oraclePath
			oracle(reflect.TypeFor[nState](), json.NewDecoder(bytes.NewReader(doc)), "", &want)
			var all, top []string
			for _, w := range want {
				first, _, _ := strings.Cut(strings.Split(w.path, "[]")[0], ".")
				if slices.Contains(all, w.path) || !w.top && strings.EqualFold(first, "dup") {
					continue
				}
				all = append(all, w.path)
				if w.top {
					top = append(top, w.path)
				}
			}
			got := check(doc)
			for _, g := range got {
				if !slices.Contains(all, g) {
					t.Errorf("%s: stateFields lists %q, which encoding/json decodes (it skips %q)", doc, g, all)
				}
			}
			if len(all) <= maxUnknownFields {
				for _, w := range all {
					if !slices.Contains(got, w) {
						t.Errorf("%s: stateFields misses %q, which encoding/json skips (it lists %q)", doc, w, got)
					}
				}
				continue
			}
			if len(got) != maxUnknownFields {
				t.Errorf("%s: stateFields lists %d of %d fields, want %d", doc, len(got), len(all), maxUnknownFields)
			}
			if n := min(len(top), maxUnknownFields); !slices.Equal(got[:n], top[:n]) {
				t.Errorf("%s: stateFields lists %q, want the top-level %q first", doc, got, top[:n])
			}
		}
	})
}
