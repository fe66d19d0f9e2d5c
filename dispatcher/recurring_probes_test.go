package dispatcher_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/clock"
	"github.com/sluicequeue/sluice/coalesce"
	"github.com/sluicequeue/sluice/dispatcher"
	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
	"github.com/sluicequeue/sluice/jobs"
)

// docs/recurring.md: "one that catches up after a long
// stall runs only the latest tick that has passed (if nobody ran it),
// never a backlog of them". A dispatcher stalled for an hour while
// another ran every tick enqueues nothing when it catches up, and the two
// go on sharing the ticks once each.
func TestAStalledDispatcherCatchingUpRunsNoTickAnotherRan(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		c := clock.NewFake(t0)
		client := jobs.NewClient(testdb.Public(s), registry(t), jobs.ClientConfig{Clock: c})
		cfg := dispatcher.Config{Clock: c, Logger: quiet(), Client: client,
			Tasks: []dispatcher.Task{{Key: "every-5m", Schedule: "*/5 * * * *", Args: report{}}}}
		live, stalled := newDispatcher(t, s, cfg), newDispatcher(t, s, cfg)
		for i := 0; i < 60; i++ {
			c.Advance(time.Minute)
			_, err := live.Tick(ctx)
			require.NoError(t, err)
		}
		require.Len(t, reports(t, s), 12)
		c.Advance(30 * time.Second)
		_, err := stalled.Tick(ctx)
		require.NoError(t, err)
		require.Len(t, reports(t, s), 12, "the stalled one's catch-up found the latest tick run")
		for i := 0; i < 10; i++ {
			c.Advance(time.Minute)
			for _, d := range []*dispatcher.Dispatcher{stalled, live} {
				_, err := d.Tick(ctx)
				require.NoError(t, err)
			}
		}
		require.Len(t, reports(t, s), 14)
	})
}

type digest struct{ Team string }

func (digest) Kind() string { return "digest" }

// A recurring task of a coalescing kind: a tick whose job
// is still pending from the last tick joins it (one pending job), and
// every tick is still recorded once, naming that job.
func TestATickOfACoalescingKindJoinsItsPendingJob(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		c := clock.NewFake(t0)
		reg := jobs.NewRegistry()
		require.NoError(t, jobs.Register(reg, func(context.Context, *jobs.Job[digest]) error { return nil },
			jobs.Coalesce(coalesce.Rule[digest]{Key: func(d digest) any { return d.Team }})))
		client := jobs.NewClient(testdb.Public(s), reg, jobs.ClientConfig{Clock: c})
		cfg := dispatcher.Config{Clock: c, Logger: quiet(), Client: client,
			Tasks: []dispatcher.Task{{Key: "digest", Schedule: "@every 1m", Args: digest{Team: "a"}}}}
		ds := []*dispatcher.Dispatcher{newDispatcher(t, s, cfg), newDispatcher(t, s, cfg)}
		for i := 0; i < 5; i++ {
			c.Advance(time.Minute)
			for _, d := range ds {
				_, err := d.Tick(ctx)
				require.NoError(t, err)
			}
		}
		js, err := s.ListJobs(ctx, engine.JobFilter{Kind: "digest", Limit: 100})
		require.NoError(t, err)
		require.Len(t, js, 1, "five ticks, one pending job")
		last, err := s.LastTicks(ctx)
		require.NoError(t, err)
		require.Equal(t, js[0].ID, last["digest"].JobID)
		require.Equal(t, t0.Add(5*time.Minute), last["digest"].RunAt)
	})
}
