package jobs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicequeue/sluice/clock"
	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/heartbeat"
	"github.com/sluicequeue/sluice/store"
)

// Worker defaults.
const (
	DefaultConcurrency       = 10
	DefaultPollInterval      = 100 * time.Millisecond
	DefaultJobTimeout        = time.Minute
	DefaultShutdownTimeout   = 30 * time.Second
	DefaultHeartbeatInterval = 60 * time.Second
	DefaultDeadAfter         = 5 * time.Minute
	// DefaultMaxRetryAfter caps the wait a RetryAfter error asks for.
	DefaultMaxRetryAfter = time.Hour
	// DefaultGiveBackFor is how long a job that a worker cannot run as
	// stored is given back for another worker before it fails
	// (WorkerConfig.GiveBackFor).
	DefaultGiveBackFor = 7 * 24 * time.Hour
	// MaxGiveBackWait is the longest a job given back waits before it may
	// be claimed again: the wait doubles from 2 s with each time the job
	// was given back in a row (WorkerConfig.GiveBackFor), up to this (with
	// ±10% jitter).
	MaxGiveBackWait = time.Hour
	// DeadAfterHeartbeats is how many heartbeat intervals DeadAfter must
	// span at least, so that a live process is never presumed dead (and
	// its jobs run twice) between two of its heartbeats.
	DeadAfterHeartbeats = 3
	// MinInterval is the shortest PollInterval, HeartbeatInterval and
	// OverrideRefresh (and dispatcher Interval) accepted: a shorter loop
	// only hammers the database.
	MinInterval = time.Millisecond
	// MaxQueueListBytes is the longest list of Queues a worker takes: the
	// names joined with commas, as its process row keeps them, in at most
	// 65,535 bytes on every database (MySQL's TEXT column holds no more).
	MaxQueueListBytes = engine.MaxQueueListBytes
	// MaxConcurrency is the largest WorkerConfig.Concurrency accepted. A
	// claim lists up to Concurrency jobs in a statement, one bound value
	// per job on MySQL and SQLite, and SQLite binds at most 32,766 values
	// (a claim of 33,000 fails there with "too many SQL variables"); the
	// updates that bind several values per job (a claim's deferrals, a
	// batch of results, a release) are written in runs the database
	// takes. The worker also sizes its buffers by it. Claims of 500 to
	// 1,000 already reach what the database can do.
	MaxConcurrency = 10000
	// maxClaimsPerPoll bounds the claims a worker makes in a row when
	// claims defer jobs and slots stay free.
	maxClaimsPerPoll = 5
	// minCandidates is the fewest rate-limited jobs a claim decides when
	// claims keep deferring more than they admit.
	minCandidates = 8
	// firstCandidates is how many rate-limited jobs a worker's first claim
	// decides; claims that admit them widen it up to the free slots.
	firstCandidates = 16
	// maxBudgetHint bounds the budgets a claim locks ahead on the word of
	// the claim before it.
	maxBudgetHint = 256
	// minDueLead and maxDueLead bound how early a worker wakes for a slot
	// its claims handed out: the claim then admits the job at its slot
	// (see engine.ClaimParams.DueLead), instead of a wake-up and a round
	// trip late, which a limit with no burst to spare would lose. Within
	// them the lead follows how long the worker's claims take
	// (dueSlots.learn); the claim admits the job as of its slot and the
	// worker holds it until then, so the upper bound is also the longest
	// a claimed job waits to start.
	minDueLead = 2 * time.Millisecond
	maxDueLead = 20 * time.Millisecond
)

// WorkerConfig configures a Worker. The zero value works every queue the
// registry's kinds go to, and "default", with 10 goroutines.
type WorkerConfig struct {
	// Queues are claimed in order: a later queue's jobs are claimed only
	// while the earlier ones have none ready. Each name is a key (1 to 255
	// bytes of UTF-8, no control characters, no trailing space) without a
	// comma, and the names joined with commas take at most
	// MaxQueueListBytes. Defaults to the queues the registry's kinds with
	// a handler go to (Registry.Queues, in name order, as registered when
	// NewWorker is called), then "default" if none of them is: a kind
	// registered with Queue("stripe") is worked without naming its queue,
	// and jobs enqueued to "default" still are.
	Queues []string
	// Concurrency is how many jobs run at once, at most MaxConcurrency
	// (10,000). Defaults to 10.
	Concurrency int
	// PollInterval is how often an idle worker looks for jobs; it also
	// wakes at once when this process enqueues, when a slot frees after a
	// full claim, and on PostgreSQL when any process enqueues. Defaults to
	// 100ms.
	PollInterval time.Duration
	// JobTimeout bounds each run unless its kind sets Timeout; negative
	// means none. Defaults to 1 minute.
	JobTimeout time.Duration
	// ShutdownTimeout is how long a stopping worker lets running jobs
	// finish before cancelling them and releasing them back to ready.
	// It also bounds, from the moment the worker stops claiming, how long
	// a result waits for a concurrency key another transaction holds
	// before its job is released back to ready instead. Defaults to 30s.
	ShutdownTimeout time.Duration
	// HeartbeatInterval is how often the worker stamps its process row and
	// looks for dead processes. Defaults to 60s.
	HeartbeatInterval time.Duration
	// DeadAfter is how old a heartbeat must be before its process is
	// presumed dead and its jobs released. Defaults to 5 minutes.
	DeadAfter time.Duration
	// Clock drives every time-based decision. Defaults to the system
	// clock.
	Clock clock.Clock
	// HostClock decides rate limits, and every other comparison with a
	// stored time, on Clock instead of the database's clock. It is implied
	// when Clock is not the system clock (tests), unless DatabaseClock is
	// set.
	HostClock bool
	// DatabaseClock decides on the database's clock even when Clock is not
	// the system clock: for a test of a host whose clock is off. Ignored
	// with HostClock.
	DatabaseClock bool
	// Horizon is how far ahead rate-limit slots are handed out. Defaults
	// to 5 minutes.
	Horizon time.Duration
	// ShadowLimits runs every rate limit in shadow mode: each decision is
	// computed and recorded (a would_defer event and debug line), and the
	// job runs anyway. Budgets advance as if enforcing.
	ShadowLimits bool
	// OverrideRefresh is how often the worker reads the rate-limit
	// overrides set at run time (sluice limits set). Defaults to 5s.
	OverrideRefresh time.Duration
	// MaxRetryAfter caps the wait a handler's RetryAfter error asks for.
	// Defaults to 1 hour.
	MaxRetryAfter time.Duration
	// GiveBackFor is how long a job this worker cannot run as stored is
	// given back for a worker that can: a job whose kind has no handler
	// here (a rolling deploy that adds the kind, whose old workers serve
	// the same queue), or one that holds collected calls its handler here
	// would not read (registered with Register, where the job's other
	// version collects with RegisterCalls). Such a job goes back to wait
	// without spending an attempt — 2 s doubling with each time it was
	// given back in a row, up to MaxGiveBackWait — and gives back its
	// concurrency slot, with the reason as its last error. A worker that
	// claims it once it was given back for GiveBackFor in a row fails it
	// for good instead, with that error: a job no worker can run does not
	// loop for ever. Only give-backs in a row count (a streak: no other
	// claim of the job between them), reckoned from the first one's time,
	// on this worker's clock; the waits of the streak's give-backs, each
	// at its shortest (less 10% of jitter), must add up to GiveBackFor
	// too, so that a clock that is off fails no job early. Anything else
	// that claims the job (its handler's attempt, snooze or 429, a release,
	// a lost run) ends the streak, as does an operator's retry of the job
	// once it failed. So neither the time a job waited before it was first
	// given back (a job enqueued to run a month ahead, or retried with
	// backoff for weeks) nor the snoozes of a job that polls for weeks
	// count, and a job bounced every hour fails after GiveBackFor of
	// give-backs, and at most a quarter (and an hour) later. Each give-back
	// records the streak in the job's last error (no migration). Defaults
	// to DefaultGiveBackFor (7 days).
	GiveBackFor time.Duration
	// Name labels the worker's process row: a key, as a queue's name is
	// (1 to 255 bytes of UTF-8, no control characters, no trailing
	// space). Defaults to the host name.
	Name string
	// Logger receives the worker's logs. Defaults to slog.Default().
	Logger *slog.Logger
	// Hooks are called as jobs are claimed, deferred and finished.
	Hooks Hooks
	// Middleware wraps every run, outermost first, around the kind's own
	// middleware (WithMiddleware) and the handler. Defaults to none: a
	// run then calls its handler directly.
	Middleware []Middleware
}

// Worker claims and runs jobs. Create it with NewWorker and call Run.
//
// A worker works once at a time: a Run or Drain called while another Run
// or Drain of the same worker has not returned returns ErrWorkerRunning
// at once, changing nothing. Once it returned, the worker may be Run (or
// drained) again: it registers a new process and starts afresh. A handler
// the earlier Run released at shutdown without it returning (one that
// ignores its context) still takes one of the Concurrency slots until it
// returns, and its outcome is ignored.
type Worker struct {
	cfg   WorkerConfig
	store *engine.Store
	reg   *Registry
	clock clock.Clock
	log   *slog.Logger
	hooks Hooks

	pid atomic.Int64
	// active is set while a Run or Drain is in progress (ErrWorkerRunning).
	active atomic.Bool
	// stopping is set once the Run or Drain in progress stopped claiming:
	// the recorder then gives up on a batch it cannot write (see
	// recorder.record). Each Run and Drain starts with it unset.
	stopping atomic.Bool
	// stoppedAt is when Run stopped claiming, on clock: the results left
	// for keys another transaction holds wait for them until
	// ShutdownTimeout after it (finishHeld).
	stoppedAt time.Time

	mu sync.Mutex
	// running holds every run in progress, one entry per run: a job whose
	// lost run (its process presumed dead) still goes on when this worker,
	// registered again, claims it anew has two.
	running map[*runningJob]struct{}
	// unrecorded counts, per job, the runs that finished and whose results
	// are not written yet: with running, every job this worker holds.
	unrecorded map[int64]int
	// abandoned holds, by job, the process id of each run whose result
	// the worker gave up writing (the database refused even its failed
	// attempt, or it could not be written before the worker stopped): the
	// job stays running for that process, having run, until presumed
	// lost, and is no stray of a claim.
	abandoned map[int64]int64
	// givenUp counts the results the recorder gave up writing, over the
	// worker's life (a Drain tells its caller of those it gave up on).
	givenUp int
	// strayClaims counts the claims that failed (each one's commit may
	// have landed, its reply lost) since strays were last released: while
	// any is pending the worker looks for strays before each claim round,
	// and at shutdown, and each may have taken up to Concurrency jobs.
	// Only the claiming goroutine touches it (and Run once it is done).
	strayClaims int
	// jobs counts the handlers the current (or last) Run started; each Run
	// has its own, so that its shutdown waits for none that an earlier
	// Run released and that have not returned yet.
	jobs *sync.WaitGroup
	// sending counts the finished jobs whose result is on its way to
	// results: shutdown waits for them before closing it.
	sending sync.WaitGroup
	freed   chan struct{}
	// results carries the current Run's results to its recorder; each Run
	// makes its own, and closes it once every run it started either sent
	// its result or was released (and so sends none).
	results chan result

	unknown sync.Map // kinds already logged as unknown, or as unread calls (unrunnableLog)
	// badBackoff holds the kinds whose Backoff returned a delay out of
	// range, already logged (backoffWarning).
	badBackoff sync.Map

	// limits is what claims decide against; nil when no limit is declared.
	limits *limitsView
	// declared are the concurrency limits the worker declares on their
	// keys' semaphores as it starts; nil when none is declared.
	declared *slotDeclarations
	// slots are the coming slots this worker's claims handed out; only the
	// claiming goroutine touches them.
	slots dueSlots
	// sweeps waits for the goroutines of this worker that defer a budget's
	// overflow.
	sweeps sync.WaitGroup
	// window is how many rate-limited jobs the next claim decides, at most
	// its free slots (see adaptWindow).
	window int
	// budgetHint are the budgets the last claim locked, when it admitted
	// rate-limited jobs.
	budgetHint []string
	// snapshotHint is set when the next claim decides on a snapshot of
	// its hint first; snapshotIn counts the claims until it tries again,
	// and snapshotAlone the snapshots in a row that found no other claim
	// on their budgets (see adaptSnapshot).
	snapshotHint              bool
	snapshotIn, snapshotAlone int
	// yielded is set when the last claim left rate-limited jobs ready
	// because another claim held their budget (engine.ClaimResult.Yielded).
	yielded bool
	// overflowed counts, per budget, the jobs this worker's claims deferred
	// on it while more were ready behind them, until it sweeps the budget
	// (see overflowing); only the claiming goroutine touches it.
	overflowed map[string]int
	// leftovers is set while the claims of a worker that declares no limit
	// also take the ready jobs that carry a rate-limit key: jobs a limit
	// since removed left with their keys, which no one would claim
	// otherwise. They run unchecked, as nothing limits them any more. Set
	// at start and once a PollInterval (whatever else wakes the worker),
	// and kept while such claims find more; only the claiming goroutine
	// touches it and leftoversAt, when the next such claim is due.
	leftovers   bool
	leftoversAt time.Time
}

type runningJob struct {
	job *engine.Job
	// pid is the process id the job was claimed under: its result and its
	// release at shutdown count only for it.
	pid int64
	run runState
	// began is when its handler was to start (after the job's Hold): a
	// run released while it ran reports how long it had run by then.
	began    time.Time
	released bool
}

// NewWorker returns a worker for the kinds in reg, claiming from s. A zero
// setting takes its default; it refuses, naming the field, a negative
// count or duration (but JobTimeout, where negative means none), a
// Concurrency over MaxConcurrency, a PollInterval, HeartbeatInterval or
// OverrideRefresh under MinInterval, a DeadAfter shorter than
// DeadAfterHeartbeats × HeartbeatInterval, a Name or queue name that is
// not a key every database stores alike, and Queues longer than
// MaxQueueListBytes.
func NewWorker(pub *store.Store, reg *Registry, cfg WorkerConfig) (*Worker, error) {
	if pub == nil || reg == nil {
		return nil, errors.New("jobs: NewWorker needs a store and a registry")
	}
	s := engine.From(pub)
	if len(cfg.Queues) == 0 {
		cfg.Queues = reg.workerQueues()
	}
	for _, q := range cfg.Queues {
		if q == "" {
			return nil, errors.New("jobs: NewWorker: a queue name is empty")
		}
		if err := engine.CheckQueue("queue name", q); err != nil {
			return nil, fmt.Errorf("jobs: NewWorker: %w", err)
		}
	}
	if err := engine.CheckQueueList(cfg.Queues); err != nil {
		return nil, fmt.Errorf("jobs: NewWorker: Queues: %w", err)
	}
	if err := engine.CheckProcessName(cfg.Name); err != nil {
		return nil, fmt.Errorf("jobs: NewWorker: %w", err)
	}
	if err := checkMiddleware("jobs: NewWorker: Middleware", cfg.Middleware); err != nil {
		return nil, err
	}
	if cfg.Concurrency < 0 || cfg.Concurrency > MaxConcurrency {
		return nil, fmt.Errorf("jobs: NewWorker: Concurrency is %d; it must be from 1 to %d (MaxConcurrency), or 0 for the default (%d)", cfg.Concurrency, MaxConcurrency, DefaultConcurrency)
	}
	// JobTimeout is left out: a negative one means none.
	for _, f := range []struct {
		name string
		d    time.Duration
	}{
		{"PollInterval", cfg.PollInterval}, {"ShutdownTimeout", cfg.ShutdownTimeout},
		{"HeartbeatInterval", cfg.HeartbeatInterval}, {"DeadAfter", cfg.DeadAfter},
		{"Horizon", cfg.Horizon}, {"OverrideRefresh", cfg.OverrideRefresh}, {"MaxRetryAfter", cfg.MaxRetryAfter},
		{"GiveBackFor", cfg.GiveBackFor},
	} {
		if f.d < 0 {
			return nil, fmt.Errorf("jobs: NewWorker: %s is %s; it must be positive, or 0 for the default", f.name, f.d)
		}
	}
	deadAfterSet := cfg.DeadAfter != 0
	setDefault(&cfg.Concurrency, DefaultConcurrency)
	setDefault(&cfg.PollInterval, DefaultPollInterval)
	setDefault(&cfg.JobTimeout, DefaultJobTimeout)
	setDefault(&cfg.ShutdownTimeout, DefaultShutdownTimeout)
	setDefault(&cfg.HeartbeatInterval, DefaultHeartbeatInterval)
	setDefault(&cfg.DeadAfter, DefaultDeadAfter)
	setDefault(&cfg.Horizon, engine.DefaultHorizon)
	setDefault(&cfg.OverrideRefresh, 5*time.Second)
	setDefault(&cfg.MaxRetryAfter, DefaultMaxRetryAfter)
	setDefault(&cfg.GiveBackFor, DefaultGiveBackFor)
	for _, f := range []struct {
		name string
		d    time.Duration
	}{{"PollInterval", cfg.PollInterval}, {"HeartbeatInterval", cfg.HeartbeatInterval}, {"OverrideRefresh", cfg.OverrideRefresh}} {
		if f.d < MinInterval {
			return nil, fmt.Errorf("jobs: NewWorker: %s is %s; it must be at least %s", f.name, f.d, MinInterval)
		}
	}
	if cfg.HeartbeatInterval > cfg.DeadAfter/DeadAfterHeartbeats {
		what := ""
		if !deadAfterSet {
			what = " (the default)"
		}
		return nil, fmt.Errorf("jobs: NewWorker: DeadAfter is %s%s; it must be at least %d × HeartbeatInterval (%s), or a live worker is presumed dead between its heartbeats and its jobs run twice",
			cfg.DeadAfter, what, DeadAfterHeartbeats, cfg.HeartbeatInterval)
	}
	if cfg.Name == "" {
		cfg.Name, _ = os.Hostname()
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	var limits *limitsView
	if reg.limits() != nil {
		limits = &limitsView{reg: reg, shadowAll: cfg.ShadowLimits}
	}
	w := &Worker{
		limits:   limits,
		declared: newSlotDeclarations(reg),
		cfg:      cfg,
		store:    s,
		reg:      reg,
		clock:    clock.OrSystem(cfg.Clock),
		log:      log,
		hooks:    cfg.Hooks.guarded(log),
		running:  map[*runningJob]struct{}{}, unrecorded: map[int64]int{}, abandoned: map[int64]int64{},
		freed: make(chan struct{}, 1),
		jobs:  &sync.WaitGroup{},
	}
	if w.storeClock().Database() {
		w.slots.lead = minDueLead
	}
	w.window = firstCandidates
	return w, nil
}

func setDefault[T comparable](v *T, def T) {
	var zero T
	if *v == zero {
		*v = def
	}
}

// ProcessID returns the worker's registered process id (0 before Run).
func (w *Worker) ProcessID() int64 { return w.pid.Load() }

// Run works jobs until ctx is done, then shuts down gracefully: it stops
// claiming, lets running jobs finish for up to ShutdownTimeout, cancels the
// rest and releases them back to ready. It writes the results in hand
// before it returns; one that waits for a concurrency key another
// transaction holds is written as soon as that transaction ends, or, if
// it has not by ShutdownTimeout after the stop, its job is released back
// to ready. It refuses to start against a
// database with pending migrations. Stopped before it started (ctx done
// while it checks the schema or registers), it returns nil. It returns
// ErrWorkerRunning while another Run or Drain of the worker is in
// progress; once Run returned, the worker may be Run again, as a new
// process (see Worker).
func (w *Worker) Run(ctx context.Context) error {
	if !w.active.CompareAndSwap(false, true) {
		return fmt.Errorf("jobs: worker: Run: %w", ErrWorkerRunning)
	}
	defer w.active.Store(false)
	// What one Run keeps apart from the Run before it, whose released
	// handlers may not have returned yet (they send no result).
	w.stopping.Store(false)
	w.declared.restart()
	w.jobs = &sync.WaitGroup{}
	w.results = make(chan result, w.cfg.Concurrency)
	if err := w.startUp(ctx); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	jobsCtx, stopJobs := context.WithCancelCause(context.WithoutCancel(ctx))
	defer stopJobs(nil)
	wake, unsubscribe := w.store.Subscribe(w.cfg.Queues)
	defer unsubscribe()
	completed := make(chan struct{})
	go w.complete(completed)
	beatCtx, stopBeat := context.WithCancel(context.WithoutCancel(ctx))
	beaten := make(chan struct{})
	go func() { defer close(beaten); w.heartbeat(beatCtx) }()
	if w.limits != nil {
		if err := w.limits.refresh(ctx, w.store, w.storeClock(), w.cfg.Horizon); err != nil {
			w.log.Warn("sluice: refresh rate-limit overrides", "err", err)
		}
	}
	w.declareSlots(ctx)
	declared := make(chan struct{})
	go func() { defer close(declared); w.declareHeldSlots(ctx) }()
	refreshed := make(chan struct{})
	go func() {
		defer close(refreshed)
		if w.limits != nil {
			w.refreshOverrides(beatCtx)
		}
	}()
	w.log.Info("sluice: worker started", "process_id", w.pid.Load(), "queues", w.cfg.Queues, "concurrency", w.cfg.Concurrency)

	w.loop(ctx, jobsCtx, wake)
	w.sweeps.Wait()
	<-declared

	w.stoppedAt = w.clock.Now()
	w.stopping.Store(true)
	w.shutdown(stopJobs)
	// A job that finished before shutdown released the rest is still
	// sending its result; every other one was released and sends none.
	w.sending.Wait()
	close(w.results)
	<-completed
	stopBeat()
	<-beaten
	<-refreshed // no refresh of this Run overlaps the next Run's
	if w.strayClaims > 0 {
		// The last look after a failed claim failed too: once more before
		// the process row goes, after which the strays would wait to be
		// presumed lost, and be counted as lost runs that never ran.
		switch ids, err := w.releaseStrays(ctx, w.pid.Load()); {
		case err != nil:
			w.log.Warn("sluice: release the jobs a failed claim may have marked running; they come back when this process is presumed lost", "err", err)
		case len(ids) > 0:
			w.log.Warn("sluice: released jobs a failed claim had marked running after all", "jobs", ids)
		}
	}
	bg, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := w.store.DeregisterProcess(bg, w.pid.Load()); err != nil {
		w.log.Warn("sluice: deregister", "err", err)
	}
	w.log.Info("sluice: worker stopped", "process_id", w.pid.Load())
	return nil
}

// startUp checks the schema and registers the worker's process.
func (w *Worker) startUp(ctx context.Context) error {
	if err := w.store.CheckSchema(ctx); err != nil {
		return fmt.Errorf("jobs: worker: %w", err)
	}
	return w.register(ctx)
}

func (w *Worker) register(ctx context.Context) error {
	host, _ := os.Hostname()
	pid, err := w.store.RegisterProcess(ctx, engine.Process{
		Kind: "worker", Name: w.cfg.Name, Hostname: host, PID: os.Getpid(), Queues: strings.Join(w.cfg.Queues, ","),
	}, w.storeClock())
	if err != nil {
		return fmt.Errorf("jobs: worker: %w", err)
	}
	w.pid.Store(pid)
	return nil
}

// loop claims while there are free slots and waits otherwise, until ctx
// is done. It also wakes at each slot its claims handed to a rate-limited
// job, and then looks for the jobs that waited for it (as it does on each
// poll), so a backlog drains at its limit's pace.
func (w *Worker) loop(ctx, jobsCtx context.Context, wake <-chan struct{}) {
	failures := 0
	promote := w.limits != nil
	w.leftovers = w.limits == nil
	for ctx.Err() == nil {
		if w.strayClaims > 0 {
			// The release after a failed claim failed (the connection
			// was still down): again before each round until it lands.
			w.lookForStrays(ctx)
		}
		full, err := w.claimRound(ctx, jobsCtx, promote)
		pause := w.cfg.PollInterval
		if err != nil {
			w.strayClaims = min(w.strayClaims+1, maxStrayClaims)
			w.lookForStrays(ctx)
			if ctx.Err() != nil {
				return
			}
			failures++
			pause = min(pause<<min(failures, 6), 5*time.Second)
			w.log.Error("sluice: claim failed", "err", err, "retry_in", pause)
		} else {
			failures = 0
		}
		var freed <-chan struct{}
		if err == nil {
			pause, freed = w.pause(full)
		}
		t := w.clock.NewTimer(pause)
		polled := false
		select {
		case <-ctx.Done():
		case <-wake:
		case <-freed:
		case <-t.C():
			polled = true
		}
		t.Stop()
		promote = w.limits != nil && (polled || w.slots.due(w.clock.Now()))
		w.leftovers = w.leftovers || w.limits == nil && !w.clock.Now().Before(w.leftoversAt)
	}
}

// lookForStrays releases the strays a failed claim may have left
// (releaseStrays), and forgets those claims once that succeeded. A
// failure is only logged: the claims stay pending, and the loop tries
// again before its next claim round (and Run at shutdown).
func (w *Worker) lookForStrays(ctx context.Context) {
	ids, err := w.releaseStrays(ctx, w.pid.Load())
	if err != nil {
		w.log.Debug("sluice: look for jobs a failed claim left running; trying again before the next claim", "err", err)
		return
	}
	w.strayClaims = 0
	if len(ids) > 0 {
		w.log.Warn("sluice: released jobs a failed claim had marked running after all", "jobs", ids)
	}
}

// releaseStrays releases the jobs a failed claim may have marked running
// for this process after all (its commit landed, its reply was lost):
// every job running for it that it neither runs nor has a result for
// (see known). Without it they would stay running, unrun, for as long as
// the process lives, and be counted as lost runs once it stops. Only the
// claiming goroutine calls it (Drain's, in Drain), so no claim starts a job
// meanwhile. pid is the process id the claim was made under.
func (w *Worker) releaseStrays(ctx context.Context, pid int64) ([]int64, error) {
	bg, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	return w.store.ReleaseStrays(bg, pid, w.storeClock(), w.known(pid), w.cfg.Concurrency*max(w.strayClaims, 1))
}

// maxStrayClaims bounds the failed claims counted as pending: they bound
// how many running jobs a release of strays looks at, and claims that
// fail for minutes on end (a database away) took none.
const maxStrayClaims = 100

// known returns the jobs the worker holds under pid, which no stray
// release may touch: those it runs (under any process id: a job whose
// lost run goes on may run anew under pid), those whose results are not
// written yet, and those whose results it gave up writing.
func (w *Worker) known(pid int64) []int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	known := make([]int64, 0, len(w.running)+len(w.unrecorded))
	for rj := range w.running {
		known = append(known, rj.job.ID)
	}
	for id := range w.unrecorded {
		known = append(known, id)
	}
	for id, p := range w.abandoned {
		if p == pid {
			known = append(known, id)
		} else {
			delete(w.abandoned, id) // a process that no longer exists
		}
	}
	return known
}

// gaveUp notes the results the recorder gave up writing: their jobs stay
// running for their process, though they ran.
func (w *Worker) gaveUp(rs []result) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, r := range rs {
		w.abandoned[r.id] = r.pid
	}
	w.givenUp += len(rs)
}

// givenUpCount is how many results the recorder gave up writing so far.
func (w *Worker) givenUpCount() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.givenUp
}

// recorded forgets the results of batch, now written (or given up on).
func (w *Worker) recorded(batch []result) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, r := range batch {
		if w.unrecorded[r.id]--; w.unrecorded[r.id] <= 0 {
			delete(w.unrecorded, r.id)
		}
	}
}

// pause says how long the loop waits after a claim round that succeeded,
// and the channel that ends the wait early. With every slot taken it waits
// for one to free (jobs are likely waiting), polling meanwhile; otherwise
// it waits for the next poll, or the next slot its claims handed a
// rate-limited job, or, when the last claim left jobs whose budget another
// claim held, only MinInterval: that claim has decided them by then.
func (w *Worker) pause(full bool) (time.Duration, <-chan struct{}) {
	pause := w.cfg.PollInterval
	if full {
		return pause, w.freed
	}
	if wait, ok := w.slots.next(w.clock.Now()); ok {
		pause = min(pause, wait)
	}
	if w.yielded {
		pause = min(pause, MinInterval)
	}
	return pause, nil
}

// claimRound claims for the free slots, claiming again at once (up to
// maxClaimsPerPoll times) while claims defer jobs and slots stay free.
// With promote, its first claim takes the waiting jobs that are due. It
// reports whether the last claim filled every slot.
func (w *Worker) claimRound(ctx, jobsCtx context.Context, promote bool) (bool, error) {
	for round := 0; round < maxClaimsPerPoll; round++ {
		free := w.free()
		if free == 0 {
			return true, nil
		}
		window := min(w.window, free)
		// A sweep of this process deferring a flood out of the limited
		// jobs' index is left to it: rather than skip over its locked rows
		// or move the budget's cursor under it, claims take the limited
		// jobs before and after the flood.
		swept := w.store.Swept(w.cfg.Queues)
		pid := w.pid.Load()
		res, err := w.claim(ctx, pid, free, window, swept, promote || w.limits != nil && w.slots.due(w.clock.Now()))
		if err != nil {
			return false, err
		}
		w.adaptWindow(res, window)
		w.yielded = res.Yielded > 0
		w.sweep(ctx, w.overflowing(res))
		for _, j := range res.Jobs {
			w.start(jobsCtx, j, pid)
		}
		if len(res.Jobs) == free {
			return true, nil
		}
		if len(res.Deferred) == 0 && !res.MoreLimited && res.Yielded == 0 {
			return false, nil
		}
	}
	return w.free() == 0, nil
}

// adaptWindow narrows how many rate-limited jobs the next claim decides
// while claims defer more of them than they admit (a flood on a tight
// budget at the head of the queue, which DeferOverflow is moving out of the
// way), and widens it again, up to the free slots, as they admit.
func (w *Worker) adaptWindow(res *engine.ClaimResult, window int) {
	deferred := len(res.Deferred) + len(res.Unfit)
	admitted := countLimited(res.Jobs)
	// A claim that admitted rate-limited jobs tells the next which budgets
	// to lock with its candidates, saving a round trip.
	w.budgetHint = nil
	if admitted > 0 && len(res.Budgets) <= maxBudgetHint {
		w.budgetHint = res.Budgets
	}
	w.adaptSnapshot(res, deferred)
	switch {
	case window <= 0, res.Yielded > 0:
		// Candidates left to the next claim say nothing about the
		// budgets: it decides them with the same window.
	case deferred > admitted:
		w.window = max(window/2, minCandidates)
	case deferred == 0 && res.MoreLimited:
		w.window = w.cfg.Concurrency
	case admitted > 0:
		w.window = min(w.window*2, w.cfg.Concurrency)
	}
}

// snapshotProbe is how many claims a worker makes on locked budgets
// before it tries a snapshot of them again, once snapshotAlone snapshots
// in a row found no other claim taking turns on them.
const (
	snapshotProbe = 16
	snapshotAlone = 3
)

// adaptSnapshot decides whether the next claim decides on a snapshot of
// its budgets first (engine.ClaimParams.SnapshotHint): while claims defer
// nothing and other claims take turns on the same budgets. Without such
// claims a snapshot only costs a round trip, so a worker that finds none
// in snapshotAlone snapshots tries again after snapshotProbe claims.
func (w *Worker) adaptSnapshot(res *engine.ClaimResult, deferred int) {
	switch {
	case deferred > 0 || len(w.budgetHint) == 0:
		w.snapshotHint, w.snapshotIn, w.snapshotAlone = false, snapshotProbe, 0
	case w.snapshotHint && res.Contended:
		w.snapshotAlone = 0
	case w.snapshotHint:
		w.snapshotAlone++
		if w.snapshotAlone >= snapshotAlone {
			w.snapshotHint, w.snapshotIn, w.snapshotAlone = false, snapshotProbe, 0
		}
	default:
		w.snapshotIn--
		w.snapshotHint = w.snapshotIn <= 0
	}
}

// sweepAfter is how many jobs a worker's claims defer on a budget, while
// more are ready behind them, before it sweeps the rest; a claim that parks
// sweeps at once.
const sweepAfter = 128

// overflowing returns the overflows of a claim that the worker should
// sweep: those it parked jobs on (the budget's slots reach past the
// horizon: a flood), and those its claims have by now deferred sweepAfter
// jobs on. A backlog of a few hundred jobs is thus deferred by the claims
// of every worker process that meets it, each waking for the slots it
// handed out, so that one late worker delays only its own slots; a sweep
// hands all its slots to one worker, and the drain would then wait on that
// one worker's claims.
func (w *Worker) overflowing(res *engine.ClaimResult) []engine.Overflow {
	if len(res.Overflows) == 0 {
		return nil
	}
	if w.overflowed == nil {
		w.overflowed = map[string]int{}
	}
	// The budgets that overflowed, and whether the claim parked on them.
	parked := make(map[string]bool, len(res.Overflows))
	for _, o := range res.Overflows {
		parked[o.Key] = false
	}
	for _, d := range res.Deferred {
		if p, over := parked[d.Key]; over {
			w.overflowed[d.Key]++
			parked[d.Key] = p || d.Parked
		}
	}
	var out []engine.Overflow
	for _, o := range res.Overflows {
		if parked[o.Key] || w.overflowed[o.Key] >= sweepAfter {
			out = append(out, o)
		}
	}
	for _, o := range out {
		delete(w.overflowed, o.Key)
	}
	if len(w.overflowed) > maxOverflowed {
		clear(w.overflowed) // many budgets that each overflowed a little
	}
	return out
}

// maxOverflowed bounds the budgets a worker counts overflows on: the
// counts run over the worker's life, and per-account keys are many.
const maxOverflowed = 10_000

// sweepBatch is how many overflowing jobs one transaction defers, once a
// sweep is under way: its first batch is firstSweepBatch, and each after
// that twice the one before. sweepRest is how many times a batch's duration
// the sweep rests after it. Small batches keep the claims around a sweep
// quick: on PostgreSQL a 500-row batch took about 6 ms, and the unlimited
// jobs claimed meanwhile waited that much longer (light-load p99 1.5–2.0×
// the p99 without a flood, against 1.0–1.4× with 100-row batches); the
// sweep takes about 1.6 times as long.
const (
	sweepBatch      = 100
	firstSweepBatch = 50
	sweepRest       = 19
)

// sweep defers, in a goroutine per budget, the ready jobs behind an
// overflow a claim found, so that a flood on a tight budget leaves the
// ready queue in a few set-based statements instead of passing through
// claim after claim.
func (w *Worker) sweep(ctx context.Context, overflows []engine.Overflow) {
	for _, o := range overflows {
		if !w.store.StartSweep(o) {
			continue
		}
		w.sweeps.Add(1)
		go func() {
			defer w.sweeps.Done()
			defer w.store.EndSweep(o)
			switch span, ok, err := w.store.OverflowSpan(ctx, o); {
			case err != nil:
				// The claims leave all the queue's limited jobs to it.
				w.log.Warn("sluice: read the span of the jobs behind a full budget", "budget", o.Key, "err", err)
			case ok:
				w.store.SetSweepSpan(o, span)
			default:
				return // none ready, or the queue is paused: nothing to sweep
			}
			total := 0
			// The first batches are small: a sweep that starts while the
			// claims still meet the flood loses little when one of them
			// moves the budget's cursor under it, and the claims around it
			// are not held up by one large statement at once.
			for batch := firstSweepBatch; ctx.Err() == nil; batch = min(2*batch, sweepBatch) {
				began := time.Now()
				ids, slots, err := w.store.DeferOverflow(ctx, w.storeClock(), o, w.cfg.Horizon, batch)
				w.slots.addAll(slots)
				n := len(ids)
				total += n
				if n > 0 && w.hooks.OnDefer != nil {
					w.hooks.OnDefer(sweepEvent(o, ids, n-len(slots)))
				}
				if err != nil {
					if ctx.Err() == nil {
						w.log.Warn("sluice: defer the jobs behind a full budget", "budget", o.Key, "err", err)
					}
					break
				}
				if n < batch {
					break
				}
				// A twentieth of the time at most: the claims around it keep
				// their pace, and the flood's own jobs wait on their budget
				// anyway.
				select {
				case <-ctx.Done():
				case <-time.After(sweepRest * time.Since(began)):
				}
			}
			if total > 0 {
				w.log.Debug("sluice: deferred the jobs behind a full budget", "budget", o.Key, "kind", o.Kind, "count", total)
			}
		}()
	}
}

// claim takes up to max ready jobs (deciding up to window of them against
// their limits, none of those left to this process's sweeps, and first
// taking the due waiting jobs when promote is set) and reports the claim
// to the hooks and the log.
func (w *Worker) claim(ctx context.Context, pid int64, max, window int, swept map[string]*engine.Span, promote bool) (*engine.ClaimResult, error) {
	began := time.Now()
	hostBegan := w.clock.Now()
	res, err := w.store.Claim(ctx, engine.ClaimParams{
		ProcessID:    pid,
		Queues:       w.cfg.Queues,
		Max:          max,
		Candidates:   window,
		Clock:        w.storeClock(),
		Limits:       w.claimLimits(),
		Fair:         w.reg.hasFair(),
		Horizon:      w.cfg.Horizon,
		PromoteDue:   promote && w.limits != nil,
		DueLead:      w.slots.leadTime(),
		BudgetHint:   w.budgetHint,
		SnapshotHint: w.snapshotHint,
		Swept:        swept,
	})
	if err != nil {
		return nil, err
	}
	if w.limits != nil {
		w.slots.note(res, hostBegan, w.clock.Now())
	}
	if w.leftovers {
		w.leftoversAt = w.clock.Now().Add(w.cfg.PollInterval)
		w.leftovers = res.MoreLimited || countLimited(res.Jobs) > 0
	}
	if w.hooks.OnClaim != nil {
		w.hooks.OnClaim(ClaimEvent{Claimed: len(res.Jobs), Deferred: len(res.Deferred) + len(res.Displaced), Duration: time.Since(began), DecidedAt: res.DecidedAt})
	}
	w.report(res)
	return res, nil
}

// claimLimits returns the limits claims decide against; with no limit
// declared, nil (a plain claim), or none at all while the worker takes the
// jobs a removed limit left with their keys (leftovers).
func (w *Worker) claimLimits() engine.Limits {
	switch {
	case w.limits != nil:
		return w.limits
	case w.leftovers:
		return noLimits{}
	}
	return nil
}

// countLimited counts the jobs of js that carry a rate-limit key.
func countLimited(js []*engine.Job) int {
	n := 0
	for _, j := range js {
		if len(j.RateKeys) > 0 {
			n++
		}
	}
	return n
}

// refreshOverrides reads the rate-limit overrides every OverrideRefresh
// until ctx is done, and hands a limit an override changed to the
// budgets whose jobs are all parked (limitsView.reprice).
func (w *Worker) refreshOverrides(ctx context.Context) {
	t := w.clock.NewTimer(w.cfg.OverrideRefresh)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
		if err := w.limits.refresh(ctx, w.store, w.storeClock(), w.cfg.Horizon); err != nil && ctx.Err() == nil {
			w.log.Warn("sluice: refresh rate-limit overrides", "err", err)
		}
		t.Reset(w.cfg.OverrideRefresh)
	}
}

// declareSlots declares the worker's concurrency limits on the semaphores
// of their keys that record another (slotDeclarations.declare), at its
// start, skipping those another transaction holds (declareHeldSlots
// declares on them). A failure is logged, and declareHeldSlots tries
// again. Nothing runs without a concurrency limit.
func (w *Worker) declareSlots(ctx context.Context) {
	if w.declared == nil {
		return
	}
	if err := w.declared.declare(ctx, w.store, w.storeClock(), w.log, false); err != nil && ctx.Err() == nil {
		w.log.Warn("sluice: declare concurrency limits; trying again", "err", err)
	}
}

// declareHeldSlots declares the worker's concurrency limits on what its
// start left (declareSlots): the keys another transaction held, each in
// a transaction that waits for its lock, so that the limit lands as soon
// as the holder ends, and in the order the starts that wait on the key
// queued for it; and the scopes whose declaration failed. A failure
// (a lock wait that timed out, a lost connection) is logged and tried
// again after a backoff, from 1 s doubling to a minute, until everything
// is declared or ctx is done. Run waits for it before it returns.
func (w *Worker) declareHeldSlots(ctx context.Context) {
	if w.declared == nil {
		return
	}
	for failures := 0; w.declared.pending() && ctx.Err() == nil; {
		err := w.declared.declare(ctx, w.store, w.storeClock(), w.log, true)
		if err == nil || ctx.Err() != nil {
			continue
		}
		failures++
		pause := min(time.Second<<min(failures-1, 6), time.Minute)
		w.log.Warn("sluice: declare concurrency limits on the keys another transaction held", "err", err, "retry_in", pause)
		t := w.clock.NewTimer(pause)
		select {
		case <-ctx.Done():
		case <-t.C():
		}
		t.Stop()
	}
}

// storeClock is the clock the worker's store operations decide on: the
// database's, unless the worker decides on its own (HostClock, or a
// Clock that is not the system's).
func (w *Worker) storeClock() engine.Clock {
	if !w.cfg.HostClock && (w.cfg.DatabaseClock || clock.IsSystem(w.cfg.Clock)) {
		return engine.DatabaseTime(w.clock.Now)
	}
	return engine.HostTime(w.clock.Now)
}

func (w *Worker) free() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.cfg.Concurrency - len(w.running)
}

// start runs a job claimed under pid in its own goroutine.
func (w *Worker) start(ctx context.Context, j *engine.Job, pid int64) {
	rj := &runningJob{job: j, pid: pid, run: runState{base: w.log, job: j, now: w.clock.Now}, began: time.Now().Add(j.Hold)}
	rs := &rj.run
	w.mu.Lock()
	w.running[rj] = struct{}{}
	w.mu.Unlock()
	runs := w.jobs // this Run's: the next one has its own
	runs.Add(1)
	go func() {
		defer runs.Done()
		var res result
		returned := false
		defer func() {
			if !returned {
				if r := recover(); r != nil {
					panic(r) // the worker's own bug: handlers' panics are recovered
				}
				// The handler called runtime.Goexit (a test's t.FailNow):
				// its goroutine ends, but its attempt fails and its slot
				// here is freed, as for an error.
				res = w.failure(j, errGoexit).of(j, errGoexit, max(time.Since(rj.began), 0))
			}
			w.ran(rj, res)
		}()
		if j.Hold > 0 {
			// Admitted as of its slot, a moment ahead: it runs no sooner.
			t := w.clock.NewTimer(j.Hold)
			select {
			case <-ctx.Done():
			case <-t.C():
			}
			t.Stop()
		}
		res = w.execute(ctx, j, rs)
		returned = true
	}()
}

// errGoexit fails the attempt of a handler that called runtime.Goexit.
var errGoexit = errors.New("the handler called runtime.Goexit (t.FailNow?) instead of returning")

// ran reports a run's result to OnFinish and hands it to the recorder,
// unless its job was released (the shutdown reported the run as released
// then, and its result is ignored), and frees its slot. Whether a run was
// released is decided under w.mu, by whichever comes first: ran taking
// the run out of running, or shutdown marking it released. So each run is
// reported once.
func (w *Worker) ran(rj *runningJob, res result) {
	res.pid = rj.pid
	w.mu.Lock()
	delete(w.running, rj)
	released := rj.released
	if !released {
		w.sending.Add(1)
		w.unrecorded[rj.job.ID]++
	}
	w.mu.Unlock()
	if !released {
		if !res.reportedOnceWritten() {
			w.finished(rj.job, res)
		} // else once the recorder wrote it, or released its job
		w.results <- res
		w.sending.Done()
	}
	select {
	case w.freed <- struct{}{}:
	default:
	}
}

// shutdownGrace is how long cancelled jobs get to return before those still
// running are released.
const shutdownGrace = time.Second

// errShutdown is the cause of a job's context when the worker's shutdown
// timeout ran out.
var errShutdown = errors.New("worker shutting down")

// shutdown waits for running jobs up to the shutdown timeout, then cancels
// them, gives them a moment to return, and releases those still running
// back to ready.
func (w *Worker) shutdown(stopJobs context.CancelCauseFunc) {
	done := make(chan struct{})
	started := w.jobs
	go func() { started.Wait(); close(done) }()
	t := w.clock.NewTimer(w.cfg.ShutdownTimeout)
	defer t.Stop()
	select {
	case <-done:
		return
	case <-t.C():
	}
	stopJobs(errShutdown)
	grace := w.clock.NewTimer(shutdownGrace)
	select {
	case <-done:
	case <-grace.C():
	}
	grace.Stop()
	w.mu.Lock()
	// By the process id each was claimed under: a worker registered again
	// after being presumed dead may still run jobs claimed under its old
	// one. (A job's lost run and its new one are two runs of one id, at
	// two claims: only the one the job still runs under is released.)
	byPID := map[int64][]engine.Run{}
	var runs []*runningJob
	for rj := range w.running {
		if rj.released {
			continue // an earlier Run's, released then, still running
		}
		rj.released = true
		byPID[rj.pid] = append(byPID[rj.pid], rj.job.Run())
		runs = append(runs, rj)
	}
	w.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for pid, rs := range byPID {
		ids := make([]int64, len(rs))
		for i, r := range rs {
			ids[i] = r.ID
		}
		slices.Sort(ids)
		ids = slices.Compact(ids)
		if err := w.store.Release(ctx, pid, w.storeClock(), rs); err != nil {
			w.log.Error("sluice: release unfinished jobs; they come back when this process is presumed dead", "err", err, "jobs", ids)
			continue
		}
		w.log.Warn("sluice: released jobs still running at shutdown", "jobs", ids)
	}
	// Once the releases are written: the hooks and the callbacks are the
	// app's code (each guarded: one that panics is logged), and neither
	// their time nor their panics may keep a job from going back to ready.
	// Their runs' outcomes are ignored either way, even where a release
	// failed. Each run is reported now, as released, not when its handler
	// returns: the process may well exit first, and ran reports nothing
	// for a released run.
	for _, rj := range runs {
		w.finished(rj.job, result{id: rj.job.ID, t: engine.Transition{State: engine.StateReady}, took: max(time.Since(rj.began), 0)})
		rj.run.release()
	}
}

// heartbeat stamps the process row and reaps dead processes every
// HeartbeatInterval until ctx is done.
func (w *Worker) heartbeat(ctx context.Context) {
	heartbeat.Run(ctx, w.store, w.clock, w.storeClock(), w.log, w.cfg.HeartbeatInterval, w.cfg.DeadAfter, &w.pid, w.register)
}
