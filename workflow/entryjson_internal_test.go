package workflow

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"
)

// MarshalEntry writes every entry exactly as encoding/json does: entries
// with every field filled at random (by reflection, so that a field added
// to Entry and not to the encoder fails here), strings and raw values
// that need escaping or compacting, times in other zones and out of
// range.
func TestMarshalEntryMatchesEncodingJSON(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	fast := 0
	const n = 20000
	for i := range n {
		var e Entry
		fill(rng, reflect.ValueOf(&e).Elem(), 0)
		got, gotErr := MarshalEntry(&e)
		want, wantErr := json.Marshal(&e)
		if (gotErr != nil) != (wantErr != nil) || !bytes.Equal(got, want) {
			t.Fatalf("entry %d %+v:\n got %s (%v)\nwant %s (%v)", i, e, got, gotErr, want, wantErr)
		}
		if _, ok := appendEntry(nil, &e); ok {
			fast++
		}
	}

	if fast < n/20 || fast == n {
		t.Fatalf("%d of %d entries took the direct path: the test does not exercise both", fast, n)
	}
}

var (
	// Samples that encoding/json writes as they are, then some it escapes
	// or compacts: fill picks one of the latter one time in eight.
	plainStrings = []string{"a", "loop/~3/charge-card", "with space", "completed"}
	oddStrings   = []string{`q"uote`, `back\slash`, "<b>", "a&b", "ünï", "\u2028", "tab\t", "\x01", "\xff"}
	plainRaws    = []string{"1", "null", `{"a":1}`, "[1,2]", `"x"`}
	oddRaws      = []string{`{"a": 1}`, `"<x>"`, `"é"`, `"\u2028"`, "\n2", "{"}
	sampleZones  = []*time.Location{time.UTC, time.FixedZone("x", 3600+30*60), time.FixedZone("y", -7*3600), time.FixedZone("day", 24*3600), time.FixedZone("-day", -25*3600)}
)

// fill sets v to a random value, often the zero one.
func fill(rng *rand.Rand, v reflect.Value, depth int) {
	if depth > 0 && rng.IntN(3) == 0 {
		return // zero
	}
	if k := v.Kind(); (k == reflect.Pointer || k == reflect.Slice || k == reflect.Map) && v.Type() != reflect.TypeFor[json.RawMessage]() && rng.IntN(3) != 0 {
		return // nil more often: most entries have no messages, branches or errors
	}
	switch v.Type() {
	case reflect.TypeFor[time.Time]():
		var tm time.Time
		switch rng.IntN(4) {
		case 0:
			tm = time.Unix(rng.Int64N(4e9), 0)
		case 1:
			tm = time.Unix(rng.Int64N(4e9), rng.Int64N(1e9))
		case 2:
			if rng.IntN(8) == 0 {
				tm = time.Date(10000+rng.IntN(5), 1, 1, 0, 0, 0, 0, time.UTC) // MarshalJSON refuses it
			}
		default:
			tm = time.Unix(rng.Int64N(4e9), rng.Int64N(1e9)).In(sampleZones[rng.IntN(len(sampleZones))])
		}
		v.Set(reflect.ValueOf(tm))
		return
	case reflect.TypeFor[json.RawMessage]():
		v.SetBytes([]byte(pick(rng, plainRaws, oddRaws)))
		return
	}
	switch v.Kind() {
	case reflect.String:
		v.SetString(pick(rng, plainStrings, oddStrings))
	case reflect.Int, reflect.Int64, reflect.Int32:
		v.SetInt([]int64{1, -5, 123456789, 1 << 30}[rng.IntN(4)])
	case reflect.Uint64, reflect.Uint32, reflect.Uint:
		v.SetUint([]uint64{1, 7, 1 << 30}[rng.IntN(3)])
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				fill(rng, v.Field(i), depth+1)
			}
		}
	case reflect.Pointer:
		if depth < 3 {
			p := reflect.New(v.Type().Elem())
			fill(rng, p.Elem(), depth+1)
			v.Set(p)
		}
	case reflect.Slice:
		if depth < 3 {
			s := reflect.MakeSlice(v.Type(), 1+rng.IntN(2), 3)
			for i := range s.Len() {
				fill(rng, s.Index(i), depth+1)
			}
			v.Set(s)
		}
	case reflect.Map:
		if depth < 3 {
			m := reflect.MakeMap(v.Type())
			k := reflect.New(v.Type().Key()).Elem()
			fill(rng, k, depth+1)
			e := reflect.New(v.Type().Elem()).Elem()
			fill(rng, e, depth+1)
			m.SetMapIndex(k, e)
			v.Set(m)
		}
	default:
		panic("fill: no sample for " + v.Type().String())
	}
}

func pick(rng *rand.Rand, plain, odd []string) string {
	if rng.IntN(8) == 0 {
		return odd[rng.IntN(len(odd))]
	}
	return plain[rng.IntN(len(plain))]
}
