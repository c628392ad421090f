package rivet

import (
	"bytes"
	"encoding/json"
	"maps"
	"reflect"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"
)

// stateFields returns a function that lists the fields of a stored
// state's JSON that a state of type t does not declare, which
// encoding/json skips on decode and the next commit then drops for good
// (a field renamed or removed in the code, with values still in storage);
// nil if t is not a struct, or decodes itself or has a MarshalJSON (its
// own rules then apply). Names match as encoding/json matches them: by json tag or
// field name, promoted fields of embedded structs included (but for a
// name two of them promote alike), case-insensitively (as it folds case).
// Fields of nested structs are listed too, by path: "profile.name",
// "items[].sku" for a slice's (or an array's) elements, "byId.*.price"
// for a map's values; a top-level field as its name alone. Each path is
// listed once, at most maxUnknownFields of them, the top-level ones
// first: many renamed fields of a list's elements do not hide a renamed
// top-level one.
func stateFields(t reflect.Type) func(data []byte) []string {
	sh := shapeOf(t, map[reflect.Type]*shape{})
	if sh == nil || sh.kind != structShape {
		return nil
	}
	return func(data []byte) []string {
		sc := scanner{data: data}
		sc.value(sh)
		if len(sc.top)+len(sc.nested) > maxUnknownFields {
			sc.nested = sc.nested[:maxUnknownFields-len(sc.top)]
		}
		return append(sc.top, sc.nested...)
	}
}

// maxUnknownFields bounds the paths stateFields lists: a warning names
// them, and a state of many renamed fields needs only a few of them named.
const maxUnknownFields = 32

type shapeKind int

const (
	structShape shapeKind = iota
	listShape
	mapShape
)

// shape is what stateFields checks a JSON value against: a struct's
// fields by folded name, each with its value's shape, or a slice's,
// array's or map's elements' shape. A nil shape is not looked into (a
// type that decodes itself, an interface, a scalar, or a container of
// those).
type shape struct {
	kind   shapeKind
	fields map[string]*shape
	// exact is fields by their names as declared: the lookup of a key
	// that matches one needs no fold (which allocates).
	exact map[string]*shape
	elem  *shape
}

// shapeOf returns t's shape; seen holds those made so far, so that a
// recursive type ends, also one that reaches itself through a slice or
// a map first (type Node struct{ Kids []Node }, met as []Node): each is
// in seen before its parts are made.
func shapeOf(t reflect.Type, seen map[reflect.Type]*shape) *shape {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if sh, ok := seen[t]; ok {
		return sh
	}
	// A type that decodes itself reads what its code reads; one that
	// encodes itself (MarshalJSON) stores what its code writes, whose keys
	// its fields need not name (a derived "display" beside "cents"). A
	// MarshalText stores a string, which the scan does not look into, so
	// such a type is looked into still: an object stored before it had
	// one is decoded by its fields.
	pt := reflect.PointerTo(t)
	if pt.Implements(jsonUnmarshaler) || pt.Implements(textUnmarshaler) || pt.Implements(jsonMarshaler) {
		return nil
	}
	switch t.Kind() {
	case reflect.Struct:
		sh := &shape{kind: structShape, fields: map[string]*shape{}, exact: map[string]*shape{}}
		seen[t] = sh
		known, exact := map[string]reflect.Type{}, map[string]string{}
		collectFields(t, known, exact)
		// In a fixed order, so that every process (every node) makes the
		// same shape of a type.
		for _, name := range slices.Sorted(maps.Keys(known)) {
			if ft := known[name]; ft != nil {
				sh.fields[name] = shapeOf(ft, seen)
			} else {
				sh.fields[name] = nil
			}
		}
		for name, folded := range exact {
			sh.exact[name] = sh.fields[folded]
		}
		return sh
	case reflect.Slice, reflect.Array, reflect.Map:
		kind := listShape
		if t.Kind() == reflect.Map {
			kind = mapShape
		}
		// Its elem is set once made; a shape of a container whose elem
		// is nil is not looked into, as a nil shape.
		sh := &shape{kind: kind}
		seen[t] = sh
		sh.elem = shapeOf(t.Elem(), seen)
		if sh.elem == nil {
			return nil
		}
		return sh
	}
	return nil
}

// scanner lists the fields of data, a stored state's JSON, that a shape
// lacks. It scans the bytes itself rather than with a json.Decoder's
// tokens, which cost a load several times the state's decode: data has
// decoded already, so it is valid JSON, and a scan that finds otherwise
// stops.
type scanner struct {
	data []byte
	i    int
	// path is the path of the value scanned, as segments ("items", "[]",
	// "*"), made into a string only for a field listed: a path string
	// per value descended into costs a deep state its depth squared.
	path [][]byte
	// top and nested are the paths listed, of top-level fields and of
	// nested ones; listed, those of either.
	top, nested []string
	listed      map[string]bool
	// full: as many nested paths as may be listed are; the scan now
	// looks at top-level fields only.
	full bool
	// stop: as many top-level fields as may be listed are, or the JSON
	// is not what it should be.
	stop bool
}

var (
	segElems  = []byte("[]")
	segValues = []byte("*")
)

// report lists the field key of the value at sc.path, unless listed.
func (sc *scanner) report(key []byte) {
	top := len(sc.path) == 0
	if !top && sc.full {
		return
	}
	var b strings.Builder
	for i, seg := range sc.path {
		if i > 0 && !bytes.Equal(seg, segElems) {
			b.WriteByte('.')
		}
		b.Write(seg)
	}
	if !top {
		b.WriteByte('.')
	}
	b.Write(key)
	path := b.String()
	if sc.listed[path] {
		return
	}
	if sc.listed == nil {
		sc.listed = map[string]bool{}
	}
	sc.listed[path] = true
	if top {
		sc.top = append(sc.top, path)
		sc.stop = len(sc.top) >= maxUnknownFields
		return
	}
	sc.nested = append(sc.nested, path)
	sc.full = len(sc.top)+len(sc.nested) >= maxUnknownFields
}

func (sc *scanner) ws() {
	for sc.i < len(sc.data) {
		switch sc.data[sc.i] {
		case ' ', '\t', '\n', '\r':
			sc.i++
		default:
			return
		}
	}
}

// value scans one JSON value at sc.path against sh (nil: skip it). A
// value of another JSON type than the shape's (null, or one a decode
// would refuse) is skipped.
func (sc *scanner) value(sh *shape) {
	sc.ws()
	if sc.stop || sc.i >= len(sc.data) {
		sc.stop = true
		return
	}
	if sc.full && len(sc.path) > 0 {
		sh = nil
	}
	switch c := sc.data[sc.i]; {
	case c == '{':
		sc.i++
		first := true
		for !sc.stop {
			sc.ws()
			if sc.i < len(sc.data) && sc.data[sc.i] == '}' {
				sc.i++
				return
			}
			if !first {
				if !sc.expect(',') {
					return
				}
				sc.ws()
			}
			first = false
			key, ok := sc.str()
			if !ok {
				sc.stop = true
				return
			}
			sc.ws()
			if !sc.expect(':') {
				return
			}
			switch {
			case sh == nil || sh.kind == listShape:
				sc.value(nil)
			case sh.kind == mapShape:
				sc.descend(sh.elem, segValues)
			default:
				f, ok := sh.exact[string(key)]
				if !ok {
					f, ok = sh.fields[fold(string(key))]
				}
				if !ok {
					sc.report(key)
				}
				if f != nil {
					sc.descend(f, key)
				} else {
					sc.value(nil)
				}
			}
		}
	case c == '[':
		sc.i++
		var next *shape
		if sh != nil && sh.kind == listShape {
			next = sh.elem
		}
		first := true
		for !sc.stop {
			sc.ws()
			if sc.i < len(sc.data) && sc.data[sc.i] == ']' {
				sc.i++
				return
			}
			if !first && !sc.expect(',') {
				return
			}
			first = false
			if next != nil {
				sc.descend(next, segElems)
			} else {
				sc.value(nil)
			}
		}
	case c == '"':
		if _, ok := sc.skipStr(); !ok {
			sc.stop = true
		}
	default: // a number, true, false, null
		for sc.i < len(sc.data) {
			switch sc.data[sc.i] {
			case ',', '}', ']', ' ', '\t', '\n', '\r':
				return
			}
			sc.i++
		}
	}
}

// descend scans the value of seg (a field's key, segElems or segValues)
// against sh.
func (sc *scanner) descend(sh *shape, seg []byte) {
	sc.path = append(sc.path, seg)
	sc.value(sh)
	sc.path = sc.path[:len(sc.path)-1]
}

func (sc *scanner) expect(c byte) bool {
	if sc.i < len(sc.data) && sc.data[sc.i] == c {
		sc.i++
		return true
	}
	sc.stop = true
	return false
}

// skipStr scans past a string, and returns whether it has an escape and
// whether it ends (its closing quote is in data).
func (sc *scanner) skipStr() (escaped, ok bool) {
	sc.i++ // the opening quote
	for sc.i < len(sc.data) {
		switch sc.data[sc.i] {
		case '\\':
			escaped = true
			sc.i += 2
			continue
		case '"':
			sc.i++
			return escaped, true
		}
		sc.i++
	}
	return escaped, false
}

// str scans a string and returns its value (its bytes in data, if it has
// no escape and is UTF-8).
func (sc *scanner) str() ([]byte, bool) {
	if sc.i >= len(sc.data) || sc.data[sc.i] != '"' {
		return nil, false
	}
	from := sc.i
	escaped, ok := sc.skipStr()
	if !ok {
		return nil, false
	}
	if raw := sc.data[from+1 : sc.i-1]; !escaped && utf8.Valid(raw) {
		return raw, true
	}
	// Decoded as encoding/json decodes it, which also puts U+FFFD for
	// bytes that are not UTF-8.
	var s string
	if err := json.Unmarshal(sc.data[from:sc.i], &s); err != nil {
		return nil, false
	}
	return []byte(s), true
}

// collectFields adds the JSON names of t's fields to known, folded
// (fold), choosing among the fields of a name as encoding/json's
// typeFields does: the shallowest wins, and of two at that depth
// (neither or both tagged, or one struct type embedded twice) encoding/json
// decodes neither. A tag name it does not take (validTag) leaves the
// field's own name.
func collectFields(t reflect.Type, known map[string]reflect.Type, exact map[string]string) {
	seen := map[string]bool{} // names of a shallower depth
	visited := map[reflect.Type]bool{}
	next := []reflect.Type{t}
	nextCount := map[reflect.Type]int{}
	for len(next) > 0 {
		current, count := next, nextCount
		next, nextCount = nil, map[reflect.Type]int{}
		type field struct {
			tagged bool
			typ    reflect.Type
		}
		level := map[string][]field{} // name -> its fields at this depth
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
					level[name] = append(level[name], field{tagged, f.Type})
					if count[typ] > 1 {
						level[name] = append(level[name], field{tagged, f.Type}) // annihilated
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
			var typ reflect.Type
			for _, f := range level[name] {
				if f.tagged || len(level[name]) == 1 {
					tagged++
					typ = f.typ
				}
			}
			if len(level[name]) == 1 || tagged == 1 {
				k := fold(name)
				if prev, ok := known[k]; ok && prev != typ {
					// Two names that fold alike: which one a key
					// decodes into depends on its case, so neither
					// value is looked into.
					typ = nil
				}
				known[k] = typ
				exact[name] = k
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
