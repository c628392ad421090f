package rivet_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/rivet-go/rivet"
)

// plainClient is a Client of someone else's making: it finds actors, but
// has no create of its own (caller.Creator).
type plainClient struct{}

func (plainClient) GetOrCreate(string, ...string) rivet.Handle { return nil }
func (plainClient) Get(string, ...string) rivet.Handle         { return nil }

// A Client without a create is refused one, with ErrInvalidArgument that
// names it, rather than a panic or a silent getOrCreate.
func TestCreateThroughAClientWithoutOne(t *testing.T) {
	_, err := rivet.Create(context.Background(), plainClient{}, "child", []string{"a"}, 1)
	if !errors.Is(err, rivet.ErrInvalidArgument) || !strings.Contains(err.Error(), "rivet_test.plainClient") {
		t.Fatalf("Create through a client without CreateWith = %v, want ErrInvalidArgument naming it", err)
	}
	_, err = rivet.CreateWith(context.Background(), plainClient{}, "child", []string{"a"}, 1, rivet.CreateOptions{IdempotencyKey: "k"})
	if !errors.Is(err, rivet.ErrInvalidArgument) {
		t.Fatalf("CreateWith through a client without it = %v, want ErrInvalidArgument", err)
	}
}
