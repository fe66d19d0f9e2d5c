// Command shared-quota is the recipe for several job kinds that call one
// API and together have to stay under its quota: both kinds name the group
// "Stripe", and draw on one budget stored under "Stripe/global".
//
// Declare the same limit in every kind of a group: each job is charged with
// its own kind's settings (sluice check warns when they differ).
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

// RefundStripeCharge refunds one charge.
type RefundStripeCharge struct{ ChargeID int64 }

// Kind names the job type.
func (RefundStripeCharge) Kind() string { return "refund_stripe_charge" }

// One quota for both: 100 in any minute, 10 at once.
const (
	to    = 100
	per   = time.Minute
	burst = 10
	group = "Stripe"
)

func register(reg *jobs.Registry, l *recipe.Log) error {
	err := jobs.Register(reg, func(ctx context.Context, j *jobs.Job[SyncStripeCustomer]) error {
		l.Admit("sync")
		return nil
	}, jobs.RateLimit(ratelimit.Limit[SyncStripeCustomer]{To: to, Per: per, Burst: burst, Group: group, Key: "global"}))
	if err != nil {
		return err
	}
	return jobs.Register(reg, func(ctx context.Context, j *jobs.Job[RefundStripeCharge]) error {
		l.Admit("refund")
		return nil
	}, jobs.RateLimit(ratelimit.Limit[RefundStripeCharge]{To: to, Per: per, Burst: burst, Group: group, Key: "global"}))
}

// run works 150 of each kind for two minutes of fake time and returns the
// claims of both kinds together in each minute, and of each kind.
func run(ctx context.Context, s *store.Store) (perMinute []int, byKind map[string]int, err error) {
	reg, l := jobs.NewRegistry(), recipe.NewLog()
	if err := register(reg, l); err != nil {
		return nil, nil, err
	}
	var items []jobs.Item
	for i := 0; i < 150; i++ {
		items = append(items, jobs.Item{Args: SyncStripeCustomer{AccountID: int64(i)}}, jobs.Item{Args: RefundStripeCharge{ChargeID: int64(i)}})
	}
	if err := recipe.Simulate(ctx, s, reg, l, items, 200*time.Millisecond, 2*time.Minute); err != nil {
		return nil, nil, err
	}
	byKind = map[string]int{}
	for k, ts := range l.Times {
		byKind[k] = len(ts)
	}
	return recipe.PerWindow(l.All(), time.Minute, 2), byKind, nil
}

func main() {
	ctx := context.Background()
	s, closeFn, err := recipe.TempStore(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer closeFn()
	perMinute, byKind, err := run(ctx, s)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("both kinds together, per minute: %v (limit %d); sync %d, refund %d\n", perMinute, to, byKind["sync"], byKind["refund"])
}
