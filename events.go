package rivet

import (
	"encoding/json"
	"reflect"
)

// Events maps event names to event types made with EventOf: what an actor
// may broadcast, and what clients may subscribe to.
type Events map[string]EventType

// EventType is an event's payload type.
type EventType struct {
	typ reflect.Type
}

// EventOf declares an event whose payload is a T (or a *T): Broadcast of
// anything else is a bug in the actor's code, and fails. (EventOf[any]
// takes any payload that marshals to JSON, as the zero EventType does.)
func EventOf[T any]() EventType { return EventType{typ: reflect.TypeFor[T]()} }

// Event is one event an actor broadcast, as its node holds it for a
// subscriber (the Go client's is client.Event).
type Event struct {
	Name string `json:"name"`
	// Data is the payload, JSON.
	Data json.RawMessage `json:"data"`
}

// Broadcaster publishes an actor's events to the clients subscribed to it,
// like Rivet's c.broadcast, from any action (a read-only one too) and from
// workflow steps. Events are ephemeral: they reach the subscribers
// connected when they are published, and are never stored.
//
// Unlike Rivet's, an event leaves the node only once the writes of the
// turn that broadcast it are durable, and in the order the turns end: a
// subscriber never hears of a change that a crash then undid, and an
// action that fails (its state changes discarded) publishes nothing.
// A workflow step's events are published with its attempt's commit, as its
// changes to the state are (a step replayed from history does not run, so
// it does not broadcast again).
type Broadcaster interface {
	// Broadcast publishes data, marshalled to JSON, as the event name,
	// which the actor must declare in its Events with data's type.
	// An undeclared name or another type is ErrInternal (a bug in the
	// actor's code); data that does not marshal, or whose JSON is over
	// the node's limit on results, is an error too, and publishes
	// nothing. A turn broadcasts at most MaxEventsPerTurn events. These
	// checks are made whether or not anyone is subscribed.
	Broadcast(name string, data any) error
}

// MaxEventsPerTurn bounds the events one turn (an action, or a step's
// attempt) broadcasts.
const MaxEventsPerTurn = 1000

// EventSpec is one type-erased event of a Spec.
type EventSpec struct {
	// Check returns an error if data is not of the event's type.
	Check func(data any) error
}

func (t EventType) spec(actor, name string) EventSpec {
	want := t.typ
	return EventSpec{Check: func(data any) error {
		if want == nil {
			return nil
		}
		got := reflect.TypeOf(data)
		if got == want || got != nil && got.Kind() == reflect.Pointer && got.Elem() == want {
			return nil
		}
		if want.Kind() == reflect.Interface && (got == nil || got.Implements(want)) {
			return nil
		}
		return Errorf(ErrInternal, "actor %s broadcast event %q with a value of type %v; it is declared with %v", actor, name, got, want)
	}}
}
