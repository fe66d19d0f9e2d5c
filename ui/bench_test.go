package ui_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
	"github.com/sluicequeue/sluice/ui"
)

// benchSizes are the rows BenchmarkDashboardPages fills:
// SLUICE_BENCH_FINISHED finished jobs (default 1,000,000) and
// SLUICE_BENCH_WAITING waiting ones (default 100,000).
func benchSizes() (finished, waiting int) {
	finished, waiting = 1_000_000, 100_000
	if v, err := strconv.Atoi(os.Getenv("SLUICE_BENCH_FINISHED")); err == nil && v > 0 {
		finished = v
	}
	if v, err := strconv.Atoi(os.Getenv("SLUICE_BENCH_WAITING")); err == nil && v > 0 {
		waiting = v
	}
	return finished, waiting
}

// seq returns a FROM clause that yields g = 1..n on the dialect: a
// series on PostgreSQL, a thousand-row recursive CTE joined with itself
// elsewhere (within MySQL's default recursion depth).
func seq(dialect string, n int) string {
	if dialect == "postgres" {
		return fmt.Sprintf("generate_series(1::bigint, %d) AS s(g)", n)
	}
	return fmt.Sprintf(`(SELECT (a.g - 1) * 1000 + b.g AS g FROM
  (WITH RECURSIVE k(g) AS (SELECT 1 UNION ALL SELECT g + 1 FROM k WHERE g < 1000) SELECT g FROM k) a,
  (WITH RECURSIVE k(g) AS (SELECT 1 UNION ALL SELECT g + 1 FROM k WHERE g < 1000) SELECT g FROM k) b) s
WHERE s.g <= %d`, n)
}

// fill inserts the benchmark's jobs in a few bulk statements: failed jobs
// (oldest ids), finished ones spread over the last day, then ready,
// scheduled and parked jobs on one budget.
func fill(b *testing.B, s *engine.Store, now time.Time, finished, waiting int) {
	ctx := context.Background()
	d := s.Dialect().Name()
	us := engine.Micros(now)
	cols := `INSERT INTO sluice_jobs (kind, queue, priority, state, args, attempt, max_attempts, created_at, run_at, attempted_at, finished_at, rate_keys, wait_key, last_error) `
	day := int64(86_400_000_000)
	failed := waiting / 20
	ready, scheduled := waiting/2, waiting*3/10
	parked := waiting - ready - scheduled
	stmts := []string{
		cols + fmt.Sprintf(`SELECT 'bench', 'default', 0, 'failed', '{}', 25, 25, %[1]d - g, %[1]d - g, %[1]d - g, %[1]d - g, NULL, NULL, 'boom' FROM %[2]s`, us-day, seq(d, failed)),
		cols + fmt.Sprintf(`SELECT 'bench', 'default', 0, 'completed', '{}', 1, 25, %[1]d - (%[2]d - g) * %[3]d, %[1]d - (%[2]d - g) * %[3]d, %[1]d - (%[2]d - g) * %[3]d, %[1]d - (%[2]d - g) * %[3]d + 1000, NULL, NULL, NULL FROM %[4]s`,
			us, finished, day/int64(finished), seq(d, finished)),
		cols + fmt.Sprintf(`SELECT 'bench', 'default', 0, 'ready', '{}', 0, 25, %[1]d, %[1]d, NULL, NULL, NULL, NULL, NULL FROM %[2]s`, us, seq(d, ready)),
		cols + fmt.Sprintf(`SELECT 'bench', 'default', 0, 'scheduled', '{}', 0, 25, %[1]d, %[1]d + g * 10000, NULL, NULL, 'bench/global', 'bench/global', NULL FROM %[2]s`, us, seq(d, scheduled)),
		cols + fmt.Sprintf(`SELECT 'bench', 'default', 0, 'parked', '{}', 0, 25, %[1]d, %[1]d, NULL, NULL, 'bench/global', 'bench/global', NULL FROM %[2]s`, us, seq(d, parked)),
		fmt.Sprintf(`INSERT INTO sluice_budgets (name, tat_ns, next_slot_ns, interval_ns, burst, parked, updated_at) VALUES ('bench/global', %d, %d, 10000000, 1, %d, %d)`,
			(us+10_000)*1000, (us+int64(scheduled)*10_000)*1000, parked, us),
	}
	switch d {
	case "postgres":
		// VACUUM too: a table just filled has no visibility map and no hint
		// bits, which the first reads would otherwise set while timed.
		stmts = append(stmts, `VACUUM ANALYZE sluice_jobs`, `ANALYZE sluice_budgets`)
	case "mysql":
		stmts = append(stmts, `ANALYZE TABLE sluice_jobs`, `ANALYZE TABLE sluice_budgets`)
	default:
		stmts = append(stmts, `ANALYZE`)
	}
	start := time.Now()
	for _, q := range stmts {
		var err error
		if alone, ok := s.DB().(interface {
			ExecAlone(context.Context, string) error
		}); ok && strings.HasPrefix(q, "VACUUM") {
			err = alone.ExecAlone(ctx, q) // VACUUM runs in no transaction
		} else {
			_, err = s.DB().Exec(ctx, q)
		}
		if err != nil {
			b.Fatalf("fill %s: %v\n%s", d, err, q)
		}
	}
	b.Logf("%s: filled %d finished, %d failed and %d waiting jobs in %s", d, finished, failed, waiting, time.Since(start).Round(time.Millisecond))
}

// BenchmarkDashboardPages renders each page over a table of 1,000,000
// finished and 100,000 waiting jobs (see benchSizes), on every database
// the run has. Run it alone, once:
//
//	go test ./ui -run '^$' -bench DashboardPages -benchtime 10x
func BenchmarkDashboardPages(b *testing.B) {
	finished, waiting := benchSizes()
	now := time.Now()
	for _, backend := range testdb.Backends(b) {
		b.Run(backend.Name, func(b *testing.B) {
			s := backend.Open(b)
			fill(b, s, now, finished, waiting)
			ctx := context.Background()
			deep, _, err := s.PageJobs(ctx, engine.JobPage{State: engine.StateParked, Limit: 1})
			if err != nil || len(deep) == 0 {
				b.Fatalf("no parked job: %v", err)
			}
			ready, _, err := s.PageJobs(ctx, engine.JobPage{State: engine.StateReady, Limit: 1})
			if err != nil || len(ready) == 0 {
				b.Fatalf("no ready job: %v", err)
			}
			h := ui.Handler(testdb.Public(s), nil, ui.Options{Now: func() time.Time { return now }, Logger: quiet()})
			pages := []string{"/", "/jobs", "/jobs?state=failed", "/jobs?state=ready", "/jobs?state=parked", "/jobs?kind=bench&state=completed",
				"/jobs?budget=bench%2Fglobal", "/jobs?state=completed&before=500000",
				"/jobs/" + strconv.FormatInt(deep[0].ID, 10), "/jobs/" + strconv.FormatInt(ready[0].ID, 10),
				"/budgets", "/budget?key=" + url.QueryEscape("bench/global"), "/concurrency", "/limits"}
			for _, p := range pages {
				b.Run(strings.TrimPrefix(p, "/"), func(b *testing.B) {
					h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, p, nil)) // warm the caches, untimed
					for b.Loop() {
						rec := httptest.NewRecorder()
						h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, p, nil))
						if rec.Code != http.StatusOK {
							b.Fatalf("%s: %d %s", p, rec.Code, rec.Body.String())
						}
					}
				})
			}
		})
	}
}
