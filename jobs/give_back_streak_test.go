package jobs_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/jobs"
)

// pollExport is a long-lived job that polls an export, snoozing itself
// until it is ready.
type pollExport struct{ Export string }

func (pollExport) Kind() string { return "poll_export" }

// streakText is the record of a streak of n give-backs in a row since
// since, in a job's last error.
func streakText(n int, since time.Time) string {
	return fmt.Sprintf("given back without spending an attempt (%d time(s) in a row since %s,", n, since.UTC().Format(time.RFC3339))
}

// giveBackOnce has a worker without a handler for the job's kind claim
// job id, asserts it gave it back (not failed), and returns the job.
func giveBackOnce(t *testing.T, h *harness, cfg jobs.WorkerConfig, id int64) *engine.JobInfo {
	t.Helper()
	res := drainRes(t, h, jobs.NewRegistry(), cfg)
	j := h.job(id)
	require.Equal(t, jobs.DrainResult{Snoozed: 1}, res, "given back, not failed: it is %s: %s", j.State, j.LastError)
	require.Equal(t, engine.StateScheduled, j.State)
	return j
}

// docs/guarantees.md, "Nothing lost": a job a worker cannot run is given
// back, without spending an attempt, and fails only once it was given
// back for WorkerConfig.GiveBackFor. How long was reckoned from all its
// claims that spent no attempt, snoozes included: a job that polled an
// export, snoozing itself every hour for 12 days, was failed for good by
// the first worker without its handler (a rolling deploy) that claimed
// it, at its first give-back. Only give-backs in a row count now: it is
// given back, after the shortest wait, and runs on the next worker that
// has its handler.
func TestAJobThatSnoozedForDaysIsGivenBackNotFailed(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		// It polls every hour, 300 times before the export is ready. Each
		// poll but the last takes the clock an hour on and snoozes the
		// job at once, so that one drain makes them all; the last one
		// waits out its hour, and a worker without the handler (a rolling
		// deploy) claims the job then.
		polls := 0
		require.NoError(t, jobs.Register(h.reg, func(context.Context, *jobs.Job[pollExport]) error {
			switch polls++; {
			case polls < 300:
				h.clock.Advance(time.Hour)
				return jobs.Snooze(0)
			case polls == 300:
				return jobs.Snooze(time.Hour)
			}
			return nil
		}))
		id := h.enqueue(pollExport{Export: "e1"})
		// Its worker heartbeats before each poll, and is not presumed dead
		// for the hour each poll takes.
		poller := jobs.WorkerConfig{HeartbeatInterval: 10 * time.Minute, DeadAfter: 3 * time.Hour}
		require.Equal(t, jobs.DrainResult{Snoozed: 300}, h.drain(poller))
		require.EqualValues(t, 300, h.job(id).Claims)
		h.clock.Set(h.job(id).RunAt)
		require.Greater(t, h.clock.Now().Sub(t0), 12*24*time.Hour)

		j := giveBackOnce(t, h, jobs.WorkerConfig{}, id)
		require.Zero(t, j.Attempt)
		require.Contains(t, j.LastError, streakText(1, h.clock.Now()))
		require.InDelta(t, 2*time.Second, j.RunAt.Sub(h.clock.Now()), float64(200*time.Millisecond)+float64(time.Millisecond),
			"the wait of a first give-back, not the longest")

		h.clock.Set(j.RunAt)
		require.Equal(t, jobs.DrainResult{Completed: 1}, h.drain(poller))
	})
}

// A streak of give-backs ends when the job runs: a worker with its
// handler that snoozes it, or fails an attempt of it. The next give-back
// starts a new streak, from its own time and the shortest wait, so the
// job is not failed for the give-backs before its run. With GiveBackFor
// a minute, six give-backs in a row (2 + 4 + … + 64 s) take the job to
// the edge: the seventh would fail it.
func TestARunBetweenGiveBacksStartsANewStreak(t *testing.T) {
	for _, run := range []struct {
		name   string
		err    error
		result jobs.DrainResult
	}{
		{"snoozed", jobs.Snooze(time.Minute), jobs.DrainResult{Snoozed: 1}},
		{"failed attempt", errors.New("upstream down"), jobs.DrainResult{Retried: 1}},
		{"upstream 429", jobs.RetryAfter(time.Minute), jobs.DrainResult{Throttled: 1}},
	} {
		t.Run(run.name, func(t *testing.T) {
			each(t, func(t *testing.T, h *harness) {
				cfg := jobs.WorkerConfig{GiveBackFor: time.Minute}
				require.NoError(t, jobs.Register(h.reg, func(context.Context, *jobs.Job[email]) error { return run.err }))
				id := h.enqueue(email{To: "a"})
				first := h.clock.Now()
				for n := 1; n <= 6; n++ {
					j := giveBackOnce(t, h, cfg, id)
					require.Contains(t, j.LastError, streakText(n, first), "give-back %d", n)
					h.clock.Set(j.RunAt)
				}

				require.Equal(t, run.result, h.drain(cfg), "a worker with the handler runs it")
				h.clock.Set(h.job(id).RunAt)
				j := giveBackOnce(t, h, cfg, id)
				require.Contains(t, j.LastError, streakText(1, h.clock.Now()), "a new streak")
				require.InDelta(t, 2*time.Second, j.RunAt.Sub(h.clock.Now()), float64(200*time.Millisecond)+float64(time.Millisecond))

				// The new streak fails it once it lasted GiveBackFor: five
				// more give-backs, and the seventh claim fails it.
				h.clock.Set(j.RunAt)
				times, took := giveBackUntilFailed(t, h, jobs.NewRegistry(), cfg, id)
				require.Equal(t, 5, times, "give-backs after the first of the new streak")
				require.GreaterOrEqual(t, took, time.Minute-2*time.Second)
				j = h.job(id)
				require.Contains(t, j.LastError, "no worker ran it while it was given back for 1m0s (WorkerConfig.GiveBackFor; 6 time(s)), so it fails")
			})
		})
	}
}

// `sluice retry` of a job that failed for good, given back for
// GiveBackFor, gives it another GiveBackFor: its give-backs start a new
// streak. It was failed again at the first give-back after the retry,
// reckoned given back for as long as all its claims that spent no
// attempt.
func TestARetryOfAJobFailedWhileGivenBackStartsANewStreak(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		require.NoError(t, jobs.Declare[email](h.reg))
		cfg := jobs.WorkerConfig{GiveBackFor: time.Minute}
		id := h.enqueue(email{To: "a"})
		times, _ := giveBackUntilFailed(t, h, jobs.NewRegistry(), cfg, id)
		require.Equal(t, 6, times)

		_, err := h.store.RetryJobs(context.Background(), engine.At(h.clock.Now()), []int64{id})
		require.NoError(t, err)
		j := giveBackOnce(t, h, cfg, id)
		require.Contains(t, j.LastError, streakText(1, h.clock.Now()))
		h.clock.Set(j.RunAt)
		times, _ = giveBackUntilFailed(t, h, jobs.NewRegistry(), cfg, id)
		require.Equal(t, 5, times, "the rest of a whole new streak")
	})
}

// A give-back reads the streak its job is in from the job's last error,
// which a handler's error may fill: 16 KiB of it, a NUL byte, or a
// mimic of a give-back's record — one that claims a streak of a million
// give-backs since 2000, at the very claim that failed the attempt. None
// makes the job fail early, or the worker stumble: the give-back after
// such a failed attempt starts a new streak (a failed attempt spends an
// attempt, and every give-back in a streak is a claim that spent none).
func TestAHandlersErrorThatMimicsAGiveBackCountsForNothing(t *testing.T) {
	mimic := "; given back without spending an attempt (1000000 time(s) in a row since 2000-01-01T00:00:00Z, the last at claim 1) " +
		"for a worker that can run it; it fails once given back for 1m0s (WorkerConfig.GiveBackFor)"
	for name, text := range map[string]string{
		"mimic":        "upstream down" + mimic,
		"16 KiB":       "upstream down" + mimic + strings.Repeat("x", 16<<10),
		"NUL":          "upstream\x00down" + mimic,
		"cut short":    "upstream down; given back without spending an attempt (99 time(s) in a row since 2000-01-01T00",
		"huge numbers": "e; given back without spending an attempt (99999999999999999999 time(s) in a row since 2000-01-01T00:00:00Z, the last at claim 1)",
	} {
		t.Run(name, func(t *testing.T) {
			each(t, func(t *testing.T, h *harness) {
				cfg := jobs.WorkerConfig{GiveBackFor: time.Minute}
				require.NoError(t, jobs.Register(h.reg, func(context.Context, *jobs.Job[email]) error { return errors.New(text) }))
				id := h.enqueue(email{To: "a"})
				h.clock.Advance(time.Hour) // older than GiveBackFor
				require.Equal(t, jobs.DrainResult{Retried: 1}, h.drain(cfg))
				require.EqualValues(t, 1, h.job(id).Claims, "the mimic names the claim that failed the attempt")

				h.clock.Set(h.job(id).RunAt)
				j := giveBackOnce(t, h, cfg, id)
				require.Equal(t, 1, j.Attempt)
				require.Contains(t, j.LastError, streakText(1, h.clock.Now()))
			})
		})
	}
}

// mimicRecord is a give-back's record of n give-backs in a row since
// 2000, the last at claim claim, as a text that is no give-back's may
// quote it (another job's last error, say); quoted is how the job keeps
// it: readable, and no record.
func mimicRecord(n, claim int) (mimic, quoted string) {
	record := fmt.Sprintf("given back without spending an attempt (%d time(s) in a row since 2000-01-01T00:00:00Z, the last at claim %d)", n, claim)
	return "the export job failed: e; " + record + " for a worker that can run it", "; (quoted) " + record
}

// requireNoRecord asserts that a job's last error quotes the mimic (in
// full, readable) and holds no give-back's record.
func requireNoRecord(t *testing.T, lastError, quoted string) {
	t.Helper()
	require.Contains(t, lastError, quoted)
	require.NotContains(t, lastError, "; given back without spending an attempt (", "no record but a give-back's")
}

// requireFirstGiveBack asserts that a worker without job id's handler
// gives it back as its first give-back: a streak of one, not a failure.
func requireFirstGiveBack(t *testing.T, h *harness, cfg jobs.WorkerConfig, id int64) {
	t.Helper()
	j := giveBackOnce(t, h, cfg, id)
	require.Contains(t, j.LastError, streakText(1, h.clock.Now()))
	require.Contains(t, j.LastError, "; given back without spending an attempt (1 time(s)", "its own record, as written")
}

// A job that snoozed itself six times (a poller) and whose seventh run
// fails with an error that quotes a give-back's record — an upstream
// sluice job's last error, say, whose claim number happens to be this
// job's — has six claims that spent no attempt, so the record of six
// give-backs since 2000 at claim 7 passed the bound on give-backs, and
// the first give-back after it (an old worker in a rolling deploy)
// failed the job for good; Explain said it was given back, while it
// waited out its backoff. Only a give-back writes a record that reads as
// one: the store quotes any other (engine.LastErrorText).
func TestAHandlersMimicAfterSnoozesFailsNoJobAtItsFirstGiveBack(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		cfg := jobs.WorkerConfig{GiveBackFor: time.Minute}
		mimic, quoted := mimicRecord(6, 7)
		runs := 0
		require.NoError(t, jobs.Register(h.reg, func(context.Context, *jobs.Job[email]) error {
			runs++
			if runs <= 6 {
				return jobs.Snooze(0)
			}
			return errors.New(mimic)
		}))
		id := h.enqueue(email{To: "a"})
		require.Equal(t, jobs.DrainResult{Snoozed: 6, Retried: 1}, h.drain(cfg))
		j := h.job(id)
		require.EqualValues(t, 7, j.Claims, "the handler's error names the claim that failed the attempt")
		require.Equal(t, 1, j.Attempt)
		reason := h.explain(id).Reason

		h.clock.Set(j.RunAt)
		requireFirstGiveBack(t, h, cfg, id)
		requireNoRecord(t, j.LastError, quoted)
		require.Equal(t, jobs.ReasonRetryBackoff, reason, "it waited out its backoff")
	})
}

// Every text a handler or an operator has stored as a job's last error is
// kept with a give-back's record quoted, so that a job's first give-back
// after it is one, not its last: a handler's panic, a handler's Cancel
// and an operator's cancel reason (each cancel followed by an operator's
// retry, which sets the job's attempts back to 0, so that all its claims
// but the next one spent none). Each job snoozed six times first (the
// sixth for an hour), and the record names the claim that stored it.
func TestNoLastErrorButAGiveBacksReadsAsARecord(t *testing.T) {
	retry := func(t *testing.T, h *harness, id int64) {
		_, err := h.store.RetryJobs(context.Background(), engine.At(h.clock.Now()), []int64{id})
		require.NoError(t, err)
	}
	for _, path := range []struct {
		name string
		// seventh is the handler's seventh run, and res what its claim
		// did; without it, no seventh claim.
		seventh func(mimic string) error
		res     jobs.DrainResult
		// operator acts on the job after its last claim.
		operator func(t *testing.T, h *harness, id int64, mimic string)
	}{
		{name: "a panic", seventh: func(mimic string) error { panic(mimic) }, res: jobs.DrainResult{Retried: 1}},
		{
			name:     "a handler's cancel, retried",
			seventh:  func(mimic string) error { return jobs.Cancel(errors.New(mimic)) },
			res:      jobs.DrainResult{Cancelled: 1},
			operator: func(t *testing.T, h *harness, id int64, _ string) { retry(t, h, id) },
		},
		{name: "an operator's cancel reason, retried", operator: func(t *testing.T, h *harness, id int64, mimic string) {
			_, err := h.store.CancelJobs(context.Background(), engine.At(h.clock.Now()), []int64{id}, mimic)
			require.NoError(t, err)
			retry(t, h, id)
		}},
	} {
		t.Run(path.name, func(t *testing.T) {
			each(t, func(t *testing.T, h *harness) {
				claim := 6
				if path.seventh != nil {
					claim = 7
				}
				mimic, quoted := mimicRecord(6, claim)
				runs := 0
				require.NoError(t, jobs.Register(h.reg, func(context.Context, *jobs.Job[email]) error {
					switch runs++; {
					case runs < 6:
						return jobs.Snooze(0)
					case runs == 6:
						return jobs.Snooze(time.Hour)
					}
					return path.seventh(mimic)
				}))
				id := h.enqueue(email{To: "a"})
				require.Equal(t, jobs.DrainResult{Snoozed: 6}, h.drain(jobs.WorkerConfig{}))
				if path.seventh != nil {
					h.clock.Set(h.job(id).RunAt)
					require.Equal(t, path.res, h.drain(jobs.WorkerConfig{}))
				}
				if path.operator != nil {
					path.operator(t, h, id, mimic)
				}
				j := h.job(id)
				require.EqualValues(t, claim, j.Claims, "the record names the claim that stored it")

				if j.RunAt.After(h.clock.Now()) {
					h.clock.Set(j.RunAt) // a panic's backoff
				}
				requireFirstGiveBack(t, h, jobs.WorkerConfig{GiveBackFor: time.Minute}, id)
				requireNoRecord(t, j.LastError, quoted)
			})
		})
	}
}
