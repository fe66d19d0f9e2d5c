package jobs_test

// Review: a database connection lost at the worst moment.
//
// testdb.Faults can fail a statement or a commit before it reaches the
// database (a failed commit is rolled back first), as a deadlock would; it
// cannot report a failure after a statement or a commit that in fact
// landed. connLossDB below does that: it runs the statement or commits,
// and then returns a connection error, as when the connection drops
// between the server's commit and its reply. Unlike lost_runs_test.go's
// wrappers it keeps PostgreSQL's pipelined transactions (Pipeline,
// PipelineCommit), so the claim and Finish paths under test are the ones
// production runs.

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/concurrency"
	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
	"github.com/sluicequeue/sluice/jobs"
)

// errConnReset is what a driver reports when the connection drops: not a
// deadlock, so no store retries it.
var errConnReset = errors.New("read tcp 127.0.0.1:5432->127.0.0.1:41234: read: connection reset by peer")

// connLossDB is a pool whose statements may fail before they are sent
// (failStmt), and whose commits (or autocommitted statements) may land and
// then report errConnReset (loseReply, called with the statements of the
// transaction after it committed).
type connLossDB struct {
	engine.DB
	mu        sync.Mutex
	failStmt  func(q string) bool
	loseReply func(stmts []string) bool
}

func (d *connLossDB) fail(q string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.failStmt != nil && d.failStmt(q)
}

func (d *connLossDB) lose(stmts []string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.loseReply != nil && d.loseReply(stmts)
}

func (d *connLossDB) Exec(ctx context.Context, q string, args ...any) (engine.Result, error) {
	if d.fail(q) {
		return engine.Result{}, errConnReset
	}
	r, err := d.DB.Exec(ctx, q, args...)
	if err == nil && d.lose([]string{q}) {
		return engine.Result{}, errConnReset
	}
	return r, err
}

func (d *connLossDB) Query(ctx context.Context, q string, args ...any) (engine.Rows, error) {
	if d.fail(q) {
		return nil, errConnReset
	}
	return d.DB.Query(ctx, q, args...)
}

// Listen keeps PostgreSQL's wake-ups.
func (d *connLossDB) Listen(ctx context.Context, channel string, fn func(string)) error {
	if l, ok := d.DB.(engine.Listener); ok {
		return l.Listen(ctx, channel, fn)
	}
	<-ctx.Done()
	return ctx.Err()
}

func (d *connLossDB) Begin(ctx context.Context) (engine.Tx, error) {
	tx, err := d.DB.Begin(ctx)
	if err != nil {
		return nil, err
	}
	base := connLossTx{Tx: tx, d: d}
	_, pipe := tx.(engine.Pipeliner)
	_, commitPipe := tx.(engine.CommitPipeliner)
	switch {
	case pipe && commitPipe:
		return &connLossCommitPipeTx{connLossPipeTx{base}}, nil
	case pipe:
		return &connLossPipeTx{base}, nil
	}
	return &base, nil
}

type connLossTx struct {
	engine.Tx
	d     *connLossDB
	stmts []string
	// committed is set once PipelineCommit committed.
	committed bool
}

func (t *connLossTx) Exec(ctx context.Context, q string, args ...any) (engine.Result, error) {
	if t.d.fail(q) {
		return engine.Result{}, errConnReset
	}
	t.stmts = append(t.stmts, q)
	return t.Tx.Exec(ctx, q, args...)
}

func (t *connLossTx) Query(ctx context.Context, q string, args ...any) (engine.Rows, error) {
	if t.d.fail(q) {
		return nil, errConnReset
	}
	t.stmts = append(t.stmts, q)
	return t.Tx.Query(ctx, q, args...)
}

func (t *connLossTx) Commit(ctx context.Context) error {
	if t.committed {
		return t.Tx.Commit(ctx)
	}
	if err := t.Tx.Commit(ctx); err != nil {
		return err
	}
	if t.d.lose(t.stmts) {
		return errConnReset
	}
	return nil
}

type connLossPipeTx struct{ connLossTx }

func (t *connLossPipeTx) Pipeline(ctx context.Context, stmts []engine.Stmt, read func(int, engine.Rows) error) error {
	for _, st := range stmts {
		if t.d.fail(st.SQL) {
			return errConnReset
		}
		t.stmts = append(t.stmts, st.SQL)
	}
	return t.Tx.(engine.Pipeliner).Pipeline(ctx, stmts, read)
}

type connLossCommitPipeTx struct{ connLossPipeTx }

func (t *connLossCommitPipeTx) PipelineCommit(ctx context.Context, stmts []engine.Stmt, read func(int, engine.Rows) error) error {
	for _, st := range stmts {
		if t.d.fail(st.SQL) {
			return errConnReset
		}
		t.stmts = append(t.stmts, st.SQL)
	}
	if err := t.Tx.(engine.CommitPipeliner).PipelineCommit(ctx, stmts, read); err != nil {
		return err
	}
	t.committed = true
	if t.d.lose(t.stmts) {
		return errConnReset
	}
	return nil
}

// has reports whether one of stmts contains s.
func has(stmts []string, s string) bool {
	for _, q := range stmts {
		if strings.Contains(q, s) {
			return true
		}
	}
	return false
}

// once returns a predicate that is true the first time pred is.
func once(pred func([]string) bool) func([]string) bool {
	var fired atomic.Bool
	return func(stmts []string) bool {
		return pred(stmts) && fired.CompareAndSwap(false, true)
	}
}

// Statements' marks, from the catalog (internal/engine/sql).
const (
	markRunning  = "attempt = attempt + 1, claims = claims + 1" // MarkRunning: a claim
	lockRunning  = "SELECT id, claims FROM sluice_jobs j WHERE" // LockRunningOf: ReleaseStrays
	insertJobs   = "INSERT INTO sluice_jobs"                    // an enqueue
	holdsSlotSet = "sluice_semaphores"                          // a semaphore written
)

type connJob struct{ N int }

func (connJob) Kind() string { return "conn_job" }

// lossStore returns a store over h's database through a connLossDB, and a
// client on it.
func lossStore(h *harness) (*engine.Store, *connLossDB, *jobs.Client) {
	db := &connLossDB{DB: h.store.DB()}
	s := engine.New(h.store.Dialect(), db)
	return s, db, jobs.NewClient(testdb.Public(s), h.reg, jobs.ClientConfig{Clock: h.clock})
}

// guarantees.md, "Delivery: at least once": "A claim whose outcome is
// unknown (its commit landed, but the reply was lost to a dropped
// connection ...) leaves no job behind: after any failed claim the worker
// releases ... the jobs running for it that it neither runs nor has a
// result for."
//
// A connection that drops usually stays down a moment: the release that
// follows the failed claim fails too. The worker only logs that (at debug
// level) and never tries again: its next claim succeeds, and the job the
// lost claim took stays running, unrun, for the live (heartbeating)
// process — which the reaper never reaps — until the process stops; then,
// its process row gone, the reaper counts the run as a lost attempt (with
// MaxAttempts(1) the job fails as "process lost" having never run).
func TestReviewConnLossStrayOfALostClaimRunsWhenItsFirstReleaseFails(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		ran := make(chan int, 10)
		require.NoError(t, jobs.Register(h.reg, func(_ context.Context, j *jobs.Job[connJob]) error {
			ran <- j.Args.N
			return nil
		}, jobs.MaxAttempts(1)))
		s, db, client := lossStore(h)
		lostClaim := false // under db.mu, as both predicates run
		loseClaim := once(func(stmts []string) bool { return has(stmts, markRunning) })
		db.loseReply = func(stmts []string) bool {
			if loseClaim(stmts) {
				lostClaim = true
				return true
			}
			return false
		}
		// The connection is still down when the worker looks for strays.
		var failedRelease atomic.Bool
		db.failStmt = func(q string) bool {
			return lostClaim && strings.Contains(q, lockRunning) && failedRelease.CompareAndSwap(false, true)
		}
		res, err := client.Enqueue(context.Background(), connJob{N: 1})
		require.NoError(t, err)
		first := res.ID

		w, err := jobs.NewWorker(testdb.Public(s), h.reg, jobs.WorkerConfig{Clock: h.clock, Logger: quiet(), PollInterval: time.Hour})
		require.NoError(t, err)
		stop := h.run(w)
		defer stop()
		// The failed claim's back-off (min(PollInterval<<1, 5s)) is due.
		<-h.clock.WaitForTimerAt(t0.Add(5 * time.Second))
		require.True(t, failedRelease.Load(), "the release after the lost claim failed")
		j := h.job(first)
		require.Equal(t, engine.StateRunning, j.State, "the lost claim landed")

		// The connection is back: the worker claims a second job and runs it.
		_, err = client.Enqueue(context.Background(), connJob{N: 2})
		require.NoError(t, err)
		h.clock.Advance(5 * time.Second)
		require.Equal(t, []int{2}, receive(t, ran, 1))

		// The worker lives on (polls, heartbeats): job 1 must run.
		deadline := time.Now().Add(3 * time.Second)
		for time.Now().Before(deadline) {
			select {
			case n := <-ran:
				require.Equal(t, 1, n)
				return
			case <-time.After(20 * time.Millisecond):
				h.clock.Advance(time.Minute)
			}
		}
		j = h.job(first)
		t.Fatalf("job %d never ran: it is %s for the live process %d (the worker's is %d), attempt %d",
			first, j.State, j.ProcessID, w.ProcessID(), j.Attempt)
	})
}

// Same promise, through Drain (documented as making "the same claims ...
// as Run"): a claim whose commit landed but whose reply was lost makes
// Drain return the error, and leaves the job running for the drain's
// process, which Drain then deregisters. Nothing releases it: the reaper
// later counts it as a lost attempt (with MaxAttempts(1) the job fails as
// "process lost" without ever having run).
func TestReviewConnLossDrainReleasesTheJobsOfAClaimWhoseReplyIsLost(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		var runs atomic.Int32
		require.NoError(t, jobs.Register(h.reg, func(context.Context, *jobs.Job[connJob]) error {
			runs.Add(1)
			return nil
		}, jobs.MaxAttempts(1)))
		s, db, client := lossStore(h)
		db.loseReply = once(func(stmts []string) bool { return has(stmts, markRunning) })
		res, err := client.Enqueue(context.Background(), connJob{N: 1})
		require.NoError(t, err)

		w, err := jobs.NewWorker(testdb.Public(s), h.reg, jobs.WorkerConfig{Clock: h.clock, Logger: quiet()})
		require.NoError(t, err)
		_, err = w.Drain(context.Background())
		require.ErrorIs(t, err, errConnReset, "the drain reports the failed claim")
		require.Zero(t, runs.Load())

		j := h.job(res.ID)
		require.Equal(t, engine.StateReady, j.State,
			"the job of the lost claim is released, not left %s for the deregistered process %d", j.State, j.ProcessID)
		require.Equal(t, 0, j.Attempt, "its attempt given back")
	})
}

// The shutdown that follows: after TestReviewConnLossDrain..., the reaper
// fails the never-run job as a lost run. Kept apart to show the cost.
func TestReviewConnLossDrainsLostClaimIsNotFailedAsAProcessLost(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		require.NoError(t, jobs.Register(h.reg, func(context.Context, *jobs.Job[connJob]) error { return nil }, jobs.MaxAttempts(1)))
		s, db, client := lossStore(h)
		db.loseReply = once(func(stmts []string) bool { return has(stmts, markRunning) })
		res, err := client.Enqueue(context.Background(), connJob{N: 1})
		require.NoError(t, err)
		w, err := jobs.NewWorker(testdb.Public(s), h.reg, jobs.WorkerConfig{Clock: h.clock, Logger: quiet()})
		require.NoError(t, err)
		_, err = w.Drain(context.Background())
		require.Error(t, err)
		_, err = h.store.ReapDeadProcesses(context.Background(), engine.At(t0.Add(time.Hour)), jobs.DefaultDeadAfter)
		require.NoError(t, err)
		j := h.job(res.ID)
		require.NotEqual(t, engine.StateFailed, j.State, "a job that never ran is not failed as lost (last error %q)", j.LastError)
	})
}

var _ = concurrency.Limit[connJob]{}
