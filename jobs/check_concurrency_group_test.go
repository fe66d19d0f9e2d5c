package jobs_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/concurrency"
	"github.com/sluicequeue/sluice/internal/testdb"
	"github.com/sluicequeue/sluice/jobs"
)

type groupedExportA struct{ Tenant string }

func (groupedExportA) Kind() string { return "grouped_export_a" }

type groupedExportB struct{ Tenant string }

func (groupedExportB) Kind() string { return "grouped_export_b" }

// rate-limits.md, "Checks": "W005 | kinds of one concurrency group declare
// different To; the key's limit is the To of the kind enqueued last".
func TestCheckWarnsOfAConcurrencyGroupWithDifferentTo(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		tenant := func(a groupedExportA) any { return a.Tenant }
		require.NoError(t, jobs.Register(h.reg, func(context.Context, *jobs.Job[groupedExportA]) error { return nil },
			jobs.ConcurrencyLimit(concurrency.Limit[groupedExportA]{To: 1, Group: "exports", Key: tenant})))
		require.NoError(t, jobs.Register(h.reg, func(context.Context, *jobs.Job[groupedExportB]) error { return nil },
			jobs.ConcurrencyLimit(concurrency.Limit[groupedExportB]{To: 3, Group: "exports", Key: func(b groupedExportB) any { return b.Tenant }})))
		findings, err := jobs.Check(context.Background(), h.reg, testdb.Public(h.store))
		require.NoError(t, err)
		var w005 []string
		for _, f := range findings {
			if f.Code == jobs.CodeConcurrencyGroupMismatch {
				w005 = append(w005, f.String())
			}
		}
		require.Len(t, w005, 1, "%v", findings)
		require.Contains(t, w005[0], "W005 warning: concurrency group exports is declared with different limits")
		require.Contains(t, w005[0], "grouped_export_a: To 1")
		require.Contains(t, w005[0], "grouped_export_b: To 3")

		// Kinds of one group that agree are not reported.
		reg := jobs.NewRegistry()
		require.NoError(t, jobs.Register(reg, func(context.Context, *jobs.Job[groupedExportA]) error { return nil },
			jobs.ConcurrencyLimit(concurrency.Limit[groupedExportA]{To: 2, Group: "exports", Key: tenant})))
		require.NoError(t, jobs.Register(reg, func(context.Context, *jobs.Job[groupedExportB]) error { return nil },
			jobs.ConcurrencyLimit(concurrency.Limit[groupedExportB]{To: 2, Group: "exports", Key: func(b groupedExportB) any { return b.Tenant }})))
		findings, err = jobs.Check(context.Background(), reg, testdb.Public(h.store))
		require.NoError(t, err)
		for _, f := range findings {
			require.NotEqual(t, jobs.CodeConcurrencyGroupMismatch, f.Code, f.String())
		}
	})
}
