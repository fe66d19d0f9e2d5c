package jobs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"slices"
	"strconv"
	"time"

	"github.com/sluicequeue/sluice/internal/engine"
)

// maxBatchErrorBytes caps the error text one batch of results carries, so
// that a batch of long errors stays well under a server's packet limit.
const maxBatchErrorBytes = 1 << 20

// result is a run's outcome, on its way to the database.
type result struct {
	pid int64
	id  int64
	// attempt is the attempt the run was claimed at (Job.Attempt).
	attempt int
	// claim is the claim that made the run (Job.Claims): with pid, the run
	// its result is for, which counts only while the job still runs under
	// it (a lost run's does not, nor a result written again once the job
	// was claimed again, even at the same attempt).
	claim    int64
	complete bool
	t        engine.Transition
	// holdsSlot is set when the job held a concurrency slot when claimed.
	holdsSlot bool
	// withCalls is set when the job collected calls.
	withCalls bool
	// givenBack is set when the worker could not run the job and gave it
	// back (givenBackError), which gives its concurrency slot back.
	givenBack bool
	// throttled is set when an upstream refused the run (RetryAfter), and
	// pushes hold the job's budgets back until the wait is over.
	throttled bool
	pushes    []engine.BudgetPush
	// job is the claimed job, for the outcome recorded instead when the
	// database refuses this one.
	job *engine.Job
	// refused is set on that outcome.
	refused bool
	// err is the error the run ended with, and took how long its handler
	// ran: what OnFinish reports (see Worker.finished).
	err  error
	took time.Duration
}

// ranBefore reports whether the job ran before this run, so that it may
// have failed runs kept (engine.Attempts), which DeleteOnComplete deletes
// with it. The attempt does not tell: an operator's retry sets it back to 0
// and keeps the failed runs, so a retried job completes at attempt 1 with
// its old failures kept. The claims counter tells, as nothing sets it back:
// a job's first run is its first claim, and a completion at its first claim
// (most of them) costs no statement more. A claim counted before migration
// 017 is 0, which may have run before.
func (r result) ranBefore() bool { return r.claim != 1 || r.attempt > 1 }

// final reports whether the outcome ends the job.
func (r result) final() bool {
	return r.complete || r.t.State == engine.StateFailed || r.t.State == engine.StateCancelled
}

// givesSlotBack reports whether a job that held a concurrency slot gives
// it back: when it ends; when an upstream refused it (a 429), which
// makes it wait on its rate limits as a rate-limit deferral does — and a
// job waiting on a rate holds no concurrency slot; and when the worker
// could not run it and gave it back (givenBackError), so that a job no
// worker here runs does not hold its key's slot from the jobs that can
// run while it waits for a worker that can. It takes one again when it
// comes back, or is blocked (never discarded, whatever its limit's
// OnConflict). A retry or a snooze keeps its slot while it waits.
func (r result) givesSlotBack() bool { return r.final() || r.throttled || r.givenBack }

// execute runs one claimed job and decides what becomes of it. It reports
// nothing: the caller reports the run to OnFinish (finished) once it knows
// the result is the run's to report, as it is not for a run the worker
// released while it ran (Worker.ran).
func (w *Worker) execute(ctx context.Context, j *engine.Job, rs *runState) result {
	began := time.Now()
	res, err := w.run(ctx, j, rs)
	return res.of(j, err, time.Since(began))
}

// of is r as the result of j's run, which ended with err after took.
func (r result) of(j *engine.Job, err error, took time.Duration) result {
	r.attempt, r.claim, r.holdsSlot, r.withCalls, r.job = j.Attempt, j.Claims, j.HoldsSlot, j.Calls > 1, j
	r.err, r.took = err, took
	return r
}

// finished reports a run's result to OnFinish, with the outcome the worker
// decided for it.
func (w *Worker) finished(j *engine.Job, res result) {
	if w.hooks.OnFinish != nil {
		w.hooks.OnFinish(FinishEvent{
			JobID: j.ID, Kind: j.Kind, Queue: j.Queue, Attempt: j.Attempt,
			Outcome: outcomeOf(res), Err: res.err, Duration: res.took,
		})
	}
}

func (w *Worker) run(ctx context.Context, j *engine.Job, rs *runState) (result, error) {
	k := w.reg.lookup(j.Kind)
	args, md, more, bad := w.decode(ctx, j, k)
	timeout := w.cfg.JobTimeout
	if k != nil && k.cfg.timeout != 0 {
		timeout = k.cfg.timeout
	}
	jctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	if timeout > 0 {
		t := w.clock.AfterFunc(timeout, func() { cancel(ErrJobTimeout) })
		defer t.Stop()
	}
	mw := w.middlewareFor(k)
	var info JobInfo
	if len(mw) > 0 {
		info = w.jobInfo(j, md)
	}
	rs.Context, rs.parent = jctx, ctx
	err := timedOut(jctx, timeout, call(rs, k, j, md, args, more, mw, info, bad, timeout))
	return w.settle(ctx, j, err), err
}

// timedOut is err, the error of a run whose context is jctx, wrapped in
// ErrJobTimeout when jctx ended for the run's timeout; as it is when it
// says so already (the handler's error, wrapped before the middleware saw
// it: see call).
func timedOut(jctx context.Context, timeout time.Duration, err error) error {
	if err != nil && errors.Is(context.Cause(jctx), ErrJobTimeout) && !saysTimedOut(err) {
		return &timeoutError{msg: fmt.Sprintf("%v after %s: %v", ErrJobTimeout, timeout, err), err: err}
	}
	return err
}

// timeoutError is the error of a run that its timeout ended: it wraps
// ErrJobTimeout and the error the run returned.
type timeoutError struct {
	msg string
	err error
}

func (e *timeoutError) Error() string   { return e.msg }
func (e *timeoutError) Unwrap() []error { return []error{ErrJobTimeout, e.err} }

// saysTimedOut reports whether err wraps a timeoutError. The methods of
// the app's error types it calls (Unwrap, As) may panic: such an error is
// taken as one that does not, and settle deals with the panic.
func saysTimedOut(err error) (ok bool) {
	defer func() {
		if recover() != nil {
			ok = false
		}
	}()
	_, ok = errors.AsType[*timeoutError](err)
	return ok
}

// settle is outcome, for an error of the handler's: its type's own
// methods (Error, Unwrap, As, Is), which the outcome calls, may panic — a
// typed nil pointer returned as an error, say. Such a panic fails the
// attempt with the panic and its stack, and is logged, instead of taking
// the process down.
func (w *Worker) settle(ctx context.Context, j *engine.Job, err error) (res result) {
	defer func() {
		if r := recover(); r != nil {
			perr := fmt.Errorf("the handler returned an error (%T) whose methods panicked: panic: %v\n%s", err, r, debug.Stack())
			w.log.Error("sluice: a handler's error panicked when read; its attempt fails", "job_id", j.ID, "kind", j.Kind, "attempt", j.Attempt, "err", perr)
			res = w.failure(j, perr)
		}
	}()
	return w.outcome(ctx, j, err)
}

// decode reads what the handler of a claimed job is given: its args, its
// metadata and its collected calls. bad is why the job cannot run: its kind
// has no handler here, or its handler here would not read the calls it
// holds (both given back: see giveBack), or something does not decode (the
// attempt fails). It is returned still inside the middleware (see call),
// so that every attempt is seen by it.
func (w *Worker) decode(ctx context.Context, j *engine.Job, k *kind) (args any, md map[string]string, more []any, bad error) {
	if k == nil || k.work == nil {
		why := fmt.Errorf("%w: no handler for kind %q in worker %q", ErrUnknownKind, j.Kind, w.cfg.Name)
		return nil, nil, nil, w.giveBack(ctx, j, why, unrunnableLog{kind: j.Kind})
	}
	if j.Calls > 1 && !k.readsCalls {
		why := fmt.Errorf("kind %q: its handler in worker %q is registered with jobs.Register, which reads only j.Args, "+
			"but the job holds %d collected calls (another version of the kind coalesces with Collect and jobs.RegisterCalls)",
			j.Kind, w.cfg.Name, j.Calls)
		return nil, nil, nil, w.giveBack(ctx, j, why, unrunnableLog{kind: j.Kind, calls: true})
	}
	md, err := engine.DecodeMetadata(j.Metadata)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("decode metadata of %s: %w", j.Kind, err)
	}
	args, err = k.decode(j.Args, false)
	if err != nil {
		return nil, md, nil, fmt.Errorf("decode args of %s: %w", j.Kind, err)
	}
	for i, body := range j.CallArgs[min(1, len(j.CallArgs)):] {
		c, err := k.decode(body, false)
		if err != nil {
			return nil, md, nil, fmt.Errorf("decode call %d of %s: %w", i+2, j.Kind, err)
		}
		more = append(more, c)
	}
	return args, md, more, nil
}

// call runs the handler inside its middleware, turning a panic in either
// into an error with its stack. With bad set, the job cannot run (see
// decode): the middleware wraps a handler that returns bad. ctx is the
// run's context, whose timeout (if any) is timeout: an error the handler
// returns once it passed reaches the middleware wrapped in ErrJobTimeout
// (timedOut), as the worker records it, so that what the middleware
// reports of the run (a span's status) says it timed out.
func call(ctx context.Context, k *kind, j *engine.Job, md map[string]string, args any, more []any, mw []Middleware, info JobInfo, bad error, timeout time.Duration) (err error) {
	defer recoverInto(&err)
	switch {
	case bad != nil && len(mw) == 0:
		return bad
	case bad != nil:
		return chain(ctx, mw, info, func(context.Context) error { return timedOut(ctx, timeout, bad) })
	case len(mw) == 0:
		return k.work(ctx, j, md, args, more)
	}
	return chain(ctx, mw, info, func(hctx context.Context) error { return timedOut(ctx, timeout, k.work(hctx, j, md, args, more)) })
}

// outcome maps a handler's error to the job's next state.
func (w *Worker) outcome(ctx context.Context, j *engine.Job, err error) result {
	switch k, cancelled, snoozed, retryAfter := classify(ctx, err); k {
	case OutcomeCompleted:
		return result{id: j.ID, complete: true}
	case OutcomeReleased:
		return result{id: j.ID, t: engine.Transition{ID: j.ID, State: engine.StateReady, RunAt: w.clock.Now(), AttemptDelta: -1}}
	case OutcomeCancelled:
		return result{id: j.ID, t: engine.Transition{ID: j.ID, State: engine.StateCancelled, Error: errorText(cancelled.err, ""), Finished: true}}
	case OutcomeSnoozed:
		t := engine.Transition{ID: j.ID, State: engine.StateScheduled, Wait: snoozed.d, AttemptDelta: -1}
		if snoozed.back != nil {
			// Given back: the reason is the job's last error, for
			// operators to see, with the record of its streak, which
			// the store keeps as a give-back's (Transition.Record).
			t.Error, t.Record = errorText(err, snoozed.back.record), snoozed.back.record
			return result{id: j.ID, t: t, givenBack: true}
		}
		return result{id: j.ID, t: t}
	case OutcomeFailed:
		// Given back for longer than GiveBackFor: failed for good,
		// whatever attempts it has left.
		return result{id: j.ID, t: engine.Transition{ID: j.ID, State: engine.StateFailed, Error: errorText(err, ""), Finished: true}}
	case OutcomeThrottled:
		return w.waitUpstream(j, retryAfter)
	default:
		return w.failure(j, err)
	}
}

// waitUpstream sends a job an upstream refused (a 429) back to wait
// without spending an attempt, and holds back every budget it ran under
// until then.
func (w *Worker) waitUpstream(j *engine.Job, e *retryAfterError) result {
	wait := min(e.wait(w.clock.Now()), w.cfg.MaxRetryAfter)
	t := engine.Transition{ID: j.ID, State: engine.StateScheduled, Wait: wait, AttemptDelta: -1, Error: errorText(e, "")}
	var pushes []engine.BudgetPush
	if w.limits != nil {
		for _, rk := range j.RateKeys {
			if spec, ok := w.limits.RateSpec(j.Kind, rk.Key); ok {
				pushes = append(pushes, engine.BudgetPush{Key: rk.Key, Wait: wait, Params: spec.Params})
			}
		}
		for _, l := range w.limits.QueueLimits(j.Queue) {
			pushes = append(pushes, engine.BudgetPush{Key: l.Key, Wait: wait, Params: l.Spec.Params})
		}
	}
	if len(pushes) > 0 {
		t.WaitKey = pushes[0].Key
	}
	return result{id: j.ID, t: t, throttled: true, pushes: pushes}
}

// failure retries a failed attempt after its backoff, or keeps the job as
// failed when it has no attempts left.
func (w *Worker) failure(j *engine.Job, err error) result {
	if j.Attempt >= j.MaxAttempts {
		return result{id: j.ID, t: engine.Transition{ID: j.ID, State: engine.StateFailed, Error: errorText(err, ""), Finished: true}}
	}
	delay := jitter(DefaultBackoff(j.Attempt))
	if k := w.reg.lookup(j.Kind); k != nil && k.cfg.backoff != nil {
		if d, perr := callBackoff(k.cfg.backoff, j.Attempt); perr != nil {
			// The kind's own code, as a handler is: it fails nothing more
			// than the attempt already failed, which is retried after the
			// default backoff instead (a Backoff that panics on one attempt
			// likely panics on the next: the job's attempts still run out).
			w.log.Error("sluice: a kind's Backoff panicked; the job is retried after the default backoff",
				"job_id", j.ID, "kind", j.Kind, "attempt", j.Attempt, "retry_in", delay, "err", perr)
		} else {
			delay = w.boundBackoff(j, d, delay)
		}
	}
	return result{id: j.ID, t: engine.Transition{ID: j.ID, State: engine.StateScheduled, Wait: delay, Error: errorText(err, "")}}
}

// boundBackoff is the delay a retry waits when the kind's Backoff returned
// d: d itself, unless it is negative (an overflowed exponential, say),
// which waits fallback (the default backoff) rather than running the job
// again at once, attempt after attempt; or longer than MaxBackoff, or than
// what reaches engine.MaxRunAt from now, which is cut to it. Either is
// logged once per kind.
func (w *Worker) boundBackoff(j *engine.Job, d, fallback time.Duration) time.Duration {
	if d < 0 {
		if _, seen := w.badBackoff.LoadOrStore(backoffWarning{j.Kind, false}, true); !seen {
			w.log.Warn("sluice: a kind's Backoff returned a negative delay; its retries wait the default backoff instead (logged once per kind)",
				"kind", j.Kind, "job_id", j.ID, "attempt", j.Attempt, "backoff", d, "retry_in", fallback)
		}
		return fallback
	}
	// Sub saturates, and MaxRunAt is far past any clock's now: no overflow.
	limit := min(MaxBackoff, max(engine.MaxRunAt.Sub(w.clock.Now()), 0))
	if d > limit {
		if _, seen := w.badBackoff.LoadOrStore(backoffWarning{j.Kind, true}, true); !seen {
			w.log.Warn("sluice: a kind's Backoff returned a delay longer than sluice keeps; its retries wait the longest instead (logged once per kind)",
				"kind", j.Kind, "job_id", j.ID, "attempt", j.Attempt, "backoff", d, "retry_in", limit)
		}
		return limit
	}
	return d
}

// backoffWarning names a warning boundBackoff logs once per kind: a
// negative delay, or one too long.
type backoffWarning struct {
	kind    string
	tooLong bool
}

// callBackoff calls a kind's Backoff, returning its panic, with the stack,
// as an error.
func callBackoff(f func(attempt int) time.Duration, attempt int) (d time.Duration, err error) {
	defer recoverInto(&err)
	return f(attempt), nil
}

// errorText is the text kept with a job for err, as the store keeps it
// (engine.LastErrorText): valid UTF-8 without NUL, every give-back's mark
// in it quoted but in record (a give-back's own record of its streak, or
// ""), cut on a character boundary to at most engine.MaxErrorBytes and
// marked "… (truncated)" when cut. Made here, the text a batch of results
// carries is as long as the store writes it; the store makes it again
// (the same text) on every write.
func errorText(err error, record string) string {
	s := err.Error()
	if s == "" {
		s = fmt.Sprintf("%T with no message", err)
	}
	return engine.LastErrorText(s, record)
}

func outcomeOf(r result) Outcome {
	switch {
	case r.complete:
		return OutcomeCompleted
	case r.t.State == engine.StateFailed:
		return OutcomeFailed
	case r.t.State == engine.StateCancelled:
		return OutcomeCancelled
	case r.t.State == engine.StateReady:
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
// batching whatever has queued up while the previous write ran (up to 1000
// results and maxBatchErrorBytes of error text). A failed write is retried
// until it lands: a result is never dropped while the process lives. A
// result the database refuses fails alone (see flush). A result whose job
// gives a concurrency slot back to a key another transaction holds (an
// app's open transaction that enqueued a job of the key) waits for no
// lock: it is left out of its batch, the others written, and written
// again with each later batch, and on its own after a pause (heldRetry),
// until its key is free; once results is closed, what is left waits for
// its keys until the shutdown's time is up (finishHeld).
func (w *Worker) complete(done chan<- struct{}) {
	defer close(done)
	maxText := maxBatchErrorBytes
	if m := engine.MaxArgsBytes(w.store); m > 0 {
		maxText = min(maxText, m)
	}
	var held []result
	retry := newHeldRetry(w.clock)
	for {
		r, ok, again := retry.next(w.results, held)
		if !ok {
			break
		}
		batch := slices.Clone(held)
		text := 0
		for _, h := range held {
			text += len(h.t.Error)
		}
		if !again {
			batch = append(batch, r)
			text += len(r.t.Error)
		fill:
			for len(batch) < 1000 && text < maxText {
				select {
				case r, ok := <-w.results:
					if !ok {
						break fill
					}
					batch = append(batch, r)
					text += len(r.t.Error)
				default:
					break fill
				}
			}
		}
		held = w.flush(context.Background(), batch)
		w.wrote(batch, held)
		retry.left(held)
	}
	w.finishHeld(held)
}

// flush writes one batch, grouped by the process id each job was claimed
// under, and returns the results it left unwritten. A write that fails on
// the connection or the server is retried until it lands; one the
// database refuses for a value it carries is split in halves until the
// result it refuses is alone, and that job's attempt fails instead, with
// the database's error (see recorder). A result whose job gives a
// concurrency slot back to a key another transaction holds is left
// unwritten, waiting for nothing (engine's FinishUnwaiting); so is, once
// ctx is done, every result not written yet.
func (w *Worker) flush(ctx context.Context, batch []result) []result {
	pids, byPID := byProcess(batch)
	rec := recorder{
		finish:   w.store.FinishUnwaiting,
		isData:   func(err error) bool { return engine.IsDataError(w.store, err) },
		refused:  w.refused,
		now:      w.storeClock,
		log:      w.log,
		stopping: w.stopping.Load,
		since:    w.stoppingSinceTime,
		sleep:    time.Sleep,
		gaveUp:   w.gaveUp,
	}
	var left []result
	for _, pid := range pids {
		left = append(left, rec.record(ctx, pid, byPID[pid])...)
	}
	return left
}

// byProcess groups results by the process id their jobs were claimed
// under, and returns the ids in the order they first appear.
func byProcess(rs []result) ([]int64, map[int64][]result) {
	byPID := map[int64][]result{}
	var pids []int64
	for _, r := range rs {
		if _, ok := byPID[r.pid]; !ok {
			pids = append(pids, r.pid)
		}
		byPID[r.pid] = append(byPID[r.pid], r)
	}
	return pids, byPID
}

// written returns the results of batch not in left.
func written(batch, left []result) []result {
	if len(left) == 0 {
		return batch
	}
	out := make([]result, 0, len(batch)-len(left))
	for _, r := range batch {
		if !slices.ContainsFunc(left, func(l result) bool { return l.id == r.id && l.pid == r.pid && l.claim == r.claim }) {
			out = append(out, r)
		}
	}
	return out
}

// refused is the outcome recorded instead of r when the database refused
// r: the attempt fails, and is retried or kept as failed by the usual
// rules, with an ASCII error that quotes the database's.
func (w *Worker) refused(r result, dbErr error) result {
	msg := strconv.QuoteToASCII(dbErr.Error())
	msg = msg[1 : len(msg)-1]
	if len(msg) > 1024 {
		msg = msg[:1024] + "... (truncated)"
	}
	err := errors.New("sluice: the database refused this job's result: " + msg)
	var out result
	if r.job != nil {
		out = w.failure(r.job, err)
	} else {
		// Not reached: every result the worker makes carries its job.
		out = result{id: r.id, t: engine.Transition{ID: r.id, State: engine.StateFailed, Error: err.Error(), Finished: true}}
	}
	out.pid, out.attempt, out.claim, out.holdsSlot, out.withCalls, out.job, out.refused = r.pid, r.attempt, r.claim, r.holdsSlot, r.withCalls, r.job, true
	return out
}

// recorder writes batches of results, splitting a batch the database
// refuses.
type recorder struct {
	// finish writes outcomes, and returns the jobs whose outcomes it left
	// unwritten (their slot goes back to a key another transaction
	// holds).
	finish   func(ctx context.Context, processID int64, c engine.Clock, o engine.Outcomes) ([]int64, error)
	isData   func(error) bool
	refused  func(r result, err error) result
	now      func() engine.Clock
	log      *slog.Logger
	stopping func() bool
	// since, if set, is when the worker began stopping, on the wall
	// clock (zero while it is not): a batch whose tries began before then
	// is given up on stoppingTries after it.
	since func() time.Time
	sleep func(time.Duration)
	// wall, if set, is the time the tries of a stopping worker are bound
	// by (stoppingTries); time.Now if not.
	wall func() time.Time
	// gaveUp, if set, is told the results given up on: their jobs stay
	// running for the process.
	gaveUp func([]result)
}

// record writes the results of one process, and returns those it left
// unwritten: those finish left, and, once ctx is done, every result not
// written yet. An error the database classifies as refusing a value
// splits the batch in halves, each written on its own, until the refused
// result is alone; that one is replaced by its refused outcome. Any other
// error is retried, pausing 100ms doubling to 10s, until the write lands;
// once the worker stops, 10 times at most, within stoppingTries: each try
// waits for the database up to 30 s, or what is left of that bound (a
// database that does not answer at all does not hold a stopping worker
// ten times 30 s).
func (rc recorder) record(ctx context.Context, pid int64, rs []result) []result {
	pause := 100 * time.Millisecond
	began := rc.clock()
	var giveUpAt time.Time // once the worker is stopping: when the tries end
	for attempt := 1; ; attempt++ {
		timeout := 30 * time.Second
		if giveUpAt = rc.giveUpAt(giveUpAt, began); !giveUpAt.IsZero() {
			timeout = min(timeout, max(giveUpAt.Sub(rc.clock()), time.Second))
		}
		actx, cancel := context.WithTimeout(ctx, timeout)
		left, err := rc.finish(actx, pid, rc.now(), outcomes(rs))
		cancel()
		if err == nil {
			return leftOf(rs, left)
		}
		if ctx.Err() != nil {
			return rs
		}
		if rc.isData(err) {
			return rc.split(ctx, pid, rs, err)
		}
		if giveUpAt = rc.giveUpAt(giveUpAt, began); !giveUpAt.IsZero() && (attempt >= 10 || !rc.clock().Before(giveUpAt)) {
			rc.log.Error("sluice: could not record finished jobs before stopping; they run again once this process is presumed dead",
				"err", err, "jobs", len(rs))
			rc.abandon(rs)
			return nil
		}
		rc.log.Error("sluice: record finished jobs; retrying", "err", err, "jobs", len(rs), "attempt", attempt)
		rc.sleep(pause)
		pause = min(pause*2, 10*time.Second)
	}
}

// leftOf returns the results of rs whose job is in ids.
func leftOf(rs []result, ids []int64) []result {
	if len(ids) == 0 {
		return nil
	}
	var out []result
	for _, r := range rs {
		if slices.Contains(ids, r.id) {
			out = append(out, r)
		}
	}
	return out
}

// stoppingTries bounds how long a stopping worker tries to write a batch
// (recorder.record): ten tries, pausing 100ms doubling to 10s between
// them, take about 33 s when each fails at once.
const stoppingTries = 40 * time.Second

// giveUpAt is when the tries of a batch end once the worker is stopping:
// at, when set already; zero while the worker is not stopping; else
// stoppingTries after the worker began stopping, or after the batch's
// first try (began) if that came later. A try under way when the worker
// began stopping (waiting up to 30 s for a database that does not answer)
// counts against the bound: before, the bound began at the next try,
// and such a database held a stopping worker some 70 s.
func (rc recorder) giveUpAt(at, began time.Time) time.Time {
	if !at.IsZero() || !rc.stopping() {
		return at
	}
	from := rc.clock()
	if rc.since != nil {
		if since := rc.since(); !since.IsZero() {
			from = began
			if since.After(began) {
				from = since
			}
		}
	}
	return from.Add(stoppingTries)
}

// clock is the time the tries of a stopping worker are bound by.
func (rc recorder) clock() time.Time {
	if rc.wall != nil {
		return rc.wall()
	}
	return time.Now()
}

// split writes the halves of a batch the database refused, or, for a
// batch of one, its refused outcome instead, and returns what they left.
func (rc recorder) split(ctx context.Context, pid int64, rs []result, err error) []result {
	if len(rs) > 1 {
		mid := len(rs) / 2
		return append(rc.record(ctx, pid, rs[:mid]), rc.record(ctx, pid, rs[mid:])...)
	}
	r := rs[0]
	if r.refused {
		rc.log.Error("sluice: the database refused even the failed attempt recorded for a job; it stays running and runs again once this process is presumed dead",
			"job_id", r.id, "err", err)
		rc.abandon(rs)
		return nil
	}
	rc.log.Error("sluice: the database refused a job's result; its attempt fails instead",
		"job_id", r.id, "outcome", outcomeOf(r), "err", err)
	return rc.record(ctx, pid, []result{rc.refused(r, err)})
}

// abandon reports results given up on to gaveUp.
func (rc recorder) abandon(rs []result) {
	if rc.gaveUp != nil {
		rc.gaveUp(rs)
	}
}

// outcomes gathers results into what Finish records, each for its run.
func outcomes(rs []result) engine.Outcomes {
	var o engine.Outcomes
	for _, r := range rs {
		run := engine.Run{ID: r.id, Claim: r.claim}
		if r.complete {
			o.Completed = append(o.Completed, run)
			if r.withCalls {
				o.WithCalls = append(o.WithCalls, run)
			}
			if r.ranBefore() {
				o.WithAttempts = append(o.WithAttempts, run)
			}
		} else {
			t := r.t
			t.Claim = r.claim
			o.Others = append(o.Others, t)
		}
		for _, p := range r.pushes {
			p.Run = run
			o.Pushes = append(o.Pushes, p)
		}
		if r.holdsSlot && r.givesSlotBack() {
			o.SlotHolders = append(o.SlotHolders, run)
		}
	}
	return o
}

// recoverInto turns a panic of the caller's (a handler's, a kind's own
// code decoding its args, a hook's) into *err, with the stack, so that it
// fails the attempt, or is logged, instead of taking the process down. A
// joined hook's panic (hookPanic) carries its sides' panics with their
// stacks, and is taken as it is. Deferred directly: recover works only
// there.
func recoverInto(err *error) {
	if r := recover(); r != nil {
		if p, ok := r.(hookPanic); ok {
			*err = p.err
			return
		}
		*err = fmt.Errorf("panic: %v\n%s", r, debug.Stack())
	}
}
