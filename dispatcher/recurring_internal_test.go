package dispatcher

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/robfig/cron/v3"
	"github.com/stretchr/testify/require"
)

// bounded gives the year 9999 after 1000 calls of its schedule's Next: a
// dispatcher that loops on the zero time stops, and its test fails rather
// than hangs.
type bounded struct {
	cron.Schedule
	calls int
}

func (b *bounded) Next(t time.Time) time.Time {
	if b.calls++; b.calls > 1000 {
		return time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)
	}
	return b.Schedule.Next(t)
}

// robfig's search gives up after five years, and gives the zero time: a
// schedule of February 29th finds no tick from that day in 2096 until 2099
// (2100 is no leap year). runTasks looped forever on the zero time; it skips the task,
// logs it once, and runs it once it has a tick again.
func TestATaskWithNoTickIsSkippedAndLoggedOnce(t *testing.T) {
	ctx := context.Background()
	leap, err := ParseSchedule("0 0 29 2 *")
	require.NoError(t, err)
	sched := &bounded{Schedule: leap}
	start := time.Date(2097, 3, 1, 0, 0, 0, 0, time.UTC)
	var logs bytes.Buffer
	runs := 0
	d := &Dispatcher{log: slog.New(slog.NewTextHandler(&logs, nil)), tasks: []*task{{
		key: "leap-day", spec: "0 0 29 2 *", schedule: sched, next: sched.Next(start),
		run: func(context.Context, time.Time) (int, error) { runs++; return 1, nil },
	}}}
	for _, now := range []time.Time{start.Add(time.Minute), start.AddDate(1, 0, 0), start.AddDate(3, 0, 0)} {
		ran, err := d.runTasks(ctx, now)
		require.NoError(t, err)
		require.Zero(t, ran, "at %s", now)
	}
	require.Less(t, sched.calls, 10, "runTasks looked for the latest tick of a schedule that has none")
	require.Equal(t, 1, strings.Count(logs.String(), "has no tick in the next five years"), logs.String())
	require.Contains(t, logs.String(), "task=leap-day")

	ran, err := d.runTasks(ctx, time.Date(2104, 2, 29, 0, 0, 0, 0, time.UTC))
	require.NoError(t, err)
	require.Equal(t, 1, ran)
	require.Equal(t, 1, runs, "it runs once a tick comes within five years")
}
