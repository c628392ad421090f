// Package errkind lets the workflow package tell which of the root
// package's error kinds (rivet.ErrNotFound, rivet.ErrUnknownAction, ...)
// an error it recorded is, without importing the root package, which
// imports it. The root package registers its table of kinds here as it
// initialises; until it has (a program that uses the workflow package
// alone, and so cannot name those kinds either), nothing resolves.
package errkind

import "sync/atomic"

// Resolver is what the root package supplies.
type Resolver struct {
	// Kind returns the sentinel of a (group, code) pair, as the root
	// package's KindByCode does, and false for a pair it does not list
	// (where KindByCode says ErrInternal: a recorded error of a pair no
	// build lists must not match ErrInternal on a guess).
	Kind func(group, code string) (error, bool)
	// Pair returns the (group, code) of the first kind err matches,
	// false if none: the pair an error that carries none of its own (a
	// bare sentinel, wrapped or not) goes by.
	Pair func(err error) (group, code string, ok bool)
}

var current atomic.Pointer[Resolver]

// Set installs r. The root package calls it from init, before any code
// that could record or match an error runs.
func Set(r Resolver) { current.Store(&r) }

// Kind resolves (group, code) with the installed Resolver.
func Kind(group, code string) (error, bool) {
	r := current.Load()
	if r == nil || r.Kind == nil {
		return nil, false
	}
	return r.Kind(group, code)
}

// Pair returns err's kind's (group, code) with the installed Resolver.
func Pair(err error) (group, code string, ok bool) {
	r := current.Load()
	if r == nil || r.Pair == nil {
		return "", "", false
	}
	return r.Pair(err)
}
