package jobs

import (
	"context"
	"log/slog"
	"sync"

	"github.com/sluicequeue/sluice/internal/engine"
)

// runKey and loggerKey are the context keys of a run's state and of a
// logger set with WithLogger.
type (
	runKey    struct{}
	loggerKey struct{}
)

// runState is a run's context: the handler's context with its logger,
// made on first use, and the functions to call if the worker releases the
// job while it runs. Being the context itself, it costs a run no
// allocation of its own (it lives in the worker's runningJob).
type runState struct {
	context.Context
	// parent is the context the worker ran the job with, whose cause says
	// whether the worker is shutting down (errShutdown), whatever ended
	// the run's own context first (its timeout): see classify.
	parent context.Context
	base   *slog.Logger
	job    *engine.Job

	mu sync.Mutex
	// log is the run's logger once made; extra are the attributes
	// middleware added (AddLogAttrs), evaluated when it is made.
	log       *slog.Logger
	extra     []func() []slog.Attr
	released  bool
	onRelease []func() // a nil entry was stopped
}

// Logger returns the logger of the run whose context ctx is (or derives
// from): the worker's Logger with the job's job_id, kind, queue and
// attempt, and the attributes middleware added (AddLogAttrs: the trace
// ids, with tracing on), or the logger middleware set for the rest of the
// run with WithLogger. A logger set with WithLogger on the context the
// worker itself was given is not the run's. Outside a run it returns the
// logger of WithLogger, or slog.Default().
func Logger(ctx context.Context) *slog.Logger {
	if l, ok := ctx.Value(loggerKey{}).(*slog.Logger); ok {
		return l
	}
	if rs, ok := ctx.Value(runKey{}).(*runState); ok {
		return rs.logger()
	}
	return slog.Default()
}

// WithLogger returns a context whose Logger is l: for middleware that adds
// attributes to a run's logger, as in
//
//	ctx = jobs.WithLogger(ctx, jobs.Logger(ctx).With("request_id", id))
//
// A nil l leaves ctx as it is.
func WithLogger(ctx context.Context, l *slog.Logger) context.Context {
	if l == nil {
		return ctx
	}
	return context.WithValue(ctx, loggerKey{}, l)
}

// Value returns the run's state for runKey, and asks the parent context
// for anything else but loggerKey: a logger set with WithLogger on the
// context a worker was given (to Run or Drain) is not the run's, which
// has the job's attributes; one set inside the run (by middleware) is
// found before the run's state.
func (rs *runState) Value(key any) any {
	switch key {
	case runKey{}:
		return rs
	case loggerKey{}:
		return nil
	}
	return rs.Context.Value(key)
}

// AddLogAttrs adds the attributes attrs returns to the logger of the run
// whose context ctx is: they are computed when the run's logger is first
// made (by Logger), so middleware that adds them to every run (the trace
// ids) costs a run that never logs almost nothing. Outside a run it does
// nothing.
func AddLogAttrs(ctx context.Context, attrs func() []slog.Attr) {
	rs, ok := ctx.Value(runKey{}).(*runState)
	if !ok || attrs == nil {
		return
	}
	rs.mu.Lock()
	defer rs.mu.Unlock()
	rs.extra = append(rs.extra, attrs)
	rs.log = nil // made again, with them
}

func (rs *runState) logger() *slog.Logger {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if rs.log == nil {
		j := rs.job
		attrs := []any{slog.Int64("job_id", j.ID), slog.String("kind", j.Kind), slog.String("queue", j.Queue), slog.Int("attempt", j.Attempt)}
		for _, f := range rs.extra {
			for _, a := range f() {
				attrs = append(attrs, a)
			}
		}
		rs.log = rs.base.With(attrs...)
	}
	return rs.log
}

// OnRelease arranges for f to be called, once, if the worker releases the
// job that ctx runs while it still runs: its shutdown timeout and grace
// passed, the job goes back to ready, and its run's outcome will never be
// recorded. Middleware that opened something for the run (a span) closes
// it there. The worker calls f once it has written the release (or failed
// to: the job then comes back when the process is presumed dead); an f
// that panics is logged with its stack and changes nothing. Registered
// after the release, f is called at once in a goroutine of its own. The
// returned stop cancels the call; it reports whether it did (false once f
// has been called). Outside a run f is never called.
func OnRelease(ctx context.Context, f func()) (stop func() bool) {
	rs, ok := ctx.Value(runKey{}).(*runState)
	if !ok || f == nil {
		return func() bool { return false }
	}
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if rs.released {
		go rs.call(f)
		return func() bool { return false }
	}
	i := len(rs.onRelease)
	rs.onRelease = append(rs.onRelease, f)
	return func() bool {
		rs.mu.Lock()
		defer rs.mu.Unlock()
		if rs.released || rs.onRelease[i] == nil {
			return false
		}
		rs.onRelease[i] = nil
		return true
	}
}

// release calls the run's release functions, each under call.
func (rs *runState) release() {
	rs.mu.Lock()
	rs.released = true
	fs := rs.onRelease
	rs.onRelease = nil
	rs.mu.Unlock()
	for _, f := range fs {
		if f != nil {
			rs.call(f)
		}
	}
}

// call calls a release function; one that panics is logged with its stack,
// and changes nothing else: the job was released (or its release failed,
// and is left to the reaper) whatever it does.
func (rs *runState) call(f func()) {
	if err := tryCall(f); err != nil {
		// Not rs.logger(): the attributes middleware added are its code too.
		j := rs.job
		rs.base.Error("sluice: a release callback (jobs.OnRelease) panicked; the worker carries on",
			"job_id", j.ID, "kind", j.Kind, "queue", j.Queue, "attempt", j.Attempt, "err", err)
	}
}

// tryCall calls f, and returns its panic, with the stack, as an error.
func tryCall(f func()) (err error) {
	defer recoverInto(&err)
	f()
	return nil
}
