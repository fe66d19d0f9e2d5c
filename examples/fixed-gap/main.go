// Command fixed-gap is the recipe for an API that wants a gap between
// calls: with the default burst of 1, no two claims are less than 5 seconds
// apart.
//
// With burst 1 there is no slack: an admission a moment late is a moment
// lost. With a 5 s gap the worker that comes back for each slot loses a
// few milliseconds in 5 s (see docs/rate-limits.md, "Picking a burst"); on
// the fake clock here it drains at exactly one every 5 seconds.
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

// GeocodeAddress geocodes one address.
type GeocodeAddress struct{ AddressID int64 }

// Kind names the job type.
func (GeocodeAddress) Kind() string { return "geocode_address" }

// limit: one claim every 5 seconds at most (Burst defaults to 1).
var limit = ratelimit.Limit[GeocodeAddress]{To: 1, Per: 5 * time.Second, Key: "global"}

// run works 20 jobs for a minute of fake time and returns the gaps
// between consecutive claims.
func run(ctx context.Context, s *store.Store) ([]time.Duration, error) {
	reg, l := jobs.NewRegistry(), recipe.NewLog()
	err := jobs.Register(reg, func(ctx context.Context, j *jobs.Job[GeocodeAddress]) error {
		l.Admit("geocode_address/global") // call the geocoder here
		return nil
	}, jobs.RateLimit(limit))
	if err != nil {
		return nil, err
	}
	items := make([]jobs.Item, 20)
	for i := range items {
		items[i] = jobs.Item{Args: GeocodeAddress{AddressID: int64(i)}}
	}
	if err := recipe.Simulate(ctx, s, reg, l, items, time.Second, time.Minute); err != nil {
		return nil, err
	}
	times := l.All()
	gaps := make([]time.Duration, 0, len(times))
	for i := 1; i < len(times); i++ {
		gaps = append(gaps, times[i].Sub(times[i-1]))
	}
	return gaps, nil
}

func main() {
	ctx := context.Background()
	s, closeFn, err := recipe.TempStore(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer closeFn()
	gaps, err := run(ctx, s)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%d claims from 0 s to 60 s of fake time; gaps between them: %v\n", len(gaps)+1, gaps)
}
