//go:build soak

package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/sluicequeue/sluice/coalesce"
	"github.com/sluicequeue/sluice/concurrency"
	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/jobs"
	"github.com/sluicequeue/sluice/ratelimit"
	"github.com/sluicequeue/sluice/store"
)

// The soak's settings, shared by every process.
const (
	rateTo       = 20
	ratePer      = time.Second
	rateBurst    = 2
	concTo       = 2
	comboTo      = 8
	concDuration = 2 * time.Second
	heartbeat    = time.Second
	deadAfter    = 4 * time.Second
	horizon      = 10 * time.Second
	retryWait    = 200 * time.Millisecond
	snoozeWait   = 300 * time.Millisecond
)

// Plain is an unlimited job.
type Plain struct {
	Seq  int64
	Mode string
	Ms   int
}

// Kind names it.
func (Plain) Kind() string { return "soak_plain" }

// Rated is rate limited per key.
type Rated struct {
	Seq  int64
	Key  string
	Mode string
}

// Kind names it.
func (Rated) Kind() string { return "soak_rated" }

// Conc is concurrency limited per key.
type Conc struct {
	Seq  int64
	Key  string
	Mode string
	Ms   int
}

// Kind names it.
func (Conc) Kind() string { return "soak_conc" }

// Combo is one at a time per key, under a rate shared by every key.
type Combo struct {
	Seq  int64
	Key  string
	Mode string
}

// Kind names it.
func (Combo) Kind() string { return "soak_combo" }

// Coal collects calls per key.
type Coal struct {
	Seq int64
	Key string
}

// Kind names it.
func (Coal) Kind() string { return "soak_coal" }

// logger records runs in the soak's own tables.
type logger struct {
	s    *engine.Store
	pg   bool
	proc string
}

func newLogger(pub *store.Store, proc string) *logger {
	return &logger{s: engine.From(pub), pg: pub.Backend() == "postgres", proc: proc}
}

// q turns ? placeholders into $n on PostgreSQL.
func (l *logger) q(s string) string {
	if !l.pg {
		return s
	}
	var b strings.Builder
	n := 0
	for _, r := range s {
		if r == '?' {
			n++
			fmt.Fprintf(&b, "$%d", n)
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

func (l *logger) exec(ctx context.Context, q string, args ...any) error {
	for try := 0; ; try++ {
		_, err := l.s.DB().Exec(ctx, l.q(q), args...)
		if err == nil || try >= 5 || ctx.Err() != nil {
			return err
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// run is one run's record.
type run struct {
	l      *logger
	jobID  int64
	claims int64
}

// start records a run's start, with its claim (count and time) as the
// jobs table has it.
func (l *logger) start(ctx context.Context, kind, key string, jobID int64, attempt int) (*run, error) {
	rows, err := l.s.DB().Query(ctx, l.q("SELECT claims, attempted_at, process_id FROM sluice_jobs WHERE id = ?"), jobID)
	if err != nil {
		return nil, fmt.Errorf("read claim: %w", err)
	}
	var claims, at, pid int64
	if rows.Next() {
		err = rows.Scan(&claims, &at, &pid)
	}
	rows.Close()
	if err != nil {
		return nil, fmt.Errorf("scan claim: %w", err)
	}
	now := time.Now().UnixMicro()
	if err := l.exec(ctx, "INSERT INTO soak_runs (job_id, kind, k, claims, attempt, claimed_us, start_us, proc, sluice_pid) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
		jobID, kind, key, claims, attempt, at, now, l.proc, pid); err != nil {
		return nil, fmt.Errorf("record start: %w", err)
	}
	return &run{l: l, jobID: jobID, claims: claims}, nil
}

// end records a run's end and outcome.
func (r *run) end(ctx context.Context, outcome string) {
	_ = r.l.exec(context.WithoutCancel(ctx), "UPDATE soak_runs SET end_us = ?, outcome = ? WHERE job_id = ? AND claims = ? AND proc = ?",
		time.Now().UnixMicro(), outcome, r.jobID, r.claims, r.l.proc)
}

// snoozedBefore says whether an earlier run of the job snoozed.
func (l *logger) snoozedBefore(ctx context.Context, jobID int64) bool {
	rows, err := l.s.DB().Query(ctx, l.q("SELECT count(*) FROM soak_runs WHERE job_id = ? AND outcome = 'snooze'"), jobID)
	if err != nil {
		return true
	}
	defer rows.Close()
	var n int64
	if rows.Next() {
		_ = rows.Scan(&n)
	}
	return n > 0
}

var errDesigned = errors.New("designed failure")

// behave ends a run as its mode says.
func (l *logger) behave(ctx context.Context, r *run, mode string, attempt int, work time.Duration) error {
	select {
	case <-time.After(work):
	case <-ctx.Done():
		r.end(ctx, "ctx")
		return ctx.Err()
	}
	switch {
	case mode == "snooze" && !l.snoozedBefore(ctx, r.jobID):
		r.end(ctx, "snooze")
		return jobs.Snooze(snoozeWait)
	case mode == "failonce" && attempt == 1, mode == "failalways":
		r.end(ctx, "error")
		return errDesigned
	}
	r.end(ctx, "ok")
	return nil
}

func ms(lo, hi int) time.Duration { return time.Duration(lo+rand.IntN(hi-lo+1)) * time.Millisecond }

// register declares the soak's kinds; l is nil in the enqueuer.
func register(reg *jobs.Registry, l *logger) error {
	backoff := jobs.Backoff(func(int) time.Duration { return retryWait })
	err := errors.Join(
		jobs.Register(reg, func(ctx context.Context, j *jobs.Job[Plain]) error {
			r, err := l.start(ctx, "plain", "", j.ID, j.Attempt)
			if err != nil {
				return err
			}
			return l.behave(ctx, r, j.Args.Mode, j.Attempt, time.Duration(j.Args.Ms)*time.Millisecond)
		}, backoff),
		jobs.Register(reg, func(ctx context.Context, j *jobs.Job[Rated]) error {
			r, err := l.start(ctx, "rated", j.Args.Key, j.ID, j.Attempt)
			if err != nil {
				return err
			}
			return l.behave(ctx, r, j.Args.Mode, j.Attempt, ms(5, 40))
		}, backoff, jobs.RateLimit(ratelimit.Limit[Rated]{
			To: rateTo, Per: ratePer, Burst: rateBurst, Key: func(a Rated) any { return a.Key },
		})),
		jobs.Register(reg, func(ctx context.Context, j *jobs.Job[Conc]) error {
			r, err := l.start(ctx, "conc", j.Args.Key, j.ID, j.Attempt)
			if err != nil {
				return err
			}
			return l.behave(ctx, r, j.Args.Mode, j.Attempt, time.Duration(j.Args.Ms)*time.Millisecond)
		}, backoff, jobs.ConcurrencyLimit(concurrency.Limit[Conc]{
			To: concTo, Duration: concDuration, Key: func(a Conc) any { return a.Key },
		})),
		jobs.Register(reg, func(ctx context.Context, j *jobs.Job[Combo]) error {
			r, err := l.start(ctx, "combo", j.Args.Key, j.ID, j.Attempt)
			if err != nil {
				return err
			}
			return l.behave(ctx, r, j.Args.Mode, j.Attempt, ms(30, 150))
		}, backoff, jobs.ConcurrencyLimit(concurrency.Limit[Combo]{
			Duration: concDuration, Key: func(a Combo) any { return a.Key },
		}), jobs.RateLimit(ratelimit.Limit[Combo]{
			To: comboTo, Per: ratePer, Burst: 1, Group: "combo", Key: "global",
		})),
		jobs.RegisterCalls(reg, func(ctx context.Context, j *jobs.Job[Coal], calls []Coal) error {
			r, err := l.start(ctx, "coal", j.Args.Key, j.ID, j.Attempt)
			if err != nil {
				return err
			}
			var b strings.Builder
			args := []any{}
			b.WriteString("INSERT INTO soak_calls (job_id, claims, seq, proc) VALUES ")
			for i, c := range calls {
				if i > 0 {
					b.WriteString(", ")
				}
				b.WriteString("(?, ?, ?, ?)")
				args = append(args, j.ID, r.claims, c.Seq, l.proc)
			}
			if err := l.exec(ctx, b.String(), args...); err != nil {
				return fmt.Errorf("record calls: %w", err)
			}
			return l.behave(ctx, r, "", j.Attempt, ms(10, 60))
		}, backoff, jobs.Coalesce(coalesce.Rule[Coal]{
			Key: func(a Coal) any { return a.Key }, OnConflict: coalesce.Collect, MaxCalls: 10,
			Debounce: 200 * time.Millisecond, MaxDelay: time.Second,
		}), jobs.ConcurrencyLimit(concurrency.Limit[Coal]{
			Duration: concDuration, Key: func(a Coal) any { return a.Key },
		})),
	)
	return err
}
