package engine_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/sluicequeue/sluice/coalesce"
	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
	"github.com/sluicequeue/sluice/ratelimit"
)

// TestCombinedModel is a property test with rapid that mixes, on one kind,
// every feature users combine — coalescing (debounced, collecting), fair
// shares, a concurrency limit per key, rate limits (the kind's and a
// queue's), priorities — across two queues that share the budgets and the
// concurrency keys, with queue pauses and resumes, limits lowered and
// raised (and handed to parked budgets by Reprice, or left to the claims),
// floods of alike jobs and batches of their sweeps (DeferOverflow) at any
// point after a claim met them, operators' retries and cancels, and every
// outcome of a run: completion, error, cancel, Snooze, RetryAfter (429),
// release.
//
// The model test (model_test.go) drives most of these, but not pauses,
// two queues sharing keys, or the checks below that look at runs rather
// than rows. After every step it checks:
//
//   - every job enqueued is in the table, in one known state;
//   - a job is claimed only when it is not running, never from a paused
//     queue, and each claim of a job is a new run (its claims count rises);
//   - the jobs running in the database are exactly those the model's
//     processes run;
//   - each concurrency key counts exactly its holders, which never rise
//     above its limit (they may stay above a lowered one), and every job
//     of a key that runs holds one of its slots;
//   - a coalesce key is held by at most one job, a pending one;
//   - no budget admitted more than To in any window of Per, per limit;
//   - after the dispatcher's upkeep, no key has both a free slot and a
//     blocked job of a queue that is not paused.
//
// At the end it resumes every queue, lifts paused limits and lets time
// run until every job has finished, and then checks that every slot was
// given back (every semaphore holds none, no job holds one).
//
//	go test ./internal/engine -run TestCombinedModel -rapid.checks 200 -rapid.steps 80
func TestCombinedModel(t *testing.T) {
	defaultRapidFlag(t, "rapid.checks", 12)
	defaultRapidFlag(t, "rapid.steps", 80)
	for _, b := range testdb.Backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			s := b.Open(t)
			var st comboStats
			rapid.Check(t, func(rt *rapid.T) {
				m := newComboModel(rt, s)
				m.stats = &st
				rt.Repeat(m.actions())
				m.drain()
			})
			t.Logf("%+v", st)
		})
	}
}

// defaultRapidFlag sets one of rapid's flags to n for this test when the
// run set it neither on the command line nor in rapid's environment
// variable (-rapid.checks, RAPID_CHECKS): each check here runs against a
// database, not in memory, so fewer and longer walks than rapid's
// defaults.
func defaultRapidFlag(t *testing.T, name string, n int) {
	f := flag.Lookup(name)
	if f == nil || os.Getenv(strings.ToUpper(strings.ReplaceAll(name, ".", "_"))) != "" {
		return
	}
	set := false
	flag.Visit(func(g *flag.Flag) { set = set || g.Name == name })
	if set {
		return
	}
	old := f.Value.String()
	if err := f.Value.Set(fmt.Sprint(n)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Value.Set(old) })
}

var comboQueues = []string{"q1", "q2"}

var comboRules = []coalesce.Spec{
	{Scope: "co", OnConflict: coalesce.Discard, Debounce: time.Second, MaxDelay: 3 * time.Second},
	{Scope: "co", OnConflict: coalesce.Collect, MaxCalls: 2, Dispatch: true},
	{Scope: "co", OnConflict: coalesce.Replace, Debounce: 500 * time.Millisecond},
}

type comboModel struct {
	t      *rapid.T
	ctx    context.Context
	s      *engine.Store
	now    time.Time
	lim    *modelLimits
	concTo map[string]int
	pids   []int64
	// running are the runs each process makes, by job.
	running map[int64]map[int64]*engine.Job
	created map[int64]bool
	claims  map[int64]int64 // the last claim of each job seen
	paused  map[string]bool
	admits  map[string][]admission
	// prevHolders and prevLimit are each key's holders and limit after
	// the last step: the holders of a key may exceed its limit only when
	// its limit was lowered under them, never rise above it; and every
	// job of a key that runs holds a slot, so the jobs running never
	// exceed the holders.
	prevHolders map[string]int
	prevLimit   map[string]int
	log         []string
	stats       *comboStats
	hint        []string // the budgets the last claim locked
	// overflows are those the claims reported, for sweeps to move.
	overflows []engine.Overflow
	// revived are the jobs an operator retried after they finished.
	revived map[int64]bool
	// lastStep names the step just taken; prevRows and prevPaused are
	// the jobs and the paused queues after the one before, to check
	// what a step did to a paused queue's jobs.
	lastStep   string
	prevRows   map[int64]comboRow
	prevPaused map[string]bool
}

// comboStats counts what the walks did, to show they reach the
// combinations they are for.
type comboStats struct {
	Walks, Enqueued, Joined, Blocked, Claims, Runs, Deferred, Parked, Swept, PausedSkips, Outcomes, SlotOutcomes, Operators, Pauses int
}

func newComboModel(t *rapid.T, s *engine.Store) *comboModel {
	ctx := context.Background()
	wipe(t, s)
	m := &comboModel{stats: &comboStats{}, revived: map[int64]bool{},
		t: t, ctx: ctx, s: s, now: t0,
		lim:         &modelLimits{specs: map[string]ratelimit.Spec{}, version: map[string]int{}, hist: map[string][]ratelimit.Spec{}},
		concTo:      map[string]int{"c/0": 1, "c/1": 2},
		running:     map[int64]map[int64]*engine.Job{},
		created:     map[int64]bool{},
		claims:      map[int64]int64{},
		paused:      map[string]bool{},
		admits:      map[string][]admission{},
		prevHolders: map[string]int{},
		prevLimit:   map[string]int{},
	}
	m.lim.set("r", 0)                     // 2 a second, burst 1
	m.lim.set(engine.QueueScope+"/q1", 1) // 5 a second, burst 3
	for i := range 2 {
		pid, err := s.RegisterProcess(ctx, engine.Process{Kind: "worker", PID: i}, engine.At(m.now))
		m.must(err, "register")
		m.pids = append(m.pids, pid)
		m.running[pid] = map[int64]*engine.Job{}
	}
	return m
}

// wipe empties the tables a walk writes, so that one store serves every
// check (a migrated database per check would take most of the run).
func wipe(t *rapid.T, s *engine.Store) {
	for _, table := range []string{"sluice_calls", "sluice_attempts", "sluice_jobs", "sluice_budgets", "sluice_semaphores",
		"sluice_fair_keys", "sluice_queues", "sluice_processes", "sluice_limit_overrides"} {
		if _, err := s.DB().Exec(context.Background(), "DELETE FROM "+table); err != nil {
			t.Fatalf("wipe %s: %v", table, err)
		}
	}
}

func (m *comboModel) must(err error, what string) {
	if err != nil {
		m.t.Fatalf("%s: %v\nsteps:\n%s", what, err, strings.Join(m.log, "\n"))
	}
}

// write writes o as a worker does (FinishUnwaiting, waiting for no
// semaphore another transaction holds), and fails unless every outcome
// landed: no other transaction holds one here.
func (m *comboModel) write(pid int64, o engine.Outcomes, what string) {
	left, err := m.s.FinishUnwaiting(m.ctx, pid, m.clock(), o)
	m.must(err, what)
	if len(left) > 0 {
		m.fail("%s: jobs %v left unwritten, though no other transaction holds a semaphore", what, left)
	}
}

func (m *comboModel) fail(format string, args ...any) {
	m.t.Fatalf(format+"\nsteps:\n%s", append(args, strings.Join(m.log, "\n"))...)
}

func (m *comboModel) step(format string, args ...any) {
	m.log = append(m.log, fmt.Sprintf("  %s ", m.now.Sub(t0))+fmt.Sprintf(format, args...))
}

func (m *comboModel) clock() engine.Clock { return engine.At(m.now) }

func (m *comboModel) newJob(t *rapid.T) engine.NewJob {
	q := rapid.SampledFrom(comboQueues).Draw(t, "queue")
	j := engine.NewJob{Kind: "k", Queue: q, Priority: rapid.IntRange(0, 1).Draw(t, "priority"), Args: []byte(`{}`), MaxAttempts: 2}
	if rapid.IntRange(0, 3).Draw(t, "rate") > 0 {
		j.RateKeys = []engine.RateKey{{Key: fmt.Sprintf("r/%d", rapid.IntRange(0, 1).Draw(t, "rateKey")), Cost: 1}}
	}
	if c := rapid.IntRange(-1, 1).Draw(t, "conc"); c >= 0 {
		key := fmt.Sprintf("c/%d", c)
		j.Conc = &engine.Conc{Key: key, To: m.concTo[key], Duration: time.Hour}
	}
	if co := rapid.IntRange(-1, 1).Draw(t, "coalesce"); co >= 0 {
		rule := rapid.IntRange(0, len(comboRules)-1).Draw(t, "rule")
		j.Coalesce = &engine.Coalesce{Key: fmt.Sprintf("co/%d/%d", co, rule), Rule: comboRules[rule]}
	}
	if f := rapid.IntRange(-1, 2).Draw(t, "fair"); f >= 0 {
		j.FairKey, j.FairWeight = fmt.Sprintf("f/%d", f), f+1
	}
	if rapid.IntRange(0, 4).Draw(t, "delayed") == 0 {
		j.RunAt = m.now.Add(time.Duration(rapid.IntRange(1, 3000).Draw(t, "delay")) * time.Millisecond)
	}
	return j
}

// actions are the steps of a walk. rapid picks among them evenly, so the
// common ones are listed under more than one name.
func (m *comboModel) actions() map[string]func(*rapid.T) {
	acts := m.steps()
	for name, act := range acts {
		if name != "" {
			acts[name] = func(t *rapid.T) { m.lastStep = name; act(t) }
		}
	}
	for _, name := range []string{"enqueue", "claim", "finish", "advance"} {
		acts[name+" again"] = acts[name]
	}
	acts["claim once more"] = acts["claim"]
	acts["finish once more"] = acts["finish"]
	return acts
}

func (m *comboModel) steps() map[string]func(*rapid.T) {
	return map[string]func(*rapid.T){
		"enqueue": func(t *rapid.T) {
			jobs := make([]engine.NewJob, rapid.IntRange(1, 3).Draw(t, "jobs"))
			for i := range jobs {
				jobs[i] = m.newJob(t)
			}
			res, err := m.s.Enqueue(m.ctx, nil, m.clock(), jobs)
			m.must(err, "enqueue")
			for _, r := range res {
				m.stats.Enqueued++
				if r.Joined {
					m.stats.Joined++
				}
				if r.State == engine.StateBlocked {
					m.stats.Blocked++
				}
			}
			var got []string
			for i, r := range res {
				m.created[r.ID] = true
				conc, co := "", ""
				if jobs[i].Conc != nil {
					conc = fmt.Sprintf("%s/%d", jobs[i].Conc.Key, jobs[i].Conc.To)
				}
				if jobs[i].Coalesce != nil {
					co = jobs[i].Coalesce.Key
				}
				got = append(got, fmt.Sprintf("%d(%s q=%s p=%d rate=%v conc=%s fair=%s co=%s delay=%s joined=%v)", r.ID, r.State, jobs[i].Queue, jobs[i].Priority,
					jobs[i].RateKeys, conc, jobs[i].FairKey, co, jobs[i].RunAt.Sub(m.now).Truncate(time.Millisecond), r.Joined))
			}
			m.step("enqueue %s", strings.Join(got, " "))
		},
		"claim": func(t *rapid.T) {
			pid := rapid.SampledFrom(m.pids).Draw(t, "pid")
			queues := rapid.SampledFrom([][]string{{"q1"}, {"q2"}, {"q1", "q2"}, {"q2", "q1"}}).Draw(t, "queues")
			max := rapid.IntRange(1, 4).Draw(t, "max")
			var hint []string
			if rapid.Bool().Draw(t, "hint") {
				hint = m.hint // as a worker passes its last claim's budgets
			}
			res, err := m.s.Claim(m.ctx, engine.ClaimParams{ProcessID: pid, Queues: queues, Max: max, Clock: m.clock(),
				Candidates: rapid.IntRange(0, 6).Draw(t, "candidates"), Limits: m.lim, Horizon: 3 * time.Second,
				PromoteDue: rapid.Bool().Draw(t, "promoteDue"), Fair: true, BudgetHint: hint, SnapshotHint: rapid.Bool().Draw(t, "snapshot")})
			m.must(err, "claim")
			m.hint = res.Budgets
			for _, o := range res.Overflows {
				if !slices.Contains(m.overflows, o) {
					m.overflows = append(m.overflows, o)
				}
			}
			m.step("claim pid=%d %v max=%d: %v (deferred %d)", pid, queues, max, ids(res.Jobs), len(res.Deferred))
			m.stats.Claims++
			m.stats.Runs += len(res.Jobs)
			m.stats.Deferred += len(res.Deferred)
			for _, d := range res.Deferred {
				if d.Parked {
					m.stats.Parked++
				}
			}
			if m.paused[queues[0]] {
				m.stats.PausedSkips++
			}
			for _, j := range res.Jobs {
				m.claimed(pid, j, res.DecidedAt)
			}
		},
		"finish": m.finish,
		"advance": func(t *rapid.T) {
			d := rapid.SampledFrom([]time.Duration{time.Millisecond, 100 * time.Millisecond, 600 * time.Millisecond, 1500 * time.Millisecond, 4 * time.Second}).Draw(t, "by")
			m.now = m.now.Add(d)
			for _, pid := range m.pids {
				_, err := m.s.Heartbeat(m.ctx, pid, m.clock())
				m.must(err, "heartbeat")
			}
			m.step("advance %s", d)
		},
		"dispatcher": func(t *rapid.T) {
			m.dispatch()
			m.step("dispatcher tick")
			m.checkNoFreeSlotLeftBlocked()
		},
		"pause": func(t *rapid.T) {
			q := rapid.SampledFrom(comboQueues).Draw(t, "queue")
			if m.paused[q] {
				m.must(m.s.ResumeQueue(m.ctx, q, m.now), "resume")
			} else {
				m.must(m.s.PauseQueue(m.ctx, q, m.now), "pause")
			}
			m.paused[q] = !m.paused[q]
			m.step("paused %s: %v", q, m.paused[q])
			m.stats.Pauses++
		},
		"operator": func(t *rapid.T) {
			if len(m.created) == 0 {
				t.Skip("no job")
			}
			all := make([]int64, 0, len(m.created))
			for id := range m.created {
				all = append(all, id)
			}
			slices.Sort(all)
			id := rapid.SampledFrom(all).Draw(t, "job")
			retry := rapid.Bool().Draw(t, "retry")
			var err error
			if retry {
				before, gerr := m.s.GetJob(m.ctx, id)
				m.must(gerr, "read job")
				if before.State == engine.StateFailed || before.State == engine.StateCancelled {
					// It comes back with its old start, though its turn
					// may have been given back (docs/fairness.md,
					// Approximations).
					m.revived[id] = true
				}
				_, err = m.s.RetryJobs(m.ctx, m.clock(), []int64{id})
			} else {
				_, err = m.s.CancelJobs(m.ctx, m.clock(), []int64{id}, "")
			}
			if err != nil && !errors.Is(err, engine.ErrNotAllowed) {
				m.must(err, "operator")
			}
			m.step("operator retry=%v %d: %v", retry, id, err)
			if err == nil {
				m.stats.Operators++
			}
		},
		"limit": func(t *rapid.T) {
			scope := rapid.SampledFrom([]string{"r", engine.QueueScope + "/q1"}).Draw(t, "scope")
			choice := rapid.IntRange(0, len(limitChoices)-1).Draw(t, "choice")
			m.lim.set(scope, choice)
			// A worker that has seen the change hands it to the budgets
			// whose jobs are all parked; one that has not leaves it to
			// the claims.
			reprice := rapid.Bool().Draw(t, "reprice")
			if reprice {
				_, err := m.s.Reprice(m.ctx, m.clock(), engine.Repricing{Target: scope, Params: m.lim.specs[scope].Params, Horizon: 3 * time.Second})
				m.must(err, "reprice")
			}
			m.step("limit %s = %+v (repriced %v)", scope, limitChoices[choice], reprice)
		},
		"flood": func(t *rapid.T) {
			// Jobs alike, on one budget, which claims defer in numbers:
			// what a sweep moves.
			j := engine.NewJob{Kind: "k", Queue: rapid.SampledFrom(comboQueues).Draw(t, "queue"), Priority: rapid.IntRange(0, 1).Draw(t, "priority"),
				Args: []byte(`{}`), MaxAttempts: 2, RateKeys: []engine.RateKey{{Key: fmt.Sprintf("r/%d", rapid.IntRange(0, 1).Draw(t, "rateKey")), Cost: 1}}}
			res, err := m.s.Enqueue(m.ctx, nil, m.clock(), slices.Repeat([]engine.NewJob{j}, rapid.IntRange(4, 12).Draw(t, "jobs")))
			m.must(err, "enqueue a flood")
			for _, r := range res {
				m.created[r.ID] = true
				m.stats.Enqueued++
			}
			m.step("flood of %d on %s in %s at %d", len(res), j.RateKeys[0].Key, j.Queue, j.Priority)
		},
		"sweep": func(t *rapid.T) {
			if len(m.overflows) == 0 {
				t.Skip("no overflow")
			}
			// A batch of a sweep, at any point after the claim that met
			// the flood: its queue may be paused, its limit changed, its
			// jobs cancelled or retried.
			o := rapid.SampledFrom(m.overflows).Draw(t, "overflow")
			moved, slots, err := m.s.DeferOverflow(m.ctx, m.clock(), o, 3*time.Second, rapid.IntRange(1, 5).Draw(t, "batch"))
			m.must(err, "sweep")
			m.stats.Swept += len(moved)
			m.step("sweep %s of %s/%s: %v (%d slotted)", o.Key, o.Queue, o.Kind, moved, len(slots))
		},
		"concTo": func(t *rapid.T) {
			key := rapid.SampledFrom([]string{"c/0", "c/1"}).Draw(t, "key")
			m.concTo[key] = rapid.IntRange(1, 3).Draw(t, "to")
			m.step("concurrency %s declares %d from now on", key, m.concTo[key])
		},
		"": m.check,
	}
}

// claimed records a claim's job and checks it was claimable.
func (m *comboModel) claimed(pid int64, j *engine.Job, at time.Time) {
	for p, rs := range m.running {
		if rs[j.ID] != nil {
			m.fail("job %d claimed by process %d while process %d runs it", j.ID, pid, p)
		}
	}
	if m.paused[j.Queue] {
		m.fail("job %d claimed from queue %s, which is paused", j.ID, j.Queue)
	}
	if j.Claims <= m.claims[j.ID] {
		m.fail("job %d claimed at claim %d, after claim %d: not a new run", j.ID, j.Claims, m.claims[j.ID])
	}
	m.claims[j.ID] = j.Claims
	m.running[pid][j.ID] = j
	charge := func(key string, cost int) {
		scope := ratelimit.ScopeOf(key)
		if strings.HasPrefix(key, engine.QueueScope+"/") {
			scope = key
		}
		if _, ok := m.lim.specs[scope]; ok {
			m.admits[key] = append(m.admits[key], admission{at: engine.Nanos(at), cost: cost, version: m.lim.version[scope]})
		}
	}
	for _, rk := range j.RateKeys {
		charge(rk.Key, rk.Cost)
	}
	if len(m.lim.QueueLimits(j.Queue)) > 0 {
		charge(engine.QueueScope+"/"+j.Queue, 1)
	}
}

// finish records an outcome of a run, as a worker does.
func (m *comboModel) finish(t *rapid.T) {
	var runs []*engine.Job
	pids := map[int64]int64{}
	for pid, rs := range m.running {
		for _, j := range rs {
			runs = append(runs, j)
			pids[j.ID] = pid
		}
	}
	if len(runs) == 0 {
		t.Skip("nothing runs")
	}
	slices.SortFunc(runs, func(a, b *engine.Job) int { return int(a.ID - b.ID) })
	j := rapid.SampledFrom(runs).Draw(t, "run")
	pid := pids[j.ID]
	run := j.Run()
	outcome := rapid.SampledFrom([]string{"complete", "error", "cancel", "snooze", "429", "release"}).Draw(t, "outcome")
	var o engine.Outcomes
	holder := func() {
		if j.HoldsSlot {
			o.SlotHolders = []engine.Run{run}
		}
	}
	switch outcome {
	case "complete":
		o.Completed = []engine.Run{run}
		if j.Calls > 1 {
			o.WithCalls = []engine.Run{run}
		}
		holder()
	case "error":
		tr := engine.Transition{ID: j.ID, State: engine.StateScheduled, Wait: time.Second, Error: "boom"}
		if j.Attempt >= j.MaxAttempts {
			tr = engine.Transition{ID: j.ID, State: engine.StateFailed, Error: "boom", Finished: true}
			holder()
		}
		o.Others = []engine.Transition{tr}
	case "cancel":
		o.Others = []engine.Transition{{ID: j.ID, State: engine.StateCancelled, Error: "no", Finished: true}}
		holder()
	case "snooze":
		o.Others = []engine.Transition{{ID: j.ID, State: engine.StateScheduled, Wait: 700 * time.Millisecond, AttemptDelta: -1}}
	case "429":
		const wait = 1200 * time.Millisecond
		o.Others, o.Pushes = turnedAway(m.lim, j, wait)
		holder()
	case "release":
		m.must(m.s.Release(m.ctx, pid, m.clock(), []engine.Run{run}), "release")
	}
	for i := range o.Others {
		o.Others[i].Claim = j.Claims
	}
	if outcome != "release" {
		m.write(pid, o, "finish "+outcome)
	}
	delete(m.running[pid], j.ID)
	m.step("%s job %d (pid %d, held a slot: %v)", outcome, j.ID, pid, j.HoldsSlot)
	m.stats.Outcomes++
	if j.HoldsSlot {
		m.stats.SlotOutcomes++
	}
}

// turnedAway is what a worker records for a run an upstream turned away
// (a 429) with a wait: the job waits without spending its attempt, and
// every budget it ran under, the kind's and its queue's, is held back.
func turnedAway(lim engine.Limits, j *engine.Job, wait time.Duration) ([]engine.Transition, []engine.BudgetPush) {
	run := j.Run()
	tr := engine.Transition{ID: j.ID, State: engine.StateScheduled, Wait: wait, AttemptDelta: -1, Error: "429"}
	var pushes []engine.BudgetPush
	for _, rk := range j.RateKeys {
		if spec, ok := lim.RateSpec(j.Kind, rk.Key); ok {
			pushes = append(pushes, engine.BudgetPush{Key: rk.Key, Wait: wait, Params: spec.Params, Run: run})
		}
	}
	for _, l := range lim.QueueLimits(j.Queue) {
		pushes = append(pushes, engine.BudgetPush{Key: l.Key, Wait: wait, Params: l.Spec.Params, Run: run})
	}
	if len(pushes) > 0 {
		tr.WaitKey = pushes[0].Key
	}
	return []engine.Transition{tr}, pushes
}

// dispatch does a dispatcher's tick: promotion, unparking, semaphores.
func (m *comboModel) dispatch() {
	_, _, err := m.s.Promote(m.ctx, m.clock(), 100)
	m.must(err, "promote")
	_, err = m.s.Unpark(m.ctx, m.clock(), 3*time.Second, 10, 100)
	m.must(err, "unpark")
	_, _, err = m.s.MaintainSemaphores(m.ctx, m.clock(), 10)
	m.must(err, "maintain semaphores")
}

type comboRow struct {
	id                            int64
	queue                         string
	state                         engine.State
	holdsSlot                     bool
	concKey, waitKey, coalesceKey string
	processID                     int64
}

func (m *comboModel) rows() []comboRow {
	rs, err := m.s.DB().Query(m.ctx, `SELECT id, queue, state, holds_slot, COALESCE(conc_key, ''), COALESCE(wait_key, ''),
  COALESCE(coalesce_key, ''), COALESCE(process_id, 0) FROM sluice_jobs ORDER BY id`)
	m.must(err, "read jobs")
	defer rs.Close()
	var out []comboRow
	for rs.Next() {
		var r comboRow
		var st string
		m.must(rs.Scan(&r.id, &r.queue, &st, &r.holdsSlot, &r.concKey, &r.waitKey, &r.coalesceKey, &r.processID), "scan job")
		r.state = engine.State(st)
		out = append(out, r)
	}
	m.must(rs.Err(), "read jobs")
	return out
}

func (m *comboModel) semaphores() map[string]engine.SemaphoreInfo {
	sems, err := m.s.ListSemaphores(m.ctx)
	m.must(err, "list semaphores")
	out := map[string]engine.SemaphoreInfo{}
	for _, s := range sems {
		out[s.Name] = s
	}
	return out
}

// check runs after every step.
func (m *comboModel) check(*rapid.T) {
	rows := m.rows()
	if len(rows) != len(m.created) {
		m.fail("%d jobs in the table, %d enqueued", len(rows), len(m.created))
	}
	holders, coalesced := map[string]int{}, map[string]int{}
	for _, r := range rows {
		if !m.created[r.id] {
			m.fail("job %d was never enqueued", r.id)
		}
		if _, err := engine.ParseState(string(r.state)); err != nil {
			m.fail("job %d: %v", r.id, err)
		}
		switch {
		case r.holdsSlot && !slices.Contains([]engine.State{engine.StateReady, engine.StateScheduled, engine.StateRunning}, r.state):
			m.fail("job %d holds a slot while %s", r.id, r.state)
		case r.state == engine.StateReady && r.concKey != "" && !r.holdsSlot:
			m.fail("job %d is ready without a slot of %s", r.id, r.concKey)
		case r.state == engine.StateParked && r.waitKey == "":
			m.fail("job %d is parked on no budget", r.id)
		case r.coalesceKey != "" && !slices.Contains([]engine.State{engine.StateReady, engine.StateScheduled, engine.StateParked, engine.StateBlocked}, r.state):
			m.fail("job %d holds coalesce key %s while %s", r.id, r.coalesceKey, r.state)
		case r.coalesceKey != "" && r.holdsSlot && r.state != engine.StateReady:
			// A pending job takes its slot as it becomes ready, and gives
			// it back when a debounce or its rate limit sends it back.
			m.fail("pending job %d (coalesce key %s) holds a slot of %s while %s", r.id, r.coalesceKey, r.concKey, r.state)
		}
		m.checkPausedJob(r)
		// The jobs running are those the processes run.
		mine := r.processID != 0 && m.running[r.processID] != nil && m.running[r.processID][r.id] != nil
		if (r.state == engine.StateRunning) != mine {
			m.fail("job %d is %s for process %d in the database; the model's processes run it: %v", r.id, r.state, r.processID, mine)
		}
		if r.holdsSlot {
			holders[r.concKey]++
		}
		if r.state == engine.StateRunning && r.concKey != "" && !r.holdsSlot {
			// No key expires in a walk (Duration is an hour).
			m.fail("job %d runs without a slot of its key %s", r.id, r.concKey)
		}
		if r.coalesceKey != "" {
			coalesced[r.coalesceKey]++
		}
	}
	for k, n := range coalesced {
		if n > 1 {
			m.fail("coalesce key %s is held by %d pending jobs", k, n)
		}
	}
	sems := m.semaphores()
	for k, sem := range sems {
		if sem.Held != holders[k] {
			m.fail("semaphore %s counts %d held, %d jobs hold a slot", k, sem.Held, holders[k])
		}
		if n := holders[k]; n > m.prevHolders[k] && n > max(sem.Limit, m.prevLimit[k]) {
			m.fail("%d jobs hold a slot of key %s (%d before the step), over its limit %d (%d before)", n, k, m.prevHolders[k], sem.Limit, m.prevLimit[k])
		}
		m.prevLimit[k] = sem.Limit
	}
	m.prevHolders = holders
	m.checkFairFinishes()
	if over := m.lim.overLimit(m.admits); over != "" {
		m.fail("%s", over)
	}
	m.prevRows = make(map[int64]comboRow, len(rows))
	for _, r := range rows {
		m.prevRows[r.id] = r
	}
	m.prevPaused = maps.Clone(m.paused)
}

// checkPausedJob checks that a job of a queue paused before and after the
// step stayed where it was (docs/guarantees.md, Queues): it took no slot
// of its key, and, parked, got no slot of its budget; and that a job the
// step enqueued into a paused queue took no slot. An operator's retry
// moves a job as asked; an enqueue's call may fill a parked job that
// dispatches once full (it then waits, scheduled, without a slot).
func (m *comboModel) checkPausedJob(r comboRow) {
	if !m.paused[r.queue] || m.lastStep == "operator" {
		return
	}
	prev, ok := m.prevRows[r.id]
	if !ok {
		if r.holdsSlot {
			m.fail("job %d enqueued into the paused queue %s took a slot of %s (%s)", r.id, r.queue, r.concKey, r.state)
		}
		return
	}
	if !m.prevPaused[r.queue] {
		return
	}
	if !prev.holdsSlot && r.holdsSlot {
		m.fail("job %d of the paused queue %s took a slot of %s (%s, now %s) in step %q", r.id, r.queue, r.concKey, prev.state, r.state, m.lastStep)
	}
	if prev.state == engine.StateParked && r.state != engine.StateParked && m.lastStep != "enqueue" {
		m.fail("parked job %d of the paused queue %s is %s after step %q", r.id, r.queue, r.state, m.lastStep)
	}
}

// checkFairFinishes checks that no fair key was given back more turns
// than its jobs that never ran had taken: its finish at a level stays
// after the start of each of its jobs there that has not finished (an
// enqueue sets it one step past its last job's start; a refund lowers it
// only to the start of a cancelled job with no later job of the key
// waiting or running). Jobs an operator brought back after they finished
// are left out: they come back with their old starts (documented).
func (m *comboModel) checkFairFinishes() {
	rs, err := m.s.DB().Query(m.ctx, `SELECT j.id, j.fair_key, j.fair_start, k.finish FROM sluice_jobs j
  JOIN sluice_fair_keys k ON k.queue = j.queue AND k.priority = j.priority AND k.fair_key = j.fair_key
  WHERE j.fair_key IS NOT NULL AND j.state IN ('ready', 'scheduled', 'parked', 'blocked', 'running') AND j.fair_start >= k.finish`)
	m.must(err, "read fair finishes")
	defer rs.Close()
	for rs.Next() {
		var id, start, finish int64
		var key string
		m.must(rs.Scan(&id, &key, &start, &finish), "scan fair finish")
		if !m.revived[id] {
			m.fail("fair key %s's finish %d is not after the start %d of its job %d, which has not finished: its turns were given back too far", key, finish, start, id)
		}
	}
	m.must(rs.Err(), "read fair finishes")
}

// checkNoFreeSlotLeftBlocked checks, after the dispatcher's upkeep, that
// no key has a free slot and a blocked job of a queue not paused.
func (m *comboModel) checkNoFreeSlotLeftBlocked() {
	blocked := map[string][]int64{}
	for _, r := range m.rows() {
		if r.state == engine.StateBlocked && !m.paused[r.queue] {
			blocked[r.concKey] = append(blocked[r.concKey], r.id)
		}
	}
	for k, sem := range m.semaphores() {
		if sem.Held < sem.Limit && len(blocked[k]) > 0 {
			m.fail("after the dispatcher's tick key %s has %d of %d slots held, and jobs %v blocked", k, sem.Held, sem.Limit, blocked[k])
		}
	}
}

// drain resumes every queue, lifts paused limits and lets time run until
// every job has finished; then every slot must have been given back.
func (m *comboModel) drain() {
	m.step("drain")
	m.stats.Walks++
	for _, q := range comboQueues {
		if m.paused[q] {
			m.must(m.s.ResumeQueue(m.ctx, q, m.now), "resume")
			m.paused[q] = false
		}
	}
	for scope, spec := range m.lim.specs {
		if spec.Params.Paused {
			m.lim.set(scope, 4)
		}
	}
	for round := 0; ; round++ {
		open := 0
		for _, r := range m.rows() {
			if r.state != engine.StateCompleted && r.state != engine.StateFailed && r.state != engine.StateCancelled {
				open++
			}
		}
		if open == 0 {
			break
		}
		if round == 400 {
			var stuck []string
			for _, r := range m.rows() {
				if r.state != engine.StateCompleted && r.state != engine.StateFailed && r.state != engine.StateCancelled {
					stuck = append(stuck, fmt.Sprintf("%d:%s(q %s wait %q conc %q slot %v)", r.id, r.state, r.queue, r.waitKey, r.concKey, r.holdsSlot))
				}
			}
			m.fail("jobs never finished: %s", strings.Join(stuck, " "))
		}
		m.dispatch()
		for _, pid := range m.pids {
			res, err := m.s.Claim(m.ctx, engine.ClaimParams{ProcessID: pid, Queues: comboQueues, Max: 5, Clock: m.clock(),
				Limits: m.lim, Horizon: 3 * time.Second, PromoteDue: true, Fair: true})
			m.must(err, "claim")
			for _, j := range res.Jobs {
				m.claimed(pid, j, res.DecidedAt)
			}
		}
		// Finish every run, completing it.
		for _, pid := range m.pids {
			for _, j := range m.running[pid] {
				o := engine.Outcomes{Completed: []engine.Run{j.Run()}}
				if j.HoldsSlot {
					o.SlotHolders = []engine.Run{j.Run()}
				}
				if j.Calls > 1 {
					o.WithCalls = []engine.Run{j.Run()}
				}
				m.write(pid, o, "finish")
				delete(m.running[pid], j.ID)
			}
		}
		m.check(m.t)
		m.now = m.now.Add(700 * time.Millisecond)
	}
	for k, sem := range m.semaphores() {
		if sem.Held != 0 {
			m.fail("every job finished, yet semaphore %s counts %d held", k, sem.Held)
		}
	}
	for _, r := range m.rows() {
		if r.holdsSlot {
			m.fail("every job finished, yet job %d (%s) holds a slot of %s", r.id, r.state, r.concKey)
		}
	}
}
