package jobs

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A give-back's record of its streak reads back as written, after any
// reason; and after reads it only when it is the claim before's, and
// holds no more give-backs than the job's claims that spent no attempt.
func TestAGiveBackStreakReadsBackAsWritten(t *testing.T) {
	since := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	s := giveBackStreak{times: 3, since: since, claim: 7}
	text := `kind not registered: no handler for kind "a; b (c)" in worker "w"` + givenBackText + s.String() +
		") for a worker that can run it; it fails once given back for 168h0m0s (WorkerConfig.GiveBackFor)"
	got, ok := parseGiveBackStreak(text)
	require.True(t, ok)
	require.Equal(t, s, got)

	now := since.Add(time.Hour)
	next := giveBackStreak{times: 1, since: now, claim: 8}
	require.Equal(t, giveBackStreak{times: 4, since: since, claim: 8}, next.after(text, 3), "the claim after: the streak goes on")
	require.Equal(t, next, next.after(text, 2), "more give-backs than claims that spent no attempt: none of a give-back's")
	later := giveBackStreak{times: 1, since: now, claim: 9}
	require.Equal(t, later, later.after(text, 10), "a claim between: a new streak")
	early := giveBackStreak{times: 1, since: since.Add(-time.Hour), claim: 8}
	require.Equal(t, giveBackStreak{times: 4, since: early.since, claim: 8}, early.after(text, 3), "the earlier time is kept")
}

// Anything but a give-back's record is none, and reading it never panics.
func TestAGiveBackStreakIsNotReadFromOtherText(t *testing.T) {
	for _, text := range []string{
		"",
		"upstream down",
		givenBackText,
		givenBackText + "1 time(s) so far) for a worker that can run it", // a record before streaks
		givenBackText + "0 time(s) in a row since 2026-03-01T12:00:00Z, the last at claim 1)",
		givenBackText + "1 time(s) in a row since 2026-03-01T12:00:00Z, the last at claim 0)",
		givenBackText + "-1 time(s) in a row since 2026-03-01T12:00:00Z, the last at claim 1)",
		givenBackText + "1 time(s) in a row since yesterday, the last at claim 1)",
		givenBackText + "1 time(s) in a row since 2026-03-01T12:00:00Z, the last at claim 1",
		givenBackText + "99999999999999999999 time(s) in a row since 2026-03-01T12:00:00Z, the last at claim 1)",
		givenBackText + "1 time(s) in a row since 2026-03-01T12:00:00Z, the last at claim 1) " + givenBackText + "cut short",
		givenBackText + "1 time(s) in a row since 2026-03-01T12:00:00Z, the last at claim 1\x00)",
		strings.Repeat(givenBackText, 1000),
	} {
		_, ok := parseGiveBackStreak(text)
		require.False(t, ok, "%.200q", text)
	}
}

// FuzzParseGiveBackStreak: parsing never panics, and what it reads
// writes back as a record that reads back.
func FuzzParseGiveBackStreak(f *testing.F) {
	f.Add("x" + givenBackText + "3 time(s) in a row since 2026-03-01T12:00:00Z, the last at claim 7) …")
	f.Add(givenBackText + "1 time(s) in a row since 2026-03-01T12:00:00+02:00, the last at claim 1)")
	f.Fuzz(func(t *testing.T, text string) {
		s, ok := parseGiveBackStreak(text)
		if !ok {
			return
		}
		require.GreaterOrEqual(t, s.times, int64(1))
		require.GreaterOrEqual(t, s.claim, int64(1))
		again, ok := parseGiveBackStreak(givenBackText + s.String() + ")")
		require.True(t, ok)
		require.Equal(t, s.times, again.times)
		require.Equal(t, s.claim, again.claim)
	})
}
