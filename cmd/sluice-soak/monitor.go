//go:build soak

package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
)

func makeTables(ctx context.Context, l *logger) error {
	text, id := "text", "bigint"
	if l.s.Dialect().Name() == "mysql" {
		text = "varchar(64)"
	}
	for _, q := range []string{
		"DROP TABLE IF EXISTS soak_runs",
		"DROP TABLE IF EXISTS soak_calls",
		fmt.Sprintf("CREATE TABLE soak_runs (job_id %[2]s, kind %[1]s, k %[1]s, claims %[2]s, attempt int, claimed_us %[2]s, start_us %[2]s, end_us %[2]s, proc %[1]s, sluice_pid %[2]s, outcome %[1]s)", text, id),
		"CREATE INDEX soak_runs_job ON soak_runs (job_id)",
		fmt.Sprintf("CREATE TABLE soak_calls (job_id %[2]s, claims %[2]s, seq %[2]s, proc %[1]s)", text, id),
	} {
		if err := l.exec(ctx, q); err != nil {
			return fmt.Errorf("%s: %w", q, err)
		}
	}
	return nil
}

// query runs q and calls row for each row's scanned values.
func (l *logger) query(ctx context.Context, q string, dest []any, row func(), args ...any) error {
	rows, err := l.s.DB().Query(ctx, l.q(q), args...)
	if err != nil {
		return fmt.Errorf("%s: %w", q, err)
	}
	defer rows.Close()
	for rows.Next() {
		if err := rows.Scan(dest...); err != nil {
			return fmt.Errorf("%s: %w", q, err)
		}
		row()
	}
	return rows.Err()
}

// monitor samples the database's invariants every second.
func (k *soak) monitor(ctx context.Context) {
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	freeBlocked := map[string]time.Time{} // key → since when it had a free slot and a blocked job
	var dispatcherGen int
	last := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		k.mu.Lock()
		dAlive := false
		for _, p := range k.procs {
			if p.what == "dispatcher" && !p.restarting {
				dAlive = true
				if p.gen != dispatcherGen {
					dispatcherGen = p.gen
					clear(freeBlocked) // a new dispatcher: start over
				}
			}
		}
		k.mu.Unlock()
		if !dAlive {
			clear(freeBlocked)
		}
		var name string
		var value, limit, holders, running, blocked int64
		seen := map[string]bool{}
		err := k.l.query(ctx, `SELECT s.name, s.held, s.limit_to,
  (SELECT count(*) FROM sluice_jobs j WHERE j.conc_key = s.name AND j.holds_slot),
  (SELECT count(*) FROM sluice_jobs j WHERE j.conc_key = s.name AND j.holds_slot AND j.state = 'running'),
  (SELECT count(*) FROM sluice_jobs j WHERE j.conc_key = s.name AND j.state = 'blocked')
FROM sluice_semaphores s`, []any{&name, &value, &limit, &holders, &running, &blocked}, func() {
			if value != holders {
				k.alarm("semaphore %s counts %d, %d jobs hold its slots", name, value, holders)
			}
			if value > limit || running > limit {
				k.alarm("semaphore %s: value %d, %d running holders, limit %d", name, value, running, limit)
			}
			if blocked > 0 && value < limit && dAlive {
				seen[name] = true
				if _, ok := freeBlocked[name]; !ok {
					freeBlocked[name] = time.Now()
				} else if time.Since(freeBlocked[name]) > 3*time.Second {
					k.alarm("semaphore %s: %d free slots and %d blocked jobs for %s", name, limit-value, blocked, time.Since(freeBlocked[name]).Round(time.Millisecond))
				}
			}
		})
		if err != nil && ctx.Err() == nil {
			fmt.Println("monitor:", err)
		}
		for n := range freeBlocked {
			if !seen[n] {
				delete(freeBlocked, n)
			}
		}
		var n int64
		err = k.l.query(ctx, "SELECT coalesce_key, count(*) FROM sluice_jobs WHERE coalesce_key IS NOT NULL GROUP BY coalesce_key HAVING count(*) > 1",
			[]any{&name, &n}, func() { k.alarm("coalesce key %s has %d pending jobs", name, n) })
		if err != nil && ctx.Err() == nil {
			fmt.Println("monitor:", err)
		}
		var jid int64
		var jstate string
		err = k.l.query(ctx, "SELECT id, state FROM sluice_jobs WHERE holds_slot AND (state IN ('blocked', 'parked', 'completed', 'failed', 'cancelled') OR state = 'scheduled' AND wait_key IS NOT NULL)",
			[]any{&jid, &jstate}, func() { k.alarm("job %d is %s and holds a concurrency slot", jid, jstate) })
		if err != nil && ctx.Err() == nil {
			fmt.Println("monitor:", err)
		}
		var parked, jobsParked int64
		err = k.l.query(ctx, "SELECT b.name, b.parked, (SELECT count(*) FROM sluice_jobs j WHERE j.state = 'parked' AND j.wait_key = b.name) FROM sluice_budgets b",
			[]any{&name, &parked, &jobsParked}, func() {
				if jobsParked > parked {
					k.alarm("budget %s counts %d parked, %d jobs parked on it", name, parked, jobsParked)
				}
			})
		if err != nil && ctx.Err() == nil {
			fmt.Println("monitor:", err)
		}
		if time.Since(last) >= 10*time.Second {
			last = time.Now()
			st, _ := k.states(ctx)
			fmt.Printf("%s states %s\n", time.Now().Format("15:04:05"), fmtMap(st))
			k.explainSome(ctx)
		}
	}
}

// states counts the soak's jobs by state.
func (k *soak) states(ctx context.Context) (map[string]int64, error) {
	out := map[string]int64{}
	var st string
	var n int64
	err := k.l.query(ctx, "SELECT state, count(*) FROM sluice_jobs GROUP BY state", []any{&st, &n}, func() { out[st] = n })
	return out, err
}

// waitDrained waits until no job is waiting or running, and returns what
// is left when the drain time ran out.
func (k *soak) waitDrained(ctx context.Context) map[string]int64 {
	until := time.Now().Add(k.f.drain)
	began := time.Now()
	for {
		st, err := k.states(ctx)
		left := map[string]int64{}
		for s, n := range st {
			if s != "completed" && s != "failed" && s != "cancelled" {
				left[s] = n
			}
		}
		if err == nil && len(left) == 0 {
			fmt.Printf("soak: drained in %s\n", time.Since(began).Round(time.Second))
			return nil
		}
		if time.Now().After(until) || ctx.Err() != nil {
			fmt.Printf("soak: NOT drained after %s: %v\n", k.f.drain, left)
			return left
		}
		time.Sleep(2 * time.Second)
	}
}

func keysOf[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func fmtMap[V any](m map[string]V) string {
	var b strings.Builder
	for _, k := range keysOf(m) {
		fmt.Fprintf(&b, "%s=%v ", k, m[k])
	}
	return strings.TrimSpace(b.String())
}

// sluiceCLI runs the sluice command ($SOAK_SLUICE) against the soak's
// database and appends its output to cli.txt.
func (k *soak) sluiceCLI(args ...string) {
	bin := os.Getenv("SOAK_SLUICE")
	if bin == "" {
		return
	}
	out, err := exec.Command(bin, append(args, "--database-url", k.f.url)...).CombinedOutput()
	f, ferr := os.OpenFile(filepath.Join(k.f.logDir, "cli.txt"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if ferr != nil {
		return
	}
	defer f.Close()
	fmt.Fprintf(f, "=== %s sluice %s (err %v)\n%s\n", time.Now().Format("15:04:05.000"), strings.Join(args, " "), err, out)
}

// explainSome explains a job of each waiting state.
func (k *soak) explainSome(ctx context.Context) {
	for _, st := range []string{"blocked", "parked", "scheduled", "ready", "running"} {
		var id int64
		found := false
		_ = k.l.query(ctx, "SELECT id FROM sluice_jobs WHERE state = ? ORDER BY id LIMIT 1", []any{&id}, func() { found = true }, st)
		if found {
			k.sluiceCLI("explain", strconv.FormatInt(id, 10))
		}
	}
}
