package dispatcher_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/clock"
	"github.com/sluicequeue/sluice/dispatcher"
	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
	"github.com/sluicequeue/sluice/jobs"
)

type report struct {
	Period string `json:"period"`
}

func (report) Kind() string { return "report" }

func registry(t *testing.T) *jobs.Registry {
	reg := jobs.NewRegistry()
	require.NoError(t, jobs.Declare[report](reg, jobs.Queue("reports")))
	return reg
}

func reports(t *testing.T, s *engine.Store) []*engine.JobInfo {
	t.Helper()
	js, err := s.ListJobs(context.Background(), engine.JobFilter{Kind: "report", Limit: 10000})
	require.NoError(t, err)
	return js
}

func TestSeveralDispatchersEnqueueEachTickOnce(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		c := clock.NewFake(t0) // 12:00
		client := jobs.NewClient(testdb.Public(s), registry(t), jobs.ClientConfig{Clock: c})
		cfg := dispatcher.Config{Clock: c, Logger: quiet(), Client: client, Tasks: []dispatcher.Task{
			{Key: "every-10m", Schedule: "*/10 * * * *", Args: report{Period: "10m"}},
			{Key: "hourly", Schedule: "@hourly", Args: report{Period: "1h"}, Options: []jobs.EnqueueOption{jobs.Priority(2)}},
		}}
		ds := []*dispatcher.Dispatcher{newDispatcher(t, s, cfg), newDispatcher(t, s, cfg), newDispatcher(t, s, cfg)}
		for step := 0; step < 3*60; step++ { // three hours, a minute at a time
			c.Advance(time.Minute)
			var wg sync.WaitGroup
			for _, d := range ds {
				wg.Add(1)
				go func() {
					defer wg.Done()
					_, err := d.Tick(context.Background())
					assert(t, err)
				}()
			}
			wg.Wait()
		}
		js := reports(t, s)
		count := map[string]int{}
		runAt := map[string]bool{}
		for _, j := range js {
			var p string
			if strings.Contains(string(j.Args), "10m") {
				p = "10m"
			} else {
				p = "1h"
				require.Equal(t, 2, j.Priority)
			}
			count[p]++
			require.Equal(t, "reports", j.Queue)
			key := p + j.CreatedAt.String()
			require.False(t, runAt[key], "a tick enqueued twice")
			runAt[key] = true
		}
		require.Equal(t, map[string]int{"10m": 18, "1h": 3}, count, "every tick of 3 hours, once")
	})
}

func assert(t *testing.T, err error) {
	if err != nil {
		t.Error(err)
	}
}

func TestARestartMidHourNeitherLosesNorRepeatsATick(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		c := clock.NewFake(t0) // 12:00
		client := jobs.NewClient(testdb.Public(s), registry(t), jobs.ClientConfig{Clock: c})
		cfg := dispatcher.Config{Clock: c, Logger: quiet(), Client: client,
			Tasks: []dispatcher.Task{{Key: "hourly", Schedule: "0 * * * *", Args: report{}}}}
		step := func(d *dispatcher.Dispatcher, to time.Duration) {
			for c.Now().Before(t0.Add(to)) {
				c.Advance(time.Minute)
				_, err := d.Tick(ctx)
				require.NoError(t, err)
			}
		}
		d := newDispatcher(t, s, cfg)
		step(d, 90*time.Minute) // ran 13:00
		require.Len(t, reports(t, s), 1)
		d = newDispatcher(t, s, cfg) // restarted at 13:30
		step(d, 3*time.Hour)         // runs 14:00 and 15:00
		require.Len(t, reports(t, s), 3)
		// Restarted a second after a tick ran: it does not run it again.
		c.Advance(time.Second)
		d = newDispatcher(t, s, cfg)
		_, err := d.Tick(ctx)
		require.NoError(t, err)
		require.Len(t, reports(t, s), 3)
		step(d, 4*time.Hour)
		require.Len(t, reports(t, s), 4, "and it runs the next")

		infos, err := d.Tasks(ctx)
		require.NoError(t, err)
		var hourly dispatcher.TaskInfo
		for _, i := range infos {
			if i.Key == "hourly" {
				hourly = i
			}
		}
		require.Equal(t, t0.Add(4*time.Hour), hourly.Last.RunAt)
		require.Equal(t, t0.Add(5*time.Hour), hourly.Next)
		require.NotZero(t, hourly.Last.JobID)
	})
}

func TestTicksMissedWhileNoDispatcherRanAreNotReplayed(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		c := clock.NewFake(t0)
		client := jobs.NewClient(testdb.Public(s), registry(t), jobs.ClientConfig{Clock: c})
		d := newDispatcher(t, s, dispatcher.Config{Clock: c, Logger: quiet(), Client: client,
			Tasks: []dispatcher.Task{{Key: "every-minute", Schedule: "@every 1m", Args: report{}}}})
		c.Advance(10 * time.Minute) // ten ticks pass with no tick run
		_, err := d.Tick(ctx)
		require.NoError(t, err)
		require.Len(t, reports(t, s), 1, "only the latest tick runs")
	})
}

func TestInvalidTasksFailAtStartNamingTheTask(t *testing.T) {
	s := testdb.Backends(t)[0].Open(t)
	client := jobs.NewClient(testdb.Public(s), registry(t), jobs.ClientConfig{})
	for _, c := range []struct {
		task dispatcher.Task
		want string
	}{
		{dispatcher.Task{Key: "nightly", Schedule: "61 * * * *", Args: report{}}, `recurring task nightly: schedule "61 * * * *"`},
		{dispatcher.Task{Key: "nightly", Schedule: "", Args: report{}}, "recurring task nightly: schedule \"\": the schedule is empty"},
		{dispatcher.Task{Schedule: "@hourly", Args: report{}}, "a recurring task has no Key"},
		{dispatcher.Task{Key: "x", Schedule: "@hourly"}, "recurring task x has no Args"},
		// robfig's Next gives the zero time for a schedule that never
		// fires, on which the dispatcher's Tick looped forever.
		{dispatcher.Task{Key: "feb30", Schedule: "0 0 30 2 *", Args: report{}}, `recurring task feb30: schedule "0 0 30 2 *": it never fires`},
		// robfig ran an @every of less than a second every second.
		{dispatcher.Task{Key: "sync", Schedule: "@every -1h", Args: report{}}, `recurring task sync: schedule "@every -1h": @every -1h: the interval must be a whole number of seconds, at least one`},
		{dispatcher.Task{Key: "sync", Schedule: "@every 1500ms", Args: report{}}, `recurring task sync: schedule "@every 1500ms"`},
		// Keys the database cannot store failed every tick of their task;
		// on MySQL "report " shared "report"'s tick records.
		{dispatcher.Task{Key: strings.Repeat("x", 300), Schedule: "@hourly", Args: report{}}, `recurring task key "` + strings.Repeat("x", 40) + `"... is 300 bytes; a key holds at most 255`},
		{dispatcher.Task{Key: "nightly\x00report", Schedule: "@hourly", Args: report{}}, `recurring task key "nightly\x00report" contains a NUL byte`},
		{dispatcher.Task{Key: "nightly\xffreport", Schedule: "@hourly", Args: report{}}, `recurring task key "nightly\xffreport" is not valid UTF-8`},
		{dispatcher.Task{Key: "report ", Schedule: "@hourly", Args: report{}}, `recurring task key "report " ends with a space`},
	} {
		_, err := dispatcher.New(testdb.Public(s), dispatcher.Config{Client: client, Tasks: []dispatcher.Task{c.task}})
		require.ErrorContains(t, err, c.want)
	}
	_, err := dispatcher.New(testdb.Public(s), dispatcher.Config{Client: client, Tasks: []dispatcher.Task{
		{Key: "a", Schedule: "@hourly", Args: report{}}, {Key: "a", Schedule: "@daily", Args: report{}}}})
	require.ErrorContains(t, err, "recurring task a is declared twice")
	_, err = dispatcher.New(testdb.Public(s), dispatcher.Config{Client: client, Tasks: []dispatcher.Task{
		{Key: "report", Schedule: "@hourly", Args: report{}}, {Key: "report ", Schedule: "@hourly", Args: report{}}}})
	require.ErrorContains(t, err, `recurring task key "report " ends with a space`, "MySQL compares them equal")
	_, err = dispatcher.New(testdb.Public(s), dispatcher.Config{Maintenance: dispatcher.Maintenance{ClearFinishedJobs: dispatcher.MaintenanceTask{Schedule: "whenever"}}})
	require.ErrorContains(t, err, `built-in task sluice.clear_finished_jobs: schedule "whenever"`)
}

func TestLoadConfig(t *testing.T) {
	reg := registry(t)
	fc, err := dispatcher.LoadConfig(strings.NewReader(`{
  "tasks": [{"key": "nightly", "schedule": "0 3 * * *", "kind": "report", "args": {"period": "daily"}, "queue": "slow", "priority": 3}],
  "maintenance": {"clear_finished_jobs": {"retention": "48h"}, "free_expired_slots": {"off": true}, "clear_idle_budgets": {"schedule": "27 * * * *"}}
}`), reg)
	require.NoError(t, err)
	require.Len(t, fc.Tasks, 1)
	require.Equal(t, report{Period: "daily"}, fc.Tasks[0].Args)
	require.Len(t, fc.Tasks[0].Options, 2)
	require.Equal(t, 48*time.Hour, fc.Maintenance.Retention)
	require.True(t, fc.Maintenance.FreeExpiredSlots.Off)
	require.Equal(t, "27 * * * *", fc.Maintenance.ClearIdleBudgets.Schedule)

	for _, c := range []struct{ json, want string }{
		{`{"tasks": [{"key": "x", "schedule": "@hourly", "kind": "nope"}]}`, "task x: kind nope is not registered in this program"},
		{`{"tasks": [{"key": "x", "schedule": "every day", "kind": "report"}]}`, `task x: schedule "every day"`},
		{`{"tasks": [{"key": "x", "schedule": "@hourly", "kind": "report", "args": {"period": 5}}]}`, "task x: decode args of report"},
		{`{"tasks": [{"key": "x", "schedule": "@hourly", "kinds": "report"}]}`, `unknown field "kinds"`},
		{`{"maintenance": {"clear_finished_jobs": {"retention": "a day"}}}`, `retention "a day" is not a positive duration`},
	} {
		_, err := dispatcher.LoadConfig(strings.NewReader(c.json), reg)
		require.ErrorContains(t, err, c.want, c.json)
	}
	_, err = dispatcher.LoadConfig(strings.NewReader(`{"tasks": [{"key": "x", "schedule": "@hourly", "kind": "report"}]}`), nil)
	require.ErrorContains(t, err, "run the dispatcher from your app")
}

func TestFinishedJobsAreClearedAfterTheirRetention(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		c := clock.NewFake(t0)
		res, err := s.Enqueue(ctx, nil, engine.At(t0), []engine.NewJob{
			{Kind: "k", Queue: "q", Args: []byte(`{}`), MaxAttempts: 1},
			{Kind: "k", Queue: "q", Args: []byte(`{}`), MaxAttempts: 1},
			{Kind: "k", Queue: "q", Args: []byte(`{}`), MaxAttempts: 1},
		})

		require.NoError(t, err)
		pid, err := s.RegisterProcess(ctx, engine.Process{Kind: "worker", PID: 1}, engine.At(t0))
		require.NoError(t, err)
		_, err = s.Claim(ctx, engine.ClaimParams{ProcessID: pid, Queues: []string{"q"}, Max: 3, Clock: engine.HostTime(c.Now)})
		require.NoError(t, err)
		require.NoError(t, s.Finish(ctx, pid, engine.At(t0), engine.Outcomes{Completed: []engine.Run{{ID: res[0].ID, Claim: 1}},
			Others: []engine.Transition{{ID: res[1].ID, Claim: 1, State: engine.StateFailed, Finished: true}}}))
		require.NoError(t, s.Finish(ctx, pid, engine.At(t0.Add(2*time.Hour)), engine.Outcomes{Completed: []engine.Run{{ID: res[2].ID, Claim: 1}}}))
		d := newDispatcher(t, s, dispatcher.Config{Clock: c, Logger: quiet(), Maintenance: dispatcher.Maintenance{Retention: 24 * time.Hour}})
		c.Set(t0.Add(25 * time.Hour)) // the 13:00 tick of the next day
		_, err = d.Tick(ctx)
		require.NoError(t, err)
		_, err = s.GetJob(ctx, res[0].ID)
		require.ErrorIs(t, err, engine.ErrNotFound, "completed 25 h ago: deleted")
		for _, i := range []int{1, 2} {
			_, err = s.GetJob(ctx, res[i].ID)
			require.NoError(t, err, "failed jobs, and jobs younger than the retention, are kept")
		}
	})
}

// The longest key the key rule allows, of characters of two bytes, is
// stored on every database: its ticks run and are recorded.
func TestATaskOfTheLongestKeyRuns(t *testing.T) {
	key := strings.Repeat("é", 127) + "x" // 255 bytes
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		c := clock.NewFake(t0)
		client := jobs.NewClient(testdb.Public(s), registry(t), jobs.ClientConfig{Clock: c})
		d := newDispatcher(t, s, dispatcher.Config{Clock: c, Logger: quiet(), Client: client,
			Tasks: []dispatcher.Task{{Key: key, Schedule: "@hourly", Args: report{}}}})
		c.Advance(time.Hour)
		_, err := d.Tick(ctx)
		require.NoError(t, err)
		require.Len(t, reports(t, s), 1)
		last, err := s.LastTicks(ctx)
		require.NoError(t, err)
		require.Equal(t, t0.Add(time.Hour), last[key].RunAt)
	})
}

// A config file's tasks are checked as those of Config.Tasks.
func TestAConfigFileTaskWithAKeyTheDatabaseCannotStoreIsRefusedAtStart(t *testing.T) {
	s := testdb.Backends(t)[0].Open(t)
	reg := registry(t)
	fc, err := dispatcher.LoadConfig(strings.NewReader(`{"tasks": [{"key": "nightly\u0000", "schedule": "@daily", "kind": "report"}]}`), reg)
	require.NoError(t, err)
	_, err = dispatcher.New(testdb.Public(s), dispatcher.Config{Client: jobs.NewClient(testdb.Public(s), reg, jobs.ClientConfig{}), Tasks: fc.Tasks})
	require.ErrorContains(t, err, `recurring task key "nightly\x00" contains a NUL byte`)
	_, err = dispatcher.LoadConfig(strings.NewReader(`{"tasks": [{"key": "x", "schedule": "@every 0s", "kind": "report"}]}`), reg)
	require.ErrorContains(t, err, `task x: schedule "@every 0s": @every 0s: the interval must be a whole number of seconds, at least one`)
}

// DST on the fake clock, in the dispatcher's local time zone
// (America/New_York). A daily task at 01:30 ran twice on the day the
// clocks fall back (01:30 EDT and 01:30 EST), and one at 02:30 did not
// run on the day they spring forward. Vixie cron's rule runs each once:
// the first 01:30, and 02:30 at 03:00 EDT, the first instant after the
// change.
func TestADailyTaskRunsOnceOnDSTDays(t *testing.T) {
	ny, err := time.LoadLocation("America/New_York")
	require.NoError(t, err)
	for _, c := range []struct {
		name, spec string
		from       time.Time
		want       string
	}{
		{"fall back", "30 1 * * *", time.Date(2026, 11, 1, 0, 0, 0, 0, ny), "01:30 EDT"},
		{"spring forward", "30 2 * * *", time.Date(2026, 3, 8, 0, 0, 0, 0, ny), "03:00 EDT"},
	} {
		t.Run(c.name, func(t *testing.T) {
			testdb.Each(t, func(t *testing.T, s *engine.Store) {
				ctx := context.Background()
				fc := clock.NewFake(c.from)
				client := jobs.NewClient(testdb.Public(s), registry(t), jobs.ClientConfig{Clock: fc})
				d := newDispatcher(t, s, dispatcher.Config{Clock: fc, Logger: quiet(), Client: client,
					Tasks: []dispatcher.Task{{Key: "nightly", Schedule: c.spec, Args: report{}}}})
				// That whole day, five minutes at a time: every wall time a
				// tick is due at (01:30, 02:30, 03:00) is on the way, and a
				// job's CreatedAt is the first step at or after its tick.
				for fc.Now().Before(c.from.Add(24 * time.Hour)) {
					fc.Advance(5 * time.Minute)
					_, err := d.Tick(ctx)
					require.NoError(t, err)
				}
				var at []string
				for _, j := range reports(t, s) {
					at = append(at, j.CreatedAt.In(ny).Format("15:04 MST"))
				}
				require.Equal(t, []string{c.want}, at, "a daily task %q on the day of a DST change (%s) runs once", c.spec, c.from.Format(time.DateOnly))
			})
		})
	}
}
