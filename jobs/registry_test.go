package jobs_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/jobs"
	"github.com/sluicequeue/sluice/ratelimit"
)

func ok(context.Context, *jobs.Job[noop]) error { return nil }

func TestRegisterRefusesDuplicatesAndBadOptions(t *testing.T) {
	reg := jobs.NewRegistry()
	require.NoError(t, jobs.Register(reg, ok))
	err := jobs.Register(reg, ok)
	require.ErrorContains(t, err, "register noop: the kind is already registered")

	cases := []struct {
		opt  jobs.RegisterOption
		want string
	}{
		{jobs.MaxAttempts(0), "MaxAttempts is 0"},
		{jobs.Queue(""), "Queue: the name is empty"},
		{jobs.Timeout(0), "Timeout is 0"},
		{jobs.RateLimit(ratelimit.Limit[email]{To: 10, Per: time.Second, Burst: 11, Key: "global"}), "Burst is 11"},
		{jobs.RateLimit(ratelimit.Limit[email]{To: 10, Per: 0, Key: "global"}), "Per is 0s"},
		{jobs.RateLimit(ratelimit.Limit[email]{To: -1, Per: time.Second, Key: "global"}), "To is -1"},
		{jobs.RateLimit(ratelimit.Limit[email]{To: 5_000_000, Per: time.Second, Key: "global"}), "Per/(To-Burst+1)"},
		{jobs.RateLimit(ratelimit.Limit[email]{To: 1, Per: time.Second, Key: 42}), "unsupported declaration of type int"},
		{jobs.RateLimit(ratelimit.Limit[email]{To: 1, Per: time.Second, Key: "x", Group: "a/b"}), `Group "a/b" contains "/"`},
		{jobs.RateLimit(ratelimit.Limit[noop]{To: 1, Per: time.Second, Key: "x"}), "declared as ratelimit.Limit[github.com/sluicequeue/sluice/jobs_test.noop]"},
	}
	for _, c := range cases {
		err := jobs.Register(jobs.NewRegistry(), func(context.Context, *jobs.Job[email]) error { return nil }, c.opt)
		require.ErrorContains(t, err, "register email")
		require.ErrorContains(t, err, c.want)
	}

	err = jobs.Register(jobs.NewRegistry(), func(context.Context, *jobs.Job[email]) error { return nil },
		jobs.RateLimit(ratelimit.Limit[email]{To: 1, Per: time.Second, Key: "a"}),
		jobs.RateLimit(ratelimit.Limit[email]{To: 100, Per: time.Hour, Key: "a"}))
	require.ErrorContains(t, err, `two rate limits share the budget scope "email"`)

	require.ErrorContains(t, jobs.Register[noop](jobs.NewRegistry(), nil), "the handler is nil")
}

func TestRateSpecFindsTheKindsLimitByScope(t *testing.T) {
	reg := jobs.NewRegistry()
	require.NoError(t, jobs.Register(reg, func(context.Context, *jobs.Job[email]) error { return nil },
		jobs.RateLimit(ratelimit.Limit[email]{To: 100, Per: time.Minute, Burst: 10, Key: "global"}),
		jobs.RateLimit(ratelimit.Limit[email]{To: 5000, Per: 24 * time.Hour, Key: "global", Group: "daily"})))
	s, ok := reg.RateSpec("email", "email/global")
	require.True(t, ok)
	require.Equal(t, 100, s.To)
	s, ok = reg.RateSpec("email", "daily/global")
	require.True(t, ok)
	require.Equal(t, 5000, s.To)
	_, ok = reg.RateSpec("email", "other/global")
	require.False(t, ok)
	_, ok = reg.RateSpec("nope", "email/global")
	require.False(t, ok)
}
