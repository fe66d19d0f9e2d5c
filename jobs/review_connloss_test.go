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
	"fmt"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/concurrency"
	"github.com/sluicequeue/sluice/dispatcher"
	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
	"github.com/sluicequeue/sluice/jobs"
	"github.com/sluicequeue/sluice/ratelimit"
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
	rows, err := d.DB.Query(ctx, q, args...)
	if err == nil && d.lose([]string{q}) {
		rows.Close() // the statement ran to its end, autocommitted
		return nil, errConnReset
	}
	return rows, err
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

type killPlain struct{ N int }

func (killPlain) Kind() string { return "kill_plain" }

type killRated struct{ N int }

func (killRated) Kind() string { return "kill_rated" }

type killConc struct{ Account, N int }

func (killConc) Kind() string { return "kill_conc" }

// killer ends, from a connection of its own, every other server
// connection of the test's pools.
type killer struct {
	name string
	s    *engine.Store
	app  string // PostgreSQL: the pools' application_name
}

func (k *killer) kill(ctx context.Context) int {
	switch k.name {
	case "postgres":
		// Not every connection of current_database(): each test has a
		// schema of its own in one shared database, and other tests run
		// beside this one. The pools under test carry their own
		// application_name.
		rows, err := k.s.DB().Query(ctx, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1 AND pid <> pg_backend_pid()", k.app)
		if err != nil {
			return 0
		}
		n := 0
		for rows.Next() {
			n++
		}
		rows.Close()
		return n
	case "mysql":
		rows, err := k.s.DB().Query(ctx, "SELECT id FROM information_schema.processlist WHERE db = DATABASE() AND id <> CONNECTION_ID()")
		if err != nil {
			return 0
		}
		var ids []int64
		for rows.Next() {
			var id int64
			if rows.Scan(&id) == nil {
				ids = append(ids, id)
			}
		}
		rows.Close()
		for _, id := range ids {
			_, _ = k.s.DB().Exec(ctx, fmt.Sprintf("KILL CONNECTION %d", id))
		}
		return len(ids)
	}
	return 0
}

// guarantees.md, "Delivery: at least once", "Nothing lost", "Limits":
// connections killed by the server, again and again, while two workers and
// a dispatcher (each with its own pool) work plain, rate-limited and
// concurrency-limited jobs on the real clock. Afterwards every job ran at
// least once and is completed, none is left running, ready, blocked or
// waiting; each semaphore counts no holder; no key ever ran more than its
// limit at once; no window of Per held more rate-limited claims than To.
//
// SQLite has no network connection to kill: the test does not apply there.
func TestReviewConnLossKilledConnectionsLoseNoJob(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			if b.Name == "sqlite" {
				t.Skip("SQLite runs in-process: there is no connection for the server to kill")
			}
			base := b.URL(t)
			u := base
			k := &killer{name: b.Name}
			if b.Name == "postgres" {
				parsed, err := url.Parse(base)
				require.NoError(t, err)
				q := parsed.Query()
				k.app = "sluice_review_kill_" + strings.ReplaceAll(q.Get("search_path"), "\"", "")
				q.Set("application_name", k.app)
				parsed.RawQuery = q.Encode()
				u = parsed.String()
			}
			open := testdb.Opener(t, u)
			s := open()
			_, err := s.MigrateUp(context.Background(), 0)
			require.NoError(t, err)
			k.s = testdb.Opener(t, base)()

			const perKind = 100
			rated := ratelimit.Limit[killRated]{To: 10, Per: 200 * time.Millisecond, Burst: 5, Key: "global"}
			const concTo = 2
			var mu sync.Mutex
			ran := map[string]int{}
			running, most := map[int]int{}, map[int]int{}
			var claims []time.Time
			reg := jobs.NewRegistry()
			note := func(kind string, n int) {
				mu.Lock()
				ran[fmt.Sprintf("%s/%d", kind, n)]++
				mu.Unlock()
			}
			require.NoError(t, jobs.Register(reg, func(_ context.Context, j *jobs.Job[killPlain]) error {
				note("plain", j.Args.N)
				return nil
			}))
			require.NoError(t, jobs.Register(reg, func(_ context.Context, j *jobs.Job[killRated]) error {
				note("rated", j.Args.N)
				return nil
			}, jobs.RateLimit(rated)))
			require.NoError(t, jobs.Register(reg, func(_ context.Context, j *jobs.Job[killConc]) error {
				mu.Lock()
				running[j.Args.Account]++
				most[j.Args.Account] = max(most[j.Args.Account], running[j.Args.Account])
				mu.Unlock()
				note("conc", j.Args.N)
				mu.Lock()
				running[j.Args.Account]--
				mu.Unlock()
				return nil
			}, jobs.ConcurrencyLimit(concurrency.Limit[killConc]{Key: func(a killConc) any { return a.Account }, To: concTo})))
			var items []jobs.Item
			for i := 0; i < perKind; i++ {
				items = append(items, jobs.Item{Args: killPlain{N: i}}, jobs.Item{Args: killRated{N: i}},
					jobs.Item{Args: killConc{Account: i % 3, N: i}})
			}
			_, err = jobs.NewClient(testdb.Public(s), reg, jobs.ClientConfig{}).EnqueueMany(context.Background(), items)
			require.NoError(t, err)

			ctx, cancel := context.WithCancel(context.Background())
			var wg sync.WaitGroup
			for i := 0; i < 2; i++ {
				w, err := jobs.NewWorker(testdb.Public(open()), reg, jobs.WorkerConfig{Concurrency: 8, PollInterval: 10 * time.Millisecond, Logger: quiet(),
					Middleware: []jobs.Middleware{func(ctx context.Context, job jobs.JobInfo, next func(context.Context) error) error {
						if job.Kind == (killRated{}).Kind() {
							mu.Lock()
							claims = append(claims, job.ClaimedAt)
							mu.Unlock()
						}
						return next(ctx)
					}}})
				require.NoError(t, err)
				wg.Add(1)
				go func() { defer wg.Done(); _ = w.Run(ctx) }()
			}
			d := newDispatcher(t, open(), dispatcher.Config{Interval: 20 * time.Millisecond, Logger: quiet()})
			wg.Add(1)
			go func() { defer wg.Done(); _ = d.Run(ctx) }()

			allRan := func() bool {
				mu.Lock()
				defer mu.Unlock()
				return len(ran) == len(items)
			}
			// Kill every connection of the pools until every job ran once,
			// or for a few seconds (a bounded loop; its pace is not what the
			// test relies on).
			kills, rounds := 0, 0
			deadline := time.Now().Add(4 * time.Second)
			for !allRan() && time.Now().Before(deadline) {
				kills += k.kill(context.Background())
				rounds++
				time.Sleep(15 * time.Millisecond)
			}
			mu.Lock()
			t.Logf("%s: %d kill rounds, %d connections killed; %d of %d jobs ran meanwhile", b.Name, rounds, kills, len(ran), len(items))
			mu.Unlock()
			// The results of the last runs land once the connections stay up.
			left := func() []string {
				var out []string
				js, err := s.ListJobs(context.Background(), engine.JobFilter{Limit: 10000})
				if err != nil {
					return []string{err.Error()}
				}
				for _, j := range js {
					if j.State != engine.StateCompleted {
						out = append(out, fmt.Sprintf("job %d (%s) %s for process %d, attempt %d, last error %q", j.ID, j.Kind, j.State, j.ProcessID, j.Attempt, j.LastError))
					}
				}
				return out
			}
			var notDone []string
			settle := time.Now().Add(20 * time.Second)
			for notDone = left(); (len(notDone) > 0 || !allRan()) && time.Now().Before(settle); notDone = left() {
				time.Sleep(20 * time.Millisecond) // polling for a state, with a deadline
			}
			cancel()
			wg.Wait()

			mu.Lock()
			missing := len(items) - len(ran)
			var never []string
			for _, it := range items {
				var key string
				switch a := it.Args.(type) {
				case killPlain:
					key = fmt.Sprintf("plain/%d", a.N)
				case killRated:
					key = fmt.Sprintf("rated/%d", a.N)
				case killConc:
					key = fmt.Sprintf("conc/%d", a.N)
				}
				if ran[key] == 0 && len(never) < 10 {
					never = append(never, key)
				}
			}
			mu.Unlock()
			require.Zero(t, missing, "every job ran at least once; never ran: %v...; not completed: %d %v", never, len(notDone), head(notDone, 10))
			require.Empty(t, notDone, "every job is completed")
			sems, err := s.ListSemaphores(context.Background())
			require.NoError(t, err)
			for _, sem := range sems {
				require.Zero(t, sem.Held, "%s: the semaphore counts exactly its holders (none)", sem.Name)
				require.Zero(t, sem.Holding, sem.Name)
				require.Zero(t, sem.Blocked, sem.Name)
			}
			for acct, n := range most {
				require.LessOrEqual(t, n, concTo, "account %d ran more than its limit at once", acct)
			}
			require.LessOrEqual(t, ratelimit.BusiestWindow(claims, rated.Per), rated.To, "no window of Per holds more than To claims")
		})
	}
}

func head(s []string, n int) []string { return s[:min(n, len(s))] }

type connSlotJob struct{ N int }

func (connSlotJob) Kind() string { return "conn_slot_job" }

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

// guarantees.md, "Nothing lost": "a batch written again after its first
// commit landed (the reply lost) changes nothing more: each ... slot ...
// held back once"; "Limits": a slot is "given back once".
//
// The completion batch that gives a concurrency slot back (and hands it to
// the next blocked job) lands, its reply lost; the worker writes it again.
// Holds: the slot is given back once, one job of the key runs at a time,
// every job runs once, and the semaphore ends with no holder.
func TestReviewConnLossALostCompletionReplyGivesTheSlotBackOnce(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		var mu sync.Mutex
		runs := map[int]int{}
		running, most := 0, 0
		require.NoError(t, jobs.Register(h.reg, func(_ context.Context, j *jobs.Job[connSlotJob]) error {
			mu.Lock()
			defer mu.Unlock()
			runs[j.Args.N]++
			running++
			most = max(most, running)
			running--
			return nil
		}, jobs.ConcurrencyLimit(concurrency.Limit[connSlotJob]{Key: "one", To: 1})))
		s, db, client := lossStore(h)
		var fired atomic.Bool
		db.loseReply = func(stmts []string) bool {
			return has(stmts, "state = 'completed'") && fired.CompareAndSwap(false, true)
		}
		for n := 1; n <= 3; n++ {
			_, err := client.Enqueue(context.Background(), connSlotJob{N: n})
			require.NoError(t, err)
		}
		sem := semaphoreState(t, h.store)
		require.Equal(t, 1, sem.Held)
		require.Equal(t, 2, sem.Blocked)

		w, err := jobs.NewWorker(testdb.Public(s), h.reg, jobs.WorkerConfig{Clock: h.clock, Logger: quiet(), PollInterval: time.Second})
		require.NoError(t, err)
		stop := h.run(w)
		completed := func() int {
			js, err := h.store.ListJobs(context.Background(), engine.JobFilter{State: engine.StateCompleted, Limit: 10})
			require.NoError(t, err)
			return len(js)
		}
		waitFor(t, h, time.Second, func() bool { return completed() == 3 }, func() string {
			return fmt.Sprintf("%d of 3 jobs completed; semaphore %+v", completed(), semaphoreState(t, h.store))
		})
		stop()
		require.True(t, fired.Load(), "a completion's reply was lost")
		mu.Lock()
		defer mu.Unlock()
		require.Equal(t, map[int]int{1: 1, 2: 1, 3: 1}, runs, "every job ran once")
		require.Equal(t, 1, most)
		sem = semaphoreState(t, h.store)
		require.Zero(t, sem.Held, "the slot was given back once: %+v", sem)
		require.Zero(t, sem.Holding)
		require.Zero(t, sem.Blocked)
	})
}

// guarantees.md, "Nothing lost": "A caller that retries a failed
// EnqueueMany creates no duplicates, since nothing was written — except
// when the error came after the commit landed (its reply lost to a dropped
// connection), which no client can tell apart".
//
// Holds, as documented: the caller gets the connection's error for a job
// that was written (plain: one autocommitted insert; with a concurrency
// slot: a transaction), and a retry writes a second one. The second takes
// its place in the semaphore: the key counts exactly its one holder, the
// other job waits blocked, and both run.
func TestReviewConnLossAnEnqueueWhoseReplyIsLostWasWritten(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		var runs atomic.Int32
		require.NoError(t, jobs.Register(h.reg, func(context.Context, *jobs.Job[connJob]) error { runs.Add(1); return nil }))
		require.NoError(t, jobs.Register(h.reg, func(context.Context, *jobs.Job[connSlotJob]) error { runs.Add(1); return nil },
			jobs.ConcurrencyLimit(concurrency.Limit[connSlotJob]{Key: "one", To: 1})))
		_, db, client := lossStore(h)
		db.loseReply = func(stmts []string) bool { return has(stmts, insertJobs) }
		_, err := client.Enqueue(ctx, connJob{N: 1})
		require.ErrorIs(t, err, errConnReset, "the caller sees the lost reply")
		_, err = client.Enqueue(ctx, connSlotJob{N: 1})
		require.ErrorIs(t, err, errConnReset, "the caller sees the lost reply")
		db.mu.Lock()
		db.loseReply = nil
		db.mu.Unlock()
		js, err := h.store.ListJobs(ctx, engine.JobFilter{Limit: 10})
		require.NoError(t, err)
		require.Len(t, js, 2, "both jobs were written all the same")

		// The caller retries the limited one: a second job, documented.
		_, err = client.Enqueue(ctx, connSlotJob{N: 1})
		require.NoError(t, err)
		sem := semaphoreState(t, h.store)
		require.Equal(t, 1, sem.Held, "%+v", sem)
		require.Equal(t, 1, sem.Holding)
		require.Equal(t, 1, sem.Blocked)
		require.Equal(t, 3, h.drain(jobs.WorkerConfig{}).Completed)
		require.Equal(t, int32(3), runs.Load())
		sem = semaphoreState(t, h.store)
		require.Zero(t, sem.Held)
		require.Zero(t, sem.Blocked)
	})
}

// guarantees.md, "Graceful shutdown": jobs still running when the shutdown
// timeout runs out are released back to ready, giving back the attempt,
// and reported to OnFinish as released. Holds when the release's commit
// lands and its reply is lost: the job is ready, at attempt 0, and reported
// released once; then it runs.
func TestReviewConnLossAReleaseWhoseReplyIsLostReleasedTheJob(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		started := make(chan struct{}, 1)
		never := make(chan struct{})
		t.Cleanup(func() { close(never) })
		var first atomic.Bool
		first.Store(true)
		require.NoError(t, jobs.Register(h.reg, func(context.Context, *jobs.Job[connJob]) error {
			if first.CompareAndSwap(true, false) {
				started <- struct{}{}
				<-never // ignores its context
			}
			return nil
		}))
		s, db, client := lossStore(h)
		var lostRelease atomic.Bool
		db.loseReply = func(stmts []string) bool {
			// Release locks its runs (LockRuns) and gives the attempt back.
			return has(stmts, "SELECT id, claims, queue, holds_slot") && lostRelease.CompareAndSwap(false, true)
		}
		res, err := client.Enqueue(context.Background(), connJob{N: 1})
		require.NoError(t, err)
		var mu sync.Mutex
		var outcomes []jobs.Outcome
		w, err := jobs.NewWorker(testdb.Public(s), h.reg, jobs.WorkerConfig{Clock: h.clock, Logger: quiet(), PollInterval: time.Hour,
			Hooks: jobs.Hooks{OnFinish: func(e jobs.FinishEvent) { mu.Lock(); outcomes = append(outcomes, e.Outcome); mu.Unlock() }}})
		require.NoError(t, err)
		stop := h.run(w)
		<-started
		stopPastItsTimeout(h, stop)
		require.True(t, lostRelease.Load(), "the release's reply was lost")
		j := h.job(res.ID)
		require.Equal(t, engine.StateReady, j.State)
		require.Equal(t, 0, j.Attempt, "the attempt given back")
		mu.Lock()
		require.Equal(t, []jobs.Outcome{jobs.OutcomeReleased}, outcomes)
		mu.Unlock()
		require.Equal(t, 1, h.drain(jobs.WorkerConfig{}).Completed)
	})
}

type connRated struct{ N int }

func (connRated) Kind() string { return "conn_rated" }

// guarantees.md, "A claim whose outcome is unknown ... leaves no job
// behind", for a claim that decides rate limits (on PostgreSQL its writes
// and COMMIT go in one pipelined round trip, which this wrapper keeps, and
// lost_runs_test.go's does not): the claim's commit lands (its jobs
// running, the budget charged) and its reply is lost. Holds: the worker
// releases the jobs, and every one runs once, at the limit's pace.
func TestReviewConnLossALostRateLimitedClaimRunsEveryJobOnce(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		var mu sync.Mutex
		runs := map[int]int{}
		require.NoError(t, jobs.Register(h.reg, func(_ context.Context, j *jobs.Job[connRated]) error {
			mu.Lock()
			runs[j.Args.N]++
			mu.Unlock()
			return nil
		}, jobs.RateLimit(ratelimit.Limit[connRated]{To: 2, Per: time.Second, Burst: 2, Key: "global"})))
		s, db, client := lossStore(h)
		var fired atomic.Bool
		db.loseReply = func(stmts []string) bool {
			return has(stmts, markRunning) && fired.CompareAndSwap(false, true)
		}
		for n := 1; n <= 4; n++ {
			_, err := client.Enqueue(context.Background(), connRated{N: n})
			require.NoError(t, err)
		}
		w, err := jobs.NewWorker(testdb.Public(s), h.reg, jobs.WorkerConfig{Clock: h.clock, Logger: quiet(), PollInterval: 100 * time.Millisecond})
		require.NoError(t, err)
		stop := h.run(w)
		ran := func() int { mu.Lock(); defer mu.Unlock(); return len(runs) }
		waitFor(t, h, 100*time.Millisecond, func() bool { return ran() == 4 }, func() string {
			js, _ := h.store.ListJobs(context.Background(), engine.JobFilter{Limit: 10})
			var st []string
			for _, j := range js {
				st = append(st, fmt.Sprintf("%d:%s", j.ID, j.State))
			}
			return fmt.Sprintf("%d of 4 jobs ran; jobs %v", ran(), st)
		})
		stop()
		require.True(t, fired.Load(), "the claim's reply was lost")
		mu.Lock()
		defer mu.Unlock()
		require.Equal(t, map[int]int{1: 1, 2: 1, 3: 1, 4: 1}, runs)
	})
}
