package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime/pprof"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicequeue/sluice/cli"
	"github.com/sluicequeue/sluice/dispatcher"
	"github.com/sluicequeue/sluice/jobs"
	"github.com/sluicequeue/sluice/ratelimit"
	"github.com/sluicequeue/sluice/store"
)

// benchNoop is the benchmark's job: it does nothing.
type benchNoop struct{}

func (benchNoop) Kind() string { return "bench_noop" }

// benchLimited is a rate-limited no-op, with its budget key in the args.
type benchLimited struct{ Key int }

func (benchLimited) Kind() string { return "bench_limited" }

// benchStamp carries its enqueue time, for latency.
type benchStamp struct{ At int64 }

func (benchStamp) Kind() string { return "bench_stamp" }

const (
	benchQueue    = "bench"
	finishedQueue = "bench_finished"
)

type benchFlags struct {
	url         string
	jobs        int
	duration    time.Duration
	workers     int
	concurrency int
	rate        string
	burst       int
	keys        int
	latency     bool
	finished    int
	deleteDone  bool
	cpuProfile  string
}

func runBench(ctx context.Context, env *cli.Env, args []string) error {
	fs, url := env.FlagSet("bench", "bench [--jobs N | --duration D | --latency] [--rate N/PER --burst B --keys K] [flags]")
	var f benchFlags
	fs.IntVar(&f.jobs, "jobs", 100000, "burn-down: insert this many no-op jobs, then work them")
	fs.DurationVar(&f.duration, "duration", 0, "continuous: insert and work no-op jobs for this long instead of a burn-down")
	fs.IntVar(&f.workers, "workers", 2, "claiming workers (each its own claim loop) in this process")
	fs.IntVar(&f.concurrency, "concurrency", 1000, "jobs each worker runs at once (and so its largest claim)")
	fs.StringVar(&f.rate, "rate", "", "rate-limit the jobs: N/PER, e.g. 1000/1s")
	fs.IntVar(&f.burst, "burst", 1, "with --rate: the burst")
	fs.IntVar(&f.keys, "keys", 1, "with --rate: spread jobs over this many budgets")
	fs.BoolVar(&f.latency, "latency", false, "measure enqueue-to-start latency at light load (50 jobs/s for 10s)")
	fs.IntVar(&f.finished, "finished", 0, "first make sure this many finished jobs are kept in the table")
	fs.BoolVar(&f.deleteDone, "delete", false, "delete jobs as they complete instead of keeping them")
	fs.StringVar(&f.cpuProfile, "cpuprofile", "", "write a CPU profile of the run to this file")
	if err := cli.Parse(fs, args); err != nil {
		return err
	}
	f.url = *url
	if f.jobs < 1 || f.workers < 1 || f.concurrency < 1 || f.keys < 1 {
		return cli.Usagef("--jobs, --workers, --concurrency and --keys must be at least 1")
	}
	b, err := newBench(ctx, env, f)
	if err != nil {
		return err
	}
	defer b.close()
	if f.cpuProfile != "" {
		out, err := os.Create(f.cpuProfile)
		if err != nil {
			return err
		}
		defer out.Close()
		if err := pprof.StartCPUProfile(out); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	switch {
	case f.latency:
		return b.latency(ctx)
	case f.duration > 0:
		return b.continuous(ctx)
	default:
		return b.burnDown(ctx)
	}
}

// bench is one benchmark run's state.
type bench struct {
	env       *cli.Env
	f         benchFlags
	store     *store.Store
	reg       *jobs.Registry
	client    *jobs.Client
	limit     *ratelimit.Limit[benchLimited]
	done      atomic.Int64
	mu        sync.Mutex
	claims    map[int][]time.Time // starts of limited jobs, per budget key
	latencies []time.Duration
}

func newBench(ctx context.Context, env *cli.Env, f benchFlags) (*bench, error) {
	s, err := cli.Open(ctx, f.url)
	if err != nil {
		return nil, err
	}
	if _, err := s.MigrateUp(ctx, 0); err != nil {
		_ = s.Close()
		return nil, err
	}
	s.DeleteOnComplete = f.deleteDone
	b := &bench{env: env, f: f, store: s, reg: jobs.NewRegistry()}
	count := func(context.Context, *jobs.Job[benchNoop]) error { b.done.Add(1); return nil }
	must(jobs.Register(b.reg, count, jobs.Queue(benchQueue)))
	must(jobs.Register(b.reg, func(_ context.Context, j *jobs.Job[benchStamp]) error {
		d := time.Since(time.Unix(0, j.Args.At))
		b.mu.Lock()
		b.latencies = append(b.latencies, d)
		b.mu.Unlock()
		b.done.Add(1)
		return nil
	}, jobs.Queue(benchQueue)))
	if f.rate != "" {
		to, per, err := parseRate(f.rate)
		if err != nil {
			return nil, err
		}
		b.limit = &ratelimit.Limit[benchLimited]{To: to, Per: per, Burst: f.burst, Key: func(a benchLimited) any { return a.Key }}
		b.claims = map[int][]time.Time{}
		err = jobs.Register(b.reg, func(_ context.Context, j *jobs.Job[benchLimited]) error {
			b.mu.Lock()
			b.claims[j.Args.Key] = append(b.claims[j.Args.Key], time.Now())
			b.mu.Unlock()
			b.done.Add(1)
			return nil
		}, jobs.Queue(benchQueue), jobs.RateLimit(*b.limit))
		if err != nil {
			return nil, cli.Usagef("%v", err)
		}
	}
	b.client = jobs.NewClient(s, b.reg, jobs.ClientConfig{})
	if err := b.reset(ctx); err != nil {
		return nil, err
	}
	return b, nil
}

func parseRate(s string) (int, time.Duration, error) {
	n, p, ok := strings.Cut(s, "/")
	to, err := strconv.Atoi(n)
	if !ok || err != nil {
		return 0, 0, cli.Usagef("--rate %q: want N/PER, e.g. 1000/1s", s)
	}
	if !strings.ContainsAny(p, "0123456789") {
		p = "1" + p
	}
	per, err := time.ParseDuration(p)
	if err != nil {
		return 0, 0, cli.Usagef("--rate %q: %v", s, err)
	}
	return to, per, nil
}

func (b *bench) close() { _ = b.store.Close() }

func (b *bench) say(format string, args ...any) { fmt.Fprintf(b.env.Stdout, format+"\n", args...) }

// reset empties the bench queue and budgets, and tops up the kept
// finished jobs.
func (b *bench) reset(ctx context.Context) error {
	db := b.store.DB()
	if _, err := db.Exec(ctx, "DELETE FROM sluice_jobs WHERE queue = '"+benchQueue+"'"); err != nil {
		return fmt.Errorf("clear the bench queue: %w", err)
	}
	if _, err := db.Exec(ctx, "DELETE FROM sluice_budgets WHERE name LIKE 'bench_%'"); err != nil {
		return fmt.Errorf("clear the bench budgets: %w", err)
	}
	if b.store.Dialect().Name() == "postgres" {
		// What autovacuum would do between runs (it may be off on a test
		// server): without it every run pays for the last one's dead rows.
		if _, err := db.Exec(ctx, "VACUUM ANALYZE sluice_jobs"); err != nil {
			return fmt.Errorf("vacuum: %w", err)
		}
	}
	if b.f.finished == 0 {
		return nil
	}
	rows, err := db.Query(ctx, "SELECT count(*) FROM sluice_jobs WHERE queue = '"+finishedQueue+"'")
	if err != nil {
		return err
	}
	var have int64
	for rows.Next() {
		if err := rows.Scan(&have); err != nil {
			rows.Close()
			return err
		}
	}
	rows.Close()
	missing := b.f.finished - int(have)
	if missing <= 0 {
		b.say("%d finished jobs are kept in the table", have)
		return nil
	}
	b.say("adding %d finished jobs to the table…", missing)
	if err := b.insert(ctx, missing, func(int) jobs.Item {
		return jobs.Item{Args: benchNoop{}, Options: []jobs.EnqueueOption{jobs.Queue(finishedQueue)}}
	}); err != nil {
		return err
	}
	_, err = db.Exec(ctx, "UPDATE sluice_jobs SET state = 'completed', finished_at = created_at, attempt = 1 WHERE queue = '"+finishedQueue+"' AND state = 'ready'")
	return err
}

// insert enqueues n jobs in batches of 5000.
func (b *bench) insert(ctx context.Context, n int, item func(i int) jobs.Item) error {
	const batch = 5000
	items := make([]jobs.Item, 0, batch)
	for i := 0; i < n; i++ {
		items = append(items, item(i))
		if len(items) == batch || i == n-1 {
			if _, err := b.client.EnqueueMany(ctx, items); err != nil {
				return err
			}
			items = items[:0]
		}
	}
	return nil
}

func (b *bench) item(i int) jobs.Item {
	if b.limit != nil {
		return jobs.Item{Args: benchLimited{Key: i % b.f.keys}}
	}
	return jobs.Item{Args: benchNoop{}}
}

// workers starts the claiming workers and, for rate-limited runs, a
// dispatcher; stop ends them and waits.
func (b *bench) workers(ctx context.Context, s *store.Store) (stop func()) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for i := 0; i < b.f.workers; i++ {
		w, err := jobs.NewWorker(s, b.reg, jobs.WorkerConfig{
			Queues: []string{benchQueue}, Concurrency: b.f.concurrency, Logger: quiet, Name: fmt.Sprintf("bench-%d", i),
		})
		must(err)
		wg.Add(1)
		go func() { defer wg.Done(); _ = w.Run(ctx) }()
	}
	if b.limit != nil {
		d, err := dispatcher.New(s, dispatcher.Config{Interval: 100 * time.Millisecond, Logger: quiet})
		must(err)
		wg.Add(1)
		go func() { defer wg.Done(); _ = d.Run(ctx) }()
	}
	return func() { cancel(); wg.Wait() }
}

// progress prints the count every 2 seconds until stop is closed.
func (b *bench) progress(began time.Time, stop <-chan struct{}) {
	t := time.NewTicker(2 * time.Second)
	defer t.Stop()
	last, lastAt := int64(0), began
	for {
		select {
		case <-stop:
			return
		case now := <-t.C:
			n := b.done.Load()
			b.say("%6.1fs  done %8d  (%.0f jobs/s now)", now.Sub(began).Seconds(), n, float64(n-last)/now.Sub(lastAt).Seconds())
			last, lastAt = n, now
		}
	}
}

func (b *bench) burnDown(ctx context.Context) error {
	b.say("bench: burn-down of %d jobs on %s, %d workers × %d concurrency", b.f.jobs, b.store.Dialect().Name(), b.f.workers, b.f.concurrency)
	began := time.Now()
	if err := b.insert(ctx, b.f.jobs, b.item); err != nil {
		return err
	}
	inserted := time.Since(began)
	b.say("inserted in %s (%.0f jobs/s)", inserted.Round(time.Millisecond), float64(b.f.jobs)/inserted.Seconds())
	if err := b.analyze(ctx); err != nil {
		return err
	}
	began = time.Now()
	stopProgress := make(chan struct{})
	go b.progress(began, stopProgress)
	stop := b.workers(ctx, b.store)
	for b.done.Load() < int64(b.f.jobs) && ctx.Err() == nil {
		time.Sleep(5 * time.Millisecond)
	}
	stop() // flushes the last completions
	close(stopProgress)
	elapsed := time.Since(began)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	b.rateReport(elapsed)
	b.say("worked %d jobs in %s", b.f.jobs, elapsed.Round(time.Millisecond))
	b.say("jobs/s: %.0f", float64(b.f.jobs)/elapsed.Seconds())
	return nil
}

// analyze refreshes PostgreSQL's statistics after a bulk insert, as
// autovacuum would shortly.
func (b *bench) analyze(ctx context.Context) error {
	if b.store.Dialect().Name() != "postgres" {
		return nil
	}
	_, err := b.store.DB().Exec(ctx, "ANALYZE sluice_jobs")
	return err
}

func (b *bench) continuous(ctx context.Context) error {
	b.say("bench: continuous for %s on %s, %d workers × %d concurrency", b.f.duration, b.store.Dialect().Name(), b.f.workers, b.f.concurrency)
	ctx, cancel := context.WithTimeout(ctx, b.f.duration)
	defer cancel()
	var inserted, failed atomic.Int64
	var wg sync.WaitGroup
	// Two producers keep a backlog of about 20,000 ready jobs.
	for p := 0; p < 2; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				if inserted.Load()-b.done.Load() > 20000 {
					time.Sleep(2 * time.Millisecond)
					continue
				}
				items := make([]jobs.Item, 1000)
				for i := range items {
					items[i] = b.item(i)
				}
				if _, err := b.client.EnqueueMany(ctx, items); err == nil {
					inserted.Add(int64(len(items)))
				} else if ctx.Err() == nil {
					failed.Add(1)
					b.say("bench: enqueue: %v", err)
				}
			}
		}()
	}
	began := time.Now()
	stopProgress := make(chan struct{})
	go b.progress(began, stopProgress)
	stop := b.workers(ctx, b.store)
	<-ctx.Done()
	elapsed := time.Since(began)
	n := b.done.Load()
	stop()
	wg.Wait()
	close(stopProgress)
	b.rateReport(elapsed)
	b.say("inserted %d and worked %d jobs in %s; %d enqueue batches failed", inserted.Load(), n, elapsed.Round(time.Millisecond), failed.Load())
	b.say("jobs/s: %.0f", float64(n)/elapsed.Seconds())
	return nil
}

// latency enqueues one job every 20 ms for 10 s from a second connection
// pool, so that workers learn of them only as another process's workers
// would (NOTIFY on PostgreSQL, polling elsewhere), and reports how long
// each took from enqueue to its handler's start.
func (b *bench) latency(ctx context.Context) error {
	b.say("bench: enqueue-to-start latency on %s, one job every 20ms for 10s", b.store.Dialect().Name())
	workerStore, err := cli.Open(ctx, b.f.url)
	if err != nil {
		return err
	}
	defer workerStore.Close()
	stop := b.workers(ctx, workerStore)
	time.Sleep(500 * time.Millisecond) // let the workers start listening
	const n = 500
	for i := 0; i < n && ctx.Err() == nil; i++ {
		if _, err := b.client.Enqueue(ctx, benchStamp{At: time.Now().UnixNano()}); err != nil {
			stop()
			return err
		}
		time.Sleep(20 * time.Millisecond)
	}
	deadline := time.Now().Add(5 * time.Second)
	for b.done.Load() < n && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	stop()
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.latencies) == 0 {
		return errors.New("no job started")
	}
	sort.Slice(b.latencies, func(i, j int) bool { return b.latencies[i] < b.latencies[j] })
	q := func(p float64) time.Duration {
		return b.latencies[int(p*float64(len(b.latencies)-1))].Round(10 * time.Microsecond)
	}
	b.say("samples %d  p50 %s  p90 %s  p99 %s  max %s", len(b.latencies), q(0.5), q(0.9), q(0.99), q(1))
	b.say("latency p50: %s", q(0.5))
	return nil
}

// rateReport prints, for a rate-limited run, the most claims seen in any
// window of Per and the drain rate against the theoretical one.
func (b *bench) rateReport(elapsed time.Duration) {
	if b.limit == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	// The handler records a claim's start a moment after the claim; allow
	// a little jitter so that it is not mistaken for the limit's.
	most, total := 0, 0
	for _, starts := range b.claims {
		most = max(most, ratelimit.BusiestWindow(starts, b.limit.Per-b.limit.Per/50))
		total += len(starts)
	}
	theory := float64(b.f.keys) * float64(b.limit.To-b.limit.Burst+1) / b.limit.Per.Seconds()
	b.say("limit %d per %s, burst %d, over %d keys: the busiest window of one key held %d (limit %d)",
		b.limit.To, b.limit.Per, b.limit.Burst, b.f.keys, most, b.limit.To)
	b.say("drained %d at %.0f/s; the limit allows %.0f/s after the first bursts", total, float64(total)/elapsed.Seconds(), theory)
}
