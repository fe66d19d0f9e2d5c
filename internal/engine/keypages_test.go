package engine_test

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
)

// Budgets and concurrency keys are listed in keyset pages by name, each
// starting after the last name of the page before, with a count that
// stops at its bound and says so; one budget is read by its key, with
// the jobs waiting on it.
func TestBudgetsAndConcurrencyKeysArePagedByKey(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		names := []string{"k/c", "k/a", "k/e", "k/b", "k/d"}
		for _, insert := range []func([]string) (string, []any){s.SQL().InsertBudgets, s.SQL().InsertSemaphores} {
			q, args := insert([]string{"k/a", "k/b", "k/c", "k/d", "k/e"})
			_, err := s.DB().Exec(ctx, q, args...)
			require.NoError(t, err)
		}
		type page struct {
			names []string
			next  string
		}
		budgetPage := func(after string) page {
			bs, next, err := s.PageBudgets(ctx, engine.KeyPage{After: after, Limit: 2})
			require.NoError(t, err)
			p := page{next: next}
			for _, b := range bs {
				p.names = append(p.names, b.Name)
			}
			return p
		}
		semaphorePage := func(after string) page {
			ms, next, err := s.PageSemaphores(ctx, engine.KeyPage{After: after, Limit: 2})
			require.NoError(t, err)
			p := page{next: next}
			for _, m := range ms {
				p.names = append(p.names, m.Name)
			}
			return p
		}
		for what, read := range map[string]func(string) page{"budgets": budgetPage, "semaphores": semaphorePage} {
			require.Equal(t, page{[]string{"k/a", "k/b"}, "k/b"}, read(""), what)
			require.Equal(t, page{[]string{"k/c", "k/d"}, "k/d"}, read("k/b"), what)
			require.Equal(t, page{[]string{"k/e"}, ""}, read("k/d"), what)
			require.Equal(t, page{}, read("k/e"), what)
		}
		all, err := s.ListBudgets(ctx)
		require.NoError(t, err)
		require.Len(t, all, len(names), "every page")

		for what, count := range map[string]func(context.Context, int) (engine.Count, error){"budgets": s.CountBudgets, "semaphores": s.CountSemaphores} {
			n, err := count(ctx, 3)
			require.NoError(t, err)
			require.Equal(t, engine.Count{N: 3, Capped: true}, n, what)
			n, err = count(ctx, 5)
			require.NoError(t, err)
			require.Equal(t, engine.Count{N: 5}, n, what)
		}

		// One budget by its key, with the job parked on it.
		ids := enqueue(t, s, t0, limited("k", "k/c"), limited("k", "k/d"))
		_, err = s.DB().Exec(ctx, "UPDATE sluice_jobs SET state = 'parked', wait_key = rate_keys WHERE id = "+fmt.Sprint(ids[0]))
		require.NoError(t, err)
		b, found, err := s.BudgetWaiting(ctx, "k/c")
		require.NoError(t, err)
		require.True(t, found)
		require.Equal(t, "k/c", b.Name)
		require.Equal(t, 1, b.Waiting)
		b, found, err = s.BudgetWaiting(ctx, "k/none")
		require.NoError(t, err)
		require.False(t, found)
		require.Equal(t, engine.BudgetInfo{BudgetRow: engine.BudgetRow{Name: "k/none"}}, b)
	})
}

// A page of budgets or concurrency keys, and one budget, are read through
// the primary key of their table, never a scan of it, and the jobs
// waiting on each through an index of jobs by key.
func TestKeyPagesAndOneBudgetAreReadThroughTheirKeys(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		// Enough rows that no database reads the whole table instead.
		var keys []string
		for i := range 2000 {
			keys = append(keys, fmt.Sprintf("k/%04d", i))
		}
		for _, insert := range []func([]string) (string, []any){s.SQL().InsertBudgets, s.SQL().InsertSemaphores} {
			for i := 0; i < len(keys); i += 500 {
				q, args := insert(keys[i : i+500])
				_, err := s.DB().Exec(ctx, q, args...)
				require.NoError(t, err)
			}
		}
		many := make([]engine.NewJob, 2000)
		for i := range many {
			many[i] = job("k", "default", 0)
		}
		enqueue(t, s, t0, many...)
		name := s.Dialect().Name()
		q := s.SQL()
		byKey := func(table planTable, stmts map[string]func() (string, []any), equal bool) {
			t.Helper()
			for stmt, via := range tablePlans(t, s, table, stmts) {
				t.Logf("%s: %s: %s: %v", name, stmt, table.name, via)
				require.Len(t, via, 1, "%s: %s reads %s once", name, stmt, table.name)
				if equal || name == "mysql" { // MySQL's plan names the key, whether a range or one row
					require.Equal(t, "primary key", via[0], "%s: %s", name, stmt)
				} else {
					require.Regexp(t, table.name+`_pkey|sqlite_autoindex_`+table.name, via[0], "%s: %s", name, stmt)
				}
			}
		}
		byKey(planTable{"sluice_budgets", "b"}, map[string]func() (string, []any){
			"GetBudgetWaiting": func() (string, []any) { return q.GetBudgetWaiting("k/1000") },
		}, true)
		byKey(planTable{"sluice_budgets", "b"}, map[string]func() (string, []any){
			"PageBudgets": func() (string, []any) { return q.PageBudgets("k/1000", 51) },
		}, false)
		byKey(planTable{"sluice_semaphores", "s"}, map[string]func() (string, []any){
			"PageSemaphores": func() (string, []any) { return q.PageSemaphores("k/1000", 51) },
		}, false)
		for stmt, via := range plansOf(t, s, map[string]func() (string, []any){
			"GetBudgetWaiting": func() (string, []any) { return q.GetBudgetWaiting("k/1000") },
			"PageBudgets":      func() (string, []any) { return q.PageBudgets("k/1000", 51) },
			"PageSemaphores":   func() (string, []any) { return q.PageSemaphores("k/1000", 51) },
		}) {
			t.Logf("%s: %s: sluice_jobs: %v", name, stmt, via)
			require.NotEmpty(t, via, "%s: %s counts jobs", name, stmt)
			for _, v := range via {
				require.Regexp(t, `sluice_jobs_(waiting|blocked|holding|conc)`, v, "%s: %s reads jobs through their key", name, stmt)
			}
		}

		// One budget's admissions: the jobs claimed in the window, through
		// the indexes of running and finished jobs, whatever their keys.
		d := s.Dialect().(engine.DashboardDialect)
		for stmt, via := range plansOf(t, s, map[string]func() (string, []any){
			"AdmittedSince": func() (string, []any) { return d.AdmittedSince("k/1000", engine.Micros(t0), 100000) },
		}) {
			t.Logf("%s: %s: sluice_jobs: %v", name, stmt, via)
			require.Len(t, via, 3, "%s: %s reads running, finished and failed jobs", name, stmt)
			for _, v := range via {
				require.Regexp(t, `sluice_jobs_(finished|failed|running|done)`, v, "%s: %s", name, stmt)
			}
		}
	})
}

// The admissions of one budget are picked out by the database: the jobs
// that carry its key (alone, among others, or with a cost), not a key
// that starts or ends like it or differs in case, and one row besides at
// most; the read stays bounded by its limit of jobs of every key, and
// says when it reached it even when none of them carries the key.
func TestTheAdmissionsOfOneBudgetAreItsOwn(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		pid := register(t, s, t0)
		with := func(keys ...engine.RateKey) engine.NewJob {
			j := job("k", "default", 0)
			j.RateKeys = keys
			return j
		}
		enqueue(t, s, t0,
			with(engine.RateKey{Key: "sync/a", Cost: 1}),
			with(engine.RateKey{Key: "sync/a", Cost: 3}),
			with(engine.RateKey{Key: "other/x", Cost: 1}, engine.RateKey{Key: "sync/a", Cost: 1}),
			with(engine.RateKey{Key: "sync/ab", Cost: 1}),
			with(engine.RateKey{Key: "xsync/a", Cost: 1}),
			with(engine.RateKey{Key: "SYNC/a", Cost: 1}),
			with(engine.RateKey{Key: "other/y", Cost: 2}))
		lim := limits{}
		for _, scope := range []string{"sync", "other", "xsync", "SYNC"} {
			lim[scope] = spec(t, scope, 100, time.Minute, 100)
		}
		at := t0.Add(time.Second)
		require.Len(t, claimLimited(t, s, pid, at, 10, lim, 0, "default").Jobs, 7)

		adm, capped, err := s.AdmissionsSince(ctx, "sync/a", t0, 100)
		require.NoError(t, err)
		require.False(t, capped)
		require.Equal(t, map[string][]time.Time{"sync/a": {at, at, at, at, at}}, adm, "1 + 3 + 1")
		all, _, err := s.AdmissionsSince(ctx, "", t0, 100)
		require.NoError(t, err)
		require.Len(t, all, 6, "every key")

		d := s.Dialect().(engine.DashboardDialect)
		text, args := d.AdmittedSince("sync/a", engine.Micros(t0), 100)
		rows, err := s.DB().Query(ctx, text, args...)
		require.NoError(t, err)
		var got []string
		for rows.Next() {
			var keys string
			var claimed, read int64
			require.NoError(t, rows.Scan(&keys, &claimed, &read))
			require.Equal(t, int64(7), read, "the jobs read")
			got = append(got, strings.ReplaceAll(keys, "\n", " "))
		}
		require.NoError(t, rows.Err())
		rows.Close()
		require.LessOrEqual(t, len(got), 4, "the three jobs of sync/a and one other at most: %q", got)

		adm, capped, err = s.AdmissionsSince(ctx, "nobody/x", t0, 3)
		require.NoError(t, err)
		require.True(t, capped, "3 jobs of other keys read, and more claimed")
		require.Empty(t, adm)
		_, capped, err = s.AdmissionsSince(ctx, "nobody/x", t0, 8)
		require.NoError(t, err)
		require.False(t, capped)
	})
}

// A page that asks for more than MaxPageSize holds that many at most: a
// Limit of math.MaxInt used to overflow the one more row a page reads to
// a negative LIMIT, which PostgreSQL and MySQL refuse.
func TestAPageOfAnyLimitIsReadWithinMaxPageSize(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		for _, insert := range []func([]string) (string, []any){s.SQL().InsertBudgets, s.SQL().InsertSemaphores} {
			q, args := insert([]string{"k/a", "k/b", "k/c"})
			_, err := s.DB().Exec(ctx, q, args...)
			require.NoError(t, err)
		}
		enqueue(t, s, t0, job("k", "default", 0), job("k", "default", 0))
		for _, limit := range []int{math.MaxInt, engine.MaxPageSize + 1} {
			bs, next, err := s.PageBudgets(ctx, engine.KeyPage{Limit: limit})
			require.NoError(t, err)
			require.Len(t, bs, 3)
			require.Empty(t, next)
			ms, next, err := s.PageSemaphores(ctx, engine.KeyPage{Limit: limit})
			require.NoError(t, err)
			require.Len(t, ms, 3)
			require.Empty(t, next)
			js, before, err := s.PageJobs(ctx, engine.JobPage{Limit: limit})
			require.NoError(t, err)
			require.Len(t, js, 2)
			require.Zero(t, before)
		}
	})
}
