package jobs

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/ratelimit"
)

// Hooks are called as a worker works, for metrics and logs. Each may be
// nil. They run on the worker's goroutines and should return quickly; one
// that panics is logged with its stack, and the worker carries on.
type Hooks struct {
	// OnClaim is called after every claim.
	OnClaim func(ClaimEvent)
	// OnDefer is called for every deferral a rate limit makes: once per
	// kind for each claim that deferred jobs of that kind (or would have,
	// in shadow mode), once per kind for the waiting jobs a claim sent to
	// later slots to make room for more urgent ones (DeferEvent.Displaced),
	// and once for each batch of jobs the worker's sweep defers in bulk
	// behind a full budget (DeferEvent.Swept), so that the events count
	// every deferral the jobs record, but those of a claim or batch whose
	// commit landed and whose reply was lost, which the worker takes for
	// failed and reports nothing of. Sweeps run in
	// goroutines of their own: OnDefer may be called from several at once.
	OnDefer func(DeferEvent)
	// OnFinish is called once for each run the worker starts, when it
	// ends: when its handler returns, with the outcome the worker decided
	// (Classify's); or, for a run the worker releases at shutdown while
	// its handler still runs, with OutcomeReleased as soon as the release
	// is written (or failed), before Run returns — not when the handler
	// returns, which is then reported no more (the process may exit
	// first). A run whose job gives a concurrency slot back (it ended for
	// good, an upstream refused it, or the worker gave it back) is
	// reported once its result is written instead, with the outcome the
	// worker decided: such a result may wait for the key's semaphore,
	// which an app's open transaction that enqueued a job of the key
	// holds, and if the worker stops (or a Drain returns) before the key
	// is free, its job is released to run again, and the run reported
	// with OutcomeReleased; that report is made on the goroutine that
	// writes results, so a slow OnFinish holds up the writing of results
	// (keep it quick, as every hook). It reports what the worker decided, not what
	// the store made of it: a run whose process was
	// presumed dead while it ran (a lost run) is reported as it ended
	// here, though the store ignores its result or its release (the
	// reaper had released the job, counting the lost run as a failed
	// attempt, which no hook reports); and a result the database refuses
	// is reported as the handler ended it, not as the failed attempt
	// recorded instead. (Telling which results a batch's write ignored
	// would cost a completion a statement more: a completion is matched by
	// its own statement alone.) Jobs marked running for the worker that it
	// never started (a drain's claim made before it was presumed dead, or
	// a failed claim's strays, all released unrun) are no runs, and are
	// not reported.
	OnFinish func(FinishEvent)
}

// Join returns hooks that call h's and then o's. Each is called even when
// the other panics: a joined hook that panicked panics on once both have
// run, with every panic and its stack, so that a worker logs them all (a
// bug in an application's hook does not cost the metrics of the hooks
// joined to it, as otelsluice's InstrumentWorker does).
func (h Hooks) Join(o Hooks) Hooks {
	return Hooks{
		OnClaim:  join(h.OnClaim, o.OnClaim),
		OnDefer:  join(h.OnDefer, o.OnDefer),
		OnFinish: join(h.OnFinish, o.OnFinish),
	}
}

// guarded returns h with each callback recovering its own panic: a bug in
// a metrics hook must not take the worker's goroutine, and so the process
// and the job whose event it was handed, down with it.
func (h Hooks) guarded(log *slog.Logger) Hooks {
	return Hooks{
		OnClaim:  guard(h.OnClaim, "OnClaim", log),
		OnDefer:  guard(h.OnDefer, "OnDefer", log),
		OnFinish: guard(h.OnFinish, "OnFinish", log),
	}
}

func guard[E any](f func(E), name string, log *slog.Logger) func(E) {
	if f == nil {
		return nil
	}
	return func(e E) {
		if err := try(f, e); err != nil {
			log.Error("sluice: a worker hook panicked; the worker carries on", "hook", name, "err", err)
		}
	}
}

// try calls f(e), and returns its panic, with the stack, as an error.
func try[E any](f func(E), e E) (err error) {
	defer recoverInto(&err)
	f(e)
	return nil
}

// join calls a and then b, each even when the other panics; it then
// panics on with what they panicked with (see hookPanic).
func join[E any](a, b func(E)) func(E) {
	switch {
	case a == nil:
		return b
	case b == nil:
		return a
	}
	return func(e E) {
		if err := errors.Join(try(a, e), try(b, e)); err != nil {
			panic(hookPanic{err})
		}
	}
}

// hookPanic is what a joined hook panics with: the panics of its sides,
// each already with its stack, which recoverInto takes as they are.
type hookPanic struct{ err error }

func (p hookPanic) Error() string { return p.err.Error() }

func (p hookPanic) Unwrap() error { return p.err }

// ClaimEvent describes one claim.
type ClaimEvent struct {
	// Claimed counts the jobs the claim took. Deferred counts the
	// deferrals it recorded, as Hooks.OnDefer reports them: the jobs it
	// held back, and those it displaced (sent to later slots to make room
	// for more urgent jobs it deferred, DeferEvent.Displaced).
	Claimed, Deferred int
	// Duration is how long the claim's transaction took.
	Duration time.Duration
	// DecidedAt is when rate limits were decided (on the database's clock
	// by default); zero when no claimed job carried a limit.
	DecidedAt time.Time
}

// DeferEvent describes the jobs of one kind a claim deferred, or one batch
// of jobs a sweep deferred (Swept).
type DeferEvent struct {
	// Kind is the deferred jobs' kind.
	Kind string
	// Keys are the budgets that held the jobs, once each.
	Keys []string
	// JobIDs are the deferred jobs; a job can wait more than once.
	JobIDs []int64
	// Count is len(JobIDs).
	Count int
	// Parked counts those whose budget's slots reached past the horizon.
	Parked int
	// PerLimit counts the jobs per limit that held them: the budget key's
	// scope (the group, or the kind).
	PerLimit map[string]int
	// PerKey counts the jobs per budget key that held them.
	PerKey map[string]int
	// Shadow is set when the limits were in shadow mode: these jobs would
	// have been deferred (would_defer) and ran anyway.
	Shadow bool
	// Swept is set when the worker's sweep deferred these jobs in bulk,
	// not a claim: a batch of a flood's jobs, all of one kind, queue and
	// budget (Keys holds that one), moved out of the ready queue in one
	// transaction after a claim found the budget full (a claim's real
	// deferral starts a sweep: Shadow is never set with it).
	Swept bool
	// Displaced is set when these jobs were waiting for slots that the
	// claim gave to more urgent jobs it deferred, and were sent to later
	// slots (or parked): each records one more deferral.
	Displaced bool
}

// Outcome is how a job's run ended.
type Outcome string

// Outcomes of a run.
const (
	OutcomeCompleted Outcome = "completed"
	OutcomeRetried   Outcome = "retried"
	OutcomeFailed    Outcome = "failed"
	OutcomeCancelled Outcome = "cancelled"
	OutcomeSnoozed   Outcome = "snoozed"
	OutcomeReleased  Outcome = "released"
	// OutcomeThrottled is a run an upstream refused with a 429: the job
	// and its budgets wait, and no attempt is spent.
	OutcomeThrottled Outcome = "throttled"
)

// FinishEvent describes one finished run.
type FinishEvent struct {
	// JobID is the job's id.
	JobID int64
	// Kind is the job's kind.
	Kind string
	// Queue is the job's queue.
	Queue string
	// Attempt is the run's attempt, 1 for the first.
	Attempt int
	// Outcome is what became of the run.
	Outcome Outcome
	// Err is the handler's error, if any; nil for a run released while
	// its handler still ran (it had returned nothing). A run released
	// once its handler returned (its result waited for a concurrency key
	// another transaction held) keeps the handler's error.
	Err error
	// Duration is how long the handler ran; for a run released while it
	// still ran, until the release. It leaves out how long a result
	// waited to be written.
	Duration time.Duration
}

// deferEvents groups a claim's deferrals by kind, in the order they came.
func deferEvents(ds []engine.Deferral, shadow, displaced bool) []DeferEvent {
	var out []DeferEvent
	index := map[string]int{}
	for _, d := range ds {
		i, ok := index[d.Kind]
		if !ok {
			i = len(out)
			index[d.Kind] = i
			out = append(out, DeferEvent{Kind: d.Kind, Shadow: shadow, Displaced: displaced})
		}
		e := &out[i]
		e.JobIDs = append(e.JobIDs, d.JobID)
		e.Count++
		if e.PerLimit == nil {
			e.PerLimit, e.PerKey = map[string]int{}, map[string]int{}
		}
		e.PerLimit[ratelimit.ScopeOf(d.Key)]++
		e.PerKey[d.Key]++
		if d.Parked {
			e.Parked++
		}
		seen := false
		for _, k := range e.Keys {
			seen = seen || k == d.Key
		}
		if !seen {
			e.Keys = append(e.Keys, d.Key)
		}
	}
	return out
}

// sweepEvent is the deferral event of one batch of a sweep: ids, of o's
// kind, deferred on o's budget, parked of them past the horizon.
func sweepEvent(o engine.Overflow, ids []int64, parked int) DeferEvent {
	n := len(ids)
	return DeferEvent{
		Kind: o.Kind, Keys: []string{o.Key}, JobIDs: ids, Count: n, Parked: parked,
		PerLimit: map[string]int{ratelimit.ScopeOf(o.Key): n}, PerKey: map[string]int{o.Key: n},
		Swept: true,
	}
}

// report delivers a claim's deferral events to the hook and the debug log.
func (w *Worker) report(res *engine.ClaimResult) {
	for _, u := range res.Unfit {
		w.log.Error("sluice: a job costs more than its rate limit's burst, so no slot could ever admit it; it failed (raise the burst, then retry it)",
			"job_id", u.JobID, "kind", u.Kind, "budget", u.Key, "cost", u.Cost, "burst", u.Burst)
	}
	for _, batch := range []struct {
		ds                []engine.Deferral
		shadow, displaced bool
	}{{res.Deferred, false, false}, {res.Displaced, false, true}, {res.Shadowed, true, false}} {
		if len(batch.ds) == 0 {
			continue
		}
		events := deferEvents(batch.ds, batch.shadow, batch.displaced)
		for _, e := range events {
			if w.hooks.OnDefer != nil {
				w.hooks.OnDefer(e)
			}
			if w.log.Enabled(context.Background(), slog.LevelDebug) {
				msg := "sluice: deferred rate-limited jobs"
				if e.Shadow {
					msg = "sluice: would_defer (shadow mode; the jobs ran)"
				}
				w.log.Debug(msg, "kind", e.Kind, "keys", e.Keys, "job_ids", e.JobIDs, "count", e.Count, "parked", e.Parked)
			}
		}
	}
}
