// Package dispatcher runs the work that no worker does: it promotes due
// scheduled jobs to ready, hands rate-limit slots to parked jobs as the
// horizon reaches them, frees concurrency slots whose holders were lost,
// and recovers the jobs of dead processes. Several
// dispatchers may run against one database; each job is promoted once.
package dispatcher

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicequeue/sluice/clock"
	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/heartbeat"
	"github.com/sluicequeue/sluice/jobs"
	"github.com/sluicequeue/sluice/store"
)

// Defaults.
const (
	DefaultInterval          = time.Second
	DefaultBatchSize         = 500
	DefaultHeartbeatInterval = 60 * time.Second
	DefaultDeadAfter         = 5 * time.Minute
	// MaxBatchSize is the largest Config.BatchSize accepted. A promotion
	// lists the jobs it moves in its statements, one bound value per job
	// on MySQL and SQLite, and SQLite binds at most 32,766 values in one
	// statement (a promotion of 33,000 due jobs failed there with "too
	// many SQL variables", every tick, leaving them due); it also holds
	// the whole batch in one transaction. Batches of 500 to 1,000 already
	// reach what the database can do: a full batch brings the next tick
	// at once.
	MaxBatchSize = 10000
)

// Config configures a Dispatcher. The zero value is usable.
type Config struct {
	// Interval is how often the dispatcher looks for due jobs; while a
	// full batch comes back it looks again at once. After a tick that
	// failed (the database away) the wait doubles with each failure in a
	// row, up to 5 s (or Interval, if longer), and is Interval again after
	// a tick that succeeds. Defaults to 1s.
	Interval time.Duration
	// BatchSize is how many jobs one promotion moves, and how many parked
	// jobs one tick hands slots to: at most MaxBatchSize (10,000). Defaults
	// to 500.
	BatchSize int
	// Horizon is how far ahead parked jobs get rate-limit slots. Defaults
	// to 5 minutes, as the workers'.
	Horizon time.Duration
	// HeartbeatInterval is how often the dispatcher stamps its process
	// row, as the worker's: 60s by default.
	HeartbeatInterval time.Duration
	// DeadAfter is how long without a heartbeat makes a process presumed
	// dead, its running jobs released: 5 minutes by default.
	DeadAfter time.Duration
	// Clock drives every decision. Defaults to the system clock.
	Clock clock.Clock
	// HostClock compares stored times with Clock instead of the database's
	// clock. It is implied when Clock is not the system clock (tests),
	// unless DatabaseClock is set.
	HostClock bool
	// DatabaseClock compares stored times with the database's clock even
	// when Clock is not the system clock: for a test of a host whose clock
	// is off. Ignored with HostClock.
	DatabaseClock bool
	// Tasks are recurring tasks: a job enqueued at each tick of a cron
	// schedule, once however many dispatchers run.
	Tasks []Task
	// Client enqueues the tasks' jobs, with the registry that knows their
	// kinds. Required when Tasks are given.
	Client *jobs.Client
	// Maintenance configures the built-in tasks: clearing idle rate-limit
	// budgets and finished jobs, freeing lost concurrency slots.
	Maintenance Maintenance
	// Name labels the process row: a key, as a queue's name is (1 to 255
	// bytes of UTF-8, no control characters, no trailing space). Defaults
	// to the host name.
	Name string
	// Logger receives the dispatcher's logs. Defaults to slog.Default().
	Logger *slog.Logger
}

// Dispatcher promotes scheduled jobs and keeps parked ones moving.
type Dispatcher struct {
	cfg   Config
	store *engine.Store
	clock clock.Clock
	log   *slog.Logger
	pid   atomic.Int64
	tasks []*task
	// off are the built-in tasks the configuration turned off, for
	// listings.
	off []TaskInfo
	// done receives the ends of the tasks Run runs in the background (nil
	// outside Run: Tick runs every task inline), and background waits for
	// them.
	done       chan taskDone
	background sync.WaitGroup
}

// New returns a dispatcher over s. A zero setting takes its default. It
// fails, naming the field, on a negative duration or batch size, a
// BatchSize over MaxBatchSize, an Interval or HeartbeatInterval under
// jobs.MinInterval, a DeadAfter shorter than jobs.DeadAfterHeartbeats ×
// HeartbeatInterval, a Name that is not a key every database stores alike
// (as a queue's name), and, naming the task, when a recurring task is
// invalid (a bad schedule, a missing key or args, a key the database cannot
// store).
func New(pub *store.Store, cfg Config) (*Dispatcher, error) {
	s := engine.From(pub)
	if err := engine.CheckProcessName(cfg.Name); err != nil {
		return nil, fmt.Errorf("dispatcher: New: %w", err)
	}
	if cfg.BatchSize < 0 || cfg.BatchSize > MaxBatchSize {
		return nil, fmt.Errorf("dispatcher: New: BatchSize is %d; it must be from 1 to %d (MaxBatchSize), or 0 for the default (%d)", cfg.BatchSize, MaxBatchSize, DefaultBatchSize)
	}
	for _, f := range []struct {
		name string
		d    time.Duration
	}{
		{"Interval", cfg.Interval}, {"Horizon", cfg.Horizon}, {"HeartbeatInterval", cfg.HeartbeatInterval},
		{"DeadAfter", cfg.DeadAfter}, {"Maintenance.Retention", cfg.Maintenance.Retention},
	} {
		if f.d < 0 {
			return nil, fmt.Errorf("dispatcher: New: %s is %s; it must be positive, or 0 for the default", f.name, f.d)
		}
	}
	deadAfterSet := cfg.DeadAfter != 0
	if cfg.Interval == 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.BatchSize == 0 {
		cfg.BatchSize = DefaultBatchSize
	}
	if cfg.Horizon == 0 {
		cfg.Horizon = engine.DefaultHorizon
	}
	if cfg.HeartbeatInterval == 0 {
		cfg.HeartbeatInterval = DefaultHeartbeatInterval
	}
	if cfg.DeadAfter == 0 {
		cfg.DeadAfter = DefaultDeadAfter
	}
	for _, f := range []struct {
		name string
		d    time.Duration
	}{{"Interval", cfg.Interval}, {"HeartbeatInterval", cfg.HeartbeatInterval}} {
		if f.d < jobs.MinInterval {
			return nil, fmt.Errorf("dispatcher: New: %s is %s; it must be at least %s", f.name, f.d, jobs.MinInterval)
		}
	}
	if cfg.HeartbeatInterval > cfg.DeadAfter/jobs.DeadAfterHeartbeats {
		what := ""
		if !deadAfterSet {
			what = " (the default)"
		}
		return nil, fmt.Errorf("dispatcher: New: DeadAfter is %s%s; it must be at least %d × HeartbeatInterval (%s), or a live process is presumed dead between its heartbeats and its jobs run twice",
			cfg.DeadAfter, what, jobs.DeadAfterHeartbeats, cfg.HeartbeatInterval)
	}

	if cfg.Name == "" {
		cfg.Name, _ = os.Hostname()
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	d := &Dispatcher{cfg: cfg, store: s, clock: clock.OrSystem(cfg.Clock), log: log}
	if err := d.compileTasks(cfg); err != nil {
		return nil, err
	}
	return d, nil
}

// TickResult counts what one tick did.
type TickResult struct {
	// Promoted counts the due scheduled jobs the promotion took: made
	// ready, or, with no concurrency slot of their key free, blocked or
	// discarded (Discarded counts those). Due jobs it left for a later
	// tick, their key's semaphore held by another transaction, are not
	// counted.
	Promoted int
	// Discarded counts the promoted jobs discarded for want of a
	// concurrency slot, under a limit with Discard: a job that waited
	// scheduled (delayed, or enqueued into a paused queue) and found its
	// key's slots all held when it came due is cancelled with
	// engine.DiscardedError. Package metrics counts them in
	// sluice_jobs_enqueued_total{result="discarded"}.
	Discarded int
	// Unparked counts parked jobs given a slot.
	Unparked int
	// Full is set when more may be due: the unparking came back full, or
	// the promotion promoted jobs and its last read came back full — a
	// full batch, or due jobs it left behind keys other transactions
	// hold, past which more may be due (engine.Promoted.More). A
	// promotion that promoted nothing never sets it, so keys held for
	// long do not make Run tick again at once.
	Full bool
	// Tasks counts the recurring and built-in tasks this tick ran (not
	// those it started in the background under Run).
	Tasks int
}

// Tick runs one round: it promotes one batch of due jobs, hands slots to
// parked jobs whose budgets' horizons reached them, and runs the recurring
// and built-in tasks whose ticks have come. Called on its own it runs
// every task before it returns; under Run, the hourly clean-ups
// (TaskClearIdleBudgets, TaskClearFinishedJobs), which delete in batches
// for as long as there is work, run beside the rounds instead, so that
// due jobs and the other tasks never wait for them.
func (d *Dispatcher) Tick(ctx context.Context) (TickResult, error) {
	now := d.clock.Now()
	p, err := d.store.PromoteDue(ctx, d.storeClock(), d.cfg.BatchSize)
	if err != nil {
		return TickResult{}, fmt.Errorf("dispatcher: %w", err)
	}
	res := TickResult{Promoted: p.Due, Discarded: len(p.Discarded), Full: p.More}
	if res.Unparked, err = d.store.Unpark(ctx, d.storeClock(), d.cfg.Horizon, 100, d.cfg.BatchSize); err != nil {
		return res, fmt.Errorf("dispatcher: %w", err)
	}
	res.Full = res.Full || res.Unparked == d.cfg.BatchSize
	if res.Tasks, err = d.runTasks(ctx, now); err != nil {
		return res, fmt.Errorf("dispatcher: %w", err)
	}
	return res, nil
}

// Run ticks every Interval (at once again after a full batch) until ctx is
// done. It registers the dispatcher as a process and heartbeats, and
// refuses to start against a database with pending migrations. Stopped
// before it started (ctx done while it checks the schema or registers),
// it returns nil.
func (d *Dispatcher) Run(ctx context.Context) error {
	err := d.store.CheckSchema(ctx)
	if err != nil {
		err = fmt.Errorf("dispatcher: %w", err)
	} else {
		err = d.register(ctx)
	}
	if err != nil {
		if ctx.Err() != nil {
			return nil // stopped before it started
		}
		return err
	}
	beatCtx, stopBeat := context.WithCancel(context.WithoutCancel(ctx))
	beaten := make(chan struct{})
	go func() {
		defer close(beaten)
		heartbeat.Run(beatCtx, d.store, d.clock, d.storeClock(), d.log, d.cfg.HeartbeatInterval, d.cfg.DeadAfter, &d.pid, d.register)
	}()
	d.log.Info("sluice: dispatcher started", "process_id", d.pid.Load(), "interval", d.cfg.Interval, "batch_size", d.cfg.BatchSize)
	d.done = make(chan taskDone, len(d.tasks)) // each task runs once at a time
	defer func() { d.done = nil }()
	failures := 0
	for ctx.Err() == nil {
		res, err := d.Tick(ctx)
		wait := d.cfg.Interval
		switch {
		case err != nil && ctx.Err() == nil:
			failures++
			wait = retryWait(d.cfg.Interval, failures)
			d.log.Error("sluice: dispatcher tick", "err", err, "failures", failures, "retry_in", wait)
		case err == nil:
			failures = 0
			if res.Full {
				continue
			}
		}
		t := d.clock.NewTimer(wait)
		select {
		case <-ctx.Done():
		case <-t.C():
		}
		t.Stop()
	}
	d.background.Wait()
	d.finished() // a later Tick or Run runs the tasks that were under way
	stopBeat()
	<-beaten
	bg, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := d.store.DeregisterProcess(bg, d.pid.Load()); err != nil {
		d.log.Warn("sluice: deregister", "err", err)
	}
	d.log.Info("sluice: dispatcher stopped", "process_id", d.pid.Load())
	return nil
}

// maxRetryWait is the longest wait retryWait doubles up to.
const maxRetryWait = 5 * time.Second

// retryWait is how long Run waits after failures ticks in a row failed:
// interval doubled with each, up to maxRetryWait, never below interval.
// A database that is away is then asked, and its error logged, a few
// times a minute rather than at every interval.
func retryWait(interval time.Duration, failures int) time.Duration {
	return max(interval, min(interval<<min(failures, 16), maxRetryWait))
}

func (d *Dispatcher) register(ctx context.Context) error {
	host, _ := os.Hostname()
	pid, err := d.store.RegisterProcess(ctx, engine.Process{Kind: "dispatcher", Name: d.cfg.Name, Hostname: host, PID: os.Getpid()}, d.storeClock())
	if err != nil {
		return fmt.Errorf("dispatcher: %w", err)
	}
	d.pid.Store(pid)
	return nil
}

// storeClock is the clock the dispatcher's store operations compare
// stored times with: the database's, unless the dispatcher decides on its
// own (HostClock, or a Clock that is not the system's).
func (d *Dispatcher) storeClock() engine.Clock {
	if !d.cfg.HostClock && (d.cfg.DatabaseClock || clock.IsSystem(d.cfg.Clock)) {
		return engine.DatabaseTime(d.clock.Now)
	}
	return engine.HostTime(d.clock.Now)
}

// ProcessID returns the id of the dispatcher's row in sluice_processes,
// or 0 before Run registered it.
func (d *Dispatcher) ProcessID() int64 { return d.pid.Load() }
