package runtime

import (
	"encoding"
	"encoding/json"
	"reflect"
	"sync"
	"time"
)

// wholeInJSON caches stateWholeInJSON by the state's type.
var wholeInJSON sync.Map // reflect.Type -> bool

// stateWholeInJSON reports whether a state of type t (a *S) is all in its
// JSON: two whose encodings are equal are the same state, and a discard
// that finds the state's encoding equal to its restore point's may leave
// it as it is rather than decode it again (restoreState). Not so for a
// type with a part that encoding/json does not see (an unexported field, a
// `json:"-"` one, an embedded struct, whose fields may be hidden by
// another's), a part whose JSON does not say its Go type (an interface),
// or one that encodes or decodes itself (its own rules), time.Time aside
// (its JSON is its instant; its monotonic reading is not the state): the
// decode sets such a state's hidden parts as a failed turn at the top of
// the chain finds them, to their zero or to what the decoder makes.
//
// Nor does JSON say which parts share memory: a failed turn that made two
// parts one (s.B = s.A, equal before) keeps them so, where a decode would
// have made them apart again, and a later change to one shows in the
// other. Rare enough not to pay a decode per level of a chain for it, as
// the states it would exclude are most (any slice, map or pointer).
func stateWholeInJSON(t reflect.Type) bool {
	if t == nil {
		return false
	}
	if w, ok := wholeInJSON.Load(t); ok {
		return w.(bool)
	}
	w := typeWholeInJSON(t, map[reflect.Type]bool{})
	wholeInJSON.Store(t, w)
	return w
}

var (
	jsonMarshalerType   = reflect.TypeFor[json.Marshaler]()
	jsonUnmarshalerType = reflect.TypeFor[json.Unmarshaler]()
	textMarshalerType   = reflect.TypeFor[encoding.TextMarshaler]()
	textUnmarshalerType = reflect.TypeFor[encoding.TextUnmarshaler]()
)

// typeWholeInJSON is stateWholeInJSON's walk; seen holds the types being
// looked at, taken as whole until a part of theirs says otherwise (a
// recursive type).
func typeWholeInJSON(t reflect.Type, seen map[reflect.Type]bool) bool {
	if t == reflect.TypeFor[time.Time]() {
		return true
	}
	if seen[t] {
		return true
	}
	for _, it := range []reflect.Type{jsonMarshalerType, jsonUnmarshalerType, textMarshalerType, textUnmarshalerType} {
		if t.Implements(it) || reflect.PointerTo(t).Implements(it) {
			return false
		}
	}
	switch t.Kind() {
	case reflect.Bool, reflect.String,
		reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr,
		reflect.Float32, reflect.Float64:
		return true
	case reflect.Pointer, reflect.Slice, reflect.Array:
		seen[t] = true
		return typeWholeInJSON(t.Elem(), seen)
	case reflect.Map:
		seen[t] = true
		return typeWholeInJSON(t.Key(), seen) && typeWholeInJSON(t.Elem(), seen)
	case reflect.Struct:
		seen[t] = true
		for i := range t.NumField() {
			f := t.Field(i)
			if !f.IsExported() || f.Anonymous || f.Tag.Get("json") == "-" || !typeWholeInJSON(f.Type, seen) {
				return false
			}
		}
		return true
	}
	return false // an interface, a func, a chan, a complex number
}
