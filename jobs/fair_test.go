package jobs_test

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
	"github.com/sluicequeue/sluice/jobs"
)

type tenantJob struct {
	Tenant string
	Plan   int
}

func (tenantJob) Kind() string { return "tenant_job" }

type anyKeyJob struct{ Key any }

func (anyKeyJob) Kind() string { return "any_key" }

func TestFairRegistrationRefusesBadDeclarations(t *testing.T) {
	byTenant := func(a tenantJob) any { return a.Tenant }
	for _, c := range []struct {
		opts []jobs.RegisterOption
		want string
	}{
		{[]jobs.RegisterOption{jobs.Fair[tenantJob](nil)}, "Fair: the key function is nil"},
		{[]jobs.RegisterOption{jobs.Fair(byTenant), jobs.FairWeight[tenantJob](nil)}, "FairWeight: the weight function is nil"},
		{[]jobs.RegisterOption{jobs.FairWeight(func(tenantJob) int { return 1 })}, "FairWeight needs Fair"},
		{[]jobs.RegisterOption{jobs.Fair(byTenant), jobs.Fair(byTenant)}, "Fair is declared more than once"},
		{[]jobs.RegisterOption{jobs.Fair(func(noop) any { return 1 })}, "Fair: declared as func(jobs_test.noop) interface {}, but the kind's args are jobs_test.tenantJob"},
	} {
		err := jobs.Register(jobs.NewRegistry(), func(context.Context, *jobs.Job[tenantJob]) error { return nil }, c.opts...)
		require.ErrorContains(t, err, "jobs: register tenant_job: ")
		require.ErrorContains(t, err, c.want)
	}
}

func TestFairEnqueueRefusesBadKeysAndWeights(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		require.NoError(t, jobs.Register(h.reg, func(context.Context, *jobs.Job[anyKeyJob]) error { return nil },
			jobs.Fair(func(a anyKeyJob) any { return a.Key })))
		require.NoError(t, jobs.Register(h.reg, func(context.Context, *jobs.Job[tenantJob]) error { return nil },
			jobs.Fair(func(a tenantJob) any { return a.Tenant }), jobs.FairWeight(func(a tenantJob) int { return a.Plan })))
		ctx := context.Background()
		for _, c := range []struct {
			args jobs.Args
			want string
		}{
			{anyKeyJob{Key: 1.5}, "any_key: Fair returned a float64; a fairness key is a string or an integer"},
			{anyKeyJob{Key: nil}, "any_key: Fair returned nil"},
			{anyKeyJob{Key: ""}, "any_key: Fair returned an empty key"},
			{anyKeyJob{Key: strings.Repeat("k", 256)}, "any_key: fairness key"},
			{tenantJob{Tenant: "a", Plan: 0}, `tenant_job: fairness key "a": FairWeight returned 0; a weight must be between 1 and 1048576`},
			{tenantJob{Tenant: "a", Plan: jobs.MaxFairWeight + 1}, "FairWeight returned 1048577"},
		} {
			_, err := h.client.Enqueue(ctx, c.args)
			require.ErrorContains(t, err, c.want)
		}
		// Integers of any size are keys.
		for _, k := range []any{int8(-3), uint64(1 << 63), 42} {
			_, err := h.client.Enqueue(ctx, anyKeyJob{Key: k})
			require.NoError(t, err)
		}
	})
}

func TestFairWorkerRunsEveryKeyInTurn(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		var mu sync.Mutex
		var ran []string
		require.NoError(t, jobs.Register(h.reg, func(_ context.Context, j *jobs.Job[tenantJob]) error {
			mu.Lock()
			ran = append(ran, j.Args.Tenant)
			mu.Unlock()
			return nil
		}, jobs.Fair(func(a tenantJob) any { return a.Tenant }), jobs.FairWeight(func(a tenantJob) int { return a.Plan })))
		items := make([]jobs.Item, 0, 30)
		for range 20 {
			items = append(items, jobs.Item{Args: tenantJob{Tenant: "big", Plan: 1}})
		}
		for range 10 {
			items = append(items, jobs.Item{Args: tenantJob{Tenant: "paid", Plan: 2}})
		}
		_, err := h.client.EnqueueMany(context.Background(), items)
		require.NoError(t, err)
		res := h.drain(jobs.WorkerConfig{Concurrency: 3})
		require.Equal(t, 30, res.Completed)
		// Each claim of 3 takes one of big's and two of paid's (weight 2)
		// while both have work.
		for i := 0; i < 15; i += 3 {
			require.ElementsMatch(t, []string{"big", "paid", "paid"}, ran[i:i+3], "claim %d: %q", i/3, ran)
		}
	})
}

// A worker with no fair kind touches no fairness key; its claims read the
// fair stream only as they read the rate-limited one, in the claims that
// look for a removed declaration's leftovers (at start, and once a
// PollInterval): one read of the ready fair index in the claim's round
// trip (TestRemovingFairLetsTheKindsFairJobsRun).
func TestNoFairKindMeansNoFairStatement(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		for _, q := range plainWorkerStatements(t, s) {
			require.NotContains(t, q, "sluice_fair_keys")
			if strings.Contains(q, "fair_start") {
				require.Contains(t, q, "ORDER BY priority, fair_start, id LIMIT", "only the ready fair stream's read")
			}
		}
	})
}
