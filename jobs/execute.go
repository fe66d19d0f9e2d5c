package jobs

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"time"

	"github.com/sluicequeue/sluice/store"
)

// maxErrorBytes caps the error text kept with a job.
const maxErrorBytes = 16 << 10

// result is a run's outcome, on its way to the database.
type result struct {
	pid      int64
	id       int64
	complete bool
	t        store.Transition
	// holdsSlot is set when the job held a concurrency slot when claimed.
	holdsSlot bool
	// withCalls is set when the job collected calls.
	withCalls bool
	// throttled is set when an upstream refused the run (RetryAfter), and
	// pushes hold the job's budgets back until the wait is over.
	throttled bool
	pushes    []store.BudgetPush
}

// final reports whether the outcome ends the job: its slot goes back.
func (r result) final() bool {
	return r.complete || r.t.State == store.StateFailed || r.t.State == store.StateCancelled
}

// execute runs one claimed job and decides what becomes of it.
func (w *Worker) execute(ctx context.Context, j *store.Job) result {
	began := time.Now()
	res, err := w.run(ctx, j)
	res.holdsSlot, res.withCalls = j.HoldsSlot, j.Calls > 1
	if w.hooks.OnFinish != nil {
		w.hooks.OnFinish(FinishEvent{
			JobID: j.ID, Kind: j.Kind, Queue: j.Queue, Attempt: j.Attempt,
			Outcome: outcomeOf(res), Err: err, Duration: time.Since(began),
		})
	}
	return res
}

func (w *Worker) run(ctx context.Context, j *store.Job) (result, error) {
	k := w.reg.lookup(j.Kind)
	if k == nil || k.work == nil {
		if _, seen := w.unknown.LoadOrStore(j.Kind, true); !seen {
			w.log.Error("sluice: no handler for a claimed job's kind; it is retried with backoff until a worker that has one claims it",
				"kind", j.Kind, "job_id", j.ID)
		}
		err := fmt.Errorf("%w: no handler for kind %q in worker %q", ErrUnknownKind, j.Kind, w.cfg.Name)
		return w.failure(j, err), err
	}
	args, err := k.decode(j.Args)
	if err != nil {
		err = fmt.Errorf("decode args of %s: %w", j.Kind, err)
		return w.failure(j, err), err
	}
	var more []any
	for i, body := range j.CallArgs[min(1, len(j.CallArgs)):] {
		c, err := k.decode(body)
		if err != nil {
			err = fmt.Errorf("decode call %d of %s: %w", i+2, j.Kind, err)
			return w.failure(j, err), err
		}
		more = append(more, c)
	}
	timeout := w.cfg.JobTimeout
	if k.cfg.timeout != 0 {
		timeout = k.cfg.timeout
	}
	jctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	if timeout > 0 {
		t := w.clock.AfterFunc(timeout, func() { cancel(ErrJobTimeout) })
		defer t.Stop()
	}
	err = call(jctx, k, j, args, more)
	if err != nil && errors.Is(context.Cause(jctx), ErrJobTimeout) {
		err = fmt.Errorf("%w after %s: %w", ErrJobTimeout, timeout, err)
	}
	return w.outcome(ctx, j, err), err
}

// call runs the handler, turning a panic into an error with its stack.
func call(ctx context.Context, k *kind, j *store.Job, args any, more []any) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic: %v\n%s", r, debug.Stack())
		}
	}()
	return k.work(ctx, j, args, more)
}

// outcome maps a handler's error to the job's next state.
func (w *Worker) outcome(ctx context.Context, j *store.Job, err error) result {
	var cancelled *cancelError
	var snoozed *snoozeError
	var retryAfter *retryAfterError
	switch {
	case err == nil:
		return result{id: j.ID, complete: true}
	case errors.Is(context.Cause(ctx), errShutdown):
		return result{id: j.ID, t: store.Transition{ID: j.ID, State: store.StateReady, RunAt: w.clock.Now(), AttemptDelta: -1}}
	case errors.As(err, &cancelled):
		return result{id: j.ID, t: store.Transition{ID: j.ID, State: store.StateCancelled, Error: errorText(cancelled.err), Finished: true}}
	case errors.As(err, &snoozed):
		return result{id: j.ID, t: store.Transition{ID: j.ID, State: store.StateScheduled, RunAt: w.clock.Now().Add(snoozed.d), AttemptDelta: -1}}
	case errors.As(err, &retryAfter):
		return w.waitUpstream(j, retryAfter)
	default:
		return w.failure(j, err)
	}
}

// waitUpstream sends a job an upstream refused (a 429) back to wait
// without spending an attempt, and holds back every budget it ran under
// until then.
func (w *Worker) waitUpstream(j *store.Job, e *retryAfterError) result {
	now := w.clock.Now()
	wait := min(e.wait(now), w.cfg.MaxRetryAfter)
	t := store.Transition{ID: j.ID, State: store.StateScheduled, RunAt: now.Add(wait), AttemptDelta: -1, Error: errorText(e)}
	var pushes []store.BudgetPush
	if w.limits != nil {
		for _, rk := range j.RateKeys {
			if spec, ok := w.limits.RateSpec(j.Kind, rk.Key); ok {
				pushes = append(pushes, store.BudgetPush{Key: rk.Key, Wait: wait, Params: spec.Params})
			}
		}
		for _, l := range w.limits.QueueLimits(j.Queue) {
			pushes = append(pushes, store.BudgetPush{Key: l.Key, Wait: wait, Params: l.Spec.Params})
		}
	}
	if len(pushes) > 0 {
		t.WaitKey = pushes[0].Key
	}
	return result{id: j.ID, t: t, throttled: true, pushes: pushes}
}

// failure retries a failed attempt after its backoff, or keeps the job as
// failed when it has no attempts left.
func (w *Worker) failure(j *store.Job, err error) result {
	if j.Attempt >= j.MaxAttempts {
		return result{id: j.ID, t: store.Transition{ID: j.ID, State: store.StateFailed, Error: errorText(err), Finished: true}}
	}
	delay := jitter(DefaultBackoff(j.Attempt))
	if k := w.reg.lookup(j.Kind); k != nil && k.cfg.backoff != nil {
		delay = k.cfg.backoff(j.Attempt)
	}
	at := w.clock.Now().Add(delay)
	return result{id: j.ID, t: store.Transition{ID: j.ID, State: store.StateScheduled, RunAt: at, Error: errorText(err)}}
}

func errorText(err error) string {
	s := err.Error()
	if s == "" {
		s = fmt.Sprintf("%T with no message", err)
	}
	if len(s) > maxErrorBytes {
		s = s[:maxErrorBytes] + "… (truncated)"
	}
	return s
}

func outcomeOf(r result) Outcome {
	switch {
	case r.complete:
		return OutcomeCompleted
	case r.t.State == store.StateFailed:
		return OutcomeFailed
	case r.t.State == store.StateCancelled:
		return OutcomeCancelled
	case r.t.State == store.StateReady:
		return OutcomeReleased
	case r.throttled:
		return OutcomeThrottled
	case r.t.AttemptDelta < 0:
		return OutcomeSnoozed
	default:
		return OutcomeRetried
	}
}

// complete writes results to the database until results is closed,
// batching whatever has queued up while the previous write ran. A failed
// write is retried until it lands: a result is never dropped while the
// process lives.
func (w *Worker) complete(done chan<- struct{}) {
	defer close(done)
	for r := range w.results {
		batch := []result{r}
	fill:
		for len(batch) < 1000 {
			select {
			case r, ok := <-w.results:
				if !ok {
					break fill
				}
				batch = append(batch, r)
			default:
				break fill
			}
		}
		w.flush(batch)
	}
}

// flush writes one batch, grouped by the process id each job was claimed
// under.
func (w *Worker) flush(batch []result) {
	byPID := map[int64][]result{}
	for _, r := range batch {
		byPID[r.pid] = append(byPID[r.pid], r)
	}
	for pid, rs := range byPID {
		var o store.Outcomes
		for _, r := range rs {
			if r.complete {
				o.Completed = append(o.Completed, r.id)
				if r.withCalls {
					o.WithCalls = append(o.WithCalls, r.id)
				}
			} else {
				o.Others = append(o.Others, r.t)
			}
			o.Pushes = append(o.Pushes, r.pushes...)
			if r.holdsSlot && r.final() {
				o.SlotHolders = append(o.SlotHolders, r.id)
			}
		}
		pause := 100 * time.Millisecond
		for attempt := 1; ; attempt++ {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			err := w.store.Finish(ctx, pid, w.storeClock(), o)
			cancel()
			if err == nil {
				break
			}
			if w.stopping.Load() && attempt >= 10 {
				w.log.Error("sluice: could not record finished jobs before stopping; they run again once this process is presumed dead",
					"err", err, "jobs", len(rs))
				break
			}
			w.log.Error("sluice: record finished jobs; retrying", "err", err, "jobs", len(rs), "attempt", attempt)
			time.Sleep(pause)
			pause = min(pause*2, 10*time.Second)
		}
	}
}
