package counter_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/client"
	"github.com/rivet-go/rivet/examples/counter"
	"github.com/rivet-go/rivet/node/nodetest"
)

func TestMain(m *testing.M) { nodetest.VerifyNoLeaks(m) }

// An increment that would take the count past an int's range is refused
// and changes nothing: Go's addition wrapped around, so that increment
// 9223372036854775807 of a count of 2 answered -9223372036854775807.
func TestAnIncrementThatWouldOverflowIsRefused(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, _ := nodetest.Start(t, t.TempDir(), counter.Actor)
	for _, tc := range []struct {
		key          string
		start, by    int
		wantMessage  string
		wantAccepted int
	}{
		{"up", 2, math.MaxInt, fmt.Sprintf("increment by %d: the count 2 would go past the limits of an int", math.MaxInt), math.MaxInt - 2},
		{"down", -2, math.MinInt, fmt.Sprintf("increment by %d: the count -2 would go past the limits of an int", math.MinInt), math.MinInt + 2},
	} {
		h := c.GetOrCreate("counter", tc.key)
		if _, err := rivet.Call[int](ctx, h, "increment", tc.start); err != nil {
			t.Fatal(err)
		}
		_, err := rivet.Call[int](ctx, h, "increment", tc.by)
		if !errors.Is(err, rivet.ErrInvalidArgument) || client.Code(err) != codes.InvalidArgument || !strings.HasPrefix(err.Error(), tc.wantMessage) {
			t.Errorf("%s: increment %d of %d: %v, want INVALID_ARGUMENT %q", tc.key, tc.by, tc.start, err, tc.wantMessage)
		}
		if n, err := rivet.Call[int](ctx, h, "getCount"); err != nil || n != tc.start {
			t.Fatalf("%s: count after the refused increment = %d, %v; want %d", tc.key, n, err, tc.start)
		}
		// Up to the limit is fine.
		if n, err := rivet.Call[int](ctx, h, "increment", tc.wantAccepted); err != nil || n != tc.start+tc.wantAccepted {
			t.Fatalf("%s: increment to the limit = %d, %v; want %d", tc.key, n, err, tc.start+tc.wantAccepted)
		}
	}
}
