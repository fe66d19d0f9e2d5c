package jobs_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/coalesce"
	"github.com/sluicequeue/sluice/concurrency"
	"github.com/sluicequeue/sluice/jobs"
	"github.com/sluicequeue/sluice/ratelimit"
)

type ksReport struct{ Account string }

func (ksReport) Kind() string { return "ks_report" }

type ksDailyReport struct{ Account string }

func (ksDailyReport) Kind() string { return "ks_report/daily" }

// A coalesce key is stored as SCOPE/VALUE. A scope with "/" would let
// two scopes share keys: kind "ks_report/daily" with key "acct-1" and
// kind "ks_report" with key ["daily", "acct-1"] would both store
// "ks_report/daily/acct-1", and the daily report's call join the other
// kind's pending job (and, under Discard, be dropped, its handler never
// run). The same held for a Group ("sync/eu" with key "acct" against
// Group "sync" with key "eu/acct"). Registration refuses such a scope, as
// it does a rate limit's and a concurrency limit's, naming the kind or the
// Group; and the kind without "/" goes on coalescing its own calls.
func TestACoalesceScopeWithASlashIsRefusedAtRegistration(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		ran := map[string]int{}
		require.NoError(t, jobs.Register(h.reg, func(_ context.Context, j *jobs.Job[ksReport]) error { ran[j.Kind]++; return nil },
			jobs.Coalesce(coalesce.Rule[ksReport]{Key: func(a ksReport) any { return []any{"daily", a.Account} }})))
		err := jobs.Register(h.reg, func(_ context.Context, j *jobs.Job[ksDailyReport]) error { ran[j.Kind]++; return nil },
			jobs.Coalesce(coalesce.Rule[ksDailyReport]{Key: func(a ksDailyReport) any { return a.Account }}))
		require.ErrorIs(t, err, coalesce.ErrInvalid)
		require.ErrorContains(t, err, `kind "ks_report/daily" contains "/"`)
		err = jobs.Declare[ksDailyReport](h.reg, jobs.Coalesce(coalesce.Rule[ksDailyReport]{Key: "k", Group: "sync/eu"}))
		require.ErrorIs(t, err, coalesce.ErrInvalid)
		require.ErrorContains(t, err, `Group "sync/eu" contains "/"`)
		// Without a coalesce rule the kind's name may hold "/".
		require.NoError(t, jobs.Register(h.reg, func(_ context.Context, j *jobs.Job[ksDailyReport]) error { ran[j.Kind]++; return nil }))

		ctx := context.Background()
		first, err := h.client.Enqueue(ctx, ksReport{Account: "acct-1"})
		require.NoError(t, err)
		again, err := h.client.Enqueue(ctx, ksReport{Account: "acct-1"})
		require.NoError(t, err)
		require.True(t, again.Joined)
		require.Equal(t, first.ID, again.ID)
		daily, err := h.client.Enqueue(ctx, ksDailyReport{Account: "acct-1"})
		require.NoError(t, err)
		require.False(t, daily.Joined)
		h.drain(jobs.WorkerConfig{})
		require.Equal(t, map[string]int{"ks_report": 1, "ks_report/daily": 1}, ran, "each kind's job runs on its own handler")
	})
}

type ksLongKind struct{}

func (ksLongKind) Kind() string { return strings.Repeat("k", 250) }

// DESIGN.md: "Bad input gets a clear error, at the earliest point". A
// literal key (Key: "global") is the same for every job, so its stored
// form, SCOPE/global, is known at registration; a kind (or Group) of 250
// bytes makes it 257, over the 255 a key may hold. Registration used to
// accept each of the three rules, and then every enqueue of the kind
// failed: a declaration no job could ever use, found only at the first
// enqueue. Registration refuses it, naming the key and its length.
func TestALiteralKeyTooLongIsRefusedAtRegistration(t *testing.T) {
	group := strings.Repeat("g", 250)
	for name, c := range map[string]struct {
		opt     jobs.RegisterOption
		invalid error
		what    string
	}{
		"RateLimit":              {jobs.RateLimit(ratelimit.Limit[ksLongKind]{To: 1, Per: time.Hour, Key: "global"}), ratelimit.ErrInvalid, "rate-limit key"},
		"ConcurrencyLimit":       {jobs.ConcurrencyLimit(concurrency.Limit[ksLongKind]{To: 1, Key: "global"}), concurrency.ErrInvalid, "concurrency key"},
		"Coalesce":               {jobs.Coalesce(coalesce.Rule[ksLongKind]{Key: "global"}), coalesce.ErrInvalid, "coalesce key"},
		"RateLimit Group":        {jobs.RateLimit(ratelimit.Limit[ksReport]{To: 1, Per: time.Hour, Key: "global", Group: group}), ratelimit.ErrInvalid, "rate-limit key"},
		"ConcurrencyLimit Group": {jobs.ConcurrencyLimit(concurrency.Limit[ksReport]{Key: "global", Group: group}), concurrency.ErrInvalid, "concurrency key"},
		"Coalesce Group":         {jobs.Coalesce(coalesce.Rule[ksReport]{Key: "global", Group: group}), coalesce.ErrInvalid, "coalesce key"},
	} {
		var err error
		if strings.HasSuffix(name, "Group") {
			err = jobs.Declare[ksReport](jobs.NewRegistry(), c.opt)
		} else {
			err = jobs.Declare[ksLongKind](jobs.NewRegistry(), c.opt)
		}
		require.ErrorIs(t, err, c.invalid, name)
		require.ErrorContains(t, err, c.what+` "`, name)
		require.ErrorContains(t, err, "is 257 bytes; a key holds at most 255", name)
	}
	// A key function's result is known only at enqueue, and a literal
	// that fits is accepted.
	require.NoError(t, jobs.Declare[ksLongKind](jobs.NewRegistry(),
		jobs.RateLimit(ratelimit.Limit[ksLongKind]{To: 1, Per: time.Hour, Key: func(ksLongKind) any { return "global" }}),
		jobs.ConcurrencyLimit(concurrency.Limit[ksLongKind]{Key: "glob"}),
		jobs.Coalesce(coalesce.Rule[ksLongKind]{Key: ""})))
}
