package jobs_test

// A database connection lost at the worst moment.
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
	// deaf, set before a worker subscribes, drops PostgreSQL's wake-ups:
	// an enqueue then wakes the worker once (in process), as on the other
	// databases, not a second time when its notification arrives, for
	// tests that count the rounds a wake-up starts.
	deaf bool
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
	rows, err := d.DB.Query(ctx, q, args...)
	if err == nil && d.lose([]string{q}) {
		rows.Close() // the statement ran to its end, autocommitted
		return nil, errConnReset
	}
	return rows, err
}

// Listen keeps PostgreSQL's wake-ups, unless deaf.
func (d *connLossDB) Listen(ctx context.Context, channel string, listening func(), fn func(string)) error {
	if l, ok := d.DB.(engine.Listener); ok && !d.deaf {
		return l.Listen(ctx, channel, listening, fn)
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

// waitFor polls cond, advancing the fake clock by step between looks, until
// it holds or a few seconds passed.
func waitFor(t *testing.T, h *harness, step time.Duration, cond func() bool, msg func() string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal(msg())
		}
		time.Sleep(10 * time.Millisecond) // polling for a state, with a deadline
		h.clock.Advance(step)
	}
}

// semaphoreState returns the one semaphore's row, or a zero one.
func semaphoreState(t *testing.T, s *engine.Store) engine.SemaphoreInfo {
	t.Helper()
	sems, err := s.ListSemaphores(context.Background())
	require.NoError(t, err)
	require.LessOrEqual(t, len(sems), 1)
	if len(sems) == 0 {
		return engine.SemaphoreInfo{}
	}
	return sems[0]
}
