//go:build soak

package main

import (
	"bufio"
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/sluicequeue/sluice/jobs"
)

type runRow struct {
	jobID, claims        int64
	kind, key, proc      string
	attempt              int
	claimed, start, end  int64
	killed, rerun, noEnd bool
	outcome              string
	sluicePid            int64
}

type jobRow struct {
	kind, state, lastErr string
	attempt, claims      int64
	lost                 int // attempts lost with their process
}

func (k *soak) check(ctx context.Context, left map[string]int64) error {
	fmt.Println("==== checks ====")
	bad := 0
	fail := func(format string, args ...any) {
		bad++
		fmt.Printf("VIOLATION "+format+"\n", args...)
	}
	for _, a := range k.alarms {
		fail("monitor: %s", a)
	}
	if len(left) > 0 {
		fail("jobs not finished after the drain: %s", fmtMap(left))
	}
	killedAt := map[string]int64{}
	for _, kl := range k.kills {
		killedAt[kl.name] = kl.at.UnixMicro()
	}

	// Jobs.
	jobsByID := map[int64]*jobRow{}
	var id, attempt, claims int64
	var kind, state string
	var lastErr sql.NullString
	if err := k.l.query(ctx, "SELECT id, kind, state, attempt, claims, last_error FROM sluice_jobs", []any{&id, &kind, &state, &attempt, &claims, &lastErr}, func() {
		jobsByID[id] = &jobRow{kind: kind, state: state, attempt: attempt, claims: claims, lastErr: lastErr.String}
	}); err != nil {
		return err
	}
	var lostN int64
	if err := k.l.query(ctx, "SELECT job_id, count(*) FROM sluice_attempts WHERE error LIKE 'process lost%' GROUP BY job_id", []any{&id, &lostN}, func() {
		if j := jobsByID[id]; j != nil {
			j.lost = int(lostN)
		}
	}); err != nil {
		return err
	}
	outcomes := map[string]int{}
	lostJobs := 0
	for jid, what := range k.enqueued {
		j := jobsByID[jid]
		if j == nil {
			fail("job %d (%s) enqueued, not in the table", jid, what)
			continue
		}
		want := "completed"
		if strings.HasSuffix(what, "/failalways") {
			want = "failed"
		}
		outcomes[what+" "+j.state]++
		if j.lost > 0 {
			lostJobs++
		}
		if j.state != want {
			fail("job %d (%s) ended %s, want %s: attempt %d, claims %d, lost runs %d, last error %q", jid, what, j.state, want, j.attempt, j.claims, j.lost, j.lastErr)
		}
	}
	for jid, j := range jobsByID {
		if _, ok := k.enqueued[jid]; !ok && strings.HasPrefix(j.kind, "soak_") {
			fmt.Printf("note: job %d (%s, %s) in the table but no enqueue returned it\n", jid, j.kind, j.state)
		}
	}
	fmt.Printf("jobs: %d enqueued; %d had runs lost with their process; outcomes: %s\n", len(k.enqueued), lostJobs, fmtMap(outcomes))

	// Runs.
	var runs []*runRow
	var r runRow
	var end sql.NullInt64
	var outcome sql.NullString
	if err := k.l.query(ctx, "SELECT job_id, claims, kind, k, proc, attempt, claimed_us, start_us, end_us, outcome, sluice_pid FROM soak_runs",
		[]any{&r.jobID, &r.claims, &r.kind, &r.key, &r.proc, &r.attempt, &r.claimed, &r.start, &end, &outcome, &r.sluicePid}, func() {
			c := r
			c.outcome = outcome.String
			if end.Valid {
				c.end = end.Int64
			} else if at, ok := killedAt[c.proc]; ok {
				c.end, c.killed = at, true
			} else {
				c.end, c.noEnd = 1<<62, true
			}
			runs = append(runs, &c)
		}); err != nil {
		return err
	}
	sort.Slice(runs, func(i, j int) bool { return runs[i].start < runs[j].start })
	killedJob := map[int64]bool{}
	killedRuns, reruns, noEnd := 0, 0, 0
	byKind := map[string]int{}
	for _, r := range runs {
		byKind[r.kind]++
		if killedJob[r.jobID] {
			r.rerun = true
			reruns++
		}
		if r.killed {
			killedJob[r.jobID] = true
			killedRuns++
		}
		if r.noEnd {
			noEnd++
			fail("run of job %d (claim %d) in %s has no end and its process was not killed", r.jobID, r.claims, r.proc)
		}
	}
	fmt.Printf("runs: %d (%s); %d cut by a kill, %d re-runs after a killed run\n", len(runs), fmtMap(byKind), killedRuns, reruns)

	// Rate limits: claims per budget in any window of Per.
	for _, lim := range []struct {
		kind, job string
		to        int
		budget    func(*runRow) string
	}{
		{"rated", "soak_rated", rateTo, func(r *runRow) string { return r.key }},
		{"combo", "soak_combo", comboTo, func(*runRow) string { return "global" }},
	} {
		early := 0
		claimsOf := map[string][]int64{}
		firstClaims := map[string][]int64{}
		seenClaim := map[[2]int64]bool{}
		for _, r := range runs {
			if r.kind != lim.kind {
				continue
			}
			if r.start < r.claimed-1000 {
				early++
			}
			c := [2]int64{r.jobID, r.claims}
			if seenClaim[c] {
				continue
			}
			seenClaim[c] = true
			claimsOf[lim.budget(r)] = append(claimsOf[lim.budget(r)], r.claimed)
			if !r.rerun {
				firstClaims[lim.budget(r)] = append(firstClaims[lim.budget(r)], r.claimed)
			}
		}
		var tableClaims int64
		for _, j := range jobsByID {
			if j.kind == lim.job {
				tableClaims += j.claims
			}
		}
		fmt.Printf("rate %s: %d claims counted by the jobs table, %d recorded by handlers (the rest were killed before their handler wrote); %d started over 1ms before their claim time\n",
			lim.kind, tableClaims, len(seenClaim), early)
		if early > 0 {
			fail("%d %s runs started before their claim time", early, lim.kind)
		}
		for _, key := range keysOf(claimsOf) {
			all, at := busiest(claimsOf[key], ratePer.Microseconds())
			first, _ := busiest(firstClaims[key], ratePer.Microseconds())
			fmt.Printf("rate %s: key %s: %d claims, busiest window of %s holds %d (limit %d) at %s; without re-runs %d\n",
				lim.kind, key, len(claimsOf[key]), ratePer, all, lim.to, time.UnixMicro(at).Format("15:04:05.000000"), first)
			if all > lim.to {
				fail("rate %s key %s: %d claims in a window of %s from %s", lim.kind, key, all, ratePer, time.UnixMicro(at).Format("15:04:05.000000"))
			}
		}
	}

	// Concurrency: runs of a key overlapping.
	for _, lim := range []struct {
		kind string
		to   int
	}{{"conc", concTo}, {"combo", 1}, {"coal", 1}} {
		concRuns := map[string][]*runRow{}
		for _, r := range runs {
			if r.kind == lim.kind {
				concRuns[r.key] = append(concRuns[r.key], r)
			}
		}
		for _, key := range keysOf(concRuns) {
			most, over := overlaps(concRuns[key], lim.to)
			fmt.Printf("concurrency %s: key %s: %d runs, at most %d at once (limit %d)\n", lim.kind, key, len(concRuns[key]), most, lim.to)
			for _, set := range over {
				var parts []string
				classified := false
				jobsIn := map[int64]bool{}
				for _, r := range set {
					if jobsIn[r.jobID] {
						classified = true // one job twice: a paused worker's lost run and its re-run
					}
					jobsIn[r.jobID] = true
					long := time.Duration(r.end-r.claimed) * time.Microsecond
					parts = append(parts, fmt.Sprintf("job %d claim %d %s claimed %s [%s..%s] ran %s from claim, killed %v, rerun %v",
						r.jobID, r.claims, r.proc, time.UnixMicro(r.claimed).Format("15:04:05.000"), time.UnixMicro(r.start).Format("15:04:05.000"), time.UnixMicro(r.end).Format("15:04:05.000"), long, r.killed, r.rerun))
					if long > concDuration {
						classified = true
					}
				}
				if classified {
					fmt.Printf("concurrency %s: key %s over its limit, a run longer than Duration or one job twice (documented?):\n    %s\n", lim.kind, key, strings.Join(parts, "\n    "))
				} else {
					fail("concurrency %s key %s: %d runs at once:\n    %s", lim.kind, key, len(set), strings.Join(parts, "\n    "))
				}
			}
		}
	}

	// Coalescing: every call ran in the job its enqueue returned.
	seqRuns := map[int64][]int64{}
	var seq int64
	if err := k.l.query(ctx, "SELECT job_id, seq FROM soak_calls", []any{&id, &seq}, func() { seqRuns[seq] = append(seqRuns[seq], id) }); err != nil {
		return err
	}
	twice, jobsWithCalls := 0, map[int64]bool{}
	for s, jid := range k.calls {
		jobsWithCalls[jid] = true
		got := seqRuns[s]
		found := false
		for _, g := range got {
			if g == jid {
				found = true
			} else {
				fail("coalesce call %d ran in job %d, its enqueue returned job %d", s, g, jid)
			}
		}
		if !found {
			fail("coalesce call %d (job %d, %s) never ran", s, jid, jobsByID[jid].state)
		}
		if len(got) > 1 {
			twice++
		}
	}
	fmt.Printf("coalesce: %d calls into %d jobs; %d calls ran more than once (re-runs)\n", len(k.calls), len(jobsWithCalls), twice)

	// Semaphores, budgets and slots at the end.
	var name string
	var value, limit, parked int64
	if err := k.l.query(ctx, "SELECT name, held, limit_to FROM sluice_semaphores", []any{&name, &value, &limit}, func() {
		if value != 0 {
			fail("semaphore %s holds %d at the end", name, value)
		}
	}); err != nil {
		return err
	}
	if err := k.l.query(ctx, "SELECT count(*) FROM sluice_jobs WHERE holds_slot", []any{&value}, func() {
		if value != 0 {
			fail("%d jobs hold a slot at the end", value)
		}
	}); err != nil {
		return err
	}
	if err := k.l.query(ctx, "SELECT name, parked FROM sluice_budgets WHERE parked <> 0", []any{&name, &parked}, func() {
		fmt.Printf("note: budget %s counts %d parked at the end (may run ahead)\n", name, parked)
	}); err != nil {
		return err
	}
	for _, f := range k.findings {
		fmt.Println("check:", f)
	}

	// The children's logs.
	logs, _ := filepath.Glob(filepath.Join(k.f.logDir, "*.log"))
	lines := map[string]int{}
	for _, f := range logs {
		fh, err := os.Open(f)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(fh)
		for sc.Scan() {
			t := sc.Text()
			if i := strings.Index(t, "msg="); i >= 0 {
				t = t[i:]
				if j := strings.Index(t, "\" "); j > 0 {
					t = t[:j+1]
				}
			}
			lines[t]++
		}
		fh.Close()
	}
	for _, l := range keysOf(lines) {
		fmt.Printf("log x%d: %s\n", lines[l], l)
	}
	fmt.Printf("==== %d kills, %d stops, %d violations ====\n", len(k.kills), len(k.stops), bad)
	if bad > 0 {
		return fmt.Errorf("%d violations", bad)
	}
	return nil
}

// busiest returns the most times in any half-open window [t, t+per), and
// where that window starts.
func busiest(ts []int64, per int64) (int, int64) {
	sort.Slice(ts, func(i, j int) bool { return ts[i] < ts[j] })
	most, at := 0, int64(0)
	j := 0
	for i := range ts {
		for ts[i]-ts[j] >= per {
			j++
		}
		if i-j+1 > most {
			most, at = i-j+1, ts[j]
		}
	}
	return most, at
}

// overlaps returns the most runs at once, and each set of runs that
// exceeded the limit together (one per episode).
func overlaps(runs []*runRow, limit int) (int, [][]*runRow) {
	type ev struct {
		at    int64
		delta int
		r     *runRow
	}
	var evs []ev
	for _, r := range runs {
		evs = append(evs, ev{r.start, 1, r}, ev{r.end, -1, r})
	}
	sort.Slice(evs, func(i, j int) bool {
		if evs[i].at != evs[j].at {
			return evs[i].at < evs[j].at
		}
		return evs[i].delta < evs[j].delta // ends first
	})
	live := map[*runRow]bool{}
	most := 0
	var over [][]*runRow
	inEpisode := false
	for _, e := range evs {
		if e.delta > 0 {
			live[e.r] = true
		} else {
			delete(live, e.r)
		}
		most = max(most, len(live))
		if len(live) > limit && !inEpisode {
			inEpisode = true
			var set []*runRow
			for r := range live {
				set = append(set, r)
			}
			over = append(over, set)
		}
		if len(live) <= limit {
			inEpisode = false
		}
	}
	return most, over
}

// runCheck runs jobs.Check while the processes are still up.
func (k *soak) runCheck(ctx context.Context) {
	reg := jobs.NewRegistry()
	if err := register(reg, nil); err != nil {
		k.findings = append(k.findings, err.Error())
		return
	}
	k.sluiceCLI("check")
	k.sluiceCLI("semaphores")
	k.sluiceCLI("budgets")
	k.sluiceCLI("processes")
	findings, err := jobs.Check(ctx, reg, k.s)
	if err != nil {
		k.findings = append(k.findings, "jobs.Check: "+err.Error())
	}
	for _, f := range findings {
		k.findings = append(k.findings, f.String())
	}
}
