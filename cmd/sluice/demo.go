package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicequeue/sluice/cli"
	"github.com/sluicequeue/sluice/dispatcher"
	"github.com/sluicequeue/sluice/jobs"
	"github.com/sluicequeue/sluice/ratelimit"
)

// The demo's job kinds: an unlimited one that sometimes fails once, a rate
// limit per account, and a global rate limit.

type sendEmail struct{ N int }

func (sendEmail) Kind() string { return "send_email" }

// Account is a record: as a rate-limit key it gives "Account/ID".
type Account struct{ ID int }

type syncAccount struct{ Account Account }

func (syncAccount) Kind() string { return "sync_account" }

type geocode struct{ Address string }

func (geocode) Kind() string { return "geocode" }

const (
	demoEmails   = 200
	demoAccounts = 4
	demoSyncs    = 120
	demoGeocodes = 40
)

// demoLimits are the demo's rate limits, checked against the admissions
// the demo records.
var (
	syncLimit    = ratelimit.Limit[syncAccount]{To: 10, Per: time.Second, Burst: 3, Key: func(a syncAccount) any { return a.Account }}
	geocodeLimit = ratelimit.Limit[geocode]{To: 4, Per: time.Second, Burst: 2, Key: "global"}
)

// demoStats counts what happened per kind, and when limited jobs started.
type demoStats struct {
	mu       sync.Mutex
	done     map[string]int
	failed   map[string]int
	starts   map[string][]time.Time // per budget
	deferred atomic.Int64
}

func (d *demoStats) start(budget string) {
	d.mu.Lock()
	d.starts[budget] = append(d.starts[budget], time.Now())
	d.mu.Unlock()
}

func runDemo(ctx context.Context, env *cli.Env, args []string) error {
	fs, _ := env.FlagSet("demo", "demo [--database-url sqlite:sluice-demo.db]")
	url := fs.String("file", "sluice-demo.db", "the SQLite file to create (replaced if it exists)")
	timeout := fs.Duration("timeout", 90*time.Second, "give up after this long")
	if err := cli.Parse(fs, args); err != nil {
		return err
	}
	for _, suffix := range []string{"", "-wal", "-shm"} {
		if err := os.Remove(*url + suffix); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	s, err := cli.Open(ctx, "sqlite:"+*url)
	if err != nil {
		return err
	}
	defer s.Close()
	if _, err := s.MigrateUp(ctx, 0); err != nil {
		return err
	}
	fmt.Fprintf(env.Stdout, "sluice demo: %s created and migrated\n", *url)

	stats := &demoStats{done: map[string]int{}, failed: map[string]int{}, starts: map[string][]time.Time{}}
	reg := jobs.NewRegistry()
	oneSecond := jobs.Backoff(func(int) time.Duration { return time.Second })
	must(jobs.Register(reg, func(ctx context.Context, j *jobs.Job[sendEmail]) error {
		time.Sleep(5 * time.Millisecond)
		if j.Args.N%25 == 0 && j.Attempt == 1 {
			return errors.New("smtp: 421 try again later")
		}
		return nil
	}, oneSecond))
	must(jobs.Register(reg, func(ctx context.Context, j *jobs.Job[syncAccount]) error {
		stats.start(fmt.Sprintf("sync_account/Account/%d", j.Args.Account.ID))
		time.Sleep(20 * time.Millisecond)
		return nil
	}, jobs.RateLimit(syncLimit), oneSecond))
	must(jobs.Register(reg, func(ctx context.Context, j *jobs.Job[geocode]) error {
		stats.start("geocode/global")
		time.Sleep(10 * time.Millisecond)
		return nil
	}, jobs.RateLimit(geocodeLimit), oneSecond))

	client := jobs.NewClient(s, reg, jobs.ClientConfig{})
	var items []jobs.Item
	for i := 0; i < demoEmails; i++ {
		items = append(items, jobs.Item{Args: sendEmail{N: i}})
	}
	for i := 0; i < demoSyncs; i++ {
		items = append(items, jobs.Item{Args: syncAccount{Account: Account{ID: i % demoAccounts}}})
	}
	for i := 0; i < demoGeocodes; i++ {
		items = append(items, jobs.Item{Args: geocode{Address: fmt.Sprintf("%d Main St", i)}})
	}
	if _, err := client.EnqueueMany(ctx, items); err != nil {
		return err
	}
	fmt.Fprintf(env.Stdout, "enqueued %d send_email (unlimited, a few fail once), %d sync_account (%s per account, %d accounts), %d geocode (%s, global)\n\n",
		demoEmails, demoSyncs, describe(syncLimit.To, syncLimit.Per, syncLimit.Burst), demoAccounts, demoGeocodes,
		describe(geocodeLimit.To, geocodeLimit.Per, geocodeLimit.Burst))

	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	w, err := jobs.NewWorker(s, reg, jobs.WorkerConfig{
		Concurrency: 20, Logger: quiet, Name: "demo-worker",
		Hooks: jobs.Hooks{
			OnDefer: func(e jobs.DeferEvent) { stats.deferred.Add(int64(e.Count)) },
			OnFinish: func(e jobs.FinishEvent) {
				stats.mu.Lock()
				defer stats.mu.Unlock()
				switch e.Outcome {
				case jobs.OutcomeCompleted:
					stats.done[e.Kind]++
				case jobs.OutcomeFailed, jobs.OutcomeCancelled:
					stats.failed[e.Kind]++
				}
			},
		},
	})
	if err != nil {
		return err
	}
	d, err := dispatcher.New(s, dispatcher.Config{Interval: 200 * time.Millisecond, Logger: quiet, Name: "demo-dispatcher"})
	if err != nil {
		return err
	}
	runCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); _ = w.Run(runCtx) }()
	go func() { defer wg.Done(); _ = d.Run(runCtx) }()
	defer func() { stop(); wg.Wait() }()

	began := time.Now()
	totals := map[string]int{"send_email": demoEmails, "sync_account": demoSyncs, "geocode": demoGeocodes}
	kinds := []string{"send_email", "sync_account", "geocode"}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return fmt.Errorf("the demo did not finish within %s", *timeout)
		case <-tick.C:
		}
		stats.mu.Lock()
		var parts []string
		finished := 0
		for _, k := range kinds {
			done, failed := stats.done[k], stats.failed[k]
			finished += done + failed
			parts = append(parts, fmt.Sprintf("%-12s %3d/%d done %3d waiting %d failed", k, done, totals[k], totals[k]-done-failed, failed))
		}
		stats.mu.Unlock()
		fmt.Fprintf(env.Stdout, "%5.1fs  %s\n", time.Since(began).Seconds(), strings.Join(parts, " | "))
		if finished == demoEmails+demoSyncs+demoGeocodes {
			break
		}
	}
	fmt.Fprintf(env.Stdout, "\nall %d jobs done in %.1fs; claims deferred rate-limited jobs %d times instead of running them early\n",
		demoEmails+demoSyncs+demoGeocodes, time.Since(began).Seconds(), stats.deferred.Load())
	return stats.verify(env)
}

// verify prints, per budget, the most starts seen in any window of the
// limit's Per, against the limit.
func (d *demoStats) verify(env *cli.Env) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	budgets := make([]string, 0, len(d.starts))
	for b := range d.starts {
		budgets = append(budgets, b)
	}
	sort.Strings(budgets)
	var over []string
	for _, b := range budgets {
		to, per := syncLimit.To, syncLimit.Per
		if strings.HasPrefix(b, "geocode") {
			to, per = geocodeLimit.To, geocodeLimit.Per
		}
		// The handler records its start a moment after its claim; claims
		// are what the limit counts, so allow for that jitter.
		most := ratelimit.BusiestWindow(d.starts[b], per-20*time.Millisecond)
		fmt.Fprintf(env.Stdout, "  %-28s busiest %s window: %2d starts (limit %d)\n", b, per, most, to)
		if most > to {
			over = append(over, b)
		}
	}
	if len(over) > 0 {
		return fmt.Errorf("budgets over their limit: %s", strings.Join(over, ", "))
	}
	fmt.Fprintf(env.Stdout, "\nThe file is kept: try `go run ./cmd/sluice jobs --database-url sqlite:sluice-demo.db --kind geocode`.\n")
	return nil
}

func describe(to int, per time.Duration, burst int) string {
	return fmt.Sprintf("%d per %s, burst %d", to, per, burst)
}

func must(err error) {
	if err != nil {
		panic(err)
	}
}
