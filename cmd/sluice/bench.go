package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluicequeue/sluice/cli"
	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/jobs"
	"github.com/sluicequeue/sluice/otelsluice"
	"github.com/sluicequeue/sluice/ratelimit"
	"github.com/sluicequeue/sluice/store"
)

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

	procs        int
	dispInterval time.Duration
	scenario     string
	limits       string
	drainFor     time.Duration
	drainTimeout time.Duration
	flood        int
	floodRate    string
	lightRate    string
	rounds       int
	otel         bool
	otelSample   float64
}

func runBench(ctx context.Context, env *cli.Env, args []string) error {
	fs, url := env.FlagSet("bench", "bench [--jobs N | --duration D | --latency | --scenario drain|flood|loose|fair] [--procs N] [--rate N/PER --burst B --keys K] [flags]")
	var f benchFlags
	fs.IntVar(&f.jobs, "jobs", 100000, "burn-down: insert this many no-op jobs, then work them")
	fs.DurationVar(&f.duration, "duration", 0, "continuous: insert and work no-op jobs for this long instead of a burn-down")
	fs.IntVar(&f.workers, "workers", 2, "claiming workers (each its own claim loop) in this process; ignored with --procs")
	fs.IntVar(&f.concurrency, "concurrency", 1000, "jobs each worker runs at once (and so its largest claim)")
	fs.StringVar(&f.rate, "rate", "", "rate-limit the jobs: N/PER, e.g. 1000/1s (loose scenario: 1000/1s)")
	fs.IntVar(&f.burst, "burst", 1, "with --rate: the burst (loose scenario: 1000)")
	fs.IntVar(&f.keys, "keys", 1, "with --rate: spread jobs over this many budgets (loose scenario: 100); fair: the burn-down's fairness keys (100)")
	fs.BoolVar(&f.latency, "latency", false, "measure enqueue-to-start latency at light load (50 jobs/s for 10s)")
	fs.IntVar(&f.finished, "finished", 0, "first make sure this many finished jobs are kept in the table")
	fs.BoolVar(&f.deleteDone, "delete", false, "delete jobs as they complete instead of keeping them")
	fs.StringVar(&f.cpuProfile, "cpuprofile", "", "write a CPU profile of the run (this process only) to this file")
	fs.IntVar(&f.procs, "procs", 0, "run the workers in this many child processes, one worker each, on their own pools (0: in this process; drain scenario: 1)")
	fs.DurationVar(&f.dispInterval, "dispatcher-interval", 0, "the dispatcher's poll interval (0: its default, 1s; figures before the scenarios used 100ms)")
	fs.StringVar(&f.scenario, "scenario", "", "drain (declared vs measured drain rates), flood (unlimited jobs behind a throttled flood), loose (unlimited vs a loose limit) or fair (fair shares: noisy neighbour, weighted shares, fair vs plain burn-down)")
	fs.StringVar(&f.limits, "limits", defaultDrainLimits, "drain: the limits, TO/PER:BURST separated by commas")
	fs.DurationVar(&f.drainFor, "drain-for", 8*time.Second, "drain: size each backlog to drain for about this long after its burst")
	fs.DurationVar(&f.drainTimeout, "drain-timeout", 0, "drain: give up on a limit's backlog after this long (0: 3 × --drain-for + 10s)")
	fs.IntVar(&f.flood, "flood", 50000, "flood: rate-limited jobs enqueued ahead of the unlimited ones; fair: the heavy key's jobs")
	fs.StringVar(&f.floodRate, "flood-rate", "10/1s", "flood: the flood's limit, N/PER with burst 1, on one budget")
	fs.StringVar(&f.lightRate, "light-rate", "", "flood: rate-limit the light load's jobs too, N/PER with burst N, each on one of "+strconv.Itoa(lightBudgets)+" budgets of their own (\"\": unlimited)")
	fs.IntVar(&f.rounds, "rounds", 0, "flood, loose and fair: rounds, each a pair of runs (0: 3 for flood and fair, 5 for loose)")
	fs.BoolVar(&f.otel, "otel", false, "trace and measure every enqueue and run with otelsluice (spans batched and dropped at export); not with --procs")
	fs.Float64Var(&f.otelSample, "otel-sample", 1, "with --otel: the fraction of traces sampled (a parent-based trace-id ratio sampler; 1 samples all)")
	if err := cli.Parse(fs, args); err != nil {
		return err
	}
	f.url = *url
	if err := f.check(setFlags(fs)); err != nil {
		return err
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
	case f.scenario == "drain":
		return b.drainScenario(ctx)
	case f.scenario == "flood":
		return b.floodScenario(ctx)
	case f.scenario == "loose":
		return b.looseScenario(ctx)
	case f.scenario == "fair":
		return b.fairScenario(ctx)
	case f.latency:
		return b.latency(ctx)
	case f.duration > 0:
		return b.continuous(ctx)
	default:
		return b.burnDown(ctx)
	}
}

func setFlags(fs *flag.FlagSet) map[string]bool {
	set := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	return set
}

// benchScenarios are the values of --scenario, which the command's
// summary lists too.
var benchScenarios = []string{"drain", "flood", "loose", "fair"}

// check validates the flags and fills in the scenarios' defaults.
func (f *benchFlags) check(set map[string]bool) error {
	if f.jobs < 1 || f.workers < 1 || f.concurrency < 1 || f.keys < 1 {
		return cli.Usagef("--jobs, --workers, --concurrency and --keys must be at least 1")
	}
	if f.otelSample < 0 || f.otelSample > 1 {
		return cli.Usagef("--otel-sample is %g; it must be between 0 and 1", f.otelSample)
	}
	if f.otel && f.procs > 0 {
		return cli.Usagef("--otel instruments the workers in this process: it does not combine with --procs")
	}
	if f.procs < 0 || f.dispInterval < 0 || f.flood < 0 || f.rounds < 0 || f.drainTimeout < 0 {
		return cli.Usagef("--procs, --dispatcher-interval, --flood, --rounds and --drain-timeout may not be negative")
	}
	switch {
	case f.scenario == "":
	case slices.Contains(benchScenarios, f.scenario):
		if f.latency || f.duration > 0 {
			return cli.Usagef("--scenario does not combine with --latency or --duration")
		}
	default:
		return cli.Usagef("--scenario %q: want %s", f.scenario, strings.Join(benchScenarios, ", "))
	}
	if f.lightRate != "" && f.scenario != "flood" {
		return cli.Usagef("--light-rate limits the flood scenario's light load: it needs --scenario flood")
	}
	switch f.scenario {
	case "drain":
		if f.deleteDone {
			return cli.Usagef("--scenario drain reads admission times from the jobs' rows: it does not combine with --delete")
		}
		if f.drainFor <= 0 {
			return cli.Usagef("--drain-for must be positive")
		}
		if !set["procs"] {
			f.procs = 1
		}
		if f.drainTimeout == 0 {
			f.drainTimeout = 3*f.drainFor + 10*time.Second
		}
	case "flood":
		if f.rounds == 0 {
			f.rounds = 3
		}
		if _, _, err := parseRate(f.floodRate); err != nil {
			return err
		}
		if f.lightRate != "" {
			if _, _, err := parseRate(f.lightRate); err != nil {
				return cli.Usagef("--light-rate: %v", err)
			}
		}
	case "fair":
		if f.procs > 0 {
			return cli.Usagef("--scenario fair records the order jobs start in, in this process: it does not combine with --procs")
		}
		if f.rounds == 0 {
			f.rounds = 3
		}
		if !set["keys"] {
			f.keys = 100
		}
		if !set["flood"] {
			f.flood = 50000
		}
	case "loose":
		if f.rounds == 0 {
			f.rounds = 5
		}
		if !set["rate"] {
			f.rate = "1000/1s"
		}
		if !set["burst"] {
			f.burst = 1000
		}
		if !set["keys"] {
			f.keys = 100
		}
	}
	return nil
}

// beyondBursts says, when a budget gets more of the loose scenario's jobs
// than its burst admits at once, that the rest may wait: the budget then
// admits To − Burst + 1 per Per (1 a second by default), and the ratio
// would measure waiting as well as the check. It returns "" otherwise.
func (f benchFlags) beyondBursts() string {
	each := (f.jobs + f.keys - 1) / f.keys
	if each <= f.burst {
		return ""
	}
	return fmt.Sprintf("note: %d jobs over %d budgets is up to %d a budget, more than the burst (%d) admits at once; the rest wait for the limit's rate (To − Burst + 1 per Per), so the ratio measures waiting too (lower --jobs, or raise --keys or --burst)",
		f.jobs, f.keys, each, f.burst)
}

// bench is the benchmark's state: the flags and the parent's store, and,
// per run, the registry the run declares and what its handlers saw.
type bench struct {
	env *cli.Env
	f   benchFlags
	// pub is the store as workers and clients take it; store is the
	// engine behind it, which the bench reads and resets directly.
	pub   *store.Store
	store *engine.Store
	quiet *slog.Logger
	// otel is the integration --otel wires in; nil without it.
	otel      *otelsluice.Integration
	closeOtel func()
	// noPurgeWait is set once InnoDB's purge could not be awaited (its
	// counter unreadable, or a busy server): later resets do not wait.
	noPurgeWait bool

	// Set by configure, for one run.
	kc       kindsConfig
	reg      *jobs.Registry
	client   *jobs.Client
	limit    *ratelimit.Limit[benchLimited]
	dispatch bool
	t        *tally
	enqueued map[string]int
	seq      int // names workers uniquely
}

func newBench(ctx context.Context, env *cli.Env, f benchFlags) (*bench, error) {
	b := &bench{env: env, f: f, quiet: slog.New(slog.NewTextHandler(io.Discard, nil))}
	s, err := b.open(ctx)
	if err != nil {
		return nil, err
	}
	if _, err := s.MigrateUp(ctx, 0); err != nil {
		_ = s.Close()
		return nil, err
	}
	b.pub, b.store = s, engine.From(s)
	if f.otel {
		if b.otel, b.closeOtel, err = newBenchOtel(f.otelSample); err != nil {
			_ = s.Close()
			return nil, err
		}
	}
	// The flags' own kinds: bench_limited when --rate is given.
	if err := b.configure(kindsConfig{rate: f.rate, burst: f.burst}, f.rate != ""); err != nil {
		_ = s.Close()
		return nil, err
	}
	if err := b.reset(ctx); err != nil {
		_ = s.Close()
		return nil, err
	}
	return b, nil
}

// open opens a connection pool of the bench's own.
func (b *bench) open(ctx context.Context) (*store.Store, error) {
	var opts []store.Option
	if b.f.deleteDone {
		opts = append(opts, store.DeleteOnComplete())
	}
	return store.Open(ctx, b.f.url, opts...)
}

// configure starts a run: the kinds it declares (the workers, in this
// process or in children, declare the same), whether a dispatcher runs,
// and fresh counts.
func (b *bench) configure(kc kindsConfig, dispatch bool) error {
	b.kc, b.dispatch = kc, dispatch
	b.t = newTally()
	b.t.recordStarts = b.f.deleteDone
	b.enqueued = map[string]int{}
	b.reg = jobs.NewRegistry()
	if err := registerKinds(b.reg, kc, b.t); err != nil {
		return err
	}
	b.limit = nil
	if kc.rate != "" {
		to, per, _ := parseRate(kc.rate)
		b.limit = &ratelimit.Limit[benchLimited]{To: to, Per: per, Burst: kc.burst}
	}
	b.client = jobs.NewClient(b.pub, b.reg, b.clientConfig())
	return nil
}

func parseRate(s string) (int, time.Duration, error) {
	n, p, ok := strings.Cut(s, "/")
	to, err := strconv.Atoi(n)
	if !ok || err != nil {
		return 0, 0, cli.Usagef("rate %q: want N/PER, e.g. 1000/1s", s)
	}
	if !strings.ContainsAny(p, "0123456789") {
		p = "1" + p
	}
	per, err := time.ParseDuration(p)
	if err != nil {
		return 0, 0, cli.Usagef("rate %q: %v", s, err)
	}
	return to, per, nil
}

func (b *bench) close() {
	if b.closeOtel != nil {
		b.closeOtel()
	}
	_ = b.store.Close()
}

func (b *bench) say(format string, args ...any) { fmt.Fprintf(b.env.Stdout, format+"\n", args...) }

// where says where the workers run, for headers.
func (b *bench) where() string {
	if b.f.procs > 0 {
		s := "es"
		if b.f.procs == 1 {
			s = ""
		}
		return fmt.Sprintf("%d worker process%s × %d concurrency", b.f.procs, s, b.f.concurrency)
	}
	return fmt.Sprintf("%d workers × %d concurrency in this process", b.f.workers, b.f.concurrency)
}

// dispatcherSays describes the dispatcher's poll, for headers.
func (b *bench) dispatcherSays() string {
	if b.f.dispInterval == 0 {
		return "dispatcher at its default poll (1s)"
	}
	return fmt.Sprintf("dispatcher polling every %s", b.f.dispInterval)
}

// reset empties the bench queue and budgets, makes sure the queue is not
// paused, and tops up the kept finished jobs.
func (b *bench) reset(ctx context.Context) error {
	db := b.store.DB()
	if err := b.store.ResumeQueue(ctx, benchQueue, time.Now()); err != nil {
		return err
	}
	if _, err := db.Exec(ctx, "DELETE FROM sluice_jobs WHERE queue = '"+benchQueue+"'"); err != nil {
		return fmt.Errorf("clear the bench queue: %w", err)
	}
	if _, err := db.Exec(ctx, "DELETE FROM sluice_budgets WHERE name LIKE 'bench_%'"); err != nil {
		return fmt.Errorf("clear the bench budgets: %w", err)
	}
	if _, err := db.Exec(ctx, "DELETE FROM sluice_fair_keys WHERE queue = '"+benchQueue+"'"); err != nil {
		return fmt.Errorf("clear the bench fairness keys: %w", err)
	}
	if b.store.Dialect().Name() == "postgres" {
		// What autovacuum would do between runs (it may be off on a test
		// server): without it every run pays for the last one's dead rows.
		for _, table := range []string{"sluice_jobs", "sluice_budgets"} {
			if err := vacuum(ctx, db, table); err != nil {
				return fmt.Errorf("vacuum %s: %w", table, err)
			}
		}
	}
	if err := b.topUpFinished(ctx); err != nil {
		return err
	}
	if b.store.Dialect().Name() == "mysql" && !b.noPurgeWait {
		return b.awaitPurge(ctx)
	}
	return nil
}

// topUpFinished adds finished jobs to the table until it keeps
// --finished of them.
func (b *bench) topUpFinished(ctx context.Context) error {
	if b.f.finished == 0 {
		return nil
	}
	have, err := b.queryInt(ctx, "SELECT count(*) FROM sluice_jobs WHERE queue = '"+finishedQueue+"'")
	if err != nil {
		return err
	}
	missing := b.f.finished - int(have)
	if missing <= 0 {
		b.say("%d finished jobs are kept in the table", have)
		return nil
	}
	b.say("adding %d finished jobs to the table…", missing)
	if err := b.enqueueBatches(ctx, missing, func(int) jobs.Item {
		return jobs.Item{Args: benchNoop{}, Options: []jobs.EnqueueOption{jobs.Queue(finishedQueue)}}
	}, func([]jobs.Item) {}); err != nil {
		return err
	}
	_, err = b.store.DB().Exec(ctx, "UPDATE sluice_jobs SET state = 'completed', finished_at = created_at, attempt = 1 WHERE queue = '"+finishedQueue+"' AND state = 'ready'")
	return err
}

// awaitPurge waits, up to a minute, until InnoDB has purged what the reset
// and the runs before it deleted and updated (its history list, the undo
// logs of committed transactions, is empty): the MySQL counterpart of the
// VACUUM above. The purge of a flood's 50,000 deleted jobs and their index
// entries takes a few seconds; run beside the next run's workers, it
// stalled their claims for hundreds of milliseconds at a time, and a drain
// measured the last run's leftovers, not its limit.
func (b *bench) awaitPurge(ctx context.Context) error {
	const q = "SELECT count FROM information_schema.INNODB_METRICS WHERE name = 'trx_rseg_history_len'"
	start := time.Now()
	for {
		left, err := b.queryInt(ctx, q)
		if err != nil {
			// Reading INNODB_METRICS takes the PROCESS privilege.
			b.say("not waiting for InnoDB's purge: %v", err)
			b.noPurgeWait = true
			return nil
		}
		waited := time.Since(start)
		if left == 0 {
			if waited > time.Second {
				b.say("waited %s for InnoDB to purge the last run's rows", waited.Round(100*time.Millisecond))
			}
			return nil
		}
		if waited > time.Minute {
			b.say("InnoDB still has %d undo logs to purge after %s (is the server busy?); starting anyway, and not waiting again", left, waited.Round(time.Second))
			b.noPurgeWait = true
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// queryInt runs a query that returns one number.
func (b *bench) queryInt(ctx context.Context, q string) (int64, error) {
	rows, err := b.store.DB().Query(ctx, q)
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	var n int64
	for rows.Next() {
		if err := rows.Scan(&n); err != nil {
			return 0, err
		}
	}
	return n, rows.Err()
}

// insert enqueues n jobs into the bench queue, counting them per kind
// for the check at the end.
func (b *bench) insert(ctx context.Context, n int, item func(i int) jobs.Item) error {
	return b.enqueueBatches(ctx, n, item, func(items []jobs.Item) {
		for _, it := range items {
			b.enqueued[it.Args.Kind()]++
		}
	})
}

// enqueueBatches enqueues n jobs in batches of 5000, calling done after
// each batch.
func (b *bench) enqueueBatches(ctx context.Context, n int, item func(i int) jobs.Item, done func([]jobs.Item)) error {
	const batch = 5000
	items := make([]jobs.Item, 0, batch)
	for i := 0; i < n; i++ {
		items = append(items, item(i))
		if len(items) == batch || i == n-1 {
			if _, err := b.client.EnqueueMany(ctx, items); err != nil {
				return err
			}
			done(items)
			items = items[:0]
		}
	}
	return nil
}

// item is the i-th job of a burn-down: keyed under a limit, else a no-op.
func (b *bench) item(i int) jobs.Item {
	if b.limit != nil {
		return b.keyed(i)
	}
	return jobs.Item{Args: benchNoop{}}
}

// keyed is the i-th bench_limited job, on budget i mod --keys.
func (b *bench) keyed(i int) jobs.Item { return jobs.Item{Args: benchLimited{Key: i % b.f.keys}} }

// analyze refreshes PostgreSQL's statistics after a bulk insert, as
// autovacuum would shortly.
func (b *bench) analyze(ctx context.Context) error {
	if b.store.Dialect().Name() != "postgres" {
		return nil
	}
	_, err := b.store.DB().Exec(ctx, "ANALYZE sluice_jobs")
	return err
}

// vacuum runs VACUUM ANALYZE on a PostgreSQL table, outside any
// transaction (the store's DB.Exec runs each statement in one, which
// VACUUM refuses).
func vacuum(ctx context.Context, db engine.DB, table string) error {
	q := "VACUUM ANALYZE " + table
	if alone, ok := db.(interface {
		ExecAlone(context.Context, string) error
	}); ok {
		return alone.ExecAlone(ctx, q)
	}
	_, err := db.Exec(ctx, q)
	return err
}
