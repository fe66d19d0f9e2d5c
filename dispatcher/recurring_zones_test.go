package dispatcher_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/clock"
	"github.com/sluicequeue/sluice/dispatcher"
	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
	"github.com/sluicequeue/sluice/jobs"
)

// docs/recurring.md, "Time zones": a schedule without a zone ticks in the
// local time of each dispatcher's clock (TZ), so two dispatchers whose
// hosts are set to different zones tick "0 3 * * *" at different
// instants, and each instant is a tick of its own: the task runs twice a
// day. With CRON_TZ in the spec every dispatcher ticks at the same
// instants, whatever its host's zone, and the task runs once a day.
func TestDispatchersInDifferentZonesTickAScheduleWithoutCronTZAtDifferentInstants(t *testing.T) {
	paris, err := time.LoadLocation("Europe/Paris")
	require.NoError(t, err)
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		utcClock, parisClock := clock.NewFake(t0), clock.NewFake(t0.In(paris))
		client := jobs.NewClient(testdb.Public(s), registry(t), jobs.ClientConfig{Clock: utcClock})
		tasks := []dispatcher.Task{
			{Key: "local", Schedule: "0 3 * * *", Args: report{Period: "local"}},
			{Key: "zoned", Schedule: "CRON_TZ=America/New_York 0 3 * * *", Args: report{Period: "zoned"}},
		}
		ds := []*dispatcher.Dispatcher{
			newDispatcher(t, s, dispatcher.Config{Clock: utcClock, Logger: quiet(), Client: client, Tasks: tasks}),
			newDispatcher(t, s, dispatcher.Config{Clock: parisClock, Logger: quiet(), Client: client, Tasks: tasks}),
		}
		for range 24 * 4 { // a day, a quarter of an hour a step
			utcClock.Advance(15 * time.Minute)
			parisClock.Advance(15 * time.Minute)
			for _, d := range ds {
				_, err := d.Tick(ctx)
				require.NoError(t, err)
			}
		}
		ticks := func(task string) []string {
			var out []string
			for tick := range tickRecords(t, s, task) {
				out = append(out, tick.UTC().Format("15:04"))
			}
			return out
		}
		require.ElementsMatch(t, []string{"02:00", "03:00"}, ticks("local"), "03:00 in Paris (02:00 UTC in March) and 03:00 UTC: two ticks a day")
		require.ElementsMatch(t, []string{"08:00"}, ticks("zoned"), "03:00 in New York, for both: one tick a day")
	})
}
