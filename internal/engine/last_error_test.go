package engine_test

import (
	"context"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
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

// guarantees.md, "Nothing lost": a last error is kept "at most 16 KiB,
// cut on a character boundary and then marked `… (truncated)`, with each
// byte that is not valid UTF-8, and each NUL, written as `\xNN`".
func TestALastErrorIsValidUTF8WithoutNULAndCutOnACharacter(t *testing.T) {
	const mark = engine.TruncatedMark
	x := strings.Repeat("x", engine.MaxErrorBytes-1)
	for _, c := range []struct{ in, want string }{
		{"plain", "plain"},
		{x + "é" + "tail", x + mark}, // the cut would fall inside é
		{x + "x", x + "x"},
		{x + "xy", x + "x" + mark},
		{x + "🔑", x + mark},
		{"upstream said \xff\xfe ok", `upstream said \xff\xfe ok`},
		{"a\x00b", `a\x00b`},
		{"cut \xe2\x82 char", `cut \xe2\x82 char`},
		{x[:engine.MaxErrorBytes-5] + "\xff\xff", x[:engine.MaxErrorBytes-5] + `\xff` + mark}, // an escape is never cut
		{"\ufffd is fine", "\ufffd is fine"},
	} {
		require.Equal(t, c.want, engine.LastErrorText(c.in, ""), "%.60q", c.in)
	}
	for _, in := range []string{strings.Repeat("\xff", 1<<20), strings.Repeat("\x00", 1<<15), x + "é", strings.Repeat("€", 1<<14)} {
		got := engine.LastErrorText(in, "")
		require.True(t, utf8.ValidString(got))
		require.NotContains(t, got, "\x00")
		require.LessOrEqual(t, len(got), engine.MaxErrorBytes+len(mark))
		require.True(t, strings.HasSuffix(got, mark))
	}
}

// The bound holds on the text as kept: quoting a give-back's marks makes
// the text longer (nine bytes a mark), so it comes before the cut. 16 KiB
// of marks was cut to 16 KiB by the worker, then quoted by the store to
// about 20 KiB. A give-back's own record is kept whole, and last, however
// long the text before it: the next give-back reads its streak from it.
func TestALastErrorIsCutAfterItsMarksAreQuoted(t *testing.T) {
	const mark = engine.TruncatedMark
	marks := strings.Repeat(engine.GivenBackMark, engine.MaxErrorBytes/len(engine.GivenBackMark))
	require.LessOrEqual(t, len(marks), engine.MaxErrorBytes)
	const tail = " for a worker that can run it"

	got := engine.LastErrorText(marks, "")
	require.Len(t, got, engine.MaxErrorBytes+len(mark), "cut at 16 KiB")
	require.True(t, strings.HasSuffix(got, mark))
	require.NotContains(t, got, engine.GivenBackMark)
	require.Equal(t, got, engine.LastErrorText(got, ""), "kept as it is when written again")

	for name, text := range map[string]string{
		"marks before the record":        marks + giveBackRecord + tail,
		"marks after the record":         "why" + giveBackRecord + tail + marks,
		"text before the record":         strings.Repeat("y", 2*engine.MaxErrorBytes) + giveBackRecord + tail,
		"a record just within the bound": strings.Repeat("y", engine.MaxErrorBytes-len(giveBackRecord)) + giveBackRecord + tail,
	} {
		t.Run(name, func(t *testing.T) {
			got := engine.LastErrorText(text, giveBackRecord)
			require.LessOrEqual(t, len(got), engine.MaxErrorBytes+len(mark))
			require.Equal(t, 1, strings.Count(got, engine.GivenBackMark), "the record, and no other mark")
			require.Contains(t, got, giveBackRecord, "the record, whole")
			require.Contains(t, got, mark)
			require.Equal(t, got, engine.LastErrorText(got, giveBackRecord), "kept as it is when written again")
		})
	}
	cut := engine.LastErrorText(marks+giveBackRecord+tail, giveBackRecord)
	require.True(t, strings.HasSuffix(cut, mark+giveBackRecord), "the text before the record is cut and marked: %.80q", cut[len(cut)-200:])
	require.LessOrEqual(t, len(cut), engine.MaxErrorBytes)
}

// FuzzLastErrorTextIsKept: whatever the text and record, the last error
// is valid UTF-8 without NUL, at most 16 KiB and the mark, and comes back
// unchanged when kept again (the store makes again what the worker made).
func FuzzLastErrorTextIsKept(f *testing.F) {
	for _, s := range []string{"", "ok", "\xff", "a\x00b", strings.Repeat("x", engine.MaxErrorBytes-1) + "é", strings.Repeat("\xe2\x82", 9000),
		strings.Repeat(engine.GivenBackMark, 400) + giveBackRecord, strings.Repeat("x", engine.MaxErrorBytes) + engine.TruncatedMark} {
		f.Add(s, false, 1)
		f.Add(s, true, 1)
	}
	f.Fuzz(func(t *testing.T, text string, withRecord bool, n int) {
		text = strings.Repeat(text, min(max(n, 1), (64<<10)/max(len(text), 1)+1)) // long enough to be cut
		record := ""
		if withRecord {
			record = giveBackRecord
		}
		got := engine.LastErrorText(text, record)
		require.True(t, utf8.ValidString(got))
		require.NotContains(t, got, "\x00")
		require.LessOrEqual(t, len(got), engine.MaxErrorBytes+len(engine.TruncatedMark))
		require.Equal(t, got, engine.LastErrorText(got, record))
		if utf8.ValidString(text) && !strings.Contains(text, "\x00") && !strings.Contains(text, engine.GivenBackMark) && len(text) <= engine.MaxErrorBytes {
			require.Equal(t, text, got, "valid text is kept as it is")
		}
		if withRecord && strings.Contains(text, giveBackRecord) {
			require.Contains(t, got, giveBackRecord)
		}
	})
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
			if !strings.Contains(text, engine.GivenBackMark) && utf8.ValidString(text) && !strings.Contains(text, "\x00") && len(text) <= engine.MaxErrorBytes {
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

// A last error the database would refuse (bytes that are not UTF-8, a
// NUL: PostgreSQL and MariaDB refuse them) is kept escaped by the store
// itself, whoever wrote it, on every database.
func TestALastErrorTheDatabaseWouldRefuseIsKeptEscaped(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		pid := register(t, s, t0)
		id := enqueue(t, s, t0, job("k", "default", 0))[0]
		claim(t, s, pid, t0, 1)
		require.NoError(t, s.Finish(ctx, pid, engine.At(t0), engine.Outcomes{Others: ran(t, s,
			engine.Transition{ID: id, State: engine.StateFailed, Error: "upstream said \xff, a\x00b", Finished: true})}))
		require.Equal(t, `upstream said \xff, a\x00b`, state(t, s, id).LastError)
	})
}
