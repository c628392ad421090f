package seed

import (
	"context"
	"os"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/examples/exampleapi"
	"github.com/rivet-go/rivet/workflow"
)

// AuctionTimeout is how long auctionActor waits for a bid before the
// auction expires: 24 h, as in the seed, or the duration in the environment
// variable EXAMPLES_AUCTION_TIMEOUT (e.g. "2s", for a node process under
// test). Tests in this process may set it before the node starts; an
// auction already waiting keeps its recorded deadline.
var AuctionTimeout = auctionTimeoutFromEnv()

func auctionTimeoutFromEnv() time.Duration {
	if d, err := time.ParseDuration(os.Getenv("EXAMPLES_AUCTION_TIMEOUT")); err == nil && d > 0 {
		return d
	}
	return 24 * time.Hour
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
