package rivet

import (
	"fmt"
	"sort"
	"unicode/utf8"
)

// Registry is the set of actor types a node hosts (the original engine's
// setup({use})).
type Registry struct {
	specs map[string]*Spec
}

// Setup builds a registry of the given actor definitions. It fails if a
// definition is invalid or two share a name.
func Setup(defs ...Definition) (*Registry, error) {
	r := &Registry{specs: map[string]*Spec{}}
	for _, d := range defs {
		sp, err := d.Spec()
		if err != nil {
			return nil, err
		}
		if sp.IdleTimeout < 0 {
			// A Definition of one's own, which Actor.Spec's check does
			// not see: the runtime read it as the default.
			return nil, fmt.Errorf("actor %s: IdleTimeout is negative (%v): give a positive duration, or 0 for the node's (--idle-timeout)", sp.Name, sp.IdleTimeout)
		}
		if _, dup := r.specs[sp.Name]; dup {
			return nil, fmt.Errorf("rivet: two actors named %q", sp.Name)
		}
		r.specs[sp.Name] = sp
	}
	return r, nil
}

// MustSetup is Setup that panics on error, for package-level registries.
func MustSetup(defs ...Definition) *Registry {
	r, err := Setup(defs...)
	if err != nil {
		panic(err)
	}
	return r
}

// Lookup returns the spec of an actor type.
func (r *Registry) Lookup(name string) (*Spec, bool) {
	sp, ok := r.specs[name]
	return sp, ok
}

// Names returns the registered actor names, sorted.
func (r *Registry) Names() []string {
	out := make([]string, 0, len(r.specs))
	for n := range r.specs {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Key limits, as in the original engine.
const (
	MaxKeyComponentBytes = 128
	MaxKeyBytes          = 1024
	// MaxKeyComponents bounds a key's components, which MaxKeyBytes
	// alone does not: empty components count no bytes there, yet each
	// adds a separator to the stored key, so a key of a million empty
	// components would pass and be stored under a megabyte of commas. A
	// key of non-empty components has at most MaxKeyBytes of them, so
	// none of those is refused.
	MaxKeyComponents = MaxKeyBytes
	maxNameBytes     = 64
)

// ValidateName checks an actor, action or queue name: letters, digits, '_'
// and '-', starting with a letter, at most 64 bytes.
func ValidateName(what, name string) error {
	if name == "" {
		return Errorf(ErrInvalidArgument, "%s is empty", what)
	}
	if len(name) > maxNameBytes {
		return Errorf(ErrInvalidArgument, "%s is %d bytes, the limit is %d", what, len(name), maxNameBytes)
	}
	for i, c := range name {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || i > 0 && (c >= '0' && c <= '9' || c == '_' || c == '-')
		if !ok {
			return Errorf(ErrInvalidArgument, "%s %q: only letters, digits, '_' and '-' are allowed, starting with a letter", what, name)
		}
	}
	return nil
}

// ValidateKey checks an actor key: 1 to 1024 components, each valid UTF-8
// of at most 128 bytes, 1 KiB in all. A key over its limits is a bad key
// (ErrInvalidArgument), not a payload over a quota. An empty component is
// allowed: [""], ["", ""] and ["a", ""] are three actors, none another's
// (storage.EncodeKey keeps them apart), so a key built from data that may
// be empty works; check for an empty ID yourself where one is a mistake.
// Only the key of no components is refused (it names no actor).
func ValidateKey(key []string) error {
	if len(key) == 0 {
		return Errorf(ErrInvalidArgument, "actor key is empty: give at least one component")
	}
	if len(key) > MaxKeyComponents {
		return Errorf(ErrInvalidArgument, "actor key has %d components, the limit is %d", len(key), MaxKeyComponents)
	}
	total := 0
	for i, c := range key {
		if len(c) > MaxKeyComponentBytes {
			return Errorf(ErrInvalidArgument, "actor key component %d is %d bytes, the limit is %d", i, len(c), MaxKeyComponentBytes)
		}
		if !utf8.ValidString(c) {
			return Errorf(ErrInvalidArgument, "actor key component %d is not valid UTF-8", i)
		}
		total += len(c)
	}
	if total > MaxKeyBytes {
		return Errorf(ErrInvalidArgument, "actor key is %d bytes, the limit is %d", total, MaxKeyBytes)
	}
	return nil
}
