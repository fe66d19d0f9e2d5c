// Command one-at-a-time-per-account is the recipe for an API where two
// syncs of one account must not overlap, and all accounts together must
// stay under a quota: a concurrency limit per account, and a rate limit
// shared by every account.
//
// A job over the rate gives its concurrency slot back while it waits, so
// the account's next job can take it, and takes a slot again when it comes
// back (or is blocked). The program runs real workers for a few seconds
// and reports, per account, how many of its syncs ever overlapped, and the
// busiest second across accounts.
package main

import (
	"context"
	"fmt"
	"io"
	"log"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/sluicequeue/sluice/concurrency"
	"github.com/sluicequeue/sluice/dispatcher"
	"github.com/sluicequeue/sluice/examples/internal/recipe"
	"github.com/sluicequeue/sluice/jobs"
	"github.com/sluicequeue/sluice/ratelimit"
	"github.com/sluicequeue/sluice/store"
)

// SyncStripeAccount syncs one account.
type SyncStripeAccount struct{ AccountID int64 }

// Kind names the job type.
func (SyncStripeAccount) Kind() string { return "sync_stripe_account" }

var (
	// One sync at a time for each account…
	oneAtATime = concurrency.Limit[SyncStripeAccount]{Key: func(a SyncStripeAccount) any { return a.AccountID }}
	// …and at most 5 claims in any second across all of them.
	quota = ratelimit.Limit[SyncStripeAccount]{To: 5, Per: time.Second, Burst: 2, Group: "Stripe", Key: "global"}
)

// report is what a run saw.
type report struct {
	// MostAtOnce is, per account, the most of its syncs running together.
	MostAtOnce map[int64]int
	// Busiest is the most syncs started in any one second.
	Busiest int
	// Ran counts the syncs that ran.
	Ran int
}

// run enqueues jobsPerAccount syncs for each of accounts accounts, each
// taking work, and works them with two workers and a dispatcher until all
// are done.
func run(ctx context.Context, s *store.Store, accounts, jobsPerAccount int, work time.Duration) (report, error) {
	var mu sync.Mutex
	running, most := map[int64]int{}, map[int64]int{}
	var starts []time.Time
	done := make(chan struct{}, accounts*jobsPerAccount)
	reg := jobs.NewRegistry()
	err := jobs.Register(reg, func(ctx context.Context, j *jobs.Job[SyncStripeAccount]) error {
		mu.Lock()
		running[j.Args.AccountID]++
		most[j.Args.AccountID] = max(most[j.Args.AccountID], running[j.Args.AccountID])
		starts = append(starts, time.Now())
		mu.Unlock()
		time.Sleep(work) // call Stripe here
		mu.Lock()
		running[j.Args.AccountID]--
		mu.Unlock()
		done <- struct{}{}
		return nil
	}, jobs.ConcurrencyLimit(oneAtATime), jobs.RateLimit(quota))
	if err != nil {
		return report{}, err
	}
	var items []jobs.Item
	for i := 0; i < jobsPerAccount; i++ {
		for a := 1; a <= accounts; a++ {
			items = append(items, jobs.Item{Args: SyncStripeAccount{AccountID: int64(a)}})
		}
	}
	if _, err := jobs.NewClient(s, reg, jobs.ClientConfig{}).EnqueueMany(ctx, items); err != nil {
		return report{}, err
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	runCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for i := 0; i < 2; i++ {
		w, err := jobs.NewWorker(s, reg, jobs.WorkerConfig{Concurrency: 10, PollInterval: 20 * time.Millisecond, Logger: quiet})
		if err != nil {
			stop()
			return report{}, err
		}
		wg.Add(1)
		go func() { defer wg.Done(); _ = w.Run(runCtx) }()
	}
	d, err := dispatcher.New(s, dispatcher.Config{Interval: 100 * time.Millisecond, Logger: quiet})
	if err != nil {
		stop()
		return report{}, err
	}
	wg.Add(1)
	go func() { defer wg.Done(); _ = d.Run(runCtx) }()
	for range items {
		select {
		case <-done:
		case <-ctx.Done():
			stop()
			wg.Wait()
			return report{}, ctx.Err()
		}
	}
	stop()
	wg.Wait()
	sort.Slice(starts, func(i, j int) bool { return starts[i].Before(starts[j]) })
	return report{MostAtOnce: most, Busiest: ratelimit.BusiestWindow(starts, time.Second), Ran: len(starts)}, nil
}

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, closeFn, err := recipe.TempStore(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer closeFn()
	began := time.Now()
	r, err := run(ctx, s, 4, 5, 150*time.Millisecond)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%d syncs in %.1fs\n", r.Ran, time.Since(began).Seconds())
	for a := int64(1); a <= 4; a++ {
		fmt.Printf("account %d: at most %d sync running at once (limit 1)\n", a, r.MostAtOnce[a])
	}
	fmt.Printf("busiest second across accounts: %d starts (quota %d)\n", r.Busiest, quota.To)
}
