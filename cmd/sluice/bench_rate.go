package main

import (
	"context"
	"database/sql"
	"fmt"
	"sort"
	"time"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/ratelimit"
)

// admissions reads when each of the bench queue's jobs of a kind was
// admitted, per budget, sorted: its attempted_at, which a limited claim
// stamps with the time its limit decided at (microseconds).
func (b *bench) admissions(ctx context.Context, k kind) (map[string][]time.Time, error) {
	rows, err := b.store.DB().Query(ctx, "SELECT rate_keys, attempted_at FROM sluice_jobs WHERE queue = '"+benchQueue+
		"' AND kind = '"+kindNames[k]+"' AND attempted_at IS NOT NULL")
	if err != nil {
		return nil, fmt.Errorf("read admission times: %w", err)
	}
	defer rows.Close()
	out := map[string][]time.Time{}
	for rows.Next() {
		var key sql.NullString
		var at int64
		if err := rows.Scan(&key, &at); err != nil {
			return nil, err
		}
		out[key.String] = append(out[key.String], engine.FromMicros(at))
	}
	for _, ts := range out {
		sort.Slice(ts, func(i, j int) bool { return ts[i].Before(ts[j]) })
	}
	return out, rows.Err()
}

// rateReport prints, for a run of rate-limited jobs, the most admissions
// in any window of Per on one budget (from the jobs' rows; from handler
// starts in this process with --delete), and the drain rate, n jobs in
// elapsed, against the theoretical one.
func (b *bench) rateReport(ctx context.Context, elapsed time.Duration, n int64) error {
	if b.limit == nil {
		return nil
	}
	var per map[string][]time.Time
	window, source := b.limit.Per, "admission times"
	if !b.f.deleteDone {
		var err error
		if per, err = b.admissions(ctx, kLimited); err != nil {
			return err
		}
	} else if b.f.procs == 0 {
		b.t.mu.Lock()
		per = map[string][]time.Time{}
		for k, ts := range b.t.starts {
			per[fmt.Sprint(k)] = ts
		}
		b.t.mu.Unlock()
		// A handler starts a moment after its claim: allow a little jitter
		// so that it is not mistaken for the limit's.
		window, source = window-window/50, "handler starts, within 98% of Per"
	}
	theory := float64(b.f.keys) * float64(b.limit.To-b.limit.Burst+1) / b.limit.Per.Seconds()
	if per == nil {
		b.say("limit %d per %s, burst %d, over %d keys: admission times are not kept with --delete and --procs", b.limit.To, b.limit.Per, b.limit.Burst, b.f.keys)
	} else {
		most := 0
		for _, ts := range per {
			most = max(most, ratelimit.BusiestWindow(ts, window))
		}
		b.say("limit %d per %s, burst %d, over %d keys: the busiest window of one key held %d (limit %d; %s)",
			b.limit.To, b.limit.Per, b.limit.Burst, b.f.keys, most, b.limit.To, source)
		if most > b.limit.To {
			b.say("FAIL: a window of %s held %d admissions on one budget, over the limit of %d", b.limit.Per, most, b.limit.To)
		}
	}
	b.say("drained %d at %.0f/s; the limit allows %.0f/s after the first bursts", n, float64(n)/elapsed.Seconds(), theory)
	return nil
}
