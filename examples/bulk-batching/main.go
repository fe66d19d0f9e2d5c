// Command bulk-batching is the recipe for an API with a bulk endpoint whose
// quota is on requests, while the calls arrive one item at a time: each
// call joins its shop's pending job, up to 100 calls, and the limit is
// checked when a worker claims that job. A job waiting on the rate has not
// started, so calls keep joining it: the batches grow as the budget runs
// out. Make one bulk request per run; a retry sends all of its calls again.
//
// The program pushes 5 SKUs a second for one shop for a minute of fake
// time and prints the size of each bulk request.
package main

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/sluicequeue/sluice/coalesce"
	"github.com/sluicequeue/sluice/examples/internal/recipe"
	"github.com/sluicequeue/sluice/jobs"
	"github.com/sluicequeue/sluice/ratelimit"
	"github.com/sluicequeue/sluice/store"
)

// PushInventory pushes one SKU's stock level to a shop.
type PushInventory struct {
	ShopID int64
	SKU    string
}

// Kind names the job type.
func (PushInventory) Kind() string { return "push_inventory" }

func byShop(a PushInventory) any { return a.ShopID }

// limit: at most 10 bulk requests in any minute for each shop.
var limit = ratelimit.Limit[PushInventory]{To: 10, Per: time.Minute, Burst: 2, Key: byShop}

// run pushes 5 SKUs a second for a minute and returns the size of each bulk
// request and how many calls still wait.
func run(ctx context.Context, s *store.Store) (sizes []int, sent int, err error) {
	reg, l := jobs.NewRegistry(), recipe.NewLog()
	err = jobs.RegisterCalls(reg, func(ctx context.Context, j *jobs.Job[PushInventory], calls []PushInventory) error {
		l.Admit("shop")
		sizes = append(sizes, len(calls)) // one bulk request with every call's SKU
		return nil
	},
		jobs.Coalesce(coalesce.Rule[PushInventory]{Key: byShop, OnConflict: coalesce.Collect, MaxCalls: 100}),
		jobs.RateLimit(limit))
	if err != nil {
		return nil, 0, err
	}
	err = recipe.Timeline(ctx, s, reg, l, time.Second, time.Minute, func(c *jobs.Client, now time.Time) error {
		for i := 0; i < 5; i++ {
			if _, err := c.Enqueue(ctx, PushInventory{ShopID: 42, SKU: fmt.Sprintf("sku-%d", sent)}); err != nil {
				return err
			}
			sent++
		}
		return nil
	})
	return sizes, sent, err
}

func main() {
	ctx := context.Background()
	s, closeFn, err := recipe.TempStore(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer closeFn()
	sizes, sent, err := run(ctx, s)
	if err != nil {
		log.Fatal(err)
	}
	total := 0
	for _, n := range sizes {
		total += n
	}
	fmt.Printf("%d SKUs in %d bulk requests (limit %d a minute): sizes %v; %d still wait\n", total, len(sizes), limit.To, sizes, sent-total)
}
