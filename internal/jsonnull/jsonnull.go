// Package jsonnull holds the rule by which a node refuses a JSON null for a
// type that has none (rivet's arguments and QueueOf messages), shared with
// workflowtest.Host, which checks a step's messages as a node does.
package jsonnull

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
)

// Refuse says whether raw may decode into a value of type t, and why
// not: a JSON null is a value only of the types that have a nil (a
// pointer, an interface, a slice, a map) and of those that decode JSON
// themselves (their UnmarshalJSON decides). encoding/json leaves any other
// value (a struct, a number, a string, a bool, an array) as it was on a
// null, so a null message or argument would reach the actor as the zero
// value, which nobody sent: "increment by null" incremented by 0.
func Refuse(raw []byte, t reflect.Type) (string, bool) {
	if !bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
		return "", true
	}
	switch t.Kind() {
	case reflect.Pointer, reflect.Interface, reflect.Slice, reflect.Map:
		return "", true
	}
	if reflect.PointerTo(t).Implements(reflect.TypeFor[json.Unmarshaler]()) {
		return "", true
	}
	want, ok := Kind(t)
	if !ok {
		want = "a value of type " + t.String()
	}
	return fmt.Sprintf("a JSON null where %s was expected (%s has no null: send a value)", want, t), false
}

// Kind names the JSON a Go type decodes from, if plainly one.
func Kind(t reflect.Type) (string, bool) {
	switch t.Kind() {
	case reflect.Bool:
		return "a boolean", true
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return "an integer", true
	case reflect.Float32, reflect.Float64:
		return "a number", true
	case reflect.String:
		return "a string", true
	case reflect.Slice, reflect.Array:
		if t.Elem().Kind() == reflect.Uint8 {
			return "", false // []byte is a base64 string; [16]byte, an array
		}
		return "an array", true
	case reflect.Map, reflect.Struct:
		return "an object", true
	}
	return "", false
}
