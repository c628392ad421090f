// Package errtext reads the text of an error that an actor's code made.
// Its Error method is the actor's own code, and may panic: a nil *T
// returned as the error (Go's typed nil), whose Error reads its receiver.
// Read where nothing recovers the panic (a workflow's goroutine), it would
// take the node down; read in a turn, it fails the turn, and what the turn
// recorded (a failed scheduled call, a failed step attempt) is tried again
// without end.
package errtext

import "fmt"

// Of returns err.Error(), or, if that panics, a text that says so and
// names err's type.
func Of(err error) (text string) {
	defer func() {
		if v := recover(); v != nil {
			text = fmt.Sprintf("an error of type %T whose Error method panicked: %v", err, v)
		}
	}()
	return err.Error()
}
