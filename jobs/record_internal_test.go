package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/clock"
	"github.com/sluicequeue/sluice/internal/engine"
)

var errRefused = errors.New("ERROR: invalid byte sequence for encoding \"UTF8\": 0xff (SQLSTATE 22021)")

// refusingStore is a store that refuses, as a data error, any batch that
// records one of its bad job ids with an error other than the refused
// outcome's, and fails the first transientFailures writes on the
// connection.
type refusingStore struct {
	mu                sync.Mutex
	bad               map[int64]bool
	refuseAll         bool
	transientFailures int
	// held are the jobs whose outcomes finish leaves, as FinishUnwaiting
	// leaves those of a key another transaction holds.
	held     map[int64]bool
	calls    int
	recorded map[int64][]string // id -> outcome ("completed" or the error text)
}

func (s *refusingStore) finish(_ context.Context, _ int64, _ engine.Clock, o engine.Outcomes) ([]int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls++
	if s.transientFailures > 0 {
		s.transientFailures--
		return nil, errors.New("read tcp: connection reset by peer")
	}
	for _, r := range o.Completed {
		if s.bad[r.ID] {
			return nil, errRefused
		}
	}
	for _, t := range o.Others {
		if s.bad[t.ID] && (s.refuseAll || !strings.HasPrefix(t.Error, "sluice: the database refused this job's result: ")) {
			return nil, errRefused
		}
	}
	var left []int64
	for _, r := range o.Completed {
		if s.held[r.ID] {
			left = append(left, r.ID)
			continue
		}
		s.recorded[r.ID] = append(s.recorded[r.ID], "completed")
	}
	for _, t := range o.Others {
		if s.held[t.ID] {
			left = append(left, t.ID)
			continue
		}
		s.recorded[t.ID] = append(s.recorded[t.ID], string(t.State)+": "+t.Error)
	}
	return left, nil
}

func newRecorder(t *testing.T, s *refusingStore) (recorder, *[]time.Duration) {
	w := &Worker{reg: NewRegistry(), clock: clock.NewFake(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))}
	var slept []time.Duration
	return recorder{
		finish:   s.finish,
		isData:   func(err error) bool { return errors.Is(err, errRefused) },
		refused:  w.refused,
		now:      w.storeClock,
		log:      slog.New(slog.NewTextHandler(io.Discard, nil)),
		stopping: func() bool { return false },
		sleep:    func(d time.Duration) { slept = append(slept, d) },
	}, &slept
}

// batch makes results for ids 1..n: even ids completed, odd ids failed
// with an error.
func batch(n int) []result {
	rs := make([]result, 0, n)
	for id := int64(1); id <= int64(n); id++ {
		j := &engine.Job{ID: id, Kind: "k", Attempt: 1, MaxAttempts: 3}
		if id%2 == 0 {
			rs = append(rs, result{id: id, attempt: 1, complete: true, job: j})
		} else {
			rs = append(rs, result{id: id, attempt: 1, job: j, t: engine.Transition{ID: id, State: engine.StateScheduled, Error: "failure"}})
		}
	}
	return rs
}

func TestRecorderSplitsABatchUntilTheRefusedResultIsAlone(t *testing.T) {
	for _, bad := range [][]int64{{7}, {8}, {1, 64}, {3, 5, 7, 9}} {
		s := &refusingStore{bad: map[int64]bool{}, recorded: map[int64][]string{}}
		for _, id := range bad {
			s.bad[id] = true
		}
		rec, slept := newRecorder(t, s)
		rec.record(context.Background(), 1, batch(64))

		require.Len(t, s.recorded, 64, "bad %v: every job's result is recorded", bad)
		for id, got := range s.recorded {
			require.Len(t, got, 1, "job %d is recorded once", id)
			switch {
			case s.bad[id]:
				want := "scheduled: sluice: the database refused this job's result: ERROR: invalid byte sequence for encoding \\\"UTF8\\\": 0xff (SQLSTATE 22021)"
				require.Equal(t, want, got[0], "a refused result becomes a failed attempt, retried by the usual rules")
			case id%2 == 0:
				require.Equal(t, "completed", got[0])
			default:
				require.Equal(t, "scheduled: failure", got[0])
			}
		}
		// One refused job among 64 costs a write per level of the split,
		// not one per job.
		require.LessOrEqual(t, s.calls, 1+len(bad)*(2*6+1), "bad %v: %d writes", bad, s.calls)
		require.Empty(t, *slept, "a data error is not retried")
	}
}

func TestRecorderRetriesTransientErrorsWithoutSplitting(t *testing.T) {
	s := &refusingStore{bad: map[int64]bool{}, recorded: map[int64][]string{}, transientFailures: 3}
	rec, slept := newRecorder(t, s)
	rec.record(context.Background(), 1, batch(10))
	require.Equal(t, 4, s.calls, "three failed writes of the whole batch, then one that lands")
	require.Equal(t, []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond}, *slept)
	require.Len(t, s.recorded, 10)
}

func TestRecorderGivesUpOnAJobWhoseRefusedOutcomeIsRefusedToo(t *testing.T) {
	s := &refusingStore{bad: map[int64]bool{3: true}, refuseAll: true, recorded: map[int64][]string{}}
	rec, _ := newRecorder(t, s)
	var gaveUp []int64
	rec.gaveUp = func(rs []result) {
		for _, r := range rs {
			gaveUp = append(gaveUp, r.id)
		}
	}
	rec.record(context.Background(), 1, batch(8))
	require.Len(t, s.recorded, 7, "the others are recorded; job 3 stays running")
	require.NotContains(t, s.recorded, int64(3))
	require.Equal(t, []int64{3}, gaveUp, "the worker is told, so that no release of a failed claim's strays takes it for one")
}

// A stopping worker that gives up writing a batch tells the worker which
// jobs stay running for it, having run: a release of a failed claim's
// strays at shutdown leaves them alone (known), as it does the jobs of
// another process id.
func TestResultsGivenUpOnAreNoStrays(t *testing.T) {
	s := &refusingStore{bad: map[int64]bool{}, recorded: map[int64][]string{}, transientFailures: 100}
	rec, slept := newRecorder(t, s)
	rec.stopping = func() bool { return true }
	w := &Worker{running: map[*runningJob]struct{}{}, unrecorded: map[int64]int{}, abandoned: map[int64]int64{}}
	rec.gaveUp = w.gaveUp
	rs := batch(4)
	for i := range rs {
		rs[i].pid = 7
	}
	rec.record(context.Background(), 7, rs)
	require.Len(t, *slept, 9, "ten writes, then it gives up")
	require.Empty(t, s.recorded)
	require.ElementsMatch(t, []int64{1, 2, 3, 4}, w.known(7))
	require.Empty(t, w.known(8), "a process id of the past: forgotten")
	require.Empty(t, w.known(7))
}

func TestARefusedResultWithNoAttemptsLeftFails(t *testing.T) {
	w := &Worker{reg: NewRegistry(), clock: clock.NewFake(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))}
	j := &engine.Job{ID: 9, Kind: "k", Attempt: 3, MaxAttempts: 3}
	r := w.refused(result{id: 9, pid: 4, holdsSlot: true, complete: true, job: j}, errors.New("Incorrect string value: '\\xFF' for column \x00 \u00e9\n"))
	require.Equal(t, engine.StateFailed, r.t.State)
	require.True(t, r.t.Finished)
	require.True(t, r.final(), "a failed job gives its concurrency slot back")
	require.True(t, r.refused)
	require.Equal(t, int64(4), r.pid)
	require.Equal(t, `sluice: the database refused this job's result: Incorrect string value: '\\xFF' for column \x00 \u00e9\n`, r.t.Error)
	for _, c := range r.t.Error {
		require.Less(t, c, rune(utf8.RuneSelf), "the text is ASCII")
	}
	long := w.refused(result{id: 9, job: j}, errors.New(strings.Repeat("é", 10000)))
	require.Less(t, len(long.t.Error), 1200)
}

// A handler's error is kept as the store keeps it (engine.LastErrorText,
// tested there), a give-back's record as written; an error with no
// message is named by its type.
func TestErrorTextIsTheTextTheStoreKeeps(t *testing.T) {
	const record = engine.GivenBackMark + "1 time(s) in a row since 2026-03-01T12:00:00Z, the last at claim 1)"
	long := "e" + engine.GivenBackMark + strings.Repeat("x", engine.MaxErrorBytes) + "\xff"
	require.Equal(t, engine.LastErrorText(long, ""), errorText(errors.New(long), ""))
	require.Equal(t, "why"+record+" tail", errorText(errors.New("why"+record+" tail"), record))
	require.Equal(t, "why; (quoted) given back without spending an attempt (1 time(s) in a row since 2026-03-01T12:00:00Z, the last at claim 1) tail",
		errorText(errors.New("why"+record+" tail"), ""))
	require.Equal(t, "*errors.errorString with no message", errorText(errors.New(""), ""))
}

func TestHasReplacementEscape(t *testing.T) {
	for in, want := range map[string]bool{
		`"\ufffd"`:             true,
		`"a\\ufffd"`:           false, // an escaped backslash, then the text ufffd
		`"a\\\ufffd"`:          true,
		`"\\\\ufffd"`:          false,
		"\"\ufffd\"":           false, // a valid U+FFFD is written as is
		`"\uFFFD"`:             false, // not encoding/json's own escape
		`{"a":"x","b":"y"}`:    false,
		`["\\ufffd","\ufffd"]`: true,
	} {
		require.Equal(t, want, hasReplacementEscape([]byte(in)), in)
	}
}

// Account is a nested args field.
type Account struct {
	ID   int64
	Name string
	Tags map[string]string
}

type fuzzArgs struct {
	Account  Account
	Accounts []Account
	Any      any
	Ptr      *string
	Notes    [2]string
	Raw      []byte
	Labels   map[string]int `json:"labels"`
	hidden   string
	Skipped  string `json:"-"`
}

func (fuzzArgs) Kind() string { return "fuzz" }

func TestEncodeArgsNamesTheFieldThatIsNotUTF8(t *testing.T) {
	bad := "caf\xe9"
	cases := []struct {
		args fuzzArgs
		want string
	}{
		{fuzzArgs{Account: Account{Name: bad}}, `args field Account.Name: invalid UTF-8: "caf\xe9"`},
		{fuzzArgs{Accounts: []Account{{}, {Name: "ok"}, {Name: bad}}}, "args field Accounts[2].Name: invalid UTF-8"},
		{fuzzArgs{Account: Account{Tags: map[string]string{"k": bad}}}, `args field Account.Tags["k"]: invalid UTF-8`},
		{fuzzArgs{Labels: map[string]int{bad: 1}}, `args field Labels["caf\xe9"]: invalid UTF-8`},
		{fuzzArgs{Any: []any{"ok", bad}}, "args field Any[1]: invalid UTF-8"},
		{fuzzArgs{Ptr: &bad}, "args field Ptr: invalid UTF-8"},
		{fuzzArgs{Notes: [2]string{"", bad}}, "args field Notes[1]: invalid UTF-8"},
	}
	for _, c := range cases {
		_, err := encodeArgs(c.args)
		require.ErrorIs(t, err, ErrInvalidArgs)
		require.ErrorContains(t, err, c.want)
	}
	// Fields JSON leaves out may hold anything; bytes are base64.
	body, err := encodeArgs(fuzzArgs{hidden: bad, Skipped: bad, Raw: []byte(bad)})
	require.NoError(t, err)
	require.True(t, utf8.Valid(body))
}

// textArgs is encoded as its text.
type textArgs struct{ s string }

func (t textArgs) MarshalText() ([]byte, error) { return []byte(t.s), nil }
func (textArgs) Kind() string                   { return "text" }

// selfEscaped writes the escape itself, from valid fields.
type selfEscaped struct{ Name string }

func (selfEscaped) Kind() string { return "self" }
func (selfEscaped) MarshalJSON() ([]byte, error) {
	return []byte(`{"Name":"\ufffd"}`), nil
}

func TestEncodeArgsChecksTextMarshalersAndKeepsAMarshalersOwnEscape(t *testing.T) {
	_, err := encodeArgs(textArgs{s: "x\xff"})
	require.ErrorContains(t, err, "the args are not valid UTF-8")
	body, err := encodeArgs(textArgs{s: "x"})
	require.NoError(t, err)
	require.Equal(t, `"x"`, string(body))

	body, err = encodeArgs(selfEscaped{Name: "ok"})
	require.NoError(t, err, "an escape no field explains came from MarshalJSON, and is kept")
	require.Equal(t, `{"Name":"\ufffd"}`, string(body))
}

// invalidSomewhere reports whether any string JSON would encode from v is
// not valid UTF-8.
func invalidSomewhere(v fuzzArgs) bool {
	strs := []string{v.Account.Name}
	for k, s := range v.Account.Tags {
		strs = append(strs, k, s)
	}
	for _, a := range v.Accounts {
		strs = append(strs, a.Name)
	}
	if s, ok := v.Any.(string); ok {
		strs = append(strs, s)
	}
	if v.Ptr != nil {
		strs = append(strs, *v.Ptr)
	}
	strs = append(strs, v.Notes[:]...)
	for k := range v.Labels {
		strs = append(strs, k)
	}
	for _, s := range strs {
		if !utf8.ValidString(s) {
			return true
		}
	}
	return false
}

// FuzzEncodeArgs checks that args are never silently changed: they either
// encode to text that decodes back to an equal value, or are refused.
func FuzzEncodeArgs(f *testing.F) {
	f.Add("name", "tag", "value", "note", int64(1), []byte("raw"))
	f.Add("caf\xe9", "", "", "", int64(0), []byte(nil))
	f.Add("\ufffd", "\\ufffd", `\`, "\u2028<>&", int64(-1), []byte("\xff"))
	f.Add("a\x00b", "\xed\xa0\x80", "\xe2\x82", "é🔑", int64(1)<<62, []byte{})
	f.Fuzz(func(t *testing.T, name, tag, value, note string, id int64, raw []byte) {
		in := fuzzArgs{
			Account:  Account{ID: id, Name: name, Tags: map[string]string{tag: value}},
			Accounts: []Account{{Name: value}},
			Any:      note,
			Ptr:      &name,
			Notes:    [2]string{note, tag},
			Raw:      raw,
			Labels:   map[string]int{value: 1},
		}
		body, err := encodeArgs(in)
		if invalidSomewhere(in) {
			require.ErrorIs(t, err, ErrInvalidArgs, "%q", body)
			return
		}
		require.NoError(t, err)
		require.True(t, utf8.Valid(body))
		var out fuzzArgs
		require.NoError(t, json.Unmarshal(body, &out))
		if len(in.Raw) == 0 {
			in.Raw = out.Raw // nil and empty both decode as they may
		}
		require.Equal(t, in, out, "the args decode to what was enqueued")
	})
}

// A completion at its job's first claim (most of them) asks Finish for no
// kept attempts to delete, so that DeleteOnComplete costs no statement
// more; any later claim does, whatever the attempt says (an operator's
// retry sets it back to 0), and so does a claim counted before migration
// 017 (0).
func TestOnlyACompletionAfterAnEarlierRunDeletesKeptAttempts(t *testing.T) {
	o := outcomes([]result{
		{id: 1, complete: true, attempt: 1, claim: 1},
		{id: 2, complete: true, attempt: 1, claim: 3},
		{id: 3, complete: true, attempt: 2, claim: 2},
		{id: 4, complete: true, attempt: 1, claim: 0},
	})
	require.Equal(t, []engine.Run{{ID: 2, Claim: 3}, {ID: 3, Claim: 2}, {ID: 4, Claim: 0}}, o.WithAttempts)
}

// A write that leaves the results of keys another transaction holds
// (FinishUnwaiting) records the rest, and the recorder returns those it
// left, for a later write, splitting a refused batch as ever.
func TestRecorderReturnsTheResultsLeftForHeldKeys(t *testing.T) {
	s := &refusingStore{bad: map[int64]bool{3: true}, held: map[int64]bool{4: true, 7: true}, recorded: map[int64][]string{}}
	rec, slept := newRecorder(t, s)
	left := rec.record(context.Background(), 1, batch(8))
	var ids []int64
	for _, r := range left {
		ids = append(ids, r.id)
	}
	require.ElementsMatch(t, []int64{4, 7}, ids)
	require.Len(t, s.recorded, 6, "the others are recorded")
	require.NotContains(t, s.recorded, int64(4))
	require.NotContains(t, s.recorded, int64(7))
	require.Contains(t, s.recorded[3][0], "the database refused this job's result")
	require.Empty(t, *slept, "a result left is no failure to retry")

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	s.transientFailures = 1
	require.Len(t, rec.record(ctx, 1, batch(2)), 2, "a write whose context ended leaves its results")
}
