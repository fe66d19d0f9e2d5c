// Command quota-per-account is the recipe for an API whose quota is per
// account: at most 2 calls in any second for each shop, so one busy shop
// does not use up the others' share.
//
// The key function returns the shop, a record: its budget is stored under
// "sync_shop_orders/Shop/42". Each shop's backlog drains at 2 − 2 + 1 = 1 a
// second after its burst, and the shops do not wait for one another.
package main

import (
	"context"
	"fmt"
	"log"
	"sort"
	"time"

	"github.com/sluicequeue/sluice/examples/internal/recipe"
	"github.com/sluicequeue/sluice/jobs"
	"github.com/sluicequeue/sluice/ratelimit"
	"github.com/sluicequeue/sluice/store"
)

// Shop is a record: a key that names it gives "Shop/ID".
type Shop struct {
	ID     int64
	Domain string
}

// SyncShopOrders pulls one shop's orders.
type SyncShopOrders struct{ Shop Shop }

// Kind names the job type.
func (SyncShopOrders) Kind() string { return "sync_shop_orders" }

// limit: at most 2 calls in any second for each shop.
var limit = ratelimit.Limit[SyncShopOrders]{To: 2, Per: time.Second, Burst: 2,
	Key: func(a SyncShopOrders) any { return a.Shop }}

// run works 10 jobs for each of 3 shops for 12 s of fake time and returns,
// per budget, the busiest second and the time of its last claim.
func run(ctx context.Context, s *store.Store) (map[string]int, map[string]time.Duration, error) {
	reg, l := jobs.NewRegistry(), recipe.NewLog()
	err := jobs.Register(reg, func(ctx context.Context, j *jobs.Job[SyncShopOrders]) error {
		l.Admit(fmt.Sprintf("sync_shop_orders/Shop/%d", j.Args.Shop.ID)) // call the shop's API here
		return nil
	}, jobs.RateLimit(limit))
	if err != nil {
		return nil, nil, err
	}
	var items []jobs.Item
	for i := 0; i < 10; i++ {
		for _, id := range []int64{42, 43, 44} {
			items = append(items, jobs.Item{Args: SyncShopOrders{Shop: Shop{ID: id}}})
		}
	}
	if err := recipe.Simulate(ctx, s, reg, l, items, 500*time.Millisecond, 12*time.Second); err != nil {
		return nil, nil, err
	}
	busiest, last := map[string]int{}, map[string]time.Duration{}
	for budget, times := range l.Times {
		busiest[budget] = ratelimit.BusiestWindow(times, time.Second)
		last[budget] = times[len(times)-1].Sub(recipe.Start)
	}
	return busiest, last, nil
}

func main() {
	ctx := context.Background()
	s, closeFn, err := recipe.TempStore(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer closeFn()
	busiest, last, err := run(ctx, s)
	if err != nil {
		log.Fatal(err)
	}
	budgets := make([]string, 0, len(busiest))
	for b := range busiest {
		budgets = append(budgets, b)
	}
	sort.Strings(budgets)
	for _, b := range budgets {
		fmt.Printf("%s: busiest second %d (limit %d), last of 10 claimed at %s\n", b, busiest[b], limit.To, last[b])
	}
}
