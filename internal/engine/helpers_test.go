package engine_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/ratelimit"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func at(d time.Duration) time.Time { return t0.Add(d) }

func fixed(t time.Time) func() time.Time { return func() time.Time { return t } }

func job(kind, queue string, prio int) engine.NewJob {
	return engine.NewJob{Kind: kind, Queue: queue, Priority: prio, Args: []byte(`{}`), MaxAttempts: 3}
}

func enqueue(t testing.TB, s *engine.Store, now time.Time, jobs ...engine.NewJob) []int64 {
	t.Helper()
	res, err := s.Enqueue(context.Background(), nil, engine.At(now), jobs)
	require.NoError(t, err)
	require.Len(t, res, len(jobs))
	ids := make([]int64, len(res))
	for i, r := range res {
		ids[i] = r.ID
	}
	return ids
}

func register(t testing.TB, s *engine.Store, now time.Time) int64 {
	t.Helper()
	id, err := s.RegisterProcess(context.Background(), engine.Process{Kind: "worker", Name: "test", PID: 1}, engine.At(now))
	require.NoError(t, err)
	return id
}

func claim(t *testing.T, s *engine.Store, pid int64, now time.Time, max int, queues ...string) *engine.ClaimResult {
	t.Helper()
	if len(queues) == 0 {
		queues = []string{"default"}
	}
	res, err := s.Claim(context.Background(), engine.ClaimParams{ProcessID: pid, Queues: queues, Max: max, Clock: engine.At(now)})
	require.NoError(t, err)
	return res
}

func ids(jobs []*engine.Job) []int64 {
	out := make([]int64, len(jobs))
	for i, j := range jobs {
		out[i] = j.ID
	}
	return out
}

// runsOf are the runs of claimed jobs.
func runsOf(jobs []*engine.Job) []engine.Run {
	out := make([]engine.Run, len(jobs))
	for i, j := range jobs {
		out[i] = j.Run()
	}
	return out
}

// runs are the runs the listed jobs make now: each under the claim its job
// is at.
func runs(t testing.TB, s *engine.Store, ids ...int64) []engine.Run {
	t.Helper()
	out := make([]engine.Run, len(ids))
	for i, id := range ids {
		j, err := s.GetJob(context.Background(), id)
		require.NoError(t, err)
		out[i] = engine.Run{ID: id, Claim: j.Claims}
	}
	return out
}

// ran returns the transitions as the outcomes of the runs their jobs
// make now.
func ran(t testing.TB, s *engine.Store, ts ...engine.Transition) []engine.Transition {
	t.Helper()
	out := make([]engine.Transition, len(ts))
	for i, tr := range ts {
		tr.Claim = runs(t, s, tr.ID)[0].Claim
		out[i] = tr
	}
	return out
}

func state(t *testing.T, s *engine.Store, id int64) *engine.JobInfo {
	t.Helper()
	j, err := s.GetJob(context.Background(), id)
	require.NoError(t, err)
	return j
}

// limits is a Limits over a fixed table of scopes.
type limits map[string]ratelimit.Spec

func (l limits) RateSpec(_, key string) (ratelimit.Spec, bool) {
	s, ok := l[ratelimit.ScopeOf(key)]
	return s, ok
}

func (l limits) QueueLimits(queue string) []engine.QueueLimit {
	key := engine.QueueScope + "/" + queue
	if s, ok := l[key]; ok {
		return []engine.QueueLimit{{Key: key, Spec: s}}
	}
	return nil
}

func spec(t testing.TB, scope string, to int, per time.Duration, burst int) ratelimit.Spec {
	t.Helper()
	p, b, err := ratelimit.NewParams(to, per, burst)
	require.NoError(t, err)
	return ratelimit.Spec{Scope: scope, To: to, Per: per, Burst: b, Params: p}
}
