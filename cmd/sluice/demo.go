package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
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
	"github.com/sluicequeue/sluice/internal/driver/sqlite"
	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/jobs"
	"github.com/sluicequeue/sluice/ratelimit"
	"github.com/sluicequeue/sluice/store"
	"github.com/sluicequeue/sluice/store/dburl"
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

// demoQueue is the queue the demo's jobs go to, so that on a database of
// the user's it works only its own jobs.
const demoQueue = "sluice_demo"

// demoStats counts what happened per kind.
type demoStats struct {
	mu      sync.Mutex
	done    map[string]int
	failed  map[string]int
	retried map[string]int
	// doneLater counts the jobs done on a later attempt than their first.
	doneLater map[string]int
	deferred  atomic.Int64
}

func runDemo(ctx context.Context, env *cli.Env, args []string) error {
	fs, url := env.FlagSet("demo", "demo [--file sluice-demo.db | --database-url URL]")
	file := fs.String("file", "sluice-demo.db", "the SQLite file to create (replaced if it exists), unless --database-url is given")
	timeout := fs.Duration("timeout", 90*time.Second, "give up after this long")
	if err := cli.Parse(fs, args); err != nil {
		return err
	}
	// Only a --database-url on the command line is used: a
	// $SLUICE_DATABASE_URL set for an app does not send the demo's jobs
	// there.
	onDatabase := false
	fs.Visit(func(f *flag.Flag) { onDatabase = onDatabase || f.Name == "database-url" })
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	// The file's name as given, '%' and all: a sqlite: URL's path is
	// percent-decoded.
	target := sqlite.URL(*file)
	if onDatabase {
		target = *url
	} else {
		for _, suffix := range []string{"", "-wal", "-shm"} {
			if err := os.Remove(*file + suffix); err != nil && !errors.Is(err, os.ErrNotExist) {
				return err
			}
		}
	}
	s, err := cli.Open(ctx, target)
	if err != nil {
		return err
	}
	defer s.Close()
	if _, err := s.MigrateUp(ctx, 0); err != nil {
		return err
	}
	if onDatabase {
		if err := demoQueueIsEmpty(ctx, s); err != nil {
			return err
		}
		fmt.Fprintf(env.Stdout, "sluice demo: %s migrated; the demo's jobs go to queue %s\n", cli.DescribeURL(target), demoQueue)
	} else {
		fmt.Fprintf(env.Stdout, "sluice demo: %s created and migrated\n", *file)
	}

	stats := &demoStats{done: map[string]int{}, failed: map[string]int{}, retried: map[string]int{}, doneLater: map[string]int{}}
	reg := jobs.NewRegistry()
	oneSecond := jobs.Backoff(func(int) time.Duration { return time.Second })
	inDemoQueue := jobs.Queue(demoQueue)
	must(jobs.Register(reg, func(ctx context.Context, j *jobs.Job[sendEmail]) error {
		time.Sleep(5 * time.Millisecond)
		if j.Args.N%25 == 0 && j.Attempt == 1 {
			return errors.New("smtp: 421 try again later")
		}
		return nil
	}, oneSecond, inDemoQueue))
	must(jobs.Register(reg, func(ctx context.Context, j *jobs.Job[syncAccount]) error {
		time.Sleep(20 * time.Millisecond)
		return nil
	}, jobs.RateLimit(syncLimit), oneSecond, inDemoQueue))
	must(jobs.Register(reg, func(ctx context.Context, j *jobs.Job[geocode]) error {
		time.Sleep(10 * time.Millisecond)
		return nil
	}, jobs.RateLimit(geocodeLimit), oneSecond, inDemoQueue))

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
	fmt.Fprintf(env.Stdout, "enqueued %d send_email, %d sync_account for %d accounts, %d geocode\n\n", demoEmails, demoSyncs, demoAccounts, demoGeocodes)
	explain(env)

	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	w, err := jobs.NewWorker(s, reg, jobs.WorkerConfig{
		Queues: []string{demoQueue}, Concurrency: 20, Logger: quiet, Name: "demo-worker",
		Hooks: jobs.Hooks{
			OnDefer: func(e jobs.DeferEvent) { stats.deferred.Add(int64(e.Count)) },
			OnFinish: func(e jobs.FinishEvent) {
				stats.mu.Lock()
				defer stats.mu.Unlock()
				switch e.Outcome {
				case jobs.OutcomeCompleted:
					stats.done[e.Kind]++
					if e.Attempt > 1 {
						stats.doneLater[e.Kind]++
					}
				case jobs.OutcomeRetried:
					stats.retried[e.Kind]++
				case jobs.OutcomeFailed, jobs.OutcomeCancelled:
					stats.failed[e.Kind]++
				}
			},
		},
	})
	if err != nil {
		return err
	}
	// The demo's dispatcher promotes due jobs; it leaves the clean-ups of a
	// database that may be the user's to the user's own dispatchers.
	d, err := dispatcher.New(s, dispatcher.Config{Interval: 200 * time.Millisecond, Logger: quiet, Name: "demo-dispatcher",
		Maintenance: dispatcher.Maintenance{ClearIdleBudgets: dispatcher.MaintenanceTask{Off: true}, ClearFinishedJobs: dispatcher.MaintenanceTask{Off: true}}})
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
			part := fmt.Sprintf("%-12s %3d/%d done %3d waiting", k, done, totals[k], totals[k]-done-failed)
			if k == "send_email" {
				part += fmt.Sprintf(" %d retried", stats.retried[k])
			}
			parts = append(parts, part)
		}
		stats.mu.Unlock()
		fmt.Fprintf(env.Stdout, "%5.1fs  %s\n", time.Since(began).Seconds(), strings.Join(parts, " | "))
		if finished == demoEmails+demoSyncs+demoGeocodes {
			break
		}
	}
	stats.mu.Lock()
	fmt.Fprintf(env.Stdout, "\nall %d jobs done in %.1fs.\n", demoEmails+demoSyncs+demoGeocodes, time.Since(began).Seconds())
	fmt.Fprintf(env.Stdout, "send_email: %d runs failed (smtp: 421 try again later) and were retried 1s later; %d jobs then succeeded on a later attempt, %d failed for good.\n",
		stats.retried["send_email"], stats.doneLater["send_email"], stats.failed["send_email"])
	stats.mu.Unlock()
	fmt.Fprintf(env.Stdout, "rate limits: %d times a worker claimed a rate-limited job before its budget allowed it; instead of running it early,\n"+
		"it put the job back as a scheduled job with the time of its next slot (no worker slept or held it).\n", stats.deferred.Load())
	return stats.verify(ctx, env, s, onDatabase, target)
}

// verify prints, per budget, the most claims in any window of the
// limit's Per, against the limit. The claim times are the database's
// record of when each job was claimed to run (on the clock that decided),
// not when its handler happened to start: a loaded machine delays a start,
// never a decision.
func (d *demoStats) verify(ctx context.Context, env *cli.Env, pub *store.Store, onDatabase bool, target string) error {
	s := engine.From(pub)
	claims := map[string][]time.Time{}
	for _, kind := range []string{"sync_account", "geocode"} {
		js, err := s.ListJobs(ctx, engine.JobFilter{Queue: demoQueue, Kind: kind, State: engine.StateCompleted, Limit: 1000})
		if err != nil {
			return err
		}
		for _, j := range js {
			budget := "geocode/global"
			if kind == "sync_account" {
				var a syncAccount
				if err := json.Unmarshal(j.Args, &a); err != nil {
					return err
				}
				budget = fmt.Sprintf("sync_account/Account/%d", a.Account.ID)
			}
			claims[budget] = append(claims[budget], j.AttemptedAt)
		}
	}
	budgets := make([]string, 0, len(claims))
	for b := range claims {
		budgets = append(budgets, b)
	}
	sort.Strings(budgets)
	var over []string
	fmt.Fprintln(env.Stdout, "Each budget's busiest window of claims, against its limit:")
	for _, b := range budgets {
		to, per := syncLimit.To, syncLimit.Per
		if strings.HasPrefix(b, "geocode") {
			to, per = geocodeLimit.To, geocodeLimit.Per
		}
		// Claim times are stored to the microsecond: a pair a whole Per
		// apart may come back a microsecond closer.
		most := ratelimit.BusiestWindow(claims[b], per-time.Microsecond)
		fmt.Fprintf(env.Stdout, "  %-28s busiest %s window: %2d claims (limit %d)\n", b, per, most, to)
		if most > to {
			over = append(over, b)
		}
	}
	if len(over) > 0 {
		return fmt.Errorf("budgets over their limit: %s", strings.Join(over, ", "))
	}
	if onDatabase {
		fmt.Fprintf(env.Stdout, "\nThe jobs are kept: try `go run ./cmd/sluice jobs --database-url '%s' --queue %s --kind geocode`.\n", dburl.Redact(target), demoQueue)
	} else {
		fmt.Fprintf(env.Stdout, "\nThe file is kept: try `go run ./cmd/sluice jobs --database-url %s --kind geocode`.\n", target)
	}
	return nil
}

// explain says, before the demo runs, what each kind shows.
func explain(env *cli.Env) {
	sync, geo := syncLimit, geocodeLimit
	fmt.Fprintf(env.Stdout, "What to watch:\n"+
		"  send_email    no limit: runs as fast as 20 workers go. Every 25th fails once (smtp: 421) and is retried 1s later.\n"+
		"  sync_account  %s, per account: each account starts %d at once, then %d per second after that burst.\n"+
		"  geocode       %s, one budget for all: %d at once, then %d per second after that burst.\n"+
		"A burst is borrowed from the window: after %d geocodes at once, the rest are spaced %s apart, so that no 1s window\n"+
		"ever holds more than %d. That is why a backlog drains at To - Burst + 1 per Per (%d - %d + 1 = %d per second), not at To.\n\n",
		describe(sync.To, sync.Per, sync.Burst), sync.Burst, sync.To-sync.Burst+1,
		describe(geo.To, geo.Per, geo.Burst), geo.Burst, geo.To-geo.Burst+1,
		geo.Burst, (geo.Per / time.Duration(geo.To-geo.Burst+1)).Round(time.Millisecond), geo.To,
		geo.To, geo.Burst, geo.To-geo.Burst+1)
}

// demoQueueIsEmpty refuses to start while an earlier demo's jobs wait in
// demoQueue: the demo counts only its own.
func demoQueueIsEmpty(ctx context.Context, pub *store.Store) error {
	s := engine.From(pub)
	st, err := s.Stats(ctx)
	if err != nil {
		return err
	}
	for _, q := range st {
		if q.Queue != demoQueue {
			continue
		}
		n := int64(0)
		for _, state := range []engine.State{engine.StateReady, engine.StateScheduled, engine.StateParked, engine.StateBlocked, engine.StateRunning} {
			n += q.Counts[state]
		}
		if n > 0 {
			return fmt.Errorf("queue %s holds %d unfinished jobs of an earlier demo; wait for them, cancel them (sluice jobs --queue %s), or use another database", demoQueue, n, demoQueue)
		}
	}
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
