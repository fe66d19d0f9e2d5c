package engine_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/clock"
	"github.com/sluicequeue/sluice/coalesce"
	"github.com/sluicequeue/sluice/concurrency"
	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
	"github.com/sluicequeue/sluice/jobs"
	"github.com/sluicequeue/sluice/ratelimit"
)

// Kinds of job that populate enqueues, one per kind of limit.

type rtCharge struct{ Account int }

func (rtCharge) Kind() string { return "rt_charge" }

type rtPing struct{ N int }

func (rtPing) Kind() string { return "rt_ping" }

type rtRefresh struct{ Shop int }

func (rtRefresh) Kind() string { return "rt_refresh" }

type rtFair struct{ Tenant string }

func (rtFair) Kind() string { return "rt_fair" }

type rtFairCharge struct{ Tenant string }

func (rtFairCharge) Kind() string { return "rt_fair_charge" }

// populate fills every table of the schema: jobs in every state (ready,
// scheduled, parked with and without a fair key, blocked, running, failed,
// completed, cancelled), with rate keys, concurrency keys, coalesce keys,
// fair keys, metadata and attempts; budgets, semaphores, fair keys, a limit override, a recurring
// tick, a paused queue and a live process. It returns the ids of the jobs.
func populate(t *testing.T, s *engine.Store) []int64 {
	t.Helper()
	ctx := context.Background()
	c := clock.NewFake(t0)
	pub := testdb.Public(s)
	reg := jobs.NewRegistry()
	require.NoError(t, jobs.Register(reg, func(context.Context, *jobs.Job[rtCharge]) error { return nil },
		jobs.RateLimit(ratelimit.Limit[rtCharge]{To: 1, Per: time.Hour, Key: "global", Group: "Stripe"})))
	require.NoError(t, jobs.Register(reg, func(_ context.Context, j *jobs.Job[rtPing]) error {
		if j.Args.N == 0 {
			return errors.New("nope")
		}
		return nil
	}, jobs.ConcurrencyLimit(concurrency.Limit[rtPing]{Key: "one"}), jobs.MaxAttempts(1)))
	require.NoError(t, jobs.Register(reg, func(context.Context, *jobs.Job[rtRefresh]) error { return nil },
		jobs.Coalesce(coalesce.Rule[rtRefresh]{Key: func(r rtRefresh) any { return r.Shop }}), jobs.Queue("other")))
	require.NoError(t, jobs.Register(reg, func(context.Context, *jobs.Job[rtFair]) error { return nil },
		jobs.Fair(func(f rtFair) any { return f.Tenant }), jobs.Queue("fair")))
	require.NoError(t, jobs.Register(reg, func(context.Context, *jobs.Job[rtFairCharge]) error { return nil },
		jobs.Fair(func(f rtFairCharge) any { return f.Tenant }),
		jobs.RateLimit(ratelimit.Limit[rtFairCharge]{To: 1, Per: time.Hour, Key: "global", Group: "Stripe"})))
	client := jobs.NewClient(pub, reg, jobs.ClientConfig{Clock: c})
	var ids []int64
	add := func(a jobs.Args, opts ...jobs.EnqueueOption) int64 {
		r, err := client.Enqueue(ctx, a, opts...)
		require.NoError(t, err)
		ids = append(ids, r.ID)
		return r.ID
	}
	meta := jobs.WithMetadata(map[string]string{"tenant": "acme"})
	add(rtCharge{1}, meta)
	add(rtCharge{2})
	add(rtCharge{3})
	add(rtPing{N: 0})
	add(rtPing{N: 1})
	add(rtRefresh{Shop: 1})
	add(rtRefresh{Shop: 1})
	add(rtRefresh{Shop: 2}, jobs.RunAt(t0.Add(time.Hour)))
	for i := range 3 {
		add(rtFair{Tenant: fmt.Sprint("t", i%2)})
		add(rtFairCharge{Tenant: fmt.Sprint("t", i%2)}) // parked beside rtCharge's jobs
	}
	w, err := jobs.NewWorker(pub, reg, jobs.WorkerConfig{Clock: c, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Queues: []string{"default", "other"}})
	require.NoError(t, err)
	_, err = w.Drain(ctx)
	require.NoError(t, err)
	parked, err := s.ListJobs(ctx, engine.JobFilter{State: engine.StateParked, Kind: "rt_fair_charge"})
	require.NoError(t, err)
	require.NotEmpty(t, parked, "fair jobs parked on Stripe/global")
	// More work left behind: ready, blocked, scheduled, cancelled, running.
	add(rtPing{N: 2})
	add(rtPing{N: 3})
	add(rtRefresh{Shop: 3}, meta)
	cancelMe := add(rtRefresh{Shop: 4})
	_, err = s.CancelJobs(ctx, engine.At(t0), []int64{cancelMe}, "round trip")
	require.NoError(t, err)
	pid := register(t, s, t0)
	claim(t, s, pid, t0, 1, "other")

	require.NoError(t, s.SetOverride(ctx, engine.Override{Target: "Stripe", To: 5, Per: time.Minute}, t0))
	_, err = s.RunTick(ctx, "roundtrip_task", t0, t0, nil)
	require.NoError(t, err)
	require.NoError(t, s.PauseQueue(ctx, "paused", t0))
	return ids
}

// snapshot is what a round trip of migrations must keep: each surviving
// job's state, kind, queue and attempt.
func snapshot(t *testing.T, s *engine.Store) map[int64]string {
	t.Helper()
	all, err := s.ListJobs(context.Background(), engine.JobFilter{Limit: 1000})
	require.NoError(t, err)
	out := map[int64]string{}
	for _, j := range all {
		out[j.ID] = fmt.Sprintf("%s %s %s attempt=%d", j.Kind, j.Queue, j.State, j.Attempt)
	}
	return out
}

// Every down migration works on a populated database, and going back up
// again keeps the jobs (only 001, which creates the jobs table, may drop
// them): an operator who rolls back a release and forward again loses no
// job. A walk reverts the migrations one at a time, each on the data the
// later ones' reverts left (as a rollback across releases has it), down to
// 001, and then applies them all again in one run; a run reverts several
// at once and goes up again; and one reverts them all. (Every down and up
// migration runs on a populated database, in 2N steps rather than the N²
// of a round trip from every level.)
func TestMigrateDownAndUpAgainWithDataInEveryTable(t *testing.T) {
	for _, b := range testdb.Backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			ctx := context.Background()
			all, err := b.OpenRaw(t).Migrations()
			require.NoError(t, err)
			latest := len(all)
			applied := func(t *testing.T, s *engine.Store, upTo int) {
				t.Helper()
				st, err := s.MigrationStatus(ctx)
				require.NoError(t, err)
				for _, m := range st {
					require.Equal(t, m.Version <= upTo, m.Applied, "status of %03d with %d applied", m.Version, upTo)
				}
			}
			upAgain := func(t *testing.T, s *engine.Store, before any) {
				t.Helper()
				_, err := s.MigrateUp(ctx, 0)
				require.NoError(t, err, "up again")
				require.NoError(t, s.CheckSchema(ctx))
				if before == nil {
					return // 001 dropped the jobs table
				}
				require.Equal(t, before, snapshot(t, s), "jobs after down and up again")
				// And the store still works.
				enqueue(t, s, at(time.Minute), job("a", "default", 0))
			}
			t.Run("walk", func(t *testing.T) {
				s := b.Open(t)
				populate(t, s)
				before := snapshot(t, s)
				require.NotEmpty(t, before)
				for v := latest; v > 1; v-- {
					reverted, err := s.MigrateDown(ctx, 1)
					require.NoError(t, err, "revert %03d of a populated database", v)
					require.Len(t, reverted, 1)
					require.Equal(t, v, reverted[0].Version)
					applied(t, s, v-1)
				}
				upAgain(t, s, before)
			})
			t.Run("several", func(t *testing.T) {
				s := b.Open(t)
				populate(t, s)
				before := snapshot(t, s)
				reverted, err := s.MigrateDown(ctx, 3)
				require.NoError(t, err)
				require.Len(t, reverted, 3)
				applied(t, s, latest-3)
				upAgain(t, s, before)
			})
			t.Run("all", func(t *testing.T) {
				s := b.Open(t)
				populate(t, s)
				reverted, err := s.MigrateDown(ctx, latest)
				require.NoError(t, err)
				require.Len(t, reverted, latest)
				applied(t, s, 0)
				upAgain(t, s, nil)
			})
		})
	}
}
