package ui_test

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/clock"
	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
	"github.com/sluicequeue/sluice/jobs"
	"github.com/sluicequeue/sluice/ui"
)

// childURL names, in a child process of inChild, its database.
const childURL = "SLUICE_UI_TEST_CHILD_URL"

// inChild runs fn once per backend in a child process of the
// test binary that runs only the calling test, on a fresh migrated
// database of the parent's: for a fault that takes the whole process down
// (a stack overflow), which the parent then reports as a failure instead
// of dying with every other test of the package.
func inChild(t *testing.T, fn func(t *testing.T, s *engine.Store)) {
	if u := os.Getenv(childURL); u != "" {
		s, err := testdb.OpenURL(context.Background(), u)
		require.NoError(t, err)
		defer s.Close()
		_, err = s.MigrateUp(context.Background(), 0)
		require.NoError(t, err)
		fn(t, s)
		return
	}
	name := t.Name()
	for _, b := range testdb.Backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run", "^"+name+"$", "-test.count=1", "-test.v")
			cmd.Env = append(os.Environ(), childURL+"="+b.URL(t))
			out, err := cmd.CombinedOutput()
			if err != nil {
				lines := strings.Split(strings.TrimSpace(string(out)), "\n")
				t.Fatalf("the child process failed or died (%v):\n%s", err, strings.Join(lines[:min(len(lines), 16)], "\n"))
			}
		})
	}
}

type ancient struct{ N int }

func (ancient) Kind() string { return "ancient" }

// jobs.RunAt: "A time that is not after now (or the zero
// time) runs the job now". A run time more than 292 years before now (a
// date parsed as year 1700) is stored as now, so no page computes a
// distance beyond time.Duration's range: human.Duration(math.MinInt64)
// would recurse until the stack overflows, a fatal error that would take
// down the process serving the dashboard were human.Duration not to stop
// it (see internal/human/human_test.go). Run in a child process so that a
// regression fails this test instead of killing the package's.
func TestAJobScheduledCenturiesAgoDoesNotKillTheDashboard(t *testing.T) {
	inChild(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		c := clock.NewFake(t0)
		reg := jobs.NewRegistry()
		require.NoError(t, jobs.Register(reg, func(context.Context, *jobs.Job[ancient]) error { return nil }))
		client := jobs.NewClient(testdb.Public(s), reg, jobs.ClientConfig{Clock: c})
		res, err := client.Enqueue(ctx, ancient{}, jobs.RunAt(time.Date(1700, 1, 1, 0, 0, 0, 0, time.UTC)))
		require.NoError(t, err)
		require.Equal(t, engine.StateReady, res.State, "a time before now runs the job now")
		f := &fixture{store: s, reg: reg, clock: c, client: client}
		cl := serve(t, f, "", ui.Options{})
		for _, p := range []string{"/jobs", "/jobs/" + strconv.FormatInt(res.ID, 10), "/"} {
			code, body := cl.get(p)
			require.Equal(t, http.StatusOK, code, "%s: %s", p, body)
		}
	})
}

// A job may be scheduled up to the end of the year 9999 (engine.MaxRunAt;
// retries and snoozes are capped there). The job list shows the distance
// to its run time; computed as a time.Duration, which saturates at about
// 292 years, the page would say "in 106751d23h" for a job due in 7,900-odd
// years. Beyond a year it shows the date.
func TestTheJobListShowsAFarRunTimeTruly(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		c := clock.NewFake(t0)
		reg := jobs.NewRegistry()
		require.NoError(t, jobs.Register(reg, func(context.Context, *jobs.Job[ancient]) error { return nil }))
		client := jobs.NewClient(testdb.Public(s), reg, jobs.ClientConfig{Clock: c})
		_, err := client.Enqueue(context.Background(), ancient{}, jobs.RunAt(engine.MaxRunAt))
		require.NoError(t, err)
		cl := serve(t, &fixture{store: s, reg: reg, clock: c, client: client}, "", ui.Options{})
		code, body := cl.get("/jobs")
		require.Equal(t, http.StatusOK, code, body)
		require.Contains(t, body, "scheduled")
		require.NotContains(t, body, "106751d", "the year 9999 is not 292 years away")
		require.Contains(t, body, "on 9999-12-31")
	})
}
