package engine_test

// Lost replies and retried transactions on the sweep of a flood
// (DeferOverflow), the pruning of fairness keys (PruneFairKeys), the
// deletion of finished jobs (DeleteFinished) and the record of a
// recurring task's tick (RunTick).

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
	"github.com/sluicequeue/sluice/ratelimit"
)

// errReset is what a driver reports when the connection drops: not a
// deadlock, so no store runs the transaction again.
var errReset = errors.New("read tcp 127.0.0.1:5432->127.0.0.1:41234: read: connection reset by peer")

// errDeadlock is a failure the store runs the transaction again after.
type errDeadlock struct{}

func (errDeadlock) Error() string   { return "injected deadlock at commit" }
func (errDeadlock) Retryable() bool { return true }

// flakyDB is a pool whose transactions may lose their commit's reply
// (lose: the commit lands, errReset is reported), fail a statement before
// it is sent (fail: errReset, the transaction then rolled back by the
// store), or fail their commit as a deadlock would (deadlock: rolled back
// first, so the database holds nothing of it). Each predicate sees the
// transaction's statements (fail, the statement about to be sent).
// beforeBegin, when set, runs before each transaction begins.
type flakyDB struct {
	engine.DB
	mu                   sync.Mutex
	lose, deadlock, fail func(stmts []string) bool
	beforeBegin          func()
	fired                []string
}

func (d *flakyDB) check(name string, pred func([]string) bool, stmts []string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if pred != nil && pred(stmts) {
		d.fired = append(d.fired, name)
		return true
	}
	return false
}

func (d *flakyDB) firedFaults() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.fired...)
}

func (d *flakyDB) Begin(ctx context.Context) (engine.Tx, error) {
	if d.beforeBegin != nil {
		d.beforeBegin()
	}
	tx, err := d.DB.Begin(ctx)
	if err != nil {
		return nil, err
	}
	return &flakyTx{Tx: tx, d: d}, nil
}

type flakyTx struct {
	engine.Tx
	d     *flakyDB
	stmts []string
}

func (t *flakyTx) Exec(ctx context.Context, q string, args ...any) (engine.Result, error) {
	if t.d.check("fail", t.d.fail, []string{q}) {
		return engine.Result{}, errReset
	}
	t.stmts = append(t.stmts, q)
	return t.Tx.Exec(ctx, q, args...)
}

func (t *flakyTx) Query(ctx context.Context, q string, args ...any) (engine.Rows, error) {
	if t.d.check("fail", t.d.fail, []string{q}) {
		return nil, errReset
	}
	t.stmts = append(t.stmts, q)
	return t.Tx.Query(ctx, q, args...)
}

func (t *flakyTx) Commit(ctx context.Context) error {
	if t.d.check("deadlock", t.d.deadlock, t.stmts) {
		if err := t.Tx.Rollback(ctx); err != nil {
			return err
		}
		return errDeadlock{}
	}
	if err := t.Tx.Commit(ctx); err != nil {
		return err
	}
	if t.d.check("lose", t.d.lose, t.stmts) {
		return errReset
	}
	return nil
}

// firstWith returns a predicate true the first time one of the statements
// contains mark.
func firstWith(mark string) func([]string) bool {
	fired := false
	return func(stmts []string) bool {
		if fired {
			return false
		}
		for _, q := range stmts {
			if strings.Contains(q, mark) {
				fired = true
				return true
			}
		}
		return false
	}
}

// moveCursor marks DeferOverflow's last statement (MoveCursor).
const moveCursor = "parked = parked +"

// guarantees.md, "Nothing lost" (no job lost, each moved once) and
// "Limits" (a parked job's place is counted by its budget, "the count may
// run ahead of the jobs, never behind"; at most To admitted in any window
// of Per), for the sweep that moves a flood off the ready queue in batches
// (DeferOverflow): one batch lands and its reply is lost; the next fails
// midway (its last statement fails, the connection gone); the next
// deadlocks at its commit and is run again. Nothing is lost or moved
// twice, the budget's parked count matches its parked jobs after each,
// and every job then runs once, at the limit's pace.
func TestASweepBatchLostOrFailedMidwayLosesAndDoublesNothing(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		const n = 40
		per, horizon, batch := time.Second, 5*time.Second, 10
		lim := limits{"f": spec(t, "f", 1, per, 1)}
		flood := make([]engine.NewJob, n)
		for i := range flood {
			flood[i] = limited("f", "f/x")
		}
		all := enqueue(t, s, t0, flood...)
		pid := register(t, s, t0)
		ran := map[int64]int{}
		var admitted []time.Time
		record := func(res *engine.ClaimResult) {
			for _, j := range res.Jobs {
				ran[j.ID]++
				admitted = append(admitted, res.DecidedAt)
			}
		}
		first := claimLimited(t, s, pid, t0, 10, lim, horizon)
		record(first)
		require.Len(t, first.Jobs, 1)
		require.Len(t, first.Overflows, 1, "the claim met the flood")
		o := first.Overflows[0]

		states := func() map[engine.State]int {
			js, err := s.ListJobs(ctx, engine.JobFilter{Limit: 2 * n})
			require.NoError(t, err)
			out := map[engine.State]int{}
			for _, j := range js {
				out[j.State]++
			}
			return out
		}
		consistent := func(what string) map[engine.State]int {
			st := states()
			total := 0
			for _, c := range st {
				total += c
			}
			require.Equal(t, n, total, "%s: every job is in one state", what)
			require.Equal(t, st[engine.StateParked], budgetNamed(t, s, "f/x").Parked, "%s: the parked count matches the parked jobs (%v)", what, st)
			return st
		}
		before := consistent("after the claim")

		db := &flakyDB{DB: s.DB()}
		fs := engine.New(s.Dialect(), db)
		clk := engine.At(t0)
		// One batch lands, its reply lost.
		db.lose = firstWith(moveCursor)
		_, _, err := fs.DeferOverflow(ctx, clk, o, horizon, batch)
		require.ErrorIs(t, err, errReset)
		require.Equal(t, []string{"lose"}, db.firedFaults())
		st := consistent("after the lost batch")
		require.Equal(t, before[engine.StateReady]-batch, st[engine.StateReady], "the lost batch moved its jobs")

		// The next fails at its last statement, before it is sent.
		db.fail = firstWith(moveCursor)
		_, _, err = fs.DeferOverflow(ctx, clk, o, horizon, batch)
		require.ErrorIs(t, err, errReset)
		require.Equal(t, []string{"lose", "fail"}, db.firedFaults())
		require.Equal(t, st, consistent("after the failed batch"), "the failed batch changed nothing")

		// The next deadlocks at its commit and runs again.
		db.deadlock = firstWith(moveCursor)
		moved, _, err := fs.DeferOverflow(ctx, clk, o, horizon, batch)
		require.NoError(t, err)
		require.Len(t, moved, batch)
		require.Equal(t, []string{"lose", "fail", "deadlock"}, db.firedFaults())
		consistent("after the retried batch")

		// The sweep goes on to its end.
		for {
			moved, _, err := fs.DeferOverflow(ctx, clk, o, horizon, batch)
			require.NoError(t, err)
			if len(moved) < batch {
				break
			}
		}
		st = consistent("after the sweep")
		require.Zero(t, st[engine.StateReady], "the flood is off the ready queue")
		for _, id := range all {
			if ran[id] == 0 {
				require.Equal(t, 1, state(t, s, id).Deferrals, "job %d deferred once", id)
			}
		}

		// Time runs, as the dispatcher and the claims make it.
		for step := time.Duration(0); step <= time.Duration(n+10)*per && len(ran) < n; step += 500 * time.Millisecond {
			now := engine.At(t0.Add(step))
			_, err := s.Unpark(ctx, now, horizon, 10, 0)
			require.NoError(t, err)
			_, _, err = s.Promote(ctx, now, 100)
			require.NoError(t, err)
			record(claimLimited(t, s, pid, t0.Add(step), 10, lim, horizon))
			st := states()
			require.LessOrEqual(t, st[engine.StateParked], budgetNamed(t, s, "f/x").Parked, "the parked count never falls behind")
		}
		require.Len(t, ran, n, "every job ran")
		for id, c := range ran {
			require.Equal(t, 1, c, "job %d ran once", id)
		}
		require.LessOrEqual(t, ratelimit.BusiestWindow(admitted, per), 1, "at most To in any window of Per")
	})
}

// fair_prune.go, PruneFairKeys: "it returns how many it deleted"; DESIGN.md,
// invariant 6: "A transaction that is retried starts from fresh inputs;
// nothing it computed in a failed attempt survives into the next";
// store.go, inTx: "whatever it computed or changed in a failed attempt is
// rolled back in the database and must not survive in Go either".
//
// The pruning of one priority level deadlocks at its commit and is run
// again: the database deletes the idle key once, and PruneFairKeys counts
// it once (the dispatcher logs the count, "cleared idle fairness keys"),
// not the failed attempt's count added to the retried one's.
func TestPruningFairKeysRetriedCountsEachKeyOnce(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		idleFairKey(t, s)

		db := &flakyDB{DB: s.DB()}
		db.deadlock = firstWith("DELETE FROM sluice_fair_keys")
		n, err := engine.New(s.Dialect(), db).PruneFairKeys(ctx)
		require.NoError(t, err)
		require.Equal(t, []string{"deadlock"}, db.firedFaults(), "the first attempt deadlocked at its commit")
		require.Equal(t, []string{"busy"}, fairKeys(t, s), "the idle key is deleted, once")
		require.Equal(t, 1, n, "one key deleted, counted once: the failed attempt's count does not survive")
	})
}

// A pruning whose commit lands and whose reply is lost: the keys it
// deleted stay deleted, and the next pruning finds none to delete.
func TestPruningFairKeysWhoseReplyIsLostDeletesNothingMore(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		idleFairKey(t, s)

		db := &flakyDB{DB: s.DB()}
		db.lose = firstWith("DELETE FROM sluice_fair_keys")
		fs := engine.New(s.Dialect(), db)
		_, err := fs.PruneFairKeys(ctx)
		require.ErrorIs(t, err, errReset)
		require.Equal(t, []string{"busy"}, fairKeys(t, s))
		n, err := fs.PruneFairKeys(ctx)
		require.NoError(t, err)
		require.Zero(t, n)
		require.Equal(t, []string{"busy"}, fairKeys(t, s), "the busy key, whose jobs wait, is kept")
	})
}

// idleFairKey leaves a fairness key "idle" to prune (its one job was
// cancelled, and its finish is behind its level's virtual time) beside a
// key "busy" whose jobs wait.
func idleFairKey(t *testing.T, s *engine.Store) {
	t.Helper()
	ctx := context.Background()
	res := enqueue(t, s, t0, fairJob("idle", 1), fairJob("busy", 1), fairJob("busy", 1), fairJob("busy", 1))
	_, err := s.CancelJobs(ctx, engine.At(t0), []int64{res[0]}, "")
	require.NoError(t, err)
	pid := register(t, s, t0)
	cl, err := s.Claim(ctx, engine.ClaimParams{ProcessID: pid, Queues: []string{"default"}, Max: 2, Clock: engine.At(t0), Fair: true})
	require.NoError(t, err)
	require.Len(t, cl.Jobs, 2)
	require.Equal(t, []string{"busy", "idle"}, fairKeys(t, s))
}

// fairKeys lists the fairness keys' rows.
func fairKeys(t *testing.T, s *engine.Store) []string {
	t.Helper()
	rows, err := s.DB().Query(context.Background(), "SELECT fair_key FROM sluice_fair_keys ORDER BY fair_key")
	require.NoError(t, err)
	defer rows.Close()
	var keys []string
	for rows.Next() {
		var k string
		require.NoError(t, rows.Scan(&k))
		keys = append(keys, k)
	}
	require.NoError(t, rows.Err())
	return keys
}

// cleanup.go, DeleteFinished: it "returns how many it deleted"; DESIGN.md,
// invariant 6. A batch deadlocks at its commit; before it runs again,
// another clean-up deletes the job it had found. The batch run again finds
// nothing to delete, and this call deleted nothing: it says so, rather
// than the count of the attempt that rolled back.
func TestDeletingFinishedJobsRetriedCountsOnlyWhatItDeleted(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		id := enqueue(t, s, t0, job("a", "default", 0))[0]
		pid := register(t, s, t0)
		claim(t, s, pid, t0, 1)
		require.NoError(t, s.Finish(ctx, pid, engine.At(t0), engine.Outcomes{Completed: runs(t, s, id)}))

		db := &flakyDB{DB: s.DB()}
		db.deadlock = firstWith("DELETE FROM sluice_jobs")
		other := false
		db.beforeBegin = func() {
			if len(db.firedFaults()) == 1 && !other {
				other = true
				n, err := s.DeleteFinished(ctx, at(time.Hour), 500)
				require.NoError(t, err)
				require.Equal(t, 1, n, "the other clean-up deletes the job")
			}
		}
		n, err := engine.New(s.Dialect(), db).DeleteFinished(ctx, at(time.Hour), 500)
		require.NoError(t, err)
		require.True(t, other, "the batch deadlocked and ran again after the other clean-up")
		require.Zero(t, n, "the batch run again deleted nothing")
		_, err = s.GetJob(ctx, id)
		require.ErrorIs(t, err, engine.ErrNotFound)
	})
}

// recurring.go, RunTick: an error "wraps ErrTickUnknown when the tick may
// have run all the same". A record whose commit lands and whose reply is
// lost says so, with or without a job, and the tick is recorded; one whose
// statement fails before it is sent rolled back, and does not say so; one
// that deadlocks at its commit is run again (without a job) and records
// the tick.
func TestARunTickWhoseCommitFailsUnseenMayHaveRun(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		db := &flakyDB{DB: s.DB()}
		fs := engine.New(s.Dialect(), db)
		const insertTick = "INSERT INTO sluice_recurring_runs"
		recorded := func(task string) time.Time {
			last, err := s.LastTicks(ctx)
			require.NoError(t, err)
			return last[task].RunAt
		}
		enqueueJob := func(ex engine.Executor) (int64, error) {
			res, err := fs.Enqueue(ctx, ex, engine.At(t0), []engine.NewJob{job("a", "default", 0)})
			if err != nil {
				return 0, err
			}
			return res[0].ID, nil
		}
		tick := t0.Add(time.Hour)

		db.fail = firstWith(insertTick)
		_, err := fs.RunTick(ctx, "failed", tick, tick, nil)
		require.ErrorIs(t, err, errReset)
		require.NotErrorIs(t, err, engine.ErrTickUnknown, "the record failed before its commit: rolled back")
		require.True(t, recorded("failed").IsZero())

		db.lose = firstWith(insertTick)
		_, err = fs.RunTick(ctx, "lost", tick, tick, nil)
		require.ErrorIs(t, err, errReset)
		require.ErrorIs(t, err, engine.ErrTickUnknown)
		require.True(t, recorded("lost").Equal(tick), "the record landed")

		db.lose = firstWith(insertTick)
		_, err = fs.RunTick(ctx, "lost-with-job", tick, tick, enqueueJob)
		require.ErrorIs(t, err, engine.ErrTickUnknown)
		require.True(t, recorded("lost-with-job").Equal(tick), "the record landed, with its job")

		db.deadlock = firstWith(insertTick)
		ran, err := fs.RunTick(ctx, "deadlocked", tick, tick, nil)
		require.NoError(t, err)
		require.True(t, ran)
		require.True(t, recorded("deadlocked").Equal(tick))
		require.Equal(t, []string{"fail", "lose", "lose", "deadlock"}, db.firedFaults())
	})
}
