package jobs_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/sluicequeue/sluice/internal/testdb"
	"math"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/clock"
	"github.com/sluicequeue/sluice/coalesce"
	"github.com/sluicequeue/sluice/concurrency"
	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/jobs"
	"github.com/sluicequeue/sluice/ratelimit"
)

type upstream struct{ N int }

func (upstream) Kind() string { return "upstream" }

const truncated = "… (truncated)"

// badErrors are the errors handlers return for jobs 0..len-1 of a batch,
// with the text the job must keep; the jobs after them complete.
var badErrors = []struct{ err, want string }{
	// 16 KiB whose cut falls inside "é".
	{strings.Repeat("x", 16<<10-1) + "é and more", strings.Repeat("x", 16<<10-1) + truncated},
	{"upstream said \xff\xfe, giving up", `upstream said \xff\xfe, giving up`},
	{"a\x00b", `a\x00b`},
	// An invalid byte just before the cut: its escape is never split.
	{strings.Repeat("x", 16<<10-2) + "\xff tail", strings.Repeat("x", 16<<10-2) + truncated},
	{strings.Repeat("\xe2\x82", 20000), strings.Repeat(`\xe2\x82`, 2048) + truncated},
}

// TestBadErrorTextIsRecordedOnEveryDatabase runs a batch in which some
// handlers return error text that PostgreSQL and MariaDB would refuse as
// is; every job's result is recorded, through Drain and through Run.
func TestBadErrorTextIsRecordedOnEveryDatabase(t *testing.T) {
	for _, mode := range []string{"drain", "run"} {
		t.Run(mode, func(t *testing.T) {
			each(t, func(t *testing.T, h *harness) {
				require.NoError(t, jobs.Register(h.reg, func(_ context.Context, j *jobs.Job[upstream]) error {
					if j.Args.N < len(badErrors) {
						return errors.New(badErrors[j.Args.N].err)
					}
					return nil
				}))
				const n = 12
				items := make([]jobs.Item, n)
				for i := range items {
					items[i] = jobs.Item{Args: upstream{N: i}}
				}
				res, err := h.client.EnqueueMany(context.Background(), items)
				require.NoError(t, err)

				if mode == "drain" {
					out := h.drain(jobs.WorkerConfig{Concurrency: n}) // one claim, one batch of results
					require.Equal(t, len(badErrors), out.Retried)
					require.Equal(t, n-len(badErrors), out.Completed)
				} else {
					finished := make(chan jobs.FinishEvent, n)
					w := h.worker(jobs.WorkerConfig{Concurrency: n, Clock: systemClock(), PollInterval: 5 * time.Millisecond,
						Hooks: jobs.Hooks{OnFinish: func(e jobs.FinishEvent) { finished <- e }}})
					stop := h.run(w)
					receive(t, finished, n)
					stop() // writes the results in hand before returning
				}
				for i, r := range res {
					j := h.job(r.ID)
					if i >= len(badErrors) {
						require.Equal(t, engine.StateCompleted, j.State, "job %d", i)
						continue
					}
					require.Equal(t, engine.StateScheduled, j.State, "job %d", i)
					require.Equal(t, 1, j.Attempt)
					require.Equal(t, badErrors[i].want, j.LastError, "job %d", i)
					require.True(t, utf8.ValidString(j.LastError))
					require.LessOrEqual(t, len(j.LastError), 16<<10+len(truncated))
				}
			})
		})
	}
}

// refuser is a store pool that makes the database refuse any statement
// carrying marker, with a real data error of the database's own: it runs
// an insert of NULL into a NOT NULL column in its place.
type refuser struct {
	engine.DB
	marker string
}

func (r refuser) Begin(ctx context.Context) (engine.Tx, error) {
	tx, err := r.DB.Begin(ctx)
	if err != nil {
		return nil, err
	}
	return refuserTx{Tx: tx, marker: r.marker}, nil
}

type refuserTx struct {
	engine.Tx
	marker string
}

func (t refuserTx) Exec(ctx context.Context, q string, args ...any) (engine.Result, error) {
	for _, a := range args {
		var ss []string
		switch v := a.(type) {
		case string:
			ss = []string{v}
		case []string:
			ss = v
		}
		for _, s := range ss {
			if strings.Contains(s, t.marker) {
				return t.Tx.Exec(ctx, `INSERT INTO sluice_jobs (kind) VALUES (NULL)`)
			}
		}
	}
	return t.Tx.Exec(ctx, q, args...)
}

func TestAResultTheDatabaseRefusesFailsAloneOnEveryDatabase(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		require.NoError(t, jobs.Register(h.reg, func(_ context.Context, j *jobs.Job[upstream]) error {
			switch j.Args.N {
			case 3:
				return errors.New("REFUSE ME")
			case 5:
				return errors.New("an ordinary failure")
			}
			return nil
		}, jobs.MaxAttempts(2), jobs.Backoff(func(int) time.Duration { return time.Second })))
		const n = 9
		items := make([]jobs.Item, n)
		for i := range items {
			items[i] = jobs.Item{Args: upstream{N: i}}
		}
		res, err := h.client.EnqueueMany(context.Background(), items)
		require.NoError(t, err)

		refusing := engine.New(h.store.Dialect(), refuser{DB: h.store.DB(), marker: "REFUSE ME"})
		w, err := jobs.NewWorker(testdb.Public(refusing), h.reg, jobs.WorkerConfig{Concurrency: n, Clock: h.clock, Logger: quiet()})
		require.NoError(t, err)
		_, err = w.Drain(context.Background())
		require.NoError(t, err)

		const prefix = "sluice: the database refused this job's result: "
		for i, r := range res {
			j := h.job(r.ID)
			switch i {
			case 3:
				require.Equal(t, engine.StateScheduled, j.State, "the refused attempt fails and is retried")
				require.Equal(t, 1, j.Attempt)
				require.True(t, strings.HasPrefix(j.LastError, prefix), j.LastError)
				require.NotContains(t, j.LastError, "REFUSE ME")
				for _, c := range j.LastError {
					require.Less(t, c, rune(utf8.RuneSelf), "ASCII: %q", j.LastError)
				}
			case 5:
				require.Equal(t, engine.StateScheduled, j.State)
				require.Equal(t, "an ordinary failure", j.LastError)
			default:
				require.Equal(t, engine.StateCompleted, j.State, "job %d completes beside the refused one", i)
			}
		}

		// With no attempts left, the refused attempt fails the job.
		h.clock.Advance(2 * time.Second)
		_, err = w.Drain(context.Background())
		require.NoError(t, err)
		j := h.job(res[3].ID)
		require.Equal(t, engine.StateFailed, j.State)
		require.Equal(t, 2, j.Attempt)
		require.True(t, strings.HasPrefix(j.LastError, prefix), j.LastError)
		require.Equal(t, engine.StateFailed, h.job(res[5].ID).State)
	})
}

type keyed2 struct{ Key string }

func (keyed2) Kind() string { return "keyed2" }

// slot's key may come from Raw, so that a key can hold bytes the args
// (where Raw is base64) do not.
type slot struct {
	Key string
	Raw []byte
}

func (slot) Kind() string { return "slot" }

type pending struct{ Key string }

func (pending) Kind() string { return "pending" }

func TestEnqueueRefusesBadComputedKeysOnEveryDatabase(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		noop := func(context.Context, *jobs.Job[keyed2]) error { return nil }
		require.NoError(t, jobs.Register(h.reg, noop, jobs.RateLimit(ratelimit.Limit[keyed2]{
			To: 10, Per: time.Second, Key: func(a keyed2) any { return a.Key }})))
		require.NoError(t, jobs.Declare[slot](h.reg, jobs.ConcurrencyLimit(concurrency.Limit[slot]{Key: func(a slot) any {
			if a.Raw != nil {
				return string(a.Raw)
			}
			return a.Key
		}})))
		require.NoError(t, jobs.Declare[pending](h.reg, jobs.Coalesce(coalesce.Rule[pending]{Key: func(a pending) any { return a.Key }})))
		ctx := context.Background()
		for _, c := range []struct {
			key, want string
			tooLong   bool
		}{
			{strings.Repeat("k", 251), "bytes; a key holds at most 255", true},
			{strings.Repeat("k", 16<<10), "bytes; a key holds at most 255", true},
			{strings.Repeat("€", 84), "bytes; a key holds at most 255", true}, // 252 bytes, cut mid-character at 255 with its scope
			{"acct\xff", "invalid UTF-8", false},                              // refused with the args, which hold it
			{"acct\x00", "contains a NUL byte", false},
			{"acct\x1b[31m", "contains the control character U+001B", false},
		} {
			for _, args := range []jobs.Args{keyed2{Key: c.key}, slot{Key: c.key}, pending{Key: c.key}} {
				_, err := h.client.Enqueue(ctx, args)
				require.Error(t, err, "%T %.20q", args, c.key)
				require.ErrorContains(t, err, c.want)
				require.Equal(t, c.tooLong, errors.Is(err, engine.ErrKeyTooLong))
				require.Less(t, len(err.Error()), 300, "the error quotes a prefix of the key: %.400q", err.Error())
				require.True(t, utf8.ValidString(err.Error()))
				require.NotContains(t, err.Error(), "\x00")
			}
		}
		_, err := h.client.Enqueue(ctx, keyed2{Key: "a\tb"})
		require.ErrorContains(t, err, `rate-limit key "keyed2/a\tb" contains a tab at byte 8`)
		_, err = h.client.Enqueue(ctx, slot{Raw: []byte("\xff")})
		require.ErrorContains(t, err, `concurrency key "slot/\xff" is not valid UTF-8`)
		_, err = h.client.Enqueue(ctx, pending{Key: "\x00"})
		require.ErrorContains(t, err, `coalesce key "pending/\x00" contains a NUL byte`)
		_, err = h.client.Enqueue(ctx, keyed2{Key: "x"}, jobs.Queue("q\x00"))
		require.ErrorContains(t, err, `Queue "q\x00" contains a NUL byte`)

		st, err := h.store.Stats(ctx)
		require.NoError(t, err)
		require.Empty(t, st, "nothing was written")

		// The longest keys are taken, and a job with one runs.
		long := strings.Repeat("é", (255-len("keyed2/"))/2)
		id := h.enqueue(keyed2{Key: long})
		require.Equal(t, 1, h.drain(jobs.WorkerConfig{}).Completed)
		require.Equal(t, engine.StateCompleted, h.job(id).State)
	})
}

type badKind struct{}

func (badKind) Kind() string { return "sync\x00" }

type longKind struct{}

func (longKind) Kind() string { return strings.Repeat("k", 256) }

func TestRegisterRefusesBadNamesAndRanges(t *testing.T) {
	work := func(context.Context, *jobs.Job[email]) error { return nil }
	cases := []struct {
		opt  jobs.RegisterOption
		want string
	}{
		{jobs.Queue("mail\n"), `Queue "mail\n" contains a line break`},
		{jobs.Queue(strings.Repeat("q", 256)), "is 256 bytes; a key holds at most 255"},
		{jobs.Queue("\xff"), `Queue "\xff" is not valid UTF-8`},
		{jobs.Priority(math.MaxInt), "Priority is 9223372036854775807; it must be between -2147483648 and 2147483647"},
		{jobs.Priority(math.MinInt32 - 1), "Priority is -2147483649"},
		{jobs.MaxAttempts(1 << 32), "MaxAttempts is 4294967296; it must be between 1 and 2147483647"},
		{jobs.RateLimit(ratelimit.Limit[email]{To: 1, Per: time.Second, Key: "x", Group: "@queue"}), `scope "@queue" starts with "@"`},
		{jobs.RateLimit(ratelimit.Limit[email]{To: 1, Per: time.Second, Key: "x", Group: "@sms"}), `starts with "@"`},
		{jobs.RateLimit(ratelimit.Limit[email]{To: 1, Per: time.Second, Key: "x", Group: "g\x00"}), `Group "g\x00" contains a NUL byte`},
		{jobs.RateLimit(ratelimit.Limit[email]{To: 1, Per: time.Second, Key: "x", Group: strings.Repeat("g", 300)}), "is 300 bytes"},
		{jobs.ConcurrencyLimit(concurrency.Limit[email]{Key: "x", To: 1 << 32}), "To is 4294967296; it must be between 1 and 2147483647"},
		{jobs.ConcurrencyLimit(concurrency.Limit[email]{Key: "x", Group: "\xff"}), `Group "\xff" is not valid UTF-8`},
		{jobs.Coalesce(coalesce.Rule[email]{Key: "x", Group: "a\tb"}), `Group "a\tb" contains a tab`},
	}
	for _, c := range cases {
		err := jobs.Register(jobs.NewRegistry(), work, c.opt)
		require.ErrorContains(t, err, "register email")
		require.ErrorContains(t, err, c.want)
	}
	require.NoError(t, jobs.Register(jobs.NewRegistry(), work, jobs.Priority(math.MinInt32), jobs.MaxAttempts(math.MaxInt32),
		jobs.Queue(strings.Repeat("q", 255)), jobs.ConcurrencyLimit(concurrency.Limit[email]{Key: "x", To: math.MaxInt32})))

	err := jobs.Register(jobs.NewRegistry(), func(context.Context, *jobs.Job[badKind]) error { return nil })
	require.ErrorContains(t, err, `kind "sync\x00" contains a NUL byte`)
	err = jobs.Register(jobs.NewRegistry(), func(context.Context, *jobs.Job[longKind]) error { return nil })
	require.ErrorContains(t, err, "kind \"kkkk")
	require.ErrorContains(t, err, "is 256 bytes")

	reg := jobs.NewRegistry()
	require.ErrorContains(t, reg.LimitQueue(strings.Repeat("q", 250), ratelimit.QueueLimit{To: 1, Per: time.Second}),
		`queue budget key "@queue/qqq`)
	require.ErrorContains(t, reg.LimitQueue("sms\n", ratelimit.QueueLimit{To: 1, Per: time.Second}), `queue "sms\n" contains a line break`)
	require.NoError(t, reg.LimitQueue(strings.Repeat("q", 255-len("@queue/")), ratelimit.QueueLimit{To: 1, Per: time.Second}))
}

func TestEnqueueRefusesNumbersAndTimesThatWouldWrap(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		require.NoError(t, jobs.Declare[email](h.reg))
		ctx := context.Background()
		for _, c := range []struct {
			opt  jobs.EnqueueOption
			want string
		}{
			{jobs.Priority(math.MaxInt), "Priority is 9223372036854775807"},
			{jobs.Priority(math.MaxInt32 + 1), "Priority is 2147483648"},
			{jobs.MaxAttempts(1 << 32), "MaxAttempts is 4294967296"},
			{jobs.RunAt(time.Date(300000, 1, 1, 0, 0, 0, 0, time.UTC)), "RunAt is 300000-01-01T00:00:00Z; it must not be after 9999-12-31T23:59:59Z"},
			{jobs.Delay(-time.Second), "Delay is -1s; it must not be negative"},
		} {
			_, err := h.client.Enqueue(ctx, email{}, c.opt)
			require.ErrorContains(t, err, c.want)
		}
		// A delay that lands after the year 9999.
		late := jobs.NewClient(testdb.Public(h.store), h.reg, jobs.ClientConfig{Clock: clock.NewFake(time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC))})
		_, err := late.Enqueue(ctx, email{}, jobs.Delay(48*time.Hour))
		require.ErrorContains(t, err, "the run time 10000-01-02T00:00:00Z is after 9999-12-31T23:59:59Z")
		st, err := h.store.Stats(ctx)
		require.NoError(t, err)
		require.Empty(t, st, "nothing was written")

		// The edges are stored as given, and the lowest priority still runs
		// last.
		first := h.enqueue(email{Subject: "first"}, jobs.Priority(math.MinInt32), jobs.MaxAttempts(math.MaxInt32))
		last := h.enqueue(email{Subject: "last"}, jobs.Priority(math.MaxInt32))
		far := h.enqueue(email{}, jobs.RunAt(engine.MaxRunAt))
		require.Equal(t, math.MinInt32, h.job(first).Priority)
		require.Equal(t, math.MaxInt32, h.job(first).MaxAttempts)
		require.Equal(t, math.MaxInt32, h.job(last).Priority)
		require.Equal(t, engine.StateScheduled, h.job(far).State)
		require.Equal(t, engine.MaxRunAt.Truncate(time.Microsecond), h.job(far).RunAt)
	})
}

type profile struct {
	Account struct {
		Name string
		Tags []string
	}
	Note string
}

func (profile) Kind() string { return "profile" }

func TestArgsAreNeverSilentlyChangedOnEveryDatabase(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		var mu sync.Mutex
		var got []profile
		require.NoError(t, jobs.Register(h.reg, func(_ context.Context, j *jobs.Job[profile]) error {
			mu.Lock()
			got = append(got, j.Args)
			mu.Unlock()
			return nil
		}))
		ctx := context.Background()

		bad := profile{}
		bad.Account.Name = "Jos\xe9"
		_, err := h.client.Enqueue(ctx, bad)
		require.ErrorIs(t, err, jobs.ErrInvalidArgs)
		require.ErrorContains(t, err, `args field Account.Name: invalid UTF-8: "Jos\xe9"`)

		bad = profile{Note: "ok"}
		bad.Account.Tags = []string{"a", strings.Repeat("€", 5000) + "\xe2\x82"}
		_, err = h.client.Enqueue(ctx, bad)
		require.ErrorContains(t, err, "args field Account.Tags[1]: invalid UTF-8")
		require.Less(t, len(err.Error()), 300)

		_, err = h.client.EnqueueMany(ctx, []jobs.Item{{Args: profile{}}, {Args: profile{Note: "\xff"}}})
		require.ErrorContains(t, err, "enqueue item 1: profile: invalid args: args field Note: invalid UTF-8")

		// What is valid arrives as it was sent: a real U+FFFD, the text
		// "\ufffd", NUL and other control characters (escaped by JSON),
		// multi-byte characters.
		good := profile{Note: "\ufffd \\ufffd \x00 \x1b é€🔑 \u2028 <&>"}
		good.Account.Name = strings.Repeat("é", 8<<10)
		good.Account.Tags = []string{"", "\t"}
		h.enqueue(good)
		require.Equal(t, 1, h.drain(jobs.WorkerConfig{}).Completed)
		require.Equal(t, []profile{good}, got)
	})
}

type rawArgs struct{ Payload json.RawMessage }

func (rawArgs) Kind() string { return "raw" }

func TestArgsWrittenRawAreCheckedByTheStore(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		require.NoError(t, jobs.Declare[rawArgs](h.reg))
		// encoding/json copies a RawMessage's string as it is, invalid
		// bytes too; the store refuses them.
		_, err := h.client.Enqueue(context.Background(), rawArgs{Payload: json.RawMessage("\"\xff\"")})
		require.ErrorContains(t, err, "args are not valid UTF-8 (at byte 12)")
	})
}

type blob struct{ S string }

func (blob) Kind() string { return "blob" }

// TestArgsOverTheServersPacketAreRefusedOnMySQL needs no change to the
// server: it reads max_allowed_packet as the store does, and sends args
// right at the cap (every character one that escaping doubles) and just
// over it.
func TestArgsOverTheServersPacketAreRefusedOnMySQL(t *testing.T) {
	for _, b := range backends(t) {
		if b.Name != "mysql" {
			continue
		}
		t.Run(b.Name, func(t *testing.T) {
			s := b.Open(t)
			ctx := context.Background()
			rows, err := s.DB().Query(ctx, `SELECT @@max_allowed_packet`)
			require.NoError(t, err)
			require.True(t, rows.Next())
			var packet int
			require.NoError(t, rows.Scan(&packet))
			rows.Close()
			capBytes := engine.MaxArgsBytes(s)
			require.Equal(t, (packet-min(64<<10, packet/2))/2, capBytes)

			reg := jobs.NewRegistry()
			var mu sync.Mutex
			var sizes []int
			require.NoError(t, jobs.Register(reg, func(_ context.Context, j *jobs.Job[blob]) error {
				mu.Lock()
				sizes = append(sizes, len(j.Args.S))
				mu.Unlock()
				return nil
			}))
			c := jobs.NewClient(testdb.Public(s), reg, jobs.ClientConfig{MaxArgsBytes: 4 * packet})

			// {"S":"\"\"…"}: 8 bytes and two per quote, each of which the
			// driver escapes again.
			quotes := (capBytes - 8) / 2
			_, err = c.Enqueue(ctx, blob{S: strings.Repeat(`"`, quotes+1)})
			require.ErrorIs(t, err, jobs.ErrArgsTooLarge)
			require.ErrorContains(t, err, fmt.Sprintf("%d bytes encoded; the mysql server carries at most %d bytes of args", 8+2*(quotes+1), capBytes))

			_, err = c.Enqueue(ctx, blob{S: strings.Repeat(`"`, quotes)})
			require.NoError(t, err, "args at the cap fit the packet however they escape")
			// Three jobs of a third of the cap each go in more than one
			// insert, each under the packet.
			third := blob{S: strings.Repeat(`\`, quotes/3)}
			_, err = c.EnqueueMany(ctx, []jobs.Item{{Args: third}, {Args: third}, {Args: third}})
			require.NoError(t, err)

			w, err := jobs.NewWorker(testdb.Public(s), reg, jobs.WorkerConfig{Concurrency: 4, Logger: quiet()})
			require.NoError(t, err)
			res, err := w.Drain(ctx)
			require.NoError(t, err)
			require.Equal(t, 4, res.Completed)
			require.ElementsMatch(t, []int{quotes, quotes / 3, quotes / 3, quotes / 3}, sizes)
		})
	}
}

// panicky's args decoder panics on a value it does not expect.
type panicky struct{ V string }

func (panicky) Kind() string { return "panicky" }

func (p *panicky) UnmarshalJSON(b []byte) error {
	if string(b) == `"boom"` {
		panic("decoder bug")
	}
	p.V = string(b)
	return nil
}

func (p panicky) MarshalJSON() ([]byte, error) { return []byte(fmt.Sprintf("%q", p.V)), nil }

// guarantees.md, "Nothing lost": a panic in the kind's own code that
// decodes its args (an UnmarshalJSON) fails the attempt, as a handler's
// does; it once ran outside the recover and took the process down.
func TestAPanicDecodingArgsFailsTheAttempt(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		require.NoError(t, jobs.Register(h.reg, func(context.Context, *jobs.Job[panicky]) error { return nil }))
		id := h.enqueue(panicky{V: "boom"})
		var recovered any
		var res jobs.DrainResult
		func() {
			defer func() { recovered = recover() }()
			var err error
			res, err = h.worker(jobs.WorkerConfig{}).Drain(context.Background())
			require.NoError(t, err)
		}()
		require.Nil(t, recovered, "the decoder's panic unwound the worker")
		require.Equal(t, 1, res.Retried)
		require.Contains(t, h.job(id).LastError, "decoder bug")
	})
}
