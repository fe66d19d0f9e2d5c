package dispatcher_test

// Lost replies on the dispatcher's paths: a transaction (or an
// autocommitted statement) whose commit lands while the dispatcher sees a
// dropped connection, as when the connection drops between the server's
// commit and its reply.

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/clock"
	"github.com/sluicequeue/sluice/dispatcher"
	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
	"github.com/sluicequeue/sluice/jobs"
	"github.com/sluicequeue/sluice/ratelimit"
)

// errReset is what a driver reports when the connection drops: not a
// deadlock, so no store runs the transaction again.
var errReset = errors.New("read tcp 127.0.0.1:5432->127.0.0.1:41234: read: connection reset by peer")

// replyLossDB commits a transaction (or runs an autocommitted statement)
// and then, when lose says so of its statements, reports errReset. When
// fail says so of a statement of a transaction, it reports errReset
// instead of sending it (the store then rolls the transaction back).
type replyLossDB struct {
	engine.DB
	mu         sync.Mutex
	lose, fail func(stmts []string) bool
	lost       int
}

func (d *replyLossDB) fails(q string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.fail != nil && d.fail([]string{q})
}

func (d *replyLossDB) loses(stmts []string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.lose != nil && d.lose(stmts) {
		d.lost++
		return true
	}
	return false
}

func (d *replyLossDB) lostReplies() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.lost
}

func (d *replyLossDB) Exec(ctx context.Context, q string, args ...any) (engine.Result, error) {
	r, err := d.DB.Exec(ctx, q, args...)
	if err == nil && d.loses([]string{q}) {
		return engine.Result{}, errReset
	}
	return r, err
}

func (d *replyLossDB) Query(ctx context.Context, q string, args ...any) (engine.Rows, error) {
	rows, err := d.DB.Query(ctx, q, args...)
	if err == nil && d.loses([]string{q}) {
		rows.Close()
		return nil, errReset
	}
	return rows, err
}

func (d *replyLossDB) Begin(ctx context.Context) (engine.Tx, error) {
	tx, err := d.DB.Begin(ctx)
	if err != nil {
		return nil, err
	}
	return &replyLossTx{Tx: tx, d: d}, nil
}

type replyLossTx struct {
	engine.Tx
	d     *replyLossDB
	stmts []string
}

func (t *replyLossTx) Exec(ctx context.Context, q string, args ...any) (engine.Result, error) {
	if t.d.fails(q) {
		return engine.Result{}, errReset
	}
	t.stmts = append(t.stmts, q)
	return t.Tx.Exec(ctx, q, args...)
}

func (t *replyLossTx) Query(ctx context.Context, q string, args ...any) (engine.Rows, error) {
	if t.d.fails(q) {
		return nil, errReset
	}
	t.stmts = append(t.stmts, q)
	return t.Tx.Query(ctx, q, args...)
}

func (t *replyLossTx) Commit(ctx context.Context) error {
	if err := t.Tx.Commit(ctx); err != nil {
		return err
	}
	if t.d.loses(t.stmts) {
		return errReset
	}
	return nil
}

// loseOnce returns a predicate true the first time one of the statements
// contains mark.
func loseOnce(mark string) func([]string) bool {
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

// lossy returns a store over s's database whose replies db may lose.
func lossy(s *engine.Store) (*engine.Store, *replyLossDB) {
	db := &replyLossDB{DB: s.DB()}
	return engine.New(s.Dialect(), db), db
}

// guarantees.md, "Limits": a parked job waits on "a place among the parked
// jobs its budget counts (the count may run ahead of the jobs, never
// behind)"; a rate limit admits at most To in any window of Per.
//
// An unparking whose commit lands and whose reply is lost fails the
// dispatcher's tick; the next tick hands no job a second slot, moves the
// cursor no further for those it slotted, and the budget's parked count
// still matches its parked jobs. Every job then runs once, at the limit's
// pace.
func TestAnUnparkWhoseReplyIsLostHandsEachSlotOnce(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		p, burst, err := ratelimit.NewParams(1, time.Second, 1)
		require.NoError(t, err)
		lim := oneLimit{ratelimit.Spec{Scope: "k", To: 1, Per: time.Second, Burst: burst, Params: p}}
		var js []engine.NewJob
		for range 20 {
			js = append(js, engine.NewJob{Kind: "k", Queue: "default", Args: []byte(`{}`), MaxAttempts: 1,
				RateKeys: []engine.RateKey{{Key: "k/one", Cost: 1}}})
		}
		_, err = s.Enqueue(ctx, nil, engine.At(t0), js)
		require.NoError(t, err)
		pid, err := s.RegisterProcess(ctx, engine.Process{Kind: "worker", Name: "w"}, engine.At(t0))
		require.NoError(t, err)
		var admitted []time.Time
		claim := func(now time.Time) int {
			res, err := s.Claim(ctx, engine.ClaimParams{ProcessID: pid, Queues: []string{"default"}, Max: 20,
				Clock: engine.At(now), Limits: lim, Horizon: 5 * time.Second})
			require.NoError(t, err)
			for range res.Jobs {
				admitted = append(admitted, res.DecidedAt)
			}
			return len(res.Jobs)
		}
		require.Equal(t, 1, claim(t0))
		counts := func() (parkedJobs, count int) {
			js, err := s.ListJobs(ctx, engine.JobFilter{State: engine.StateParked, Limit: 100})
			require.NoError(t, err)
			bs, err := s.ListBudgets(ctx)
			require.NoError(t, err)
			require.Len(t, bs, 1)
			return len(js), bs[0].Parked
		}
		parked, count := counts()
		require.Equal(t, 14, parked, "5 slots within the 5 s horizon; the other 14 park")
		require.Equal(t, parked, count)

		ls, db := lossy(s)
		db.lose = loseOnce("WHERE parked > 0 AND next_slot_ns") // Unpark's transaction
		now := t0.Add(5 * time.Second)
		c := clock.NewFake(now)
		d := newDispatcher(t, ls, dispatcher.Config{Clock: c, Logger: quiet(), Horizon: 5 * time.Second,
			Maintenance: dispatcher.Maintenance{ClearIdleBudgets: dispatcher.MaintenanceTask{Off: true},
				ClearFinishedJobs: dispatcher.MaintenanceTask{Off: true}, FreeExpiredSlots: dispatcher.MaintenanceTask{Off: true}}})
		_, err = d.Tick(ctx)
		require.ErrorIs(t, err, errReset, "the unpark's commit landed, its reply lost")
		require.Equal(t, 1, db.lostReplies())
		parked, count = counts()
		require.Less(t, parked, 14, "the lost unpark handed slots")
		require.Equal(t, parked, count, "the parked count matches the parked jobs")
		before := budgetRow(t, s)

		res, err := d.Tick(ctx)
		require.NoError(t, err)
		require.Zero(t, res.Unparked, "no slot within the horizon is left: none handed twice")
		require.Equal(t, before.NextSlot, budgetRow(t, s).NextSlot, "the cursor moved once")

		// Time runs: every job runs once, within the limit.
		for step := time.Duration(0); step <= 30*time.Second && len(admitted) < 20; step += 100 * time.Millisecond {
			at := now.Add(step)
			c.Set(at)
			_, err := d.Tick(ctx)
			require.NoError(t, err)
			claim(at)
			parked, count = counts()
			require.LessOrEqual(t, parked, count, "the parked count never falls behind the parked jobs")
		}
		require.Len(t, admitted, 20, "every job ran, once")
		require.LessOrEqual(t, ratelimit.BusiestWindow(admitted, time.Second), 1)
	})
}

// budgetRow returns the one budget's row.
func budgetRow(t *testing.T, s *engine.Store) engine.BudgetInfo {
	t.Helper()
	bs, err := s.ListBudgets(context.Background())
	require.NoError(t, err)
	require.Len(t, bs, 1)
	return bs[0]
}

// guarantees.md, "A worker that dies": the lost run counts as an attempt
// and "is kept as a failed attempt". A reap whose commit lands and whose
// reply is lost released the job all the same; the next reap finds
// nothing more: the lost run is counted and kept once, and the job runs
// again.
func TestAReapWhoseReplyIsLostCountsTheLostRunOnce(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		res, err := s.Enqueue(ctx, nil, engine.At(t0), []engine.NewJob{{Kind: "k", Queue: "default", Args: []byte(`{}`), MaxAttempts: 3}})
		require.NoError(t, err)
		id := res[0].ID
		pid, err := s.RegisterProcess(ctx, engine.Process{Kind: "worker", PID: 1}, engine.At(t0))
		require.NoError(t, err)
		cl, err := s.Claim(ctx, engine.ClaimParams{ProcessID: pid, Queues: []string{"default"}, Max: 1, Clock: engine.At(t0)})
		require.NoError(t, err)
		require.Len(t, cl.Jobs, 1)

		ls, db := lossy(s)
		db.lose = loseOnce("sluice_attempts")
		later := engine.At(t0.Add(10 * time.Minute))
		_, err = ls.ReapDeadProcesses(ctx, later, jobs.DefaultDeadAfter)
		require.ErrorIs(t, err, errReset, "the reap's commit landed, its reply lost")
		n, err := ls.ReapDeadProcesses(ctx, later, jobs.DefaultDeadAfter)
		require.NoError(t, err)
		require.Zero(t, n, "nothing more to release")
		j, err := s.GetJob(ctx, id)
		require.NoError(t, err)
		require.Equal(t, engine.StateReady, j.State)
		require.Equal(t, 1, j.Attempt, "the lost run counted once")
		as, err := s.Attempts(ctx, id)
		require.NoError(t, err)
		require.Len(t, as, 1, "and kept once")
		ps, err := s.ListProcesses(ctx)
		require.NoError(t, err)
		require.Empty(t, ps, "the dead process is removed")
	})
}

// guarantees.md, "Limits": a slot is "handed out only while they are fewer
// than To, and given back once"; concurrency.md: a slot whose key saw no
// activity for its Duration is presumed lost. The dispatcher's slot
// maintenance frees the slot of a running holder presumed lost and hands
// it to the first blocked job; its commit lands, its reply is lost. The
// next rounds hand out no second slot: the key counts its one holder, the
// other job stays blocked.
func TestASlotHandedOutByMaintenanceWhoseReplyIsLostIsHandedOnce(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		conc := func() engine.NewJob {
			return engine.NewJob{Kind: "k", Queue: "default", Args: []byte(`{}`), MaxAttempts: 3,
				Conc: &engine.Conc{Key: "c/one", To: 1, Duration: time.Minute}}
		}
		res, err := s.Enqueue(ctx, nil, engine.At(t0), []engine.NewJob{conc(), conc(), conc()})
		require.NoError(t, err)
		pid, err := s.RegisterProcess(ctx, engine.Process{Kind: "worker", PID: 1}, engine.At(t0))
		require.NoError(t, err)
		cl, err := s.Claim(ctx, engine.ClaimParams{ProcessID: pid, Queues: []string{"default"}, Max: 3, Clock: engine.At(t0)})
		require.NoError(t, err)
		require.Equal(t, []int64{res[0].ID}, []int64{cl.Jobs[0].ID})

		ls, db := lossy(s)
		db.lose = loseOnce("sluice_semaphores")
		c := clock.NewFake(t0.Add(2 * time.Minute)) // the holder's key is idle past its Duration
		d := newDispatcher(t, ls, dispatcher.Config{Clock: c, Logger: quiet(),
			Maintenance: dispatcher.Maintenance{ClearIdleBudgets: dispatcher.MaintenanceTask{Off: true},
				ClearFinishedJobs: dispatcher.MaintenanceTask{Off: true}}})
		c.Advance(time.Second)
		_, err = d.Tick(ctx)
		require.ErrorIs(t, err, errReset, "the maintenance's commit landed, its reply lost")
		j, err := s.GetJob(ctx, res[1].ID)
		require.NoError(t, err)
		require.Equal(t, engine.StateReady, j.State, "the freed slot went to the first blocked job")
		for range 3 {
			c.Advance(time.Second)
			_, err = d.Tick(ctx)
			require.NoError(t, err)
		}
		sems, err := s.ListSemaphores(ctx)
		require.NoError(t, err)
		require.Len(t, sems, 1)
		require.Equal(t, 1, sems[0].Held, "one slot handed out: %+v", sems[0])
		require.Equal(t, 1, sems[0].Holding)
		require.Equal(t, 1, sems[0].Blocked)
	})
}
