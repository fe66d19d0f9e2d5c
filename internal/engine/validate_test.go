package engine_test

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/coalesce"
	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/keys"
	"github.com/sluicequeue/sluice/internal/testdb"
)

// longest is a key of exactly keys.MaxBytes bytes whose characters take
// one to four bytes each.
var longest = func() string {
	k := "k/" + strings.Repeat("é€🔑a", 25) // 2 + 25*10 bytes
	return k + strings.Repeat("x", keys.MaxBytes-len(k))
}()

// badKeys are refused alike on every database, with the reason each gives.
var badKeys = []struct {
	name, key, want string
	tooLong         bool
}{
	{"one byte over", strings.Repeat("k", keys.MaxBytes+1), "is 256 bytes; a key holds at most 255", true},
	{"16 KiB", strings.Repeat("k", 16<<10), "is 16384 bytes", true},
	{"multi-byte over", strings.Repeat("é", 128), "is 256 bytes", true},
	{"invalid UTF-8", "acct/\xff\xfe", "is not valid UTF-8 (byte 5 is 0xff)", false},
	{"cut character", "acct/\xe2\x82", "is not valid UTF-8", false},
	{"NUL", "acct/\x00", "contains a NUL byte at byte 5", false},
	{"tab", "a\tb", "contains a tab", false},
	{"DEL", "a\x7f", "contains the control character U+007F", false},
	// MySQL's keys compare ignoring trailing spaces: "k/a " would share
	// "k/a"'s budget and semaphore there (charging one of them twice over
	// its limit), and not on PostgreSQL and SQLite.
	{"trailing space", "k/a ", "ends with a space", false},
}

func TestEnqueueRefusesBadKeysAlikeOnEveryDatabase(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		for _, c := range badKeys {
			jobsFor := map[string]engine.NewJob{
				"rate-limit key":  limited("k", c.key),
				"concurrency key": slotted(c.key, 1),
				"coalesce key":    coalescing(c.key),
				"kind":            job(c.key, "default", 0),
				"queue":           job("k", c.key, 0),
			}
			for what, j := range jobsFor {
				_, err := s.Enqueue(ctx, nil, engine.At(t0), []engine.NewJob{job("k", "default", 0), j})
				require.Error(t, err, "%s %s", c.name, what)
				require.ErrorContains(t, err, "job 1")
				require.ErrorContains(t, err, what+` "`)
				require.ErrorContains(t, err, c.want)
				require.ErrorIs(t, err, keys.ErrInvalid)
				require.Equal(t, c.tooLong, errors.Is(err, engine.ErrKeyTooLong), "%s %s: %v", c.name, what, err)
				if what != "kind" { // Enqueue's own prefix names the kind as given
					require.Less(t, len(err.Error()), 400, "the error shows a prefix of the key, not the key")
				}
			}
		}
		st, err := s.Stats(ctx)
		require.NoError(t, err)
		require.Empty(t, st, "nothing was written")
	})
}

func TestTheLongestKeyWorksOnEveryDatabase(t *testing.T) {
	require.Len(t, longest, keys.MaxBytes)
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		lim := limits{"k": spec(t, "k", 10, time.Second, 10)}
		ids := enqueue(t, s, t0, limited("k", longest), slotted(longest, 1), coalescing(longest))
		pid := register(t, s, t0)
		res := claimLimited(t, s, pid, t0, 10, lim, 0)
		require.ElementsMatch(t, ids, jobIDs(res.Jobs), "a budget, a semaphore and a coalesce key of 255 bytes")
		bs, err := s.ListBudgets(ctx)
		require.NoError(t, err)
		require.Equal(t, longest, bs[0].Name)
		sems, err := s.ListSemaphores(ctx)
		require.NoError(t, err)
		require.Equal(t, longest, sems[0].Name)
	})
}

func TestSetOverrideChecksTheTargetAlikeOnEveryDatabase(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		for _, c := range badKeys {
			err := s.SetOverride(ctx, engine.Override{Target: c.key, To: 1, Per: time.Second}, t0)
			require.ErrorContains(t, err, "limit override: target")
			require.ErrorContains(t, err, c.want)
		}
		require.ErrorContains(t, s.SetOverride(ctx, engine.Override{Target: "", To: 1, Per: time.Second}, t0), "is empty")
		require.NoError(t, s.SetOverride(ctx, engine.Override{Target: longest, To: 1, Per: time.Second}, t0))
		os, err := s.ListOverrides(ctx)
		require.NoError(t, err)
		require.Equal(t, longest, os[0].Target)
	})
}

func TestEnqueueRefusesArgsTheDatabaseWouldChange(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		for _, c := range []struct{ args, want string }{
			{`{"name":"` + "\xff" + `"}`, "args are not valid UTF-8 (at byte 9)"},
			{`{"name":"` + strings.Repeat("x", 16<<10) + "\xe2\x82" + `"}`, "args are not valid UTF-8 (at byte 16393)"},
			{`{"name":"a` + "\x00" + `"}`, "args hold a NUL byte (at byte 10)"},
		} {
			bad := job("k", "default", 0)
			bad.Args = []byte(c.args)
			_, err := s.Enqueue(ctx, nil, engine.At(t0), []engine.NewJob{job("k", "default", 0), bad})
			require.ErrorContains(t, err, "job 1 (k)")
			require.ErrorContains(t, err, c.want)
		}
		ok := job("k", "default", 0)
		ok.Args = []byte(`{"name":"é€🔑\ufffd\\u0000"}`)
		id := enqueue(t, s, t0, ok)[0]
		require.Equal(t, string(ok.Args), string(state(t, s, id).Args))
	})
}

func TestEnqueueRefusesNumbersTheColumnsWouldWrap(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		cases := []struct {
			edit func(*engine.NewJob)
			want string
		}{
			{func(j *engine.NewJob) { j.Priority = math.MaxInt32 + 1 }, "priority 2147483648 is out of range"},
			{func(j *engine.NewJob) { j.Priority = math.MinInt32 - 1 }, "priority -2147483649 is out of range"},
			{func(j *engine.NewJob) { j.Priority = math.MaxInt }, "priority 9223372036854775807 is out of range"},
			{func(j *engine.NewJob) { j.MaxAttempts = 1 << 32 }, "max attempts 4294967296 is out of range"},
			{func(j *engine.NewJob) { j.RunAt = time.Date(300000, 1, 1, 0, 0, 0, 0, time.UTC) }, "run at 300000-01-01T00:00:00Z is out of range"},
			{func(j *engine.NewJob) { j.RunAt = engine.MaxRunAt.Add(time.Microsecond) }, "is out of range"},
			{func(j *engine.NewJob) { j.Conc = &engine.Conc{Key: "c", To: 1 << 32, Duration: time.Minute} }, "concurrency limit 4294967296 is out of range"},
		}
		for _, c := range cases {
			j := job("k", "default", 0)
			c.edit(&j)
			_, err := s.Enqueue(ctx, nil, engine.At(t0), []engine.NewJob{j})
			require.ErrorContains(t, err, c.want)
		}
		edge := job("k", "default", math.MinInt32)
		edge.MaxAttempts, edge.RunAt = math.MaxInt32, engine.MaxRunAt
		top := job("k", "default", math.MaxInt32)
		ids := enqueue(t, s, t0, edge, top)
		got := state(t, s, ids[0])
		require.Equal(t, math.MinInt32, got.Priority)
		require.Equal(t, math.MaxInt32, got.MaxAttempts)
		require.Equal(t, engine.MaxRunAt.Truncate(time.Microsecond), got.RunAt)
		require.Equal(t, math.MaxInt32, state(t, s, ids[1]).Priority)
	})
}

func TestIsDataErrorTellsRefusedValuesFromOtherErrors(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		// A NOT NULL column refuses NULL on every database.
		_, err := s.DB().Exec(ctx, `INSERT INTO sluice_jobs (kind) VALUES (NULL)`)
		require.Error(t, err)
		require.True(t, engine.IsDataError(s, err), "%v", err)

		// Text that is not UTF-8, or holds NUL, is refused by PostgreSQL
		// and MariaDB (SQLite keeps any bytes): the refusal the worker's
		// error text used to hit, before the store kept it escaped
		// (LastErrorText); a key it does not escape still can.
		pid := register(t, s, t0)
		id := enqueue(t, s, t0, job("k", "default", 0))[0]
		claim(t, s, pid, t0, 1)
		for _, text := range []string{"upstream said \xff", "a\x00b"} {
			err = s.Finish(ctx, pid, engine.At(t0), engine.Outcomes{Others: ran(t, s,
				engine.Transition{ID: id, State: engine.StateScheduled, Wait: time.Second, WaitKey: text, AttemptDelta: -1, Error: text})})
			switch {
			case s.Dialect().Name() == "sqlite", s.Dialect().Name() == "mysql" && text == "a\x00b":
				require.NoError(t, err, "%q", text)
			default:
				require.Error(t, err, "%q", text)
				require.True(t, engine.IsDataError(s, err), "%q: %v", text, err)
			}
		}

		// Errors that are not about a value are not data errors.
		_, err = s.DB().Exec(ctx, `SELECT * FROM sluice_no_such_table`)
		require.Error(t, err)
		require.False(t, engine.IsDataError(s, err))
		cancelled, cancel := context.WithCancel(ctx)
		cancel()
		_, err = s.DB().Exec(cancelled, `SELECT 1`)
		require.Error(t, err)
		require.False(t, engine.IsDataError(s, err))
		require.False(t, engine.IsDataError(s, errors.New("connection reset by peer")))
		require.False(t, engine.IsDataError(s, nil))
	})
}

// smallPacket is a dialect whose server carries little in one statement,
// like MySQL with a small max_allowed_packet.
type smallPacket struct {
	engine.Dialect
	max int
}

func (d smallPacket) MaxArgsBytes() int { return d.max }

func TestArgsAndInsertBatchesStayUnderTheServersCap(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		rs, rec := testdb.Record(s)
		small := engine.New(smallPacket{Dialect: s.Dialect(), max: 2000}, rs.DB())
		require.Equal(t, 2000, engine.MaxArgsBytes(small))

		big := job("k", "default", 0)
		big.Args = []byte(`"` + strings.Repeat("x", 1999) + `"`)
		_, err := small.Enqueue(ctx, nil, engine.At(t0), []engine.NewJob{big})
		require.ErrorContains(t, err, "args are 2001 bytes; the "+s.Dialect().Name()+" server carries at most 2000 bytes of args in one job")

		// Ten jobs of 400 bytes (536 with their other columns): three to an
		// insert, not all ten in one.
		var many []engine.NewJob
		for i := 0; i < 10; i++ {
			j := job("k", "default", 0)
			j.Args = []byte(`"` + strings.Repeat("x", 398) + `"`)
			many = append(many, j)
		}
		rec.Take()
		ids := enqueue(t, small, t0, many...)
		inserts := 0
		for _, q := range rec.Take() {
			if strings.Contains(q, "INSERT INTO sluice_jobs") {
				inserts++
			}
		}
		require.Equal(t, 4, inserts, "batches of 3, 3, 3 and 1")
		for _, id := range ids {
			require.Len(t, state(t, s, id).Args, 400)
		}

		// Without a cap of the server's, batches are as large as before.
		rec.Take()
		enqueue(t, rs, t0, many...)
		inserts = 0
		for _, q := range rec.Take() {
			if strings.Contains(q, "INSERT INTO sluice_jobs") {
				inserts++
			}
		}
		require.Equal(t, 1, inserts)
	})
}

func coalescing(key string) engine.NewJob {
	j := job("k", "default", 0)
	j.Coalesce = &engine.Coalesce{Key: key, Rule: coalesce.Spec{Scope: "k"}}
	return j
}

func jobIDs(js []*engine.Job) []int64 { return ids(js) }
