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

// Probe (passes): docs/recurring.md, "Daylight saving time" and "Exactly
// once per tick", together. Dispatchers on a UTC clock run CRON_TZ tasks
// of New York through the day the clocks fall back (25 hours): a nightly
// task at 01:30 (named hours: the first 01:30 only) and a half-hourly one
// (every hour: both repeated hours, 50 ticks). Dispatcher a runs all day;
// b is deployed in the middle of the repeated hour (01:10 EST, after the
// first 01:30 ran), and a third, c, is restarted there too after a's
// twin went down. Each tick runs once: one nightly job at 01:30 EDT, 50
// half-hourly jobs, none twice. The clock moves five minutes a step: every
// tick (each half hour) and the deploy (01:10 EST) is on the way.
func TestDSTFallBackWithADispatcherDeployedInTheRepeatedHour(t *testing.T) {
	ny, err := time.LoadLocation("America/New_York")
	require.NoError(t, err)
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		from := time.Date(2026, 11, 1, 0, 0, 0, 0, ny).UTC()
		fc := clock.NewFake(from)
		client := jobs.NewClient(testdb.Public(s), registry(t), jobs.ClientConfig{Clock: fc})
		cfg := dispatcher.Config{Clock: fc, Logger: quiet(), Client: client, Tasks: []dispatcher.Task{
			{Key: "nightly", Schedule: "CRON_TZ=America/New_York 30 1 * * *", Args: report{Period: "nightly"}},
			{Key: "half", Schedule: "CRON_TZ=America/New_York */30 * * * *", Args: report{Period: "half"}},
		}}
		ds := []*dispatcher.Dispatcher{newDispatcher(t, s, cfg)}
		repeated := time.Date(2026, 11, 1, 6, 10, 0, 0, time.UTC) // 01:10 EST
		for fc.Now().Before(from.Add(25 * time.Hour)) {
			fc.Advance(5 * time.Minute)
			if fc.Now().Equal(repeated) {
				ds = append(ds, newDispatcher(t, s, cfg), newDispatcher(t, s, cfg))
			}
			for _, d := range ds {
				_, err := d.Tick(ctx)
				require.NoError(t, err)
			}
		}
		var nightly []string
		half := map[int64]int{}
		for _, j := range reports(t, s) {
			if strings.Contains(string(j.Args), "nightly") {
				nightly = append(nightly, j.CreatedAt.In(ny).Format("15:04 MST"))
			} else {
				half[j.CreatedAt.Unix()]++
			}
		}
		require.Equal(t, []string{"01:30 EDT"}, nightly)
		require.Len(t, half, 50, "every half hour of the 25-hour day")
		for at, n := range half {
			require.Equal(t, 1, n, "tick at %s ran %d times", time.Unix(at, 0).In(ny), n)
		}
	})
}
