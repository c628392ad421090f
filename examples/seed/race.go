package seed

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/examples/exampleapi"
	"github.com/rivet-go/rivet/workflow"
)

// AuctionTimeout is how long auctionActor waits for a bid before the
// auction expires: 24 h, as in the seed, or the duration in the environment
// variable EXAMPLES_AUCTION_TIMEOUT (e.g. "2s", for a node process under
// test; examples.Registry applies it too, and refuses a value that does
// not parse). Tests in this process may set it before the node starts; an
// auction already waiting keeps its recorded deadline.
var AuctionTimeout = func() time.Duration {
	if d, err := AuctionTimeoutFromEnv(); err == nil && d > 0 {
		return d
	}
	return 24 * time.Hour
}()

// AuctionTimeoutEnv names the environment variable that sets AuctionTimeout.
const AuctionTimeoutEnv = "EXAMPLES_AUCTION_TIMEOUT"

// AuctionTimeoutFromEnv parses AuctionTimeoutEnv: 0 if it is unset, an
// error if it is not a positive duration ("5s"; a bare number has no unit
// and would otherwise leave the seed's 24 h in force without a word).
func AuctionTimeoutFromEnv() (time.Duration, error) {
	v, ok := os.LookupEnv(AuctionTimeoutEnv)
	if !ok || v == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("%s=%q: want a positive duration with its unit, such as 5s or 1m30s", AuctionTimeoutEnv, v)
	}
	return d, nil
}

// Bid is a message of auctionActor's "bids" queue.
type Bid struct {
	Amount int `json:"amount"`
}

// AuctionState is auctionActor's state.
type AuctionState struct {
	// Result is null while the auction runs, then "sold" or "expired".
	Result *string `json:"result"`
}

// AuctionActor is the seed's "Race" pattern: the first of a bid and the
// auction's timeout wins, and the loser is cancelled.
var AuctionActor = rivet.Actor[AuctionState]{
	Name: "auctionActor",
	Queues: rivet.Queues{
		"bids": rivet.QueueOf[Bid](),
	},
	Run: func(ctx *workflow.Ctx[AuctionState]) error {
		if err := ctx.Step("list-item", func(step *workflow.StepCtx[AuctionState]) error {
			return listItem(step.Context(), "item-123")
		}); err != nil {
			return err
		}

		winner, _, err := workflow.Race(ctx, "bid-or-expire", []workflow.RaceBranch[AuctionState, int]{
			{
				Name: "bid",
				Run: func(branchCtx *workflow.Ctx[AuctionState]) (int, error) {
					bid, err := workflow.Next[Bid](branchCtx, "wait-bid")
					if err != nil {
						return 0, err
					}
					return bid.Body.Amount, nil
				},
			},
			{
				Name: "expire",
				Run: func(branchCtx *workflow.Ctx[AuctionState]) (int, error) {
					if err := branchCtx.Sleep("auction-timeout", AuctionTimeout); err != nil {
						return 0, err
					}
					return 0, nil
				},
			},
		})
		if err != nil {
			return err
		}

		return ctx.Step("finalize", func(step *workflow.StepCtx[AuctionState]) error {
			if err := finalizeAuction(step.Context(), "item-123", winner); err != nil {
				return err
			}
			result := "expired"
			if winner == "bid" {
				result = "sold"
			}
			step.State.Result = &result
			return nil
		})
	},
	Actions: rivet.Actions[AuctionState]{
		"getState": rivet.Query(func(c *rivet.ActionCtx[AuctionState]) (AuctionState, error) { return *c.State, nil }),
	},
}

func listItem(ctx context.Context, itemID string) error {
	return exampleapi.Post(ctx, "/auctions/"+itemID, nil)
}

func finalizeAuction(ctx context.Context, itemID, outcome string) error {
	return exampleapi.Post(ctx, "/auctions/"+itemID+"/finalize", map[string]string{"outcome": outcome})
}
