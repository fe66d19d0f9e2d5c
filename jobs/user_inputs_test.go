package jobs_test

// A user's tests of their handlers through jobs.Perform, and bad input
// refused at the earliest point.

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/clock"
	"github.com/sluicequeue/sluice/coalesce"
	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
	"github.com/sluicequeue/sluice/jobs"
	"github.com/sluicequeue/sluice/ratelimit"
)

type rvProfile struct {
	Name  string
	Score float64
}

func (rvProfile) Kind() string { return "rv_profile" }

// jobs.Perform: "The args go through the same JSON encoding a
// stored job's do, so a field that would not survive storage fails here
// too." An enqueue refuses args with a string that is not valid UTF-8
// (ErrInvalidArgs: encoding/json would turn each bad byte into U+FFFD).
// Perform json.Marshals them itself, so the handler runs with the
// replaced text and Perform returns nil: a user's test passes on args
// that production can never enqueue.
func TestPerformRefusesArgsAnEnqueueRefuses(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		var got []string
		require.NoError(t, jobs.Register(h.reg, func(_ context.Context, j *jobs.Job[rvProfile]) error {
			got = append(got, j.Args.Name)
			return nil
		}))
		bad := rvProfile{Name: "Jos\xe9"}
		_, enqErr := h.client.Enqueue(context.Background(), bad)
		require.ErrorIs(t, enqErr, jobs.ErrInvalidArgs, "the enqueue refuses it (held)")

		err := jobs.Perform(context.Background(), h.reg, bad)
		require.ErrorIs(t, err, jobs.ErrInvalidArgs, "Perform should refuse what an enqueue refuses; the handler saw %q", got)
		require.Empty(t, got, "the handler must not run on args that would not survive storage")

		// Args that do not marshal at all fail both ways (held).
		_, enqErr = h.client.Enqueue(context.Background(), rvProfile{Score: math.NaN()})
		require.ErrorContains(t, enqErr, "encode args")
		require.ErrorContains(t, jobs.Perform(context.Background(), h.reg, rvProfile{Score: math.NaN()}), "encode args")
	})
}

// bad values in a user's registration and enqueue are refused at the
// earliest point with an error naming them, before anything is written
// (what the existing tests do not cover already).
func TestBadInputAtTheEarliestPoint(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		require.NoError(t, jobs.Declare[rvProfile](h.reg))
		huge := strings.Repeat("q", 16<<10)
		for _, c := range []struct {
			opts []jobs.EnqueueOption
			want string
		}{
			{[]jobs.EnqueueOption{jobs.Queue(huge)}, "16384 bytes"},
			{[]jobs.EnqueueOption{jobs.Queue("")}, "empty"},
			{[]jobs.EnqueueOption{jobs.Queue("mail ")}, "ends with a space"},
			{[]jobs.EnqueueOption{jobs.Delay(time.Second), jobs.RunAt(t0)}, "both Delay and RunAt"},
			{[]jobs.EnqueueOption{jobs.MaxAttempts(-1)}, "MaxAttempts is -1"},
			{[]jobs.EnqueueOption{jobs.WithMetadata(map[string]string{"": "x"})}, "metadata"},
			{[]jobs.EnqueueOption{jobs.WithMetadata(map[string]string{"k\x00": "x"})}, "metadata"},
			{[]jobs.EnqueueOption{jobs.WithMetadata(map[string]string{"k": "\xff"})}, "UTF-8"},
		} {
			_, err := h.client.Enqueue(ctx, rvProfile{}, c.opts...)
			require.ErrorContains(t, err, c.want, "want %q", c.want)
			require.Less(t, len(err.Error()), 600, "the error quotes a prefix: %.700q", err.Error())
		}
		// A batch with one bad item writes nothing.
		_, err := h.client.EnqueueMany(ctx, []jobs.Item{{Args: rvProfile{}}, {Args: rvProfile{}, Options: []jobs.EnqueueOption{jobs.Queue(huge)}}})
		require.ErrorContains(t, err, "enqueue item 1")
		st, err := h.store.Stats(ctx)
		require.NoError(t, err)
		require.Empty(t, st, "nothing was written")

		// The longest Delay lands in 2318, stored as is (rounded up to the
		// microsecond, as every time a job must not run before), not
		// wrapped.
		far := h.enqueue(rvProfile{}, jobs.Delay(time.Duration(math.MaxInt64)))
		require.Equal(t, h.clock.Now().Add(time.Duration(math.MaxInt64)).Truncate(time.Microsecond).Add(time.Microsecond), h.job(far).RunAt)

		// Registration: limits with zero, negative and huge values.
		work := func(context.Context, *jobs.Job[rvProfile]) error { return nil }
		for _, c := range []struct {
			opt  jobs.RegisterOption
			want string
		}{
			{jobs.RateLimit(ratelimit.Limit[rvProfile]{To: 1, Per: -time.Second, Key: "g"}), "Per is -1s"},
			{jobs.RateLimit(ratelimit.Limit[rvProfile]{To: 1, Per: time.Duration(math.MaxInt64), Key: "g"}), "Per"},
			{jobs.RateLimit(ratelimit.Limit[rvProfile]{To: math.MaxInt32 + 1, Per: time.Hour, Key: "g"}), "To is 2147483648"},
			{jobs.RateLimit(ratelimit.Limit[rvProfile]{To: 10, Per: time.Second, Burst: -1, Key: "g"}), "Burst is -1"},
			{jobs.Backoff(nil), "Backoff"},
		} {
			err := jobs.Register(jobs.NewRegistry(), work, c.opt)
			require.ErrorContains(t, err, c.want, "want %q", c.want)
		}
	})
}

type rvDecoded struct{ Payload map[string]any }

func (rvDecoded) Kind() string { return "rv_decoded" }

// rate-limits.md: "Numbers and strings give the same key
// (1 and "1")". A key taken from args decoded from JSON into an `any`
// (a float64, as encoding/json gives every number) is refused at enqueue,
// with an error that tells the user to return "a number":
// "unsupported key value: float64 (return a string, a number, …)". A
// whole float64 should give the key of the integer; a fractional one
// either its text or an error that says floats are not keys.
func TestAFloatKeyIsANumber(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		require.NoError(t, jobs.Declare[rvDecoded](h.reg, jobs.RateLimit(ratelimit.Limit[rvDecoded]{
			To: 1, Per: time.Hour, Key: func(a rvDecoded) any { return a.Payload["account"] }})))
		_, err := h.client.Enqueue(context.Background(), rvDecoded{Payload: map[string]any{"account": float64(42)}})
		require.NoError(t, err, "a number is a key")
		j, err := h.store.ListJobs(context.Background(), engine.JobFilter{Kind: "rv_decoded"})
		require.NoError(t, err)
		require.Len(t, j, 1)
		require.Equal(t, "rv_decoded/42", j[0].RateKeys[0].Key, "float64(42) gives the key of 42")
	})
}

type rvDebounced struct{ K string }

func (rvDebounced) Kind() string { return "rv_debounced" }

// guarantees.md: "no retry (nor snooze) waits past the end
// of the year 9999, the latest time a job may run at", and an enqueue
// whose Delay lands after it is refused ("the run time 10000-01-02… is
// after 9999-12-31T23:59:59Z", TestEnqueueRefusesNumbersAndTimesThatWouldWrap).
// A coalescing rule's Debounce moves the run time to now + Debounce
// (engine: Store.insertCoalesced and Store.join, coalesce.Spec.RunAt) with
// no such bound, so the same 48 h, as a Debounce, stores a job that runs
// in the year 10000 — on the first call and on a joining one.
func TestADebounceDoesNotScheduleAfterTheYear9999(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		require.NoError(t, jobs.Declare[rvDebounced](h.reg, jobs.Coalesce(coalesce.Rule[rvDebounced]{
			Key: func(a rvDebounced) any { return a.K }, Debounce: 48 * time.Hour})))
		late := jobs.NewClient(testdb.Public(h.store), h.reg, jobs.ClientConfig{Clock: clock.NewFake(time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC))})
		for range 2 { // the call that creates the job, then one that joins it
			res, err := late.Enqueue(context.Background(), rvDebounced{K: "a"})
			if err != nil {
				require.ErrorContains(t, err, "9999", "refused, naming the bound")
				continue
			}
			j := h.job(res.ID)
			require.False(t, j.RunAt.After(engine.MaxRunAt), "run_at %s is after %s", j.RunAt, engine.MaxRunAt)
		}
	})
}
