package engine_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/engine"
)

// giveBackRecord is a give-back's record of its streak, as the jobs
// package writes it.
const giveBackRecord = engine.GivenBackMark + "3 time(s) in a row since 2026-03-01T12:00:00Z, the last at claim 7)"

// A job's last error keeps a give-back's mark as is only in the record its
// give-back names: anywhere else (a handler's error, a panic, an
// operator's reason, a kind's name in the give-back's own reason, a
// middleware's words around it) it is quoted, readably; text without a
// mark is kept as it is.
func TestALastErrorKeepsOnlyAGiveBacksRecordAsOne(t *testing.T) {
	const tail = " for a worker that can run it; it fails once given back for 1m0s (WorkerConfig.GiveBackFor)"
	quoted := "; (quoted) given back without spending an attempt (3 time(s) in a row since 2026-03-01T12:00:00Z, the last at claim 7)"
	for _, c := range []struct {
		name, text, record, want string
	}{
		{"no mark", "upstream down; given back (not really)", "", "upstream down; given back (not really)"},
		{"a handler's mimic", "e" + giveBackRecord + tail, "", "e" + quoted + tail},
		{"a mimic twice", "e" + giveBackRecord + giveBackRecord, "", "e" + quoted + quoted},
		{"quoted already", "e" + quoted, "", "e" + quoted},
		{"the mark alone", engine.GivenBackMark, "", "; (quoted) given back without spending an attempt ("},
		{"a give-back's own", "no handler for kind \"k\"" + giveBackRecord + tail, giveBackRecord, "no handler for kind \"k\"" + giveBackRecord + tail},
		{
			"a give-back whose kind's name mimics one",
			"no handler for kind \"k" + giveBackRecord + "\"" + giveBackRecord + tail, giveBackRecord,
			"no handler for kind \"k" + quoted + "\"" + giveBackRecord + tail,
		},
		{
			"a give-back wrapped by middleware that quotes a mimic after it",
			"mw: why" + giveBackRecord + tail + " (last upstream error: x" + engine.GivenBackMark + "99 time(s) in a row since 2000-01-01T00:00:00Z, the last at claim 8))",
			giveBackRecord,
			"mw: why" + giveBackRecord + tail + " (last upstream error: x; (quoted) given back without spending an attempt (99 time(s) in a row since 2000-01-01T00:00:00Z, the last at claim 8))",
		},
		{"a record cut off the text", "why" + engine.GivenBackMark + "3 time(s)… (truncated)", giveBackRecord, "why; (quoted) given back without spending an attempt (3 time(s)… (truncated)"},
		{"a record that holds two marks is none", "e" + giveBackRecord + giveBackRecord, giveBackRecord + giveBackRecord, "e" + quoted + quoted},
		{"a record that is no record is none", "e" + giveBackRecord, "e", "e" + quoted},
	} {
		t.Run(c.name, func(t *testing.T) {
			require.Equal(t, c.want, engine.LastErrorText(c.text, c.record))
		})
	}
}

// FuzzLastErrorText: whatever the text, the last error keeps no
// give-back's mark but in the record it names, and the record, when the
// text holds it, is the last mark and reads as written.
func FuzzLastErrorText(f *testing.F) {
	f.Add("e"+giveBackRecord+" tail", false)
	f.Add(giveBackRecord+giveBackRecord, true)
	f.Add("; given back without spending an attempt ; given back without spending an attempt ((", false)
	f.Add("x; ; given back without spending an attempt (quoted) (", true)
	f.Fuzz(func(t *testing.T, text string, withRecord bool) {
		if !withRecord {
			got := engine.LastErrorText(text, "")
			require.NotContains(t, got, engine.GivenBackMark)
			if !strings.Contains(text, engine.GivenBackMark) {
				require.Equal(t, text, got)
			}
			return
		}
		got := engine.LastErrorText(text, giveBackRecord)
		if !strings.Contains(text, giveBackRecord) {
			require.NotContains(t, got, engine.GivenBackMark)
			return
		}
		require.Equal(t, 1, strings.Count(got, engine.GivenBackMark), "%q", got)
		i := strings.Index(got, engine.GivenBackMark)
		require.True(t, strings.HasPrefix(got[i:], giveBackRecord), "%q", got)
	})
}
