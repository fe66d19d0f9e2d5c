package engine_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
)

// Explain's counts of the parked and blocked jobs ahead of one read the
// jobs through the index of their state and key, the paused-queue check
// (JobQueueNotPaused) beside it, as the statements that hand out slots do:
// an explain of a job behind a large backlog reads at most the jobs it
// counts, never the table.
func TestExplainCountsOfJobsAheadReadThroughTheirIndexes(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		d, ok := s.Dialect().(engine.DashboardDialect)
		require.True(t, ok)
		// A backlog of ready jobs, and 200 of a concurrency key, one
		// holding its slot and the others blocked (half of them fair).
		many := make([]engine.NewJob, 2000)
		for i := range many {
			many[i] = job("p", "default", 0)
		}
		enqueue(t, s, t0, many...)
		keyed := make([]engine.NewJob, 200)
		for i := range keyed {
			keyed[i] = job("p", "default", 0)
			if i%2 == 0 {
				keyed[i] = fairJob(fmt.Sprintf("k%02d", i%20), 1)
			}
			keyed[i].Conc = &engine.Conc{Key: "export/global", To: 1, Duration: time.Hour}
			keyed[i].Priority = i % 3
		}
		ids := enqueue(t, s, t0, keyed...)
		name := s.Dialect().Name()
		check := func(index string, stmts map[string]func() (string, []any)) {
			t.Helper()
			for stmt, via := range plansOf(t, s, stmts) {
				t.Logf("%s: %s: %v", name, stmt, via)
				require.NotEmpty(t, via, "%s: %s reads sluice_jobs", name, stmt)
				for _, v := range via {
					if v != "primary key" { // the job itself (me)
						require.Contains(t, v, index, "%s: %s", name, stmt)
					}
				}
			}
		}
		target := ids[len(ids)-1]
		check("sluice_jobs_blocked", map[string]func() (string, []any){
			"BlockedAhead": func() (string, []any) {
				return d.BlockedAhead("export/global", "default", 1, target, engine.MaxAhead+1)
			},
		})

		// The same jobs parked on a budget instead.
		_, err := s.DB().Exec(ctx, "UPDATE sluice_jobs SET state = 'parked', wait_key = 'api/global', conc_key = NULL, holds_slot = "+
			map[bool]string{true: "FALSE", false: "0"}[name == "postgres"]+" WHERE conc_key IS NOT NULL")
		require.NoError(t, err)
		check("sluice_jobs_parked", map[string]func() (string, []any){
			"ParkedAhead": func() (string, []any) { return d.ParkedAhead("api/global", "default", 1, target, engine.MaxAhead+1) },
		})
	})
}
