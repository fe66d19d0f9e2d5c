package jobs

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"time"

	"github.com/sluicequeue/sluice/internal/engine"
)

// ErrInvalidMetadata is wrapped by the error for metadata a job cannot
// carry: an empty key, a key over engine.MaxMetadataKeyBytes or with
// control characters, a key or value that is not valid UTF-8, or more than
// engine.MaxMetadataBytes (8 KiB) encoded as JSON in all.
var ErrInvalidMetadata = engine.ErrInvalidMetadata

type metadataOption map[string]string

// WithMetadata stores m with the job: a small map of strings (a trace
// context, a request id, a tenant) that the handler (Job.Metadata),
// middleware (JobInfo.Metadata) and `sluice jobs` see. Several
// WithMetadata options merge, a later key winning; enqueue middleware may
// add more. It is refused, naming the key, by the rules of
// ErrInvalidMetadata. Defaults to none.
func WithMetadata(m map[string]string) EnqueueOption { return metadataOption(m) }

func (m metadataOption) applyEnqueue(c *enqueueConfig) error {
	for k, v := range m {
		if err := engine.CheckMetadataEntry(k, v); err != nil {
			return fmt.Errorf("WithMetadata: %w", err)
		}
	}
	if len(m) == 0 {
		return nil
	}
	if c.metadata == nil {
		c.metadata = make(map[string]string, len(m))
	}
	maps.Copy(c.metadata, m)
	return nil
}

// EnqueueMiddleware wraps every enqueue (Enqueue, EnqueueTx, EnqueueMany,
// and their Tx forms): it sees the jobs about to be written, may set their
// metadata, and calls next to write them (with the context it chooses, a
// span's, say); when next returns nil, each job's Result says what became
// of it. One call covers the whole batch of an EnqueueMany. Middleware
// declared first runs outermost. Metadata it sets is checked, and refused
// with ErrInvalidMetadata, before anything is written.
//
// The enqueue stays all or nothing. Without a caller's transaction
// (Enqueue, EnqueueMany) the chain is one transaction: next begins it and
// writes the jobs, and it commits only once the outermost middleware
// returns nil having called next exactly once; an error, a panic, a
// second call of next or none rolls it back, and nothing is written. So
// work a middleware does after next runs while that transaction is open:
// keep it short. And when next returns nil the jobs are written, not yet
// committed: the commit may still fail. Middleware that reports the
// enqueue (a span) learns its outcome from OnEnqueueDone. On SQLite the transaction holds the store's one
// connection until the chain returns, so a middleware that uses the store
// after next (an enqueue, a read, a job's lookup) waits for itself until
// its context ends: do such work before next, or in ClientConfig.OnEnqueue,
// which runs after the commit. A deadlock or serialization failure
// in the write is retried inside next, in a new transaction: the
// middleware runs once per enqueue, never again for a retry. The commit
// is not retried: a deadlock or serialization failure reported at commit
// is returned (nothing written), where an enqueue without middleware
// writes the jobs again in a new transaction. In a
// caller's transaction (EnqueueTx, EnqueueManyTx) next writes into it
// under a savepoint, which the same failures roll back to: after a failed
// enqueue your transaction holds none of its jobs, and may go on and
// commit (on PostgreSQL too, the savepoint undoing a failed statement's
// abort); the jobs of an enqueue that succeeded commit or roll back with
// it.
type EnqueueMiddleware func(ctx context.Context, jobs []*EnqueueJob, next func(ctx context.Context) error) error

// EnqueueJob is one job an enqueue is about to write, as enqueue
// middleware sees it.
type EnqueueJob struct {
	// Kind is the job's kind.
	Kind string
	// Queue is the queue it goes to.
	Queue string
	// Priority is its priority.
	Priority int
	// RunAt is when it may first run; zero means now.
	RunAt time.Time
	// Metadata is what will be stored with it: the enqueue's WithMetadata
	// options, and whatever middleware sets (SetMetadata). Nil for none.
	Metadata map[string]string
	// Result is what became of the job, once next returned nil.
	Result Enqueued
}

// SetMetadata sets one metadata entry of the job.
func (j *EnqueueJob) SetMetadata(key, value string) {
	if j.Metadata == nil {
		j.Metadata = map[string]string{}
	}
	j.Metadata[key] = value
}

// errNextTwice fails an enqueue whose middleware called next more than
// once.
var errNextTwice = errors.New("jobs: enqueue: a middleware called next twice")

// enqueueThrough runs the client's enqueue middleware around the write
// of rows: each row takes the metadata its job ended with. Through ex (the
// caller's transaction) the write joins it. Without one, the whole chain
// is one transaction: the first next begins it and writes the rows (a
// deadlock or serialization failure writes them again in a new one, the
// middleware running once), and it commits only when the outermost
// middleware returns nil having called next exactly once. Otherwise, a
// panic included, it is rolled back and nothing is written. In the
// caller's transaction the first next sets a savepoint before the write,
// which the same failures roll back to: the caller's transaction holds
// none of the jobs, should it commit anyway. An enqueue that fails (a
// panic included) calls the functions middleware registered with
// OnEnqueueDone with its error; one that wrote its jobs returns its state,
// whose finish the caller calls once the outcome is settled (see
// Client.write).
func (c *Client) enqueueThrough(ctx context.Context, ex engine.Executor, sc engine.Clock, rows []engine.NewJob) ([]Enqueued, *enqueueState, error) {
	es := &enqueueState{}
	returned := false
	var err error
	defer func() {
		if !returned {
			es.finish(ctx, errEnqueuePanicked) // and the panic goes on
			return
		}
		if err != nil {
			es.finish(ctx, err)
		}
	}()
	var res []Enqueued
	res, err = c.enqueueChain(context.WithValue(ctx, enqueueKey{}, es), ex, sc, rows)
	returned = true
	if err != nil {
		return nil, nil, err
	}
	return res, es, nil
}

// errEnqueuePanicked is what OnEnqueueDone's functions get for an enqueue
// whose middleware panicked: it was rolled back, and the panic reaches the
// caller.
var errEnqueuePanicked = errors.New("jobs: enqueue: a middleware panicked; nothing was written")

// enqueueKey is the context key of an enqueue's state, which enqueue
// middleware's context carries.
type enqueueKey struct{}

// enqueueState holds the functions registered with OnEnqueueDone, and the
// enqueue's outcome once it is settled.
type enqueueState struct {
	mu   sync.Mutex
	done bool
	err  error
	fs   []func(error)
}

// OnEnqueueDone arranges for f to be called, once, with the outcome of the
// enqueue whose middleware ctx was given (or derives from), once it is
// settled: after the enqueue's own transaction committed, f(nil), or
// failed to commit, f with the commit's error; in a caller's transaction
// (EnqueueTx, EnqueueManyTx), once the jobs were written into it, f(nil)
// (they commit or roll back with it); for a dispatcher's recurring task,
// whose job commits with the record of its tick, once that transaction
// committed, f(nil), or failed, f with its error; and after an enqueue that failed
// and wrote nothing (a middleware's error or panic, a failed write, next
// called twice or not at all), f with the error the enqueue returns. So
// middleware learns what next cannot tell it, whether the jobs it saw
// written were kept: what it opened for the enqueue (a span) it closes
// there, with the outcome. The enqueue calls f in its own goroutine,
// before it returns (and before ClientConfig.OnEnqueue); an f that panics
// is logged (jobs.Logger of the enqueue's context) with its stack and
// changes nothing. Registered once the outcome is settled, f is called at
// once. It reports whether f will be called: false outside an enqueue's
// middleware (and for a nil f).
func OnEnqueueDone(ctx context.Context, f func(err error)) bool {
	es, ok := ctx.Value(enqueueKey{}).(*enqueueState)
	if !ok || f == nil {
		return false
	}
	es.mu.Lock()
	if es.done {
		err := es.err
		es.mu.Unlock()
		callDone(ctx, f, err)
		return true
	}
	es.fs = append(es.fs, f)
	es.mu.Unlock()
	return true
}

// finish settles the enqueue's outcome and calls the functions registered
// for it, in the order they were.
func (es *enqueueState) finish(ctx context.Context, err error) {
	es.mu.Lock()
	es.done, es.err = true, err
	fs := es.fs
	es.fs = nil
	es.mu.Unlock()
	for _, f := range fs {
		callDone(ctx, f, err)
	}
}

// callDone calls an OnEnqueueDone function; one that panics is logged with
// its stack, and changes nothing else: the enqueue's outcome stands.
func callDone(ctx context.Context, f func(error), err error) {
	if p := tryCall(func() { f(err) }); p != nil {
		Logger(ctx).Error("sluice: an enqueue callback (jobs.OnEnqueueDone) panicked; the enqueue's outcome stands", "err", p)
	}
}

// enqueueChain is enqueueThrough's work: the chain, the write, and the
// commit or rollback.
func (c *Client) enqueueChain(ctx context.Context, ex engine.Executor, sc engine.Clock, rows []engine.NewJob) (_ []Enqueued, err error) {
	jobs := make([]*EnqueueJob, len(rows))
	for i, r := range rows {
		jobs[i] = &EnqueueJob{Kind: r.Kind, Queue: r.Queue, Priority: r.Priority, RunAt: r.RunAt, Metadata: maps.Clone(r.Metadata)}
	}
	var (
		res      []Enqueued
		open     engine.Tx    // the chain's transaction, until it commits
		mark     *engine.Mark // the savepoint in the caller's, until kept
		called   bool
		twice    bool // next was called again: the enqueue fails, whatever the chain returns
		writeErr error
	)
	defer func() {
		if open != nil {
			if e := open.Rollback(context.WithoutCancel(ctx)); e != nil && err != nil {
				err = errors.Join(err, fmt.Errorf("jobs: enqueue: roll back: %w", e))
			}
		}
		if mark != nil {
			if e := mark.Undo(ctx); e != nil && err != nil {
				err = errors.Join(err, fmt.Errorf("jobs: %w", e))
			}
		}
	}()
	inner := func(nctx context.Context) error {
		if called {
			twice = true
			return errNextTwice
		}
		called = true
		for i, j := range jobs {
			rows[i].Metadata = j.Metadata
		}
		var err error
		if ex != nil {
			var m engine.Mark
			if m, err = c.store.MarkTx(nctx, ex); err == nil {
				mark = &m
				// The mark undoes a failed write: the write sets no
				// savepoint of its own.
				res, err = c.store.EnqueueUnder(nctx, m, sc, rows)
			}
		} else {
			// Begun with the enqueue's own context, which outlives the
			// commit, whatever context the middleware passes next.
			open, res, err = c.store.EnqueueOpen(ctx, nctx, sc, rows)
		}
		if err != nil {
			res, writeErr = nil, fmt.Errorf("jobs: %w", err)
			return writeErr
		}
		for i, r := range res {
			jobs[i].Result = r
		}
		return nil
	}
	if err := chain(ctx, c.middleware, jobs, inner); err != nil {
		return nil, err
	}
	switch {
	case twice:
		// Even when the middleware dropped the second call's error.
		return nil, errNextTwice
	case !called:
		return nil, fmt.Errorf("jobs: enqueue: a middleware returned without writing the jobs (it did not call next)")
	case writeErr != nil:
		return nil, fmt.Errorf("%w (a middleware returned nil after next failed)", writeErr)
	}
	if open != nil {
		tx := open
		open = nil
		if err := tx.Commit(ctx); err != nil {
			return nil, fmt.Errorf("jobs: enqueue: commit: %w", err)
		}
	}
	if mark != nil {
		m := mark
		mark = nil
		if err := m.Keep(ctx); err != nil {
			return nil, fmt.Errorf("jobs: %w", err)
		}
	}
	return res, nil
}
