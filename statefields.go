package rivet

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
)

// stateFields returns a function that lists the top-level fields of a
// stored state's JSON that a state of type t does not declare, which
// encoding/json skips on decode and the next commit then drops for good
// (a field renamed or removed in the code, with values still in storage);
// nil if t is not a struct, or decodes itself (its own rules then apply).
// Names match as encoding/json matches them: by json tag or field name,
// promoted fields of embedded structs included, case-insensitively.
func stateFields(t reflect.Type) func(data []byte) []string {
	if t.Kind() != reflect.Struct || reflect.PointerTo(t).Implements(reflect.TypeFor[json.Unmarshaler]()) {
		return nil
	}
	known := map[string]bool{}
	collectFields(t, known, 0)
	return func(data []byte) []string {
		data = bytes.TrimSpace(data)
		if len(data) == 0 || data[0] != '{' {
			return nil
		}
		dec := json.NewDecoder(bytes.NewReader(data))
		if _, err := dec.Token(); err != nil {
			return nil
		}
		var unknown []string
		for dec.More() {
			tok, err := dec.Token()
			if err != nil {
				return unknown
			}
			key, _ := tok.(string)
			var skip json.RawMessage
			if err := dec.Decode(&skip); err != nil {
				return unknown
			}
			if !known[strings.ToLower(key)] {
				unknown = append(unknown, key)
			}
		}
		return unknown
	}
}

// collectFields adds the JSON names of t's fields to known, lower-cased,
// following embedded structs as encoding/json does (to a depth that no
// state reaches, against a cycle of embedded pointers).
func collectFields(t reflect.Type, known map[string]bool, depth int) {
	if depth > 16 {
		return
	}
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" {
			ft := f.Type
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				collectFields(ft, known, depth+1)
				continue
			}
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		known[strings.ToLower(name)] = true
	}
}
