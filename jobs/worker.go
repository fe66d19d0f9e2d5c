package jobs

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicequeue/sluice/clock"
	"github.com/sluicequeue/sluice/internal/engine"
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
	// stoppingSince is when stopping was set, on the wall clock (Unix
	// nanoseconds; 0 while unset): the tries of a batch already under way
	// then end stoppingTries after it (recorder.record).
	stoppingSince atomic.Int64
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
	// otherwise. They run unchecked, as nothing limits them any more. In
	// a worker with no fair kind it likewise adds the fair stream, for the
	// jobs a kind's removed Fair left with their fairness keys. Set
	// at start and once a PollInterval (whatever else wakes the worker),
	// and kept while such claims find more; only the claiming goroutine
	// touches it and leftoversAt, when the next such claim is due.
	leftovers   bool
	leftoversAt time.Time
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

// storeClock is the clock the worker's store operations decide on: the
// database's, unless the worker decides on its own (HostClock, or a
// Clock that is not the system's).
func (w *Worker) storeClock() engine.Clock {
	if !w.cfg.HostClock && (w.cfg.DatabaseClock || clock.IsSystem(w.cfg.Clock)) {
		return engine.DatabaseTime(w.clock.Now)
	}
	return engine.HostTime(w.clock.Now)
}

// setStopping sets or unsets stopping, with the wall time it was set.
func (w *Worker) setStopping(on bool) {
	if on {
		w.stoppingSince.Store(time.Now().UnixNano())
	} else {
		w.stoppingSince.Store(0)
	}
	w.stopping.Store(on)
}

// stoppingSinceTime is when stopping was set (zero while it is not).
func (w *Worker) stoppingSinceTime() time.Time {
	if ns := w.stoppingSince.Load(); ns != 0 {
		return time.Unix(0, ns)
	}
	return time.Time{}
}
