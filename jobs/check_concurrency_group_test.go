package jobs_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/concurrency"
	"github.com/sluicequeue/sluice/internal/testdb"
	"github.com/sluicequeue/sluice/jobs"
)

type groupedExportA struct{ Tenant string }

func (groupedExportA) Kind() string { return "grouped_export_a" }

type groupedExportB struct{ Tenant string }

func (groupedExportB) Kind() string { return "grouped_export_b" }

// checkW005 returns the W005 findings of Check on reg.
func checkW005(t *testing.T, h *harness, reg *jobs.Registry) []string {
	t.Helper()
	findings, err := jobs.Check(context.Background(), reg, testdb.Public(h.store))
	require.NoError(t, err)
	var w005 []string
	for _, f := range findings {
		if f.Code == jobs.CodeConcurrencyGroupMismatch {
			w005 = append(w005, f.String())
		}
	}
	return w005
}

// rate-limits.md, "Checks": "W005 | kinds of one concurrency group declare
// different limits (To or Duration)".
func TestCheckWarnsOfAConcurrencyGroupWithDifferentTo(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		tenant := func(a groupedExportA) any { return a.Tenant }
		require.NoError(t, jobs.Register(h.reg, func(context.Context, *jobs.Job[groupedExportA]) error { return nil },
			jobs.ConcurrencyLimit(concurrency.Limit[groupedExportA]{To: 1, Group: "exports", Key: tenant})))
		require.NoError(t, jobs.Register(h.reg, func(context.Context, *jobs.Job[groupedExportB]) error { return nil },
			jobs.ConcurrencyLimit(concurrency.Limit[groupedExportB]{To: 3, Group: "exports", Key: func(b groupedExportB) any { return b.Tenant }})))
		w005 := checkW005(t, h, h.reg)
		require.Len(t, w005, 1)
		require.Contains(t, w005[0], "W005 warning: concurrency group exports is declared with different limits")
		require.Contains(t, w005[0], "grouped_export_a: To 1, Duration 3m0s")
		require.Contains(t, w005[0], "grouped_export_b: To 3, Duration 3m0s")

		// Kinds of one group that agree are not reported.
		reg := jobs.NewRegistry()
		require.NoError(t, jobs.Register(reg, func(context.Context, *jobs.Job[groupedExportA]) error { return nil },
			jobs.ConcurrencyLimit(concurrency.Limit[groupedExportA]{To: 2, Group: "exports", Key: tenant})))
		require.NoError(t, jobs.Register(reg, func(context.Context, *jobs.Job[groupedExportB]) error { return nil },
			jobs.ConcurrencyLimit(concurrency.Limit[groupedExportB]{To: 2, Group: "exports", Key: func(b groupedExportB) any { return b.Tenant }})))
		require.Empty(t, checkW005(t, h, reg))
	})
}

// rate-limits.md, "Checks": W005 reports the kinds of a concurrency group
// that share To and differ in Duration, naming both: a semaphore records
// both, so each enqueue declares its own kind's Duration, and a worker's
// start leaves such a group to its enqueues (docs/concurrency.md), with a
// warning that points to W005. Before, W005 compared To alone, and `sluice
// check` reported nothing for a group every start skipped.
func TestCheckWarnsOfAConcurrencyGroupWithDifferentDurationThatAStartSkips(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		require.NoError(t, jobs.Declare[groupedExportA](h.reg, jobs.ConcurrencyLimit(concurrency.Limit[groupedExportA]{To: 1, Group: "exports", Key: "t"})))
		h.enqueue(groupedExportA{})
		require.Equal(t, 1, semaphoreOf(t, h, "exports/t").Limit)

		reg := jobs.NewRegistry()
		require.NoError(t, jobs.Declare[groupedExportA](reg, jobs.ConcurrencyLimit(concurrency.Limit[groupedExportA]{To: 3, Duration: time.Minute, Group: "exports", Key: "t"})))
		require.NoError(t, jobs.Declare[groupedExportB](reg, jobs.ConcurrencyLimit(concurrency.Limit[groupedExportB]{To: 3, Duration: 2 * time.Minute, Group: "exports", Key: "t"})))
		w005 := checkW005(t, h, reg)
		require.Len(t, w005, 1)
		require.Contains(t, w005[0], "concurrency group exports is declared with different limits")
		require.Contains(t, w005[0], "grouped_export_a: To 3, Duration 1m0s")
		require.Contains(t, w005[0], "grouped_export_b: To 3, Duration 2m0s")

		w, err := jobs.NewWorker(testdb.Public(h.store), reg, jobs.WorkerConfig{Clock: h.clock, Logger: quiet(), Queues: []string{"elsewhere"}})
		require.NoError(t, err)
		_, err = w.Drain(ctx)
		require.NoError(t, err)
		require.Equal(t, 1, semaphoreOf(t, h, "exports/t").Limit, "the group W005 reports is the one the start leaves alone")
	})
}
