package rivet

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"unicode"
	"unicode/utf8"
)

// stateFields returns a function that lists the top-level fields of a
// stored state's JSON that a state of type t does not declare, which
// encoding/json skips on decode and the next commit then drops for good
// (a field renamed or removed in the code, with values still in storage);
// nil if t is not a struct, or decodes itself (its own rules then apply).
// Names match as encoding/json matches them: by json tag or field name,
// promoted fields of embedded structs included (but for a name two of
// them promote alike), case-insensitively (as it folds case).
func stateFields(t reflect.Type) func(data []byte) []string {
	if t.Kind() != reflect.Struct || reflect.PointerTo(t).Implements(reflect.TypeFor[json.Unmarshaler]()) {
		return nil
	}
	known := map[string]bool{}
	collectFields(t, known)
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
			if !known[fold(key)] {
				unknown = append(unknown, key)
			}
		}
		return unknown
	}
}

// collectFields adds the JSON names of t's fields to known, folded
// (fold), choosing among the fields of a name as encoding/json's
// typeFields does: the shallowest wins, and of two at that depth
// (neither or both tagged, or one struct type embedded twice) encoding/json
// decodes neither. A tag name it does not take (validTag) leaves the
// field's own name.
func collectFields(t reflect.Type, known map[string]bool) {
	seen := map[string]bool{} // names of a shallower depth
	visited := map[reflect.Type]bool{}
	next := []reflect.Type{t}
	nextCount := map[reflect.Type]int{}
	for len(next) > 0 {
		current, count := next, nextCount
		next, nextCount = nil, map[reflect.Type]int{}
		level := map[string][]bool{} // name -> whether each field of it is tagged
		var order []string
		for _, typ := range current {
			if visited[typ] {
				continue
			}
			visited[typ] = true
			for i := range typ.NumField() {
				f := typ.Field(i)
				if f.Anonymous {
					ft := f.Type
					if ft.Kind() == reflect.Pointer {
						ft = ft.Elem()
					}
					if !f.IsExported() && ft.Kind() != reflect.Struct {
						continue
					}
				} else if !f.IsExported() {
					continue
				}
				tag := f.Tag.Get("json")
				if tag == "-" {
					continue
				}
				name, _, _ := strings.Cut(tag, ",")
				if !validTag(name) {
					name = ""
				}
				ft := f.Type
				if ft.Name() == "" && ft.Kind() == reflect.Pointer {
					ft = ft.Elem()
				}
				if name != "" || !f.Anonymous || ft.Kind() != reflect.Struct {
					tagged := name != ""
					if name == "" {
						name = f.Name
					}
					if level[name] == nil {
						order = append(order, name)
					}
					level[name] = append(level[name], tagged)
					if count[typ] > 1 {
						level[name] = append(level[name], tagged) // annihilated
					}
					continue
				}
				nextCount[ft]++
				if nextCount[ft] == 1 {
					next = append(next, ft)
				}
			}
		}
		for _, name := range order {
			if seen[name] {
				continue // hidden by a shallower field
			}
			seen[name] = true
			tagged := 0
			for _, t := range level[name] {
				if t {
					tagged++
				}
			}
			if len(level[name]) == 1 || tagged == 1 {
				known[fold(name)] = true
			}
		}
	}
}

// validTag reports whether encoding/json takes name as a field's name.
func validTag(name string) bool {
	if name == "" {
		return false
	}
	for _, c := range name {
		switch {
		case strings.ContainsRune("!#$%&()*+-./:;<=>?@[]^_{|}~ ", c):
		case !unicode.IsLetter(c) && !unicode.IsDigit(c):
			return false
		}
	}
	return true
}

// fold is name as encoding/json matches it to a field's: two names it
// takes for one fold alike.
func fold(name string) string {
	b := make([]byte, 0, len(name))
	for _, r := range name {
		if r < utf8.RuneSelf {
			if 'a' <= r && r <= 'z' {
				r -= 'a' - 'A'
			}
			b = append(b, byte(r))
			continue
		}
		// The least rune of those that fold to r.
		for {
			r2 := unicode.SimpleFold(r)
			if r2 <= r {
				r = r2
				break
			}
			r = r2
		}
		b = utf8.AppendRune(b, r)
	}
	return string(b)
}
