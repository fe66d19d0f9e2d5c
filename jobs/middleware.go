package jobs

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"time"

	"github.com/sluicequeue/sluice/internal/engine"
)

// Middleware wraps the runs of jobs: it calls next to run the rest of the
// chain and the handler, and may change the context next gets or the error
// the run ends with (the worker decides the job's fate from that error, so
// a middleware that returns Snooze snoozes the job). It runs inside the
// job's timeout and panic recovery: a panic in middleware fails the
// attempt as a panicking handler does. Not calling next skips the
// handler. It wraps every attempt: for a job that cannot run (its kind
// has no handler in this worker, or its metadata, args or calls do not
// decode) next returns the error the attempt fails with, and calls no
// handler.
//
// Middleware declared for the worker (WorkerConfig.Middleware) runs
// outermost, in the order given, then the kind's (WithMiddleware), then
// the handler.
type Middleware func(ctx context.Context, job JobInfo, next func(ctx context.Context) error) error

// JobInfo is what middleware knows of the job it wraps.
type JobInfo struct {
	// ID is the job's id.
	ID int64
	// Kind is the job's kind.
	Kind string
	// Queue is the queue the job was claimed from.
	Queue string
	// Attempt counts this run: 1 for the first.
	Attempt int
	// MaxAttempts is how many runs the job gets.
	MaxAttempts int
	// Priority is the job's priority: lower runs first.
	Priority int
	// Metadata is the job's metadata (see WithMetadata); nil when it has
	// none. It is the handler's copy too: changing it stores nothing.
	Metadata map[string]string
	// EnqueuedAt is when the job was enqueued.
	EnqueuedAt time.Time
	// ClaimedAt is when the claim took the job, on the claim's clock (the
	// database's, by default).
	ClaimedAt time.Time
	// Deferrals counts the times a rate limit deferred the job (a claim,
	// or a worker's sweep of a flood), over its whole life (this attempt's
	// wait and earlier ones).
	Deferrals int
	// DeferralReason says why the job was last deferred ("rate limit"
	// and the budget key); empty when it never was.
	DeferralReason string
	// DeferredAt is when the job's wait on rate limits before this run
	// began; zero when it was not deferred since it last ran.
	DeferredAt time.Time
	// LimitWait is how long the job waited on rate limits before this run:
	// from DeferredAt to ClaimedAt; 0 when it did not wait.
	LimitWait time.Duration
	// Budgets are the rate-limit budgets the job ran under: its kind's,
	// then its queue's. Nil when none limits it.
	Budgets []Budget
	// ConcurrencyKey is the job's concurrency key; empty without a
	// concurrency limit.
	ConcurrencyKey string
	// Calls counts the calls a coalescing job collected; 1 for most jobs.
	Calls int
}

// Budget is one rate-limit budget a job draws on.
type Budget struct {
	// Key is the budget's key: the limit's scope (its group, or the kind,
	// or "@queue") and the job's key value, joined with "/".
	Key string
	// Cost is what one run of the job draws from it.
	Cost int
}

// withMiddleware is the RegisterOption WithMiddleware returns.
type withMiddleware []Middleware

// WithMiddleware wraps the runs of the kind's jobs in mw, inside the
// worker's middleware, in the order given. Defaults to none.
func WithMiddleware(mw ...Middleware) RegisterOption { return withMiddleware(mw) }

func (m withMiddleware) applyRegister(c *kindConfig) error {
	if err := checkMiddleware("WithMiddleware: middleware", m); err != nil {
		return err
	}
	c.middleware = append(c.middleware, m...)
	return nil
}

// checkMiddleware refuses a nil middleware in a list, naming its index.
func checkMiddleware[M any](field string, mw []M) error {
	for i, f := range mw {
		if v := reflect.ValueOf(f); !v.IsValid() || v.IsNil() {
			return fmt.Errorf("%s %d is nil", field, i)
		}
	}
	return nil
}

// chain runs mw around h, outermost first, each given info.
func chain[I any, M ~func(context.Context, I, func(context.Context) error) error](ctx context.Context, mw []M, info I, h func(ctx context.Context) error) error {
	c := &chainRun[I, M]{mw: mw, info: info, h: h}
	return c.step(0, ctx)
}

// chainRun is one run of a middleware chain: one allocation, info
// included, and one per middleware for the next it is given.
type chainRun[I any, M ~func(context.Context, I, func(context.Context) error) error] struct {
	mw   []M
	info I
	h    func(ctx context.Context) error
}

// errNilContext is what next returns when given a nil context.
var errNilContext = errors.New("jobs: a middleware passed a nil context to next")

// step runs the chain from middleware i on.
func (c *chainRun[I, M]) step(i int, ctx context.Context) error {
	if ctx == nil {
		return errNilContext
	}
	if i == len(c.mw) {
		return c.h(ctx)
	}
	return c.mw[i](ctx, c.info, func(ctx context.Context) error { return c.step(i+1, ctx) })
}

// jobInfo describes a claimed job to middleware.
func (w *Worker) jobInfo(j *engine.Job, md map[string]string) JobInfo {
	info := JobInfo{
		ID: j.ID, Kind: j.Kind, Queue: j.Queue, Attempt: j.Attempt, MaxAttempts: j.MaxAttempts, Priority: j.Priority,
		Metadata: md, EnqueuedAt: j.CreatedAt, ClaimedAt: j.ClaimedAt,
		Deferrals: j.Deferrals, DeferralReason: j.DeferralReason, DeferredAt: j.DeferredAt, LimitWait: j.LimitWait(),
		ConcurrencyKey: j.ConcKey, Calls: max(j.Calls, 1),
	}
	for _, rk := range j.RateKeys {
		info.Budgets = append(info.Budgets, Budget{Key: rk.Key, Cost: rk.Cost})
	}
	if w.limits != nil {
		for _, l := range w.limits.QueueLimits(j.Queue) {
			info.Budgets = append(info.Budgets, Budget{Key: l.Key, Cost: 1})
		}
	}
	return info
}

// middlewareFor returns the middleware a run of kind k goes through: the
// worker's, then the kind's (none for a kind k the registry does not have,
// nil).
func (w *Worker) middlewareFor(k *kind) []Middleware {
	switch {
	case k == nil || len(k.cfg.middleware) == 0:
		return w.cfg.Middleware
	case len(w.cfg.Middleware) == 0:
		return k.cfg.middleware
	}
	return append(append(make([]Middleware, 0, len(w.cfg.Middleware)+len(k.cfg.middleware)), w.cfg.Middleware...), k.cfg.middleware...)
}

// Verdict is what a worker makes of the error a run ends with, for
// middleware that reports it (Classify).
type Verdict struct {
	// Outcome is what becomes of the job: completed, snoozed, throttled
	// (an upstream's 429), cancelled, released (the worker is shutting
	// down), or, for any other error, retried or failed (no attempt
	// left).
	Outcome Outcome
	// Wait is how long a snoozed or throttled job waits before it runs
	// again (for a throttled one, before the worker's MaxRetryAfter cap).
	Wait time.Duration
	// Reason is a cancellation's reason, or the error's text; empty for
	// a completed run.
	Reason string
}

// Classify says what the worker makes of err, the error a run of job
// returned with the handler's context ctx: the outcome FinishEvent
// reports, as middleware sees it before the worker acts on it. A run the
// worker's shutdown cancelled is released, as the worker records it, even
// when ctx ended first for the run's timeout.
func Classify(ctx context.Context, job JobInfo, err error) Verdict {
	k, c, s, r := classify(ctx, err)
	switch k {
	case OutcomeCompleted:
		return Verdict{Outcome: k}
	case OutcomeReleased:
		return Verdict{Outcome: k, Reason: "released: the worker is shutting down"}
	case OutcomeCancelled:
		return Verdict{Outcome: k, Reason: c.err.Error()}
	case OutcomeSnoozed:
		return Verdict{Outcome: k, Wait: s.d, Reason: s.Error()}
	case OutcomeThrottled:
		return Verdict{Outcome: k, Wait: upstreamWait(ctx, r), Reason: r.Error()}
	case OutcomeFailed:
		return Verdict{Outcome: k, Reason: err.Error()}
	}
	v := Verdict{Outcome: OutcomeRetried, Reason: err.Error()}
	if job.Attempt >= job.MaxAttempts {
		v.Outcome = OutcomeFailed
	}
	return v
}

// upstreamWait is how long r asks the job of ctx to wait, reckoned on the
// clock of the worker running it (before its MaxRetryAfter cap); outside
// a worker's run (Perform), on the system clock.
func upstreamWait(ctx context.Context, r *retryAfterError) time.Duration {
	if rs, ok := ctx.Value(runKey{}).(*runState); ok && rs.now != nil {
		return r.wait(rs.now())
	}
	return r.wait(time.Now())
}

// shuttingDown reports whether the worker running the job of ctx (the
// context it ran the job with, or the handler's, or one derived from it)
// is shutting down and has cancelled its jobs: the run is then released,
// whatever ended the handler's context first (its timeout, say), as the
// worker records it.
func shuttingDown(ctx context.Context) bool {
	if errors.Is(context.Cause(ctx), errShutdown) {
		return true
	}
	rs, ok := ctx.Value(runKey{}).(*runState)
	return ok && rs.parent != nil && errors.Is(context.Cause(rs.parent), errShutdown)
}

// classify sorts a run's error: completed, released, cancelled, snoozed,
// throttled, or "" for a failed attempt. A job the worker could not run
// (givenBackError) is snoozed for its wait, or failed for good once it was
// given back for longer than GiveBackFor. It allocates nothing (a run that
// completed pays for no error targets), but for a job given back.
func classify(ctx context.Context, err error) (Outcome, *cancelError, *snoozeError, *retryAfterError) {
	if err == nil {
		return OutcomeCompleted, nil, nil, nil
	}
	if shuttingDown(ctx) {
		return OutcomeReleased, nil, nil, nil
	}
	if cancelled, ok := errors.AsType[*cancelError](err); ok {
		return OutcomeCancelled, cancelled, nil, nil
	}
	if snoozed, ok := errors.AsType[*snoozeError](err); ok {
		return OutcomeSnoozed, nil, snoozed, nil
	}
	if retryAfter, ok := errors.AsType[*retryAfterError](err); ok {
		return OutcomeThrottled, nil, nil, retryAfter
	}
	if back, ok := errors.AsType[*givenBackError](err); ok {
		if back.final {
			return OutcomeFailed, nil, nil, nil
		}
		return OutcomeSnoozed, nil, &snoozeError{d: back.wait, back: back}, nil
	}
	return "", nil, nil, nil
}
