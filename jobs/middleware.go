package jobs

import "context"

// RunInfo describes the run a Middleware wraps.
type RunInfo struct {
	JobID   int64
	Kind    string
	Queue   string
	Attempt int
	// MaxAttempts is how many runs the job gets in all.
	MaxAttempts int
}

// Middleware wraps every run of a handler, the first of a worker's
// Middleware outermost: it may add to ctx (a trace span, a logger with
// the job's fields), time or log the run, and must call next and return
// what it returns (or an error of its own, which the job's outcome then
// follows, as a handler's would). A panic in it fails the run as a
// handler's panic does.
type Middleware func(ctx context.Context, run RunInfo, next func(context.Context) error) error

// wrap returns handler wrapped in mw, the first outermost.
func wrap(mw []Middleware, run RunInfo, handler func(context.Context) error) func(context.Context) error {
	for i := len(mw) - 1; i >= 0; i-- {
		m, next := mw[i], handler
		handler = func(ctx context.Context) error { return m(ctx, run, next) }
	}
	return handler
}
