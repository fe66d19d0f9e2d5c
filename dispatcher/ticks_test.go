package dispatcher_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/clock"
	"github.com/sluicequeue/sluice/dispatcher"
	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
	"github.com/sluicequeue/sluice/jobs"
)

// docs/recurring.md, "Exactly once per tick": however many dispatchers
// run, each tick runs once. "@every" once ticked from each dispatcher's own
// start, so two dispatchers started three minutes apart each enqueued
// their own ticks: twice the jobs.
func TestTwoDispatchersEnqueueEachEveryTickOnce(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		c := clock.NewFake(t0)
		client := jobs.NewClient(testdb.Public(s), registry(t), jobs.ClientConfig{Clock: c})
		cfg := dispatcher.Config{Clock: c, Logger: quiet(), Client: client,
			Tasks: []dispatcher.Task{{Key: "sync-rates", Schedule: "@every 10m", Args: report{}}}}
		a := newDispatcher(t, s, cfg)
		c.Advance(3 * time.Minute)
		b := newDispatcher(t, s, cfg) // a second dispatcher, deployed 3 min later
		for c.Now().Before(t0.Add(63 * time.Minute)) {
			c.Advance(time.Minute)
			for _, d := range []*dispatcher.Dispatcher{a, b} {
				_, err := d.Tick(ctx)
				require.NoError(t, err)
			}
		}
		require.Len(t, reports(t, s), 6, "one job per 10 minutes for an hour, however many dispatchers run")
	})
}

type unregisteredArgs struct{}

func (unregisteredArgs) Kind() string { return "unregistered_args" }

// docs/recurring.md: an unknown kind or a built-in's key stops the
// dispatcher at start, naming the task, for tasks declared in code too.
// Such a task once started: one of an unknown kind failed at every tick,
// one keyed like a built-in shared its tick records, so one of the two
// never ran.
func TestAnUnknownKindOrABuiltInsKeyStopsTheDispatcherAtStart(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		client := jobs.NewClient(testdb.Public(s), registry(t), jobs.ClientConfig{})
		_, err := dispatcher.New(testdb.Public(s), dispatcher.Config{Client: client, Logger: quiet(),
			Tasks: []dispatcher.Task{{Key: "orphan", Schedule: "@hourly", Args: unregisteredArgs{}}}})
		if err == nil || !strings.Contains(err.Error(), "orphan") {
			t.Errorf("unknown kind: dispatcher.New returned %v; want an error naming task orphan", err)
		}
		_, err = dispatcher.New(testdb.Public(s), dispatcher.Config{Client: client, Logger: quiet(),
			Tasks: []dispatcher.Task{{Key: dispatcher.TaskClearFinishedJobs, Schedule: "@hourly", Args: report{}}}})
		if err == nil {
			t.Errorf("a task keyed %s (a built-in's key) started", dispatcher.TaskClearFinishedJobs)
		}
	})
}
