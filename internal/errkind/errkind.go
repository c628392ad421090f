// Package errkind names the root package's error kinds (rivet.ErrNotFound,
// rivet.ErrUnknownAction, ...) for the workflow package, which cannot
// import the root package (the root package imports it): a recorded error
// keeps the name of the kind its original matched, and matches that kind
// by it, live and on replay.
//
// A kind's name is its stable (group, code) on the wire, "actor.not_found"
// ("user" for rivet.ErrUser): unlike a sentinel's message or its place in
// a table, it does not change from one build to the next, so a name
// recorded by one build means the same kind to every later one.
//
// The root package installs its kinds as it initialises. Until it has (a
// program that links the workflow package alone, and so can neither name
// those kinds nor return an error that matches one), no error has a kind.
package errkind

import "errors"

// Kind is one of the root package's sentinels and its name.
type Kind struct {
	Err  error
	Name string
}

// kinds is set once, by the root package's init, before any code that
// could record or match an error runs; it is only read after.
var kinds []Kind

// Set installs the root package's kinds, in its order (rivet.Kinds()).
func Set(k []Kind) { kinds = k }

// Of returns the name of the first kind that err matches with errors.Is,
// "" if none.
func Of(err error) string {
	for _, k := range kinds {
		if errors.Is(err, k.Err) {
			return k.Name
		}
	}
	return ""
}

// Is reports whether target is the kind named name (compared by identity,
// as errors.Is compares a sentinel).
func Is(name string, target error) bool {
	if name == "" {
		return false
	}
	for _, k := range kinds {
		if k.Err == target {
			return k.Name == name
		}
	}
	return false
}
