package engine_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/sluicequeue/sluice/coalesce"
	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
)

func withMetadata(j engine.NewJob, m map[string]string) engine.NewJob {
	j.Metadata = m
	return j
}

// Metadata is stored with the job, as given (NUL and every valid UTF-8
// character included), by every way a job is written, and a claim and an
// inspection read it back.
func TestMetadataRoundTripsOnEveryWrite(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		m := map[string]string{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "nul": "a\x00b", "émoji": "🚀 \u2028"}
		one := enqueue(t, s, t0, withMetadata(job("a", "default", 0), m))[0]
		many := enqueue(t, s, t0, withMetadata(job("a", "default", 0), map[string]string{"i": "1"}), job("a", "default", 0))
		co := job("a", "default", 0)
		co.Coalesce = &engine.Coalesce{Key: "a/c", Rule: coalesce.Spec{OnConflict: coalesce.Discard}}
		coID := enqueue(t, s, t0, withMetadata(co, map[string]string{"c": "first"}))[0]

		got, err := engine.DecodeMetadata(state(t, s, one).Metadata)
		require.NoError(t, err)
		require.Equal(t, m, got)
		require.Empty(t, state(t, s, many[1]).Metadata, "no metadata is stored as none")
		got, err = engine.DecodeMetadata(state(t, s, coID).Metadata)
		require.NoError(t, err)
		require.Equal(t, map[string]string{"c": "first"}, got)

		pid := register(t, s, t0)
		res := claim(t, s, pid, t0, 10)
		require.Len(t, res.Jobs, 4)
		byID := map[int64]*engine.Job{}
		for _, j := range res.Jobs {
			byID[j.ID] = j
		}
		got, err = engine.DecodeMetadata(byID[one].Metadata)
		require.NoError(t, err)
		require.Equal(t, m, got)
		require.JSONEq(t, `{"i":"1"}`, byID[many[0]].Metadata)
		require.Zero(t, byID[one].Deferrals)
		require.Zero(t, byID[one].LimitWait())
	})
}

func TestBadMetadataIsRefusedBeforeAnythingIsWritten(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		for _, c := range []struct {
			name string
			m    map[string]string
			want string
		}{
			{"empty key", map[string]string{"": "x"}, "a key is empty"},
			{"invalid UTF-8 key", map[string]string{"k\xff": "x"}, "not valid UTF-8"},
			{"invalid UTF-8 value", map[string]string{"k": "v\xfe"}, `the value of "k" is not valid UTF-8`},
			{"control character in key", map[string]string{"k\x00": "x"}, "control character"},
			{"long key", map[string]string{strings.Repeat("k", 256): "x"}, "256 bytes; a key holds at most 255"},
			{"huge value", map[string]string{"k": strings.Repeat("v", engine.MaxMetadataBytes)}, "metadata holds at most 8192"},
			{"huge after escaping", map[string]string{"k": strings.Repeat("\x00", 2000)}, "metadata holds at most 8192"},
		} {
			_, err := s.Enqueue(ctx, nil, engine.At(t0), []engine.NewJob{job("a", "default", 0), withMetadata(job("a", "default", 0), c.m)})
			require.ErrorIs(t, err, engine.ErrInvalidMetadata, c.name)
			require.ErrorContains(t, err, c.want, c.name)
			require.ErrorContains(t, err, "job 1", c.name)
		}
		st, err := s.Stats(ctx)
		require.NoError(t, err)
		require.Empty(t, st, "all or nothing: no job was written")
	})
}

// A claim that defers a job counts it, says why and since when, in the
// statement that moves the job; the count survives the job's run, and the
// wait starts again on its next deferral.
func TestDeferralsAreCountedWithTheirReason(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		lim := limits{"k": spec(t, "k", 1, time.Second, 1)}
		jobIDs := enqueue(t, s, t0, limited("k", "k/x"), limited("k", "k/x"), limited("k", "k/x"))
		pid := register(t, s, t0)
		res := claimLimited(t, s, pid, t0, 10, lim, 1500*time.Millisecond)
		require.Equal(t, []int64{jobIDs[0]}, ids(res.Jobs))
		require.Zero(t, res.Jobs[0].Deferrals)

		slotted, parked := state(t, s, jobIDs[1]), state(t, s, jobIDs[2])
		require.Equal(t, engine.StateScheduled, slotted.State)
		require.Equal(t, 1, slotted.Deferrals)
		require.Equal(t, "rate limit k/x", slotted.DeferralReason)
		require.Equal(t, t0, slotted.DeferredAt)
		require.Equal(t, engine.StateParked, parked.State)
		require.Equal(t, 1, parked.Deferrals)
		require.Equal(t, "rate limit k/x (parked past the horizon)", parked.DeferralReason)

		// Another job takes the slot: the job waits again, its wait still
		// counted from its first deferral.
		late := enqueue(t, s, at(time.Second), limited("k", "k/x"))
		require.Equal(t, late, ids(claimLimited(t, s, pid, at(time.Second), 1, lim, time.Hour).Jobs))
		_, _, err := s.Promote(ctx, engine.At(at(time.Second)), 100)
		require.NoError(t, err)
		res = claimLimited(t, s, pid, at(time.Second), 1, lim, time.Hour)
		require.Empty(t, res.Jobs)
		again := state(t, s, jobIDs[1])
		require.Equal(t, 2, again.Deferrals)
		require.Equal(t, t0, again.DeferredAt, "the wait began at the first deferral")

		// Its slot comes: the claim hands it over with what it waited.
		_, _, err = s.Promote(ctx, engine.At(at(2*time.Second)), 100)
		require.NoError(t, err)
		res = claimLimited(t, s, pid, at(2*time.Second), 1, lim, time.Hour)
		require.Equal(t, []int64{jobIDs[1]}, ids(res.Jobs))
		j := res.Jobs[0]
		require.Equal(t, 2, j.Deferrals)
		require.Equal(t, "rate limit k/x", j.DeferralReason)
		require.Equal(t, at(2*time.Second), j.ClaimedAt)
		require.Equal(t, 2*time.Second, j.LimitWait())

		// It fails and is retried: a retry is not a deferral, and once it
		// has run its old wait is over.
		retry := at(2500 * time.Millisecond)
		require.NoError(t, s.Finish(ctx, pid, engine.At(retry), engine.Outcomes{Others: ran(t, s,
			engine.Transition{ID: j.ID, State: engine.StateReady, RunAt: retry, Error: "boom"},
		)}))
		info := state(t, s, j.ID)
		require.Equal(t, 2, info.Deferrals)
		require.True(t, info.DeferredAt.IsZero(), "it ran since its last deferral")
		res = claimLimited(t, s, pid, retry, 1, lim, time.Hour)
		require.Empty(t, res.Jobs, "the budget is spent until 3s")
		info = state(t, s, j.ID)
		require.Equal(t, 3, info.Deferrals)
		require.Equal(t, retry, info.DeferredAt, "a new wait")
	})
}

// The jobs a sweep defers in bulk are counted as deferred too.
func TestDeferOverflowCountsItsDeferrals(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		lim := limits{"k": spec(t, "k", 1, time.Minute, 1)}
		flood := make([]engine.NewJob, 6)
		for i := range flood {
			flood[i] = limited("k", "k/x")
		}
		got := enqueue(t, s, t0, flood...)
		pid := register(t, s, t0)
		res := claimLimited(t, s, pid, t0, 2, lim, 3*time.Minute)
		require.Len(t, res.Overflows, 1)
		swept, _, err := s.DeferOverflow(context.Background(), engine.At(t0), res.Overflows[0], 3*time.Minute, 20)
		n := len(swept)
		require.NoError(t, err)
		require.Positive(t, n)
		for _, id := range got[1:] {
			j := state(t, s, id)
			require.Equal(t, 1, j.Deferrals, "job %d is deferred once", id)
			require.True(t, strings.HasPrefix(j.DeferralReason, "rate limit k/x"), j.DeferralReason)
			require.Equal(t, t0, j.DeferredAt)
		}
	})
}

// Whatever EncodeMetadata accepts, DecodeMetadata gives back as it was,
// through the plain fast path or encoding/json; text written by hand is
// read as JSON, and text that is not an object of strings is an error.
func TestMetadataEncodingRoundTrips(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		m := rapid.MapOf(rapid.StringN(1, 20, -1), rapid.String()).Draw(t, "m")
		enc, err := engine.EncodeMetadata(m)
		if err != nil {
			require.ErrorIs(t, err, engine.ErrInvalidMetadata)
			return
		}
		got, err := engine.DecodeMetadata(enc)
		require.NoError(t, err)
		if len(m) == 0 {
			require.Nil(t, got)
			return
		}
		require.Equal(t, m, got)
	})
	for stored, want := range map[string]map[string]string{
		`{ "a" : "b" }`:          {"a": "b"},
		`{"a":"b","c":"d"}`:      {"a": "b", "c": "d"},
		`{"a":"\u00e9","b":"x"}`: {"a": "é", "b": "x"},
		`{}`:                     {},
	} {
		got, err := engine.DecodeMetadata(stored)
		require.NoError(t, err, stored)
		require.Equal(t, want, got, stored)
	}
	for _, bad := range []string{`{"a":"b",}`, `{"a":1}`, `["a"]`, `{"a":"b"`, `{"a""b"}`, "{\"a\":\"\x01\"}"} {
		_, err := engine.DecodeMetadata(bad)
		require.ErrorIs(t, err, engine.ErrInvalidMetadata, bad)
	}
}

// The stored form is what encoding/json writes (keys sorted, its escapes),
// whether EncodeMetadata's fast path for plain ASCII wrote it or
// encoding/json did.
func TestMetadataIsStoredAsEncodingJSONWritesIt(t *testing.T) {
	var plain, escaped []rune
	for r := rune(' '); r <= '~'; r++ {
		if strings.ContainsRune(`"\<>&`, r) {
			escaped = append(escaped, r)
		} else {
			plain = append(plain, r)
		}
	}
	escaped = append(escaped, 0x1f, 0x7f, 0x80, 0x2028)
	// Mostly plain ASCII, the fast path's input, and now and then a string
	// with what encoding/json escapes, which the fast path must leave to it.
	ascii := func(minLen int) *rapid.Generator[string] {
		return rapid.OneOf(rapid.StringOfN(rapid.RuneFrom(plain), minLen, 20, -1), rapid.StringOfN(rapid.RuneFrom(plain), minLen, 20, -1),
			rapid.StringOfN(rapid.RuneFrom(plain), minLen, 20, -1), rapid.StringOfN(rapid.RuneFrom(append(plain, escaped...)), minLen, 20, -1))
	}
	rapid.Check(t, func(t *rapid.T) {
		key, value := ascii(1), ascii(0)
		if rapid.Bool().Draw(t, "unicode") {
			key, value = rapid.StringN(1, 20, -1), rapid.String()
		}
		m := rapid.MapOfN(key, value, 1, 4).Draw(t, "m")
		enc, err := engine.EncodeMetadata(m)
		if err != nil {
			require.ErrorIs(t, err, engine.ErrInvalidMetadata)
			return
		}
		want, err := json.Marshal(m)
		require.NoError(t, err)
		require.Equal(t, string(want), enc)
	})
}
