package jobs_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
	"github.com/sluicequeue/sluice/jobs"
	"github.com/sluicequeue/sluice/ratelimit"
)

// The app's code an enqueue calls before writing — a rate limit's key
// and Cost functions, a kind's Fair and FairWeight functions — may panic.
// A key function's panic failed the enqueue with an error naming it, but a
// panicking Cost, Fair or FairWeight reached the caller of Enqueue as a
// panic. Each fails the enqueue now with an error naming the kind and the
// function, before anything is written: in a batch, none of its jobs.

// touchy panics in whichever of its kind's functions Panic names.
type touchy struct {
	Panic string
	N     int
}

func (touchy) Kind() string { return "touchy" }

// badJSON's MarshalJSON panics: the args' own code, which no closer guard
// names.
type badJSON struct{}

func (badJSON) Kind() string { return "bad_json" }

func (badJSON) MarshalJSON() ([]byte, error) { panic("no JSON today") }

// jobCount counts the jobs in the store.
func jobCount(t *testing.T, s *engine.Store) int {
	t.Helper()
	rows, err := s.DB().Query(context.Background(), "SELECT COUNT(*) FROM sluice_jobs")
	require.NoError(t, err)
	defer rows.Close()
	require.True(t, rows.Next())
	var n int
	require.NoError(t, rows.Scan(&n))
	return n
}

func TestAPanicInAKindsFunctionFailsTheEnqueueWithAnError(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		maybe := func(a touchy, fn string) {
			if a.Panic == fn {
				panic(fn + " is broken")
			}
		}
		require.NoError(t, jobs.Register(h.reg, func(context.Context, *jobs.Job[touchy]) error { return nil },
			jobs.RateLimit(ratelimit.Limit[touchy]{To: 10, Per: time.Second, Burst: 10,
				Key:  func(a touchy) any { maybe(a, "key"); return a.N },
				Cost: func(a touchy) int { maybe(a, "cost"); return 1 }}),
			jobs.Fair(func(a touchy) any { maybe(a, "fair"); return a.N }),
			jobs.FairWeight(func(a touchy) int { maybe(a, "weight"); return 1 })))
		require.NoError(t, jobs.Declare[badJSON](h.reg))

		for _, c := range []struct {
			args jobs.Args
			want string
		}{
			{touchy{Panic: "key"}, "touchy: RateLimit.Key: key function panicked: key is broken"},
			{touchy{Panic: "cost"}, "touchy: rate limit touchy: RateLimit.Cost: cost function panicked: cost is broken"},
			{touchy{Panic: "fair"}, "touchy: Fair: key function panicked: fair is broken"},
			{touchy{Panic: "weight"}, `touchy: fairness key "0": FairWeight: weight function panicked: weight is broken`},
			{badJSON{}, "bad_json: the args' own code panicked while the job was prepared: no JSON today"},
		} {
			t.Run(c.want, func(t *testing.T) {
				var err error
				require.NotPanics(t, func() { _, err = h.client.Enqueue(ctx, c.args) })
				require.ErrorContains(t, err, "jobs: enqueue: "+c.want)
				require.NotPanics(t, func() { err = h.client.Check(jobs.Item{Args: c.args}) })
				require.ErrorContains(t, err, c.want)

				// In a batch, none of its jobs is written, and the error
				// names the item.
				items := []jobs.Item{{Args: touchy{N: 1}}, {Args: c.args}, {Args: touchy{N: 2}}}
				require.NotPanics(t, func() { _, err = h.client.EnqueueMany(ctx, items) })
				require.ErrorContains(t, err, "jobs: enqueue item 1: "+c.want)
				tx, commit, _ := callerTx(t, h.store)
				require.NotPanics(t, func() { _, err = h.client.EnqueueManyTx(ctx, tx, items) })
				require.ErrorContains(t, err, "jobs: enqueue item 1: "+c.want)
				commit()
				require.Zero(t, jobCount(t, h.store), "nothing is enqueued")
			})
		}
		// The same functions that do not panic enqueue.
		h.enqueue(touchy{N: 1})
		require.Equal(t, 1, jobCount(t, h.store))
	})
}

// ClientConfig.OnEnqueue runs once the jobs are written: one that panics
// reached the caller as a panic, after the jobs were committed (and, in
// the batch, kept the jobs after it from their calls). The enqueue returns
// its jobs now, with an error wrapping ErrOnEnqueuePanicked that names the
// kind, and every job still has its call. Within the caller's transaction,
// the caller rolls back, and nothing is enqueued.
func TestAPanicInOnEnqueueIsReturnedAsAnError(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		require.NoError(t, jobs.Declare[touchy](h.reg))
		var calls []int
		client := jobs.NewClient(testdb.Public(h.store), h.reg, jobs.ClientConfig{Clock: h.clock, OnEnqueue: func(e jobs.EnqueueEvent) {
			calls = append(calls, int(e.ID))
			if e.Kind == "touchy" && len(calls)%2 == 0 {
				panic("the metrics are not set up")
			}
		}})

		var res []jobs.Enqueued
		var err error
		items := []jobs.Item{{Args: touchy{N: 1}}, {Args: touchy{N: 2}}, {Args: touchy{N: 3}}}
		require.NotPanics(t, func() { res, err = client.EnqueueMany(ctx, items) })
		require.ErrorIs(t, err, jobs.ErrOnEnqueuePanicked)
		require.ErrorContains(t, err, "ClientConfig.OnEnqueue panicked for a job of kind touchy")
		require.ErrorContains(t, err, "the metrics are not set up")
		require.Len(t, res, 3, "the jobs were written, and are returned")
		require.Equal(t, []int{int(res[0].ID), int(res[1].ID), int(res[2].ID)}, calls, "every job has its call")
		require.Equal(t, 3, jobCount(t, h.store))

		calls = []int{0} // the next call panics
		var one jobs.Enqueued
		require.NotPanics(t, func() { one, err = client.Enqueue(ctx, touchy{N: 4}) })
		require.ErrorIs(t, err, jobs.ErrOnEnqueuePanicked)
		require.NotZero(t, one.ID, "the job is returned")
		require.Equal(t, engine.StateReady, one.State)

		calls = []int{0}
		tx, _, rollback := callerTx(t, h.store)
		require.NotPanics(t, func() { _, err = client.EnqueueTx(ctx, tx, touchy{N: 5}) })
		require.ErrorIs(t, err, jobs.ErrOnEnqueuePanicked)
		rollback()
		require.Equal(t, 4, jobCount(t, h.store), "the caller's transaction took the job with it")
	})
}
