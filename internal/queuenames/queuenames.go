// Package queuenames is a node's rule for a queue's name that is none of
// its actor's queues (a send, an enqueue, a workflow's receive), shared
// with workflowtest.Host so that a test refuses what a node refuses, with
// the same words.
package queuenames

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Check fails if a name in names is none of queues, the queues of actor,
// with Unknown's text.
func Check[V any](actor string, names []string, queues map[string]V) error {
	for _, n := range names {
		if _, ok := queues[n]; !ok {
			return errors.New(Unknown(actor, n, queues))
		}
	}
	return nil
}

// Unknown says that actor has no queue name, and which it has.
func Unknown[V any](actor, name string, queues map[string]V) string {
	known := "none"
	if len(queues) > 0 {
		known = strings.Join(slices.Sorted(maps.Keys(queues)), ", ")
	}
	return fmt.Sprintf("actor %s has no queue %q (it has %s)", actor, name, known)
}
