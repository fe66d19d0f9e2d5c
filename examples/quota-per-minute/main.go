// Command quota-per-minute is the recipe for an API that allows a number of
// calls in any minute, with a burst for spikes: at most 100 claims in any
// minute, 10 of them at once.
//
// A quiet budget admits 10 at once, then one every 60s/91 (about 0.66 s):
// that spacing leaves room for the burst, so no minute holds more than 100,
// and a backlog drains at 91 a minute. The program shows it on a backlog of
// 250 jobs, three minutes of fake time in a second of real time.
package main

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/sluicequeue/sluice/examples/internal/recipe"
	"github.com/sluicequeue/sluice/jobs"
	"github.com/sluicequeue/sluice/ratelimit"
	"github.com/sluicequeue/sluice/store"
)

// SyncStripeCustomer pushes one account to Stripe.
type SyncStripeCustomer struct{ AccountID int64 }

// Kind names the job type.
func (SyncStripeCustomer) Kind() string { return "sync_stripe_customer" }

// limit: at most 100 claims in any minute, 10 of them at once, for all
// accounts together.
var limit = ratelimit.Limit[SyncStripeCustomer]{To: 100, Per: time.Minute, Burst: 10, Key: "global"}

func register(reg *jobs.Registry, l *recipe.Log) error {
	return jobs.Register(reg, func(ctx context.Context, j *jobs.Job[SyncStripeCustomer]) error {
		l.Admit("sync_stripe_customer/global") // call Stripe here
		return nil
	}, jobs.RateLimit(limit))
}

// run works a backlog of 250 jobs for three minutes of fake time and
// returns the claims in each minute and in the busiest minute.
func run(ctx context.Context, s *store.Store) (perMinute []int, busiest int, err error) {
	reg, l := jobs.NewRegistry(), recipe.NewLog()
	if err := register(reg, l); err != nil {
		return nil, 0, err
	}
	items := make([]jobs.Item, 250)
	for i := range items {
		items[i] = jobs.Item{Args: SyncStripeCustomer{AccountID: int64(i)}}
	}
	if err := recipe.Simulate(ctx, s, reg, l, items, 200*time.Millisecond, 3*time.Minute); err != nil {
		return nil, 0, err
	}
	return recipe.PerWindow(l.All(), time.Minute, 3), ratelimit.BusiestWindow(l.All(), time.Minute), nil
}

func main() {
	ctx := context.Background()
	s, closeFn, err := recipe.TempStore(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer closeFn()
	perMinute, busiest, err := run(ctx, s)
	if err != nil {
		log.Fatal(err)
	}
	for i, n := range perMinute {
		fmt.Printf("minute %d: %3d claims\n", i+1, n)
	}
	fmt.Printf("busiest window of any minute: %d (limit %d)\n", busiest, limit.To)
}
