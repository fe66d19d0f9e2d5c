package jobs_test

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"sync"
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
func TestKilledConnectionsLoseNoJob(t *testing.T) {
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
				k.app = "sluice_kill_" + strings.ReplaceAll(q.Get("search_path"), "\"", "")
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
			defer cancel()
			var wg sync.WaitGroup
			var started []func() int64 // each process's id, once it registered
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
				started = append(started, w.ProcessID)
			}
			d := newDispatcher(t, open(), dispatcher.Config{Interval: 20 * time.Millisecond, Logger: quiet()})
			wg.Add(1)
			go func() { defer wg.Done(); _ = d.Run(ctx) }()
			started = append(started, d.ProcessID)
			// The kills start once every process registered: a worker or a
			// dispatcher whose start-up (schema check, registration) is
			// killed returns its error and never runs.
			registered := func() bool {
				for _, pid := range started {
					if pid() == 0 {
						return false
					}
				}
				return true
			}
			for wait := time.Now().Add(time.Minute); !registered(); time.Sleep(5 * time.Millisecond) { // polling for a state, with a deadline
				if time.Now().After(wait) {
					cancel()
					wg.Wait()
					t.Fatal("the workers and the dispatcher did not start")
				}
			}

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
			// They are read through a pool opened now, which no kill
			// reached (s's idle connections may have been killed).
			check := testdb.Opener(t, base)()
			left := func() []string {
				var out []string
				js, err := check.ListJobs(context.Background(), engine.JobFilter{Limit: 10000})
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
			// A generous deadline (a busy CI machine): the loop ends as soon
			// as every job completed.
			var notDone []string
			settleFrom := time.Now()
			settle := settleFrom.Add(2 * time.Minute)
			for notDone = left(); (len(notDone) > 0 || !allRan()) && time.Now().Before(settle); notDone = left() {
				time.Sleep(20 * time.Millisecond) // polling for a state, with a deadline
			}
			t.Logf("%s: settled in %s", b.Name, time.Since(settleFrom).Round(time.Millisecond))
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
			sems, err := check.ListSemaphores(context.Background())
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
