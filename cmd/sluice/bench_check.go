package main

import (
	"context"
	"fmt"
	"strings"
)

// jobCount is how many of the bench queue's jobs of a kind are in a state
// with an attempt count.
type jobCount struct {
	kind, state string
	attempt, n  int64
}

func (b *bench) jobCounts(ctx context.Context) ([]jobCount, error) {
	rows, err := b.store.DB().Query(ctx, "SELECT kind, state, attempt, count(*) FROM sluice_jobs WHERE queue = '"+benchQueue+"' GROUP BY kind, state, attempt")
	if err != nil {
		return nil, fmt.Errorf("count the bench jobs: %w", err)
	}
	defer rows.Close()
	var out []jobCount
	for rows.Next() {
		var c jobCount
		if err := rows.Scan(&c.kind, &c.state, &c.attempt, &c.n); err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, rows.Err()
}

// onceCheck is what became of one kind's jobs.
type onceCheck struct {
	kind                     string
	enqueued, rows, once     int64
	again, failed, cancelled int64 // completed on a later attempt, failed, cancelled
	running                  int64
	waiting                  map[string]int64 // ready, scheduled, parked, blocked
	ran                      int64            // handler runs counted
}

func (c onceCheck) waitingTotal() int64 {
	var n int64
	for _, v := range c.waiting {
		n += v
	}
	return n
}

func (c onceCheck) ok() bool { return c.once == c.enqueued && c.ran == c.enqueued }

// checkOnce counts, in the database, what became of each kind of job the
// run enqueued, and prints per kind
//
//	completed once: X of N KIND jobs (…)
//
// A job deferred by a rate limit and claimed later still has attempt 1: a
// deferral spends no attempt. For the kinds in mustFinish it prints a FAIL
// line when not every job completed exactly once.
func (b *bench) checkOnce(ctx context.Context, mustFinish ...kind) (map[kind]onceCheck, error) {
	counts, err := b.jobCounts(ctx)
	if err != nil {
		return nil, err
	}
	out := map[kind]onceCheck{}
	for k := kind(0); k < nKinds; k++ {
		name := kindNames[k]
		c := onceCheck{kind: name, enqueued: int64(b.enqueued[name]), waiting: map[string]int64{}, ran: b.t.ran[k].Load()}
		for _, r := range counts {
			if r.kind != name {
				continue
			}
			c.rows += r.n
			switch {
			case r.state == "completed" && r.attempt == 1:
				c.once += r.n
			case r.state == "completed":
				c.again += r.n
			case r.state == "failed":
				c.failed += r.n
			case r.state == "cancelled":
				c.cancelled += r.n
			case r.state == "running":
				c.running += r.n
			default:
				c.waiting[r.state] += r.n
			}
		}
		if c.enqueued == 0 && c.rows == 0 {
			continue
		}
		out[k] = c
		b.say("%s", b.onceLine(c))
	}
	for _, k := range mustFinish {
		if c := out[k]; !b.f.deleteDone && !c.ok() {
			b.say("FAIL: not every %s job completed exactly once: %d of %d did, and handlers ran %d times", kindNames[k], c.once, c.enqueued, c.ran)
		}
	}
	return out, nil
}

func (b *bench) onceLine(c onceCheck) string {
	var waiting []string
	for _, st := range []string{"ready", "scheduled", "parked", "blocked"} {
		if n := c.waiting[st]; n > 0 {
			waiting = append(waiting, fmt.Sprintf("%s %d", st, n))
		}
	}
	still := fmt.Sprintf("still waiting %d", c.waitingTotal())
	if len(waiting) > 0 {
		still += ": " + strings.Join(waiting, ", ")
	}
	if b.f.deleteDone {
		return fmt.Sprintf("completed once: ? of %d %s jobs (--delete removes completed rows, so attempts cannot be read; left in the table %d: failed %d, cancelled %d, running %d, %s; handlers ran %d)",
			c.enqueued, c.kind, c.rows, c.failed, c.cancelled, c.running, still, c.ran)
	}
	missing := ""
	if c.rows < c.enqueued {
		missing = fmt.Sprintf(", MISSING %d", c.enqueued-c.rows)
	}
	return fmt.Sprintf("completed once: %d of %d %s jobs (completed again %d, failed %d, cancelled %d, running %d, %s%s; handlers ran %d)",
		c.once, c.enqueued, c.kind, c.again, c.failed, c.cancelled, c.running, still, missing, c.ran)
}
