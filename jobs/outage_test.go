package jobs_test

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/dispatcher"
	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
	"github.com/sluicequeue/sluice/jobs"
)

// guarantees.md, "Nothing lost": "Errors on the connection
// are retried until the results land"; a worker whose database goes away
// for a while keeps the results of the jobs that finished meanwhile, writes
// them when it comes back, and claims again.
func TestResultsOfAnOutageLandWhenTheDatabaseComesBack(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		started := make(chan int, 3)
		finish := map[int]chan struct{}{1: make(chan struct{}), 2: make(chan struct{})}
		require.NoError(t, jobs.Register(h.reg, func(_ context.Context, j *jobs.Job[waitJob]) error {
			started <- j.Args.N
			if ch := finish[j.Args.N]; ch != nil {
				<-ch
			}
			return nil
		}))
		a, b := h.enqueue(waitJob{N: 1}), h.enqueue(waitJob{N: 2})
		db := &outageDB{DB: h.store.DB()}
		w, err := jobs.NewWorker(testdb.Public(engine.New(h.store.Dialect(), db)), h.reg,
			jobs.WorkerConfig{Clock: h.clock, Logger: quiet(), Concurrency: 2, PollInterval: time.Hour, JobTimeout: -1})
		require.NoError(t, err)
		stop := h.run(w)
		require.ElementsMatch(t, []int{1, 2}, receive(t, started, 2))

		// The database goes away; both jobs finish meanwhile, and the claim
		// their freed slots make fails.
		db.down.Store(true)
		close(finish[1])
		close(finish[2])
		<-h.clock.WaitForTimerAt(t0.Add(5 * time.Second)) // the failed claim's back-off
		require.True(t, db.refused.Load() > 0)
		for _, id := range []int64{a, b} {
			require.Equal(t, engine.StateRunning, h.job(id).State)
		}
		c := h.enqueue(waitJob{N: 3})

		// It comes back: the results land, and the next claim takes the new job.
		db.down.Store(false)
		h.clock.Advance(5 * time.Second)
		require.Equal(t, []int{3}, receive(t, started, 1))
		require.Eventually(t, func() bool {
			for _, id := range []int64{a, b, c} {
				if h.job(id).State != engine.StateCompleted {
					return false
				}
			}
			return true
		}, 30*time.Second, 5*time.Millisecond)
		stop()
		for _, id := range []int64{a, b, c} {
			require.Equal(t, 1, h.job(id).Attempt)
		}
	})
}

// outageDB refuses every statement while down is set, as a database that
// went away does.
type outageDB struct {
	engine.DB
	down    atomic.Bool
	refused atomic.Int32
}

var errOutage = errors.New("dial tcp 10.0.0.7:5432: connect: connection refused")

func (d *outageDB) check() error {
	if d.down.Load() {
		d.refused.Add(1)
		return errOutage
	}
	return nil
}

func (d *outageDB) Exec(ctx context.Context, q string, args ...any) (engine.Result, error) {
	if err := d.check(); err != nil {
		return engine.Result{}, err
	}
	return d.DB.Exec(ctx, q, args...)
}

func (d *outageDB) Query(ctx context.Context, q string, args ...any) (engine.Rows, error) {
	if err := d.check(); err != nil {
		return nil, err
	}
	return d.DB.Query(ctx, q, args...)
}

func (d *outageDB) Begin(ctx context.Context) (engine.Tx, error) {
	if err := d.check(); err != nil {
		return nil, err
	}
	return d.DB.Begin(ctx)
}

// dispatcher.Config.Interval: a dispatcher whose database is away waits
// twice as long after each tick that failed, up to 5 s, logging each
// failure with the wait, and ticks at its interval again once a tick
// succeeds (before, it logged a failure at every interval however long
// the database stayed away).
func TestADispatcherWhoseTicksFailWaitsLongerEachTime(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		db := &outageDB{DB: h.store.DB()}
		logs := &logCount{}
		d := newDispatcher(t, engine.New(h.store.Dialect(), db), dispatcher.Config{Clock: h.clock, Interval: time.Second, Logger: slog.New(logs)})
		ctx, stop := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- d.Run(ctx) }()
		at := t0.Add(time.Second)
		awaitTimer(t, h, at) // a tick that succeeded waits Interval
		db.down.Store(true)
		for _, wait := range []time.Duration{2 * time.Second, 4 * time.Second, 5 * time.Second, 5 * time.Second} {
			h.clock.Set(at)
			at = at.Add(wait)
			awaitTimer(t, h, at)
		}
		require.Equal(t, 4, logs.count("sluice: dispatcher tick"))
		db.down.Store(false)
		h.clock.Set(at)
		at = at.Add(time.Second)
		awaitTimer(t, h, at) // back to Interval
		require.Equal(t, 4, logs.count("sluice: dispatcher tick"))
		stop()
		require.NoError(t, <-done)
	})
}

// logCount counts the records logged with each message, and keeps the
// last err of each.
type logCount struct {
	mu   sync.Mutex
	n    map[string]int
	errs map[string]string
}

func (l *logCount) Enabled(context.Context, slog.Level) bool { return true }
func (l *logCount) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.n == nil {
		l.n, l.errs = map[string]int{}, map[string]string{}
	}
	l.n[r.Message]++
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "err" {
			l.errs[r.Message] = a.Value.String()
		}
		return true
	})
	return nil
}
func (l *logCount) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *logCount) WithGroup(string) slog.Handler      { return l }
func (l *logCount) count(msg string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.n[msg]
}

// lastErr is the err of the last record logged with msg.
func (l *logCount) lastErr(msg string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.errs[msg]
}
