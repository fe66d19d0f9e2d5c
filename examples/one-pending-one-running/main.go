// Command one-pending-one-running is the recipe for a sync that can be
// asked for many times, where only the latest request needs to run, two
// syncs of one shop must not overlap, and all shops together stay under an
// API's quota: coalescing, a concurrency limit and a rate limit together.
//
// Each control acts at a different step of a job's life: coalescing when
// it is enqueued (calls join the shop's pending job), the concurrency limit
// when it becomes ready, the rate limit when a worker claims it. A job
// waiting on the rate still holds its coalescing key, so calls keep
// joining it. The program sends 8 requests a second for 20 shops for
// 10 seconds of fake time and counts the syncs that ran.
package main

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/sluicequeue/sluice/coalesce"
	"github.com/sluicequeue/sluice/concurrency"
	"github.com/sluicequeue/sluice/examples/internal/recipe"
	"github.com/sluicequeue/sluice/jobs"
	"github.com/sluicequeue/sluice/ratelimit"
	"github.com/sluicequeue/sluice/store"
)

// SyncShopProducts pulls one shop's catalogue.
type SyncShopProducts struct{ ShopID int64 }

// Kind names the job type.
func (SyncShopProducts) Kind() string { return "sync_shop_products" }

func byShop(a SyncShopProducts) any { return a.ShopID }

// quota: at most 2 syncs a second across all shops.
var quota = ratelimit.Limit[SyncShopProducts]{To: 2, Per: time.Second, Burst: 2, Group: "Shopify", Key: "global"}

func register(reg *jobs.Registry, l *recipe.Log) error {
	return jobs.Register(reg, func(ctx context.Context, j *jobs.Job[SyncShopProducts]) error {
		l.Admit(fmt.Sprintf("shop/%d", j.Args.ShopID)) // sync the catalogue here
		return nil
	},
		jobs.Coalesce(coalesce.Rule[SyncShopProducts]{Key: byShop}),             // one pending sync per shop
		jobs.ConcurrencyLimit(concurrency.Limit[SyncShopProducts]{Key: byShop}), // one running sync per shop
		jobs.RateLimit(quota))
}

// report is what a run saw.
type report struct {
	Requests, Syncs, Joined int
	// Busiest is the most syncs started in any second.
	Busiest int
}

func run(ctx context.Context, s *store.Store) (report, error) {
	reg, l := jobs.NewRegistry(), recipe.NewLog()
	if err := register(reg, l); err != nil {
		return report{}, err
	}
	var r report
	err := recipe.Timeline(ctx, s, reg, l, 125*time.Millisecond, 10*time.Second, func(c *jobs.Client, now time.Time) error {
		res, err := c.Enqueue(ctx, SyncShopProducts{ShopID: int64(r.Requests % 20)})
		r.Requests++
		if res.Joined {
			r.Joined++
		}
		return err
	})
	if err != nil {
		return r, err
	}
	r.Syncs, r.Busiest = len(l.All()), ratelimit.BusiestWindow(l.All(), time.Second)
	return r, nil
}

func main() {
	ctx := context.Background()
	s, closeFn, err := recipe.TempStore(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer closeFn()
	r, err := run(ctx, s)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%d requests for 20 shops: %d joined a pending sync, %d syncs ran; busiest second %d (quota %d)\n",
		r.Requests, r.Joined, r.Syncs, r.Busiest, quota.To)
}
