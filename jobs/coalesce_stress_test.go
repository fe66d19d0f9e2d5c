package jobs_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/clock"
	"github.com/sluicequeue/sluice/coalesce"
	"github.com/sluicequeue/sluice/dispatcher"
	"github.com/sluicequeue/sluice/internal/driver/mysql"
	"github.com/sluicequeue/sluice/internal/driver/sqlite"
	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
	"github.com/sluicequeue/sluice/jobs"
	"github.com/sluicequeue/sluice/store"
	"github.com/sluicequeue/sluice/store/dburl"
)

// Kinds of the end-to-end coalescing stress test: two that collect (one
// plain, one debounced that dispatches once full), one that discards and
// one that replaces, both debounced. Each call carries a unique ID.
type stressCollect struct {
	Key int
	ID  string
}

func (stressCollect) Kind() string { return "stress_collect" }

type stressCollectD struct {
	Key int
	ID  string
}

func (stressCollectD) Kind() string { return "stress_collect_d" }

type stressDiscard struct {
	Key int
	ID  string
}

func (stressDiscard) Kind() string { return "stress_discard" }

type stressReplace struct {
	Key int
	ID  string
}

func (stressReplace) Kind() string { return "stress_replace" }

// stressLedger records what enqueuers committed and rolled back, and what
// handlers ran.
type stressLedger struct {
	mu         sync.Mutex
	committed  map[string]jobs.Enqueued // call ID → what its enqueue said
	kindOf     map[string]string        // call ID → kind
	rolledBack map[string]bool
	ran        map[string][]int64 // call ID → jobs whose run handed it over
	runs       map[int64]int      // job → runs
	errs       []string
	retried    int // deadlocks, serialization failures and SQLite busy begins a caller runs again (docs/concurrency.md, docs/operations.md)
}

func (l *stressLedger) run(jobID int64, ids ...string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.runs[jobID]++
	for _, id := range ids {
		l.ran[id] = append(l.ran[id], jobID)
	}
}

func (l *stressLedger) fail(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.errs = append(l.errs, fmt.Sprintf(format, args...))
}

// stressCall is one call an enqueuer makes.
type stressCall struct {
	id   string
	kind string
	args jobs.Args
}

func newStressCall(r *rand.Rand, who string, n int) stressCall {
	id := fmt.Sprintf("%s-%d", who, n)
	key := r.Intn(3)
	switch r.Intn(4) {
	case 0:
		return stressCall{id, "stress_collect", stressCollect{Key: key, ID: id}}
	case 1:
		return stressCall{id, "stress_collect_d", stressCollectD{Key: key, ID: id}}
	case 2:
		return stressCall{id, "stress_discard", stressDiscard{Key: key, ID: id}}
	default:
		return stressCall{id, "stress_replace", stressReplace{Key: key, ID: id}}
	}
}

// appTxPool is an app's own pool on the test database, for EnqueueTx:
// PostgreSQL's at READ COMMITTED or REPEATABLE READ, MySQL's at its
// default REPEATABLE READ, SQLite's with one connection.
type appTxPool struct {
	client *jobs.Client
	begin  func(ctx context.Context) (tx any, commit func() error, rollback func() error, err error)
	// busy reports a begin that outwaited SQLite's busy timeout behind
	// the other pools on the file (each pool here is a process of its
	// own): an app's own transaction is not sluice's to retry, so its
	// caller runs it again, as docs/operations.md says.
	busy func(error) bool
}

func openAppTxPool(t *testing.T, backend, url string, reg *jobs.Registry, clk clock.Clock, repeatable bool) appTxPool {
	ctx := context.Background()
	switch backend {
	case "postgres":
		pool, err := pgxpool.New(ctx, url)
		require.NoError(t, err)
		t.Cleanup(pool.Close)
		s, err := store.OpenPostgresPool(ctx, pool)
		require.NoError(t, err)
		iso := pgx.ReadCommitted
		if repeatable {
			iso = pgx.RepeatableRead
		}
		return appTxPool{client: jobs.NewClient(s, reg, jobs.ClientConfig{Clock: clk}), begin: func(ctx context.Context) (any, func() error, func() error, error) {
			tx, err := pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: iso})
			if err != nil {
				return nil, nil, nil, err
			}
			return tx, func() error { return tx.Commit(ctx) }, func() error { return tx.Rollback(ctx) }, nil
		}, busy: func(error) bool { return false }}
	case "mysql":
		cfg, err := mysql.Config(url)
		require.NoError(t, err)
		db, err := sql.Open("mysql", cfg.FormatDSN())
		require.NoError(t, err)
		t.Cleanup(func() { _ = db.Close() })
		s, err := store.OpenMySQLDB(ctx, db)
		require.NoError(t, err)
		return sqlTxPool(s, db, reg, clk)
	default:
		path, ok := dburl.SQLitePath(url)
		require.True(t, ok, url)
		dsn, err := store.SQLiteDSN(path)
		require.NoError(t, err)
		db, err := sql.Open("sqlite", dsn)
		require.NoError(t, err)
		db.SetMaxOpenConns(1)
		t.Cleanup(func() { _ = db.Close() })
		s, err := store.OpenSQLiteDB(ctx, db)
		require.NoError(t, err)
		p := sqlTxPool(s, db, reg, clk)
		p.busy = sqlite.Dialect{}.IsRetryable
		return p
	}
}

func sqlTxPool(s *store.Store, db *sql.DB, reg *jobs.Registry, clk clock.Clock) appTxPool {
	return appTxPool{client: jobs.NewClient(s, reg, jobs.ClientConfig{Clock: clk}), begin: func(ctx context.Context) (any, func() error, func() error, error) {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return nil, nil, nil, err
		}
		return tx, tx.Commit, tx.Rollback, nil
	}, busy: func(error) bool { return false }}
}

// serializationFailure reports PostgreSQL's 40001, which a transaction at
// REPEATABLE READ may get (docs/coalesce.md, "Key rows").
func serializationFailure(err error) bool {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code == "40001"
	}
	return err != nil && strings.Contains(err.Error(), "40001")
}

// TestCoalescingEndToEndUnderStress races enqueuers (each on its
// own pool; some inside their own transactions, of which some roll back)
// of Collect, Discard and Replace kinds across a few keys against two
// running workers, a ticking dispatcher and the clean-up of idle key rows,
// and checks docs/coalesce.md's promises: every committed call reaches
// exactly one run of the job its enqueue named, no rolled-back call ever
// runs, no two jobs hold one key at any moment, and no enqueue fails.
func TestCoalescingEndToEndUnderStress(t *testing.T) {
	for _, b := range testdb.Backends(t) {
		t.Run(b.Name, func(t *testing.T) { coalesceStress(t, b) })
	}
}

func coalesceStress(t *testing.T, b testdb.Backend) {
	ctx := context.Background()
	began := time.Now()
	url := b.URL(t)
	open := testdb.Opener(t, url)
	s := open()
	_, err := s.MigrateUp(ctx, 0)
	require.NoError(t, err)
	clk := clock.NewFake(t0)

	l := &stressLedger{committed: map[string]jobs.Enqueued{}, kindOf: map[string]string{}, rolledBack: map[string]bool{},
		ran: map[string][]int64{}, runs: map[int64]int{}}
	reg := jobs.NewRegistry()
	debounce := coalesce.Rule[stressDiscard]{Key: func(a stressDiscard) any { return a.Key }, Debounce: 20 * time.Millisecond, MaxDelay: 60 * time.Millisecond}
	require.NoError(t, jobs.RegisterCalls(reg, func(_ context.Context, j *jobs.Job[stressCollect], calls []stressCollect) error {
		ids := make([]string, len(calls))
		for i, c := range calls {
			ids[i] = c.ID
		}
		l.run(j.ID, ids...)
		return nil
	}, jobs.Coalesce(coalesce.Rule[stressCollect]{Key: func(a stressCollect) any { return a.Key }, OnConflict: coalesce.Collect, MaxCalls: 3})))
	require.NoError(t, jobs.RegisterCalls(reg, func(_ context.Context, j *jobs.Job[stressCollectD], calls []stressCollectD) error {
		ids := make([]string, len(calls))
		for i, c := range calls {
			ids[i] = c.ID
		}
		l.run(j.ID, ids...)
		return nil
	}, jobs.Coalesce(coalesce.Rule[stressCollectD]{Key: func(a stressCollectD) any { return a.Key }, OnConflict: coalesce.Collect,
		MaxCalls: 4, OnFull: coalesce.Dispatch, Debounce: 20 * time.Millisecond, MaxDelay: 60 * time.Millisecond})))
	require.NoError(t, jobs.Register(reg, func(_ context.Context, j *jobs.Job[stressDiscard]) error {
		l.run(j.ID, j.Args.ID)
		return nil
	}, jobs.Coalesce(debounce)))
	require.NoError(t, jobs.Register(reg, func(_ context.Context, j *jobs.Job[stressReplace]) error {
		l.run(j.ID, j.Args.ID)
		return nil
	}, jobs.Coalesce(coalesce.Rule[stressReplace]{Key: func(a stressReplace) any { return a.Key }, OnConflict: coalesce.Replace,
		Debounce: 20 * time.Millisecond, MaxDelay: 60 * time.Millisecond})))

	runCtx, stopRun := context.WithCancel(ctx)
	defer stopRun()
	var bg sync.WaitGroup

	// Two workers, each on its own pool.
	for i := 0; i < 2; i++ {
		w, err := jobs.NewWorker(testdb.Public(open()), reg, jobs.WorkerConfig{Concurrency: 3, PollInterval: 5 * time.Millisecond, Clock: clk, Logger: quiet()})
		require.NoError(t, err)
		bg.Add(1)
		go func() {
			defer bg.Done()
			if err := w.Run(runCtx); err != nil {
				l.fail("worker: %v", err)
			}
		}()
	}
	// A dispatcher's ticks, the clean-up of idle key rows, and a watch
	// for two jobs holding one key, each on its own pool.
	d := newDispatcher(t, open(), dispatcher.Config{Clock: clk, Logger: quiet()})
	bg.Add(1)
	go func() {
		defer bg.Done()
		for runCtx.Err() == nil {
			if _, err := d.Tick(runCtx); err != nil && runCtx.Err() == nil {
				l.fail("tick: %v", err)
			}
		}
	}()
	var cleared atomic.Int64
	cleaner := open()
	bg.Add(1)
	go func() {
		defer bg.Done()
		for runCtx.Err() == nil {
			n, err := cleaner.ClearCoalesceKeys(runCtx, 2, 0)
			if err != nil && runCtx.Err() == nil {
				l.fail("clear coalesce keys: %v", err)
			}
			cleared.Add(int64(n))
		}
	}()
	watcher := open()
	var watched atomic.Int64
	bg.Add(1)
	go func() {
		defer bg.Done()
		for runCtx.Err() == nil {
			if bad := twoHolders(runCtx, watcher); bad != "" && runCtx.Err() == nil {
				l.fail("at one moment: %s", bad)
			}
			watched.Add(1)
		}
	}()

	// Enqueuers: three with Enqueue on pools of their own, three in
	// transactions of their own (one in three rolls back). SQLite has one
	// writer: there one caller's transaction at a time, so that callers
	// queued behind it do not outwait the busy timeout on a slow (-race)
	// run.
	const rounds = 80
	plain, inTx := 3, 3
	var rolledBackBefore atomic.Bool // a caller's transaction rolled back
	if b.Name == "sqlite" {
		inTx = 1
	}
	var enq sync.WaitGroup
	record := func(calls []stressCall, res []jobs.Enqueued, committed bool) {
		l.mu.Lock()
		defer l.mu.Unlock()
		for i, c := range calls {
			if committed {
				l.committed[c.id], l.kindOf[c.id] = res[i], c.kind
			} else {
				l.rolledBack[c.id] = true
			}
		}
	}
	for e := 0; e < plain; e++ {
		client := jobs.NewClient(testdb.Public(open()), reg, jobs.ClientConfig{Clock: clk})
		enq.Add(1)
		go func(e int) {
			defer enq.Done()
			r := rand.New(rand.NewSource(int64(e)))
			for n := 0; n < rounds; n++ {
				c := newStressCall(r, fmt.Sprintf("p%d", e), n)
				res, err := client.Enqueue(ctx, c.args)
				if err != nil {
					l.fail("enqueue %s: %v", c.id, err)
					return
				}
				record([]stressCall{c}, []jobs.Enqueued{res}, true)
				clk.Advance(time.Millisecond)
			}
		}(e)
	}
	for e := 0; e < inTx; e++ {
		pool := openAppTxPool(t, b.Name, url, reg, clk, b.Name == "postgres" && e == 2)
		enq.Add(1)
		go func(e int) {
			defer enq.Done()
			who := fmt.Sprintf("t%d", e)
			r := rand.New(rand.NewSource(int64(100 + e)))
			n := 0
			for round := 0; round < rounds/2; round++ {
				tx, commit, rollback, err := pool.begin(ctx)
				if err != nil && pool.busy(err) {
					l.mu.Lock()
					l.retried++
					l.mu.Unlock()
					continue
				}
				if err != nil {
					l.fail("begin: %v", err)
					return
				}
				var calls []stressCall
				var res []jobs.Enqueued
				var failed error
				if r.Intn(2) == 0 {
					// Several calls of one key, one EnqueueTx each.
					first := newStressCall(r, who, n)
					n++
					calls = append(calls, first)
					for k := r.Intn(3); k > 0; k-- {
						c := newStressCall(r, who, n)
						n++
						c = sameKey(first, c)
						calls = append(calls, c)
					}
					for _, c := range calls {
						got, err := pool.client.EnqueueTx(ctx, tx, c.args)
						if err != nil {
							failed = fmt.Errorf("enqueue tx %s: %w", c.id, err)
							break
						}
						res = append(res, got)
					}
				} else {
					// One EnqueueManyTx across kinds and keys.
					var items []jobs.Item
					for k := 1 + r.Intn(4); k > 0; k-- {
						c := newStressCall(r, who, n)
						n++
						calls = append(calls, c)
						items = append(items, jobs.Item{Args: c.args})
					}
					got, err := pool.client.EnqueueManyTx(ctx, tx, items)
					if err != nil {
						failed = fmt.Errorf("enqueue many tx %v: %w", ids(calls), err)
					}
					res = got
				}
				back := r.Intn(3) == 0
				switch {
				case failed != nil:
					_ = rollback()
					record(calls, nil, false)
					if serializationFailure(failed) && (e == 2 && b.Name == "postgres" || b.Name == "mysql" && rolledBackBefore.Load()) {
						// PostgreSQL at REPEATABLE READ; or on MySQL the
						// exception docs/concurrency.md lists: two callers
						// waiting to make a key's row that a third made
						// and rolled back. The caller runs it again.
						l.mu.Lock()
						l.retried++
						l.mu.Unlock()
						continue
					}
					// Reported at the end; the calls count as rolled
					// back, and the enqueuer goes on, so that the
					// other checks still run.
					l.fail("%v", failed)
				case back:
					if err := rollback(); err != nil {
						l.fail("rollback: %v", err)
						return
					}
					rolledBackBefore.Store(true)
					record(calls, nil, false)
				default:
					if err := commit(); err != nil {
						record(calls, nil, false)
						if serializationFailure(err) && e == 2 && b.Name == "postgres" {
							continue
						}
						l.fail("commit: %v", err)
						return
					}
					record(calls, res, true)
				}
				clk.Advance(time.Millisecond)
			}
		}(e)
	}
	enq.Wait()

	// Run everything out: advance the clock until no job is left
	// unfinished.
	deadline := time.Now().Add(20 * time.Second)
	for {
		left, err := unfinished(ctx, s)
		require.NoError(t, err)
		if left == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d jobs still unfinished after 20s", left)
		}
		// The dispatcher's goroutine still ticks (a Dispatcher's Tick is
		// not to be called from two goroutines at once).
		clk.Advance(10 * time.Millisecond)
	}
	stopRun()
	bg.Wait()

	l.mu.Lock()
	defer l.mu.Unlock()
	// Reported without stopping, so that the checks below run too.
	for _, e := range l.errs {
		t.Errorf("no enqueue, run, tick or clean-up fails, and no key has two jobs: %s", e)
	}
	byJob := map[int64][]string{} // job → committed calls its enqueues named
	for id, res := range l.committed {
		byJob[res.ID] = append(byJob[res.ID], id)
	}
	for id, res := range l.committed {
		switch l.kindOf[id] {
		case "stress_collect", "stress_collect_d":
			require.Equal(t, []int64{res.ID}, l.ran[id], "collected call %s reaches one run, of job %d", id, res.ID)
		default:
			require.Equal(t, 1, l.runs[res.ID], "call %s's job %d runs once", id, res.ID)
		}
	}
	for id, jobIDs := range l.ran {
		require.False(t, l.rolledBack[id], "rolled-back call %s ran in jobs %v", id, jobIDs)
		res, ok := l.committed[id]
		require.True(t, ok, "call %s ran but was never committed", id)
		for _, j := range jobIDs {
			require.Equal(t, res.ID, j, "call %s ran in job %d, its enqueue said %d (calls of that job: %v)", id, j, res.ID, byJob[res.ID])
		}
	}
	for j, n := range l.runs {
		require.Equal(t, 1, n, "job %d ran once", j)
	}
	t.Logf("%s: %d committed, %d rolled back, %d jobs ran, %d caller retries, %d key rows cleared, %d watches, %v",
		b.Name, len(l.committed), len(l.rolledBack), len(l.runs), l.retried, cleared.Load(), watched.Load(), time.Since(began).Round(time.Millisecond))
}

// sameKey gives c first's kind and key.
func sameKey(first, c stressCall) stressCall {
	var key int
	switch a := first.args.(type) {
	case stressCollect:
		key = a.Key
	case stressCollectD:
		key = a.Key
	case stressDiscard:
		key = a.Key
	case stressReplace:
		key = a.Key
	}
	c.kind = first.kind
	switch first.args.(type) {
	case stressCollect:
		c.args = stressCollect{Key: key, ID: c.id}
	case stressCollectD:
		c.args = stressCollectD{Key: key, ID: c.id}
	case stressDiscard:
		c.args = stressDiscard{Key: key, ID: c.id}
	case stressReplace:
		c.args = stressReplace{Key: key, ID: c.id}
	}
	return c
}

func ids(calls []stressCall) []string {
	out := make([]string, len(calls))
	for i, c := range calls {
		out[i] = c.id
	}
	return out
}

// twoHolders returns, when one statement sees two jobs holding one
// coalesce key or a job that is not pending holding one, what it saw.
func twoHolders(ctx context.Context, s *engine.Store) string {
	rows, err := s.DB().Query(ctx, `SELECT coalesce_key, id, state FROM sluice_jobs WHERE coalesce_key IN
		(SELECT coalesce_key FROM sluice_jobs WHERE coalesce_key IS NOT NULL GROUP BY coalesce_key HAVING COUNT(*) > 1)
		OR (coalesce_key IS NOT NULL AND state NOT IN ('ready', 'scheduled', 'parked', 'blocked'))`)
	if err != nil {
		if ctx.Err() != nil {
			return ""
		}
		return "watch: " + err.Error()
	}
	defer rows.Close()
	var seen []string
	for rows.Next() {
		var key, state string
		var id int64
		if err := rows.Scan(&key, &id, &state); err != nil {
			return "watch: " + err.Error()
		}
		seen = append(seen, fmt.Sprintf("%s: job %d %s", key, id, state))
	}
	if err := rows.Err(); err != nil && ctx.Err() == nil {
		return "watch: " + err.Error()
	}
	sort.Strings(seen)
	return strings.Join(seen, "; ")
}

// unfinished counts the jobs not yet completed, failed or cancelled.
func unfinished(ctx context.Context, s *engine.Store) (int, error) {
	rows, err := s.DB().Query(ctx, `SELECT COUNT(*) FROM sluice_jobs WHERE state NOT IN ('completed', 'failed', 'cancelled')`)
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		if err := rows.Scan(&n); err != nil {
			return 0, err
		}
	}
	return n, rows.Err()
}
