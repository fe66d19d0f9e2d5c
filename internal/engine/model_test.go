package engine_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/sluicequeue/sluice/coalesce"
	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
	"github.com/sluicequeue/sluice/ratelimit"
)

// The model-based test drives a store through seeded random walks of every
// operation the engine has — enqueues of every kind, claims by several
// processes, every outcome of a run, limit changes up and down, the
// dispatcher's work, dead processes, operators — with a retryable failure
// injected into some of them, and checks the invariants of DESIGN.md after
// every step. At the end it lets time run until every job has finished:
// no waiting job is left without a future event.
//
//	go test ./internal/engine -run TestModel -model.steps 2000 -model.seeds 20
//	go test ./internal/engine -run TestModel -model.seed 12345   # replay one walk
var (
	modelSeeds = flag.Int("model.seeds", 2, "model test: walks per database")
	modelSteps = flag.Int("model.steps", 120, "model test: steps per walk")
	modelSeed  = flag.Uint64("model.seed", 0, "model test: run only this seed")
)

func TestModelInvariantsHoldOnRandomWalks(t *testing.T) {
	for _, b := range testdb.Backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			seeds := make([]uint64, 0, *modelSeeds)
			if *modelSeed != 0 {
				seeds = append(seeds, *modelSeed)
			} else {
				for i := range *modelSeeds {
					seeds = append(seeds, uint64(time.Now().UnixNano())+uint64(i)*7919)
				}
			}
			for _, seed := range seeds {
				trace := generate(seed, *modelSteps)
				if f := runModel(t, b, trace); f != nil {
					short := shrink(t, b, trace[:f.step+1])
					t.Fatalf("%s: seed %d failed at step %d of %d: %s\nshortest failing trace found (%d steps):\n%s\nreplay: go test ./internal/engine -run TestModel -model.seed %d -model.steps %d",
						b.Name, seed, f.step, len(trace), f.msg, len(short.trace), short, seed, *modelSteps)
				}
			}
		})
	}
}

// opKind is one of the engine's operations.
type opKind int

const (
	opEnqueue opKind = iota
	opEnqueueTx
	opClaim
	opFinish
	opAdvance
	opPromote
	opUnpark
	opMaintain
	opReap
	opClearIdle
	opSetLimit
	opSetConcTo
	opOperator
	opSweep
	opCount
)

var opNames = [...]string{"enqueue", "enqueue-tx", "claim", "finish", "advance", "promote", "unpark", "maintain",
	"reap", "clear-idle", "set-limit", "set-conc-to", "operator", "sweep"}

// jobSpec is a job an enqueue adds.
type jobSpec struct {
	rateScope string // "", "ra" or "rb"
	rateKey   int
	cost      int
	queueKey  bool // also draws on the queue's limit
	conc      int  // -1 for none, else the key index
	coalesce  int  // -1 for none, else the key index
	rule      int  // coalesce rule index
	delay     time.Duration
	priority  int
	fair      int // -1 for none, else the fairness key index (weight fair+1)
}

// op is one step of a walk. Its numbers pick among whatever the state
// holds when it runs (the i-th running job, modulo how many there are), so
// a trace stays runnable when steps are removed from it.
type op struct {
	kind  opKind
	a, b  int
	jobs  []jobSpec
	fault int // > 0: the fault-th statement (or commit) of the step fails with a retryable error
	// between, with fault, is what another process enqueues after the
	// failed attempt and before the retry, so the retry finds the
	// database changed under it.
	between []jobSpec
}

func (o op) String() string {
	s := fmt.Sprintf("%s a=%d b=%d", opNames[o.kind], o.a, o.b)
	for _, j := range o.jobs {
		s += fmt.Sprintf(" job{rate=%s/%d cost=%d queue=%v conc=%d coalesce=%d/%d delay=%s prio=%d}",
			j.rateScope, j.rateKey, j.cost, j.queueKey, j.conc, j.coalesce, j.rule, j.delay, j.priority)
	}
	if o.fault > 0 {
		s += fmt.Sprintf(" fault@%d", o.fault)
		for _, j := range o.between {
			s += fmt.Sprintf(" then-other{rate=%s/%d conc=%d coalesce=%d/%d}", j.rateScope, j.rateKey, j.conc, j.coalesce, j.rule)
		}
	}
	return s
}

type trace []op

func (tr trace) String() string {
	var b strings.Builder
	for i, o := range tr {
		fmt.Fprintf(&b, "  %3d %s\n", i, o)
	}
	return b.String()
}

// generate makes a walk of n steps from seed.
func generate(seed uint64, n int) trace {
	r := rand.New(rand.NewPCG(seed, 0x5ee1))
	weights := []int{opEnqueue: 14, opEnqueueTx: 3, opClaim: 16, opFinish: 16, opAdvance: 10, opPromote: 7, opUnpark: 5,
		opMaintain: 3, opReap: 2, opClearIdle: 2, opSetLimit: 3, opSetConcTo: 2, opOperator: 3, opSweep: 4}
	total := 0
	for _, w := range weights {
		total += w
	}
	out := make(trace, n)
	for i := range out {
		x, k := r.IntN(total), opKind(0)
		for ; x >= weights[k]; k++ {
			x -= weights[k]
		}
		o := op{kind: k, a: r.IntN(1000), b: r.IntN(1000)}
		if k == opEnqueue || k == opEnqueueTx {
			for range 1 + r.IntN(3) {
				o.jobs = append(o.jobs, randomJob(r))
			}
		}
		if r.IntN(5) == 0 {
			o.fault = 1 + r.IntN(6)
			if r.IntN(2) == 0 {
				o.between = []jobSpec{randomJob(r)}
			}
		}
		out[i] = o
	}
	return out
}

func randomJob(r *rand.Rand) jobSpec {
	j := jobSpec{conc: -1, coalesce: -1, cost: 1, fair: -1}
	switch r.IntN(3) {
	case 0:
		j.rateScope = "ra"
	case 1:
		j.rateScope = "rb"
	}
	j.rateKey = r.IntN(2)
	if r.IntN(4) == 0 {
		j.cost = 2
	}
	j.queueKey = r.IntN(6) == 0
	if r.IntN(3) == 0 {
		j.conc = r.IntN(2)
	}
	if r.IntN(4) == 0 {
		j.coalesce, j.rule = r.IntN(2), r.IntN(len(coalesceRules))
	}
	if r.IntN(5) == 0 {
		j.delay = time.Duration(r.IntN(3000)) * time.Millisecond
	}
	j.priority = r.IntN(3)
	if r.IntN(3) == 0 {
		j.fair = r.IntN(3)
	}
	return j
}

var coalesceRules = []coalesce.Spec{
	{Scope: "co", OnConflict: coalesce.Discard},
	{Scope: "co", OnConflict: coalesce.Replace},
	{Scope: "co", OnConflict: coalesce.Collect, MaxCalls: 3},
	{Scope: "co", OnConflict: coalesce.Collect, MaxCalls: 2, Dispatch: true},
	{Scope: "co", OnConflict: coalesce.Discard, Debounce: time.Second, MaxDelay: 3 * time.Second},
}

// The limits a walk switches between, by scope; version counts the
// switches, so that windows are checked under one limit at a time (a
// window that spans a change may hold more than either, as documented).
var limitChoices = []struct {
	to    int
	per   time.Duration
	burst int
}{{2, time.Second, 1}, {5, time.Second, 3}, {1, 2 * time.Second, 1}, {0, time.Second, 1}, {3, time.Second, 2}, {4, 3 * time.Second, 4}}

type modelLimits struct {
	specs   map[string]ratelimit.Spec // by scope, "@queue/q" for the queue
	version map[string]int
	hist    map[string][]ratelimit.Spec // by scope: the spec of version v at v-1
}

func (l *modelLimits) RateSpec(_, key string) (ratelimit.Spec, bool) {
	s, ok := l.specs[ratelimit.ScopeOf(key)]
	return s, ok
}

func (l *modelLimits) QueueLimits(queue string) []engine.QueueLimit {
	key := engine.QueueScope + "/" + queue
	if s, ok := l.specs[key]; ok {
		return []engine.QueueLimit{{Key: key, Spec: s}}
	}
	return nil
}

func (l *modelLimits) set(scope string, choice int) {
	c := limitChoices[choice%len(limitChoices)]
	p, b, err := ratelimit.NewParams(c.to, c.per, c.burst)
	if err != nil {
		panic(err)
	}
	l.specs[scope] = ratelimit.Spec{Scope: scope, To: c.to, Per: c.per, Burst: b, Params: p}
	l.version[scope]++
	l.hist[scope] = append(l.hist[scope], l.specs[scope])
}

// admission is one charge of a budget, as a claim decided it.
type admission struct {
	at      int64 // ns
	cost    int
	version int
}

// walk is one run of a trace against a fresh store.
type walk struct {
	t       testing.TB
	ctx     context.Context
	s       *engine.Store // through the fault injector
	base    *engine.Store // straight to the database, for the checks
	faults  *testdb.Faults
	now     time.Time
	lim     *modelLimits
	concTo  map[int]int
	pids    []int64
	beat    map[int64]time.Time // last heartbeat per live process
	running map[int64]map[int64]*engine.Job
	created map[int64]bool
	admits  map[string][]admission
	holders map[string]int // holders per concurrency key after the last step
	// semLimit is each concurrency key's limit after the last step: only
	// an enqueue declares one, so a slot handed out during a step fits
	// under the limit before it or the one the step's enqueues declared.
	semLimit map[string]int
	// hint are the budgets the last claim locked: the next claim's
	// BudgetHint, as a worker passes it, unless the op says not to.
	hint []string
	// overflow is the last overflow a claim reported: a later claim may
	// leave its span to a sweep, as a worker's claims do while it sweeps.
	overflow *engine.Overflow
	stats    struct{ faults, claims, swept, admitted, deferred, parked, displaced, finishes int }
}

type failure struct {
	step int
	msg  string
}

const modelQueue = "q"

func runModel(t testing.TB, b testdb.Backend, tr trace) *failure { return runWalk(t, b, tr, true) }

// runWalk runs a trace on a fresh store and returns its first failure;
// with report, it logs what the walk did.
func runWalk(t testing.TB, b testdb.Backend, tr trace, report bool) *failure {
	ctx := context.Background()
	base := b.Open(t)
	s, faults := testdb.WithFaults(base)
	w := &walk{
		t: t, ctx: ctx, s: s, base: base, faults: faults, now: t0,
		lim:      &modelLimits{specs: map[string]ratelimit.Spec{}, version: map[string]int{}, hist: map[string][]ratelimit.Spec{}},
		concTo:   map[int]int{0: 1, 1: 2},
		beat:     map[int64]time.Time{},
		running:  map[int64]map[int64]*engine.Job{},
		created:  map[int64]bool{},
		admits:   map[string][]admission{},
		holders:  map[string]int{},
		semLimit: map[string]int{},
	}
	w.lim.set("ra", 0)
	w.lim.set("rb", 1)
	w.lim.set(engine.QueueScope+"/"+modelQueue, 4)
	for range 3 {
		if err := w.register(); err != nil {
			return &failure{step: 0, msg: "register: " + err.Error()}
		}
	}
	for i, o := range tr {
		if o.fault > 0 {
			faults.FailAt(o.fault)
		}
		faults.BeforeRetry = nil
		if len(o.between) > 0 {
			faults.BeforeRetry = func() {
				faults.BeforeRetry = nil
				res, err := w.base.Enqueue(w.ctx, nil, w.clock(), []engine.NewJob{w.newJob(o.between[0])})
				if err != nil {
					w.t.Errorf("the other process's enqueue: %v", err)
				}
				w.noteCreated(res)
			}
		}
		err := w.apply(o)
		if o.fault > 0 && !faults.Pending() {
			w.stats.faults++
		}
		faults.Clear()
		var fault testdb.Fault
		if err != nil && !errors.As(err, &fault) {
			return &failure{step: i, msg: fmt.Sprintf("%s: %v", o, err)}
		}
		if msg := w.check(); msg != "" {
			return &failure{step: i, msg: fmt.Sprintf("after %s: %s", o, msg)}
		}
	}
	if msg := w.drain(); msg != "" {
		return &failure{step: len(tr) - 1, msg: "draining at the end: " + msg}
	}
	if !report {
		return nil
	}
	w.t.Logf("%d steps: %d jobs, %d faults injected, %d claims (%d beside a sweep; %d admitted, %d deferred, %d parked, %d displaced by more urgent jobs), %d finishes",
		len(tr), len(w.created), w.stats.faults, w.stats.claims, w.stats.swept, w.stats.admitted, w.stats.deferred, w.stats.parked, w.stats.displaced, w.stats.finishes)
	return nil
}

func (w *walk) clock() engine.Clock { return engine.At(w.now) }

func (w *walk) register() error {
	pid, err := w.s.RegisterProcess(w.ctx, engine.Process{Kind: "worker", PID: len(w.pids)}, w.clock())
	if err != nil {
		return err
	}
	w.pids = append(w.pids, pid)
	w.beat[pid] = w.now
	w.running[pid] = map[int64]*engine.Job{}
	return nil
}

func (w *walk) newJob(j jobSpec) engine.NewJob {
	n := engine.NewJob{Kind: "k", Queue: modelQueue, Priority: j.priority, Args: []byte(`{}`), MaxAttempts: 3}
	if j.rateScope != "" {
		n.RateKeys = append(n.RateKeys, engine.RateKey{Key: fmt.Sprintf("%s/%d", j.rateScope, j.rateKey), Cost: j.cost})
	}
	if j.conc >= 0 {
		n.Conc = &engine.Conc{Key: fmt.Sprintf("c/%d", j.conc), To: w.concTo[j.conc], Duration: 30 * time.Second}
	}
	if j.coalesce >= 0 {
		n.Coalesce = &engine.Coalesce{Key: fmt.Sprintf("co/%d", j.coalesce), Rule: coalesceRules[j.rule]}
	}
	if j.delay > 0 {
		n.RunAt = w.now.Add(j.delay)
	}
	if j.fair >= 0 {
		n.FairKey, n.FairWeight = fmt.Sprintf("f/%d", j.fair), j.fair+1
	}
	return n
}

func (w *walk) apply(o op) error {
	switch o.kind {
	case opEnqueue, opEnqueueTx:
		jobs := make([]engine.NewJob, len(o.jobs))
		for i, j := range o.jobs {
			jobs[i] = w.newJob(j)
		}
		if o.kind == opEnqueue {
			res, err := w.s.Enqueue(w.ctx, nil, w.clock(), jobs)
			w.noteCreated(res)
			return err
		}
		// In a caller's transaction, committed or rolled back.
		tx, err := w.s.DB().Begin(w.ctx)
		if err != nil {
			return err
		}
		res, err := w.s.Enqueue(w.ctx, tx, w.clock(), jobs)
		if err != nil || o.a%3 == 0 {
			_ = tx.Rollback(w.ctx)
			return err
		}
		if err := tx.Commit(w.ctx); err != nil {
			return err
		}
		w.noteCreated(res)
		return nil
	case opClaim:
		pid := w.pids[o.a%len(w.pids)]
		var hint []string
		if o.a%4 != 0 {
			hint = w.hint
		}
		var swept map[string]*engine.Span
		if o.a%5 == 1 && w.overflow != nil {
			// A sweep of the last overflow is under way: its span once
			// read, or not yet known.
			swept = map[string]*engine.Span{modelQueue: nil}
			if o.b%2 == 0 {
				span, ok, err := w.s.OverflowSpan(w.ctx, *w.overflow)
				if err != nil {
					return err
				}
				if ok {
					swept[modelQueue] = &span
				}
			}
		}
		res, err := w.s.Claim(w.ctx, engine.ClaimParams{
			ProcessID: pid, Queues: []string{modelQueue}, Max: 1 + o.b%6, Candidates: o.b % 12,
			Clock: w.clock(), Limits: w.lim, Horizon: 5 * time.Second, PromoteDue: o.b%3 != 0,
			DueLead: time.Duration(o.a%3) * 100 * time.Millisecond, Fair: true,
			BudgetHint: hint, SnapshotHint: o.a%2 == 0, Swept: swept,
		})
		if err != nil {
			return err
		}
		w.hint = res.Budgets
		if len(res.Overflows) > 0 {
			w.overflow = &res.Overflows[0]
		}
		for _, j := range res.Jobs {
			w.running[pid][j.ID] = j
			w.noteAdmission(j, res.DecidedAt)
		}
		if o.a%2 == 0 {
			for _, ov := range res.Overflows {
				if _, _, err := w.s.DeferOverflow(w.ctx, w.clock(), ov, 5*time.Second, 1+o.b%4); err != nil {
					return err
				}
			}
		}
		w.stats.claims++
		if swept != nil {
			w.stats.swept++
		}
		w.stats.admitted += len(res.Jobs)
		w.stats.deferred += len(res.Deferred)
		w.stats.displaced += len(res.Displaced)
		for _, d := range res.Deferred {
			if d.Parked {
				w.stats.parked++
			}
		}
		return nil
	case opFinish:
		return w.finish(o)
	case opAdvance:
		w.now = w.now.Add([]time.Duration{time.Millisecond, 90 * time.Millisecond, 700 * time.Millisecond, 2 * time.Second, 11 * time.Second}[o.a%5])
		for pid := range w.beat {
			if _, err := w.s.Heartbeat(w.ctx, pid, w.clock()); err != nil {
				return err
			}
			w.beat[pid] = w.now
		}
		return nil
	case opPromote:
		_, _, err := w.s.Promote(w.ctx, w.clock(), 1+o.a%20)
		return err
	case opUnpark:
		_, err := w.s.Unpark(w.ctx, w.clock(), 5*time.Second, 1+o.a%5, 1+o.b%4)
		return err
	case opMaintain:
		_, _, err := w.s.MaintainSemaphores(w.ctx, w.clock(), 10)
		return err
	case opReap:
		// A process dies: it stops heartbeating, and once time has passed
		// the others find it dead.
		dead := w.pids[o.a%len(w.pids)]
		if !w.beat[dead].Before(w.now) {
			return nil
		}
		delete(w.beat, dead)
		if _, err := w.s.ReapDeadProcesses(w.ctx, w.clock(), time.Nanosecond); err != nil {
			w.beat[dead] = w.now // it is dead, but not found yet: try again later
			return err
		}
		w.pids = slices.DeleteFunc(w.pids, func(p int64) bool { return p == dead })
		delete(w.running, dead)
		return w.register()
	case opClearIdle:
		_, err := w.s.ClearIdleBudgets(w.ctx, w.clock(), 1+o.a%5, 0)
		return err
	case opSetLimit:
		scopes := []string{"ra", "rb", engine.QueueScope + "/" + modelQueue}
		scope := scopes[o.a%len(scopes)]
		w.lim.set(scope, o.b)
		if o.a%3 == 0 {
			return nil // no worker has seen the change yet: the claims bring it
		}
		// A worker that sees the change hands it to the budgets whose
		// jobs are all parked.
		_, err := w.s.Reprice(w.ctx, w.clock(), engine.Repricing{Target: scope, Params: w.lim.specs[scope].Params, Horizon: 5 * time.Second, Batch: 1 + o.b%3})
		return err
	case opSetConcTo:
		w.concTo[o.a%2] = 1 + o.b%3
		return nil
	case opSweep:
		// A batch of the sweep of the last overflow a claim reported, at
		// any point after it: the flood may have moved on, its limit
		// changed, its budget cleared.
		if w.overflow == nil {
			return nil
		}
		_, _, err := w.s.DeferOverflow(w.ctx, w.clock(), *w.overflow, 5*time.Second, 1+o.b%6)
		return err
	case opOperator:
		id := w.pickJob(o.a)
		if id == 0 {
			return nil
		}
		var err error
		if o.b%2 == 0 {
			_, err = w.s.RetryJobs(w.ctx, w.clock(), []int64{id})
		} else {
			_, err = w.s.CancelJobs(w.ctx, w.clock(), []int64{id}, "")
		}
		if errors.Is(err, engine.ErrNotAllowed) {
			return nil // refused for its state: running or finished
		}
		return err
	}
	return fmt.Errorf("unknown op %d", o.kind)
}

func (w *walk) noteCreated(res []engine.Enqueued) {
	for _, e := range res {
		w.created[e.ID] = true
	}
}

// noteAdmission records the charges an admitted job made, under each
// enforcing limit it drew on.
func (w *walk) noteAdmission(j *engine.Job, at time.Time) {
	charge := func(key string, cost int) {
		scope := ratelimit.ScopeOf(key)
		if key == engine.QueueScope+"/"+modelQueue {
			scope = key
		}
		if spec, ok := w.lim.specs[scope]; ok && !spec.Shadow {
			w.admits[key] = append(w.admits[key], admission{at: engine.Nanos(at), cost: cost, version: w.lim.version[scope]})
		}
	}
	for _, rk := range j.RateKeys {
		charge(rk.Key, rk.Cost)
	}
	charge(engine.QueueScope+"/"+modelQueue, 1)
}

// pickJob returns the i-th job (mod how many there are), or 0.
func (w *walk) pickJob(i int) int64 {
	if len(w.created) == 0 {
		return 0
	}
	ids := make([]int64, 0, len(w.created))
	for id := range w.created {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids[i%len(ids)]
}

// finish records one outcome for a job a live process runs, as a worker
// would.
func (w *walk) finish(o op) error {
	pid := w.pids[o.a%len(w.pids)]
	var ids []int64
	for id := range w.running[pid] {
		ids = append(ids, id)
	}
	if len(ids) == 0 {
		return nil
	}
	slices.Sort(ids)
	j := w.running[pid][ids[o.b%len(ids)]]
	run := j.Run()
	var out engine.Outcomes
	holder := func() {
		if j.HoldsSlot {
			out.SlotHolders = []engine.Run{run}
		}
	}
	switch o.b % 6 {
	case 0, 1: // completed
		out.Completed = []engine.Run{run}
		if j.Calls > 1 {
			out.WithCalls = []engine.Run{run}
		}
		holder()
	case 2: // an error: retried after a backoff, or failed for good
		tr := engine.Transition{ID: j.ID, State: engine.StateScheduled, RunAt: w.now.Add(time.Second), Error: "boom"}
		if j.Attempt >= j.MaxAttempts {
			tr = engine.Transition{ID: j.ID, State: engine.StateFailed, Error: "boom", Finished: true}
			holder()
		}
		out.Others = []engine.Transition{tr}
	case 3: // cancelled by its handler
		out.Others = []engine.Transition{{ID: j.ID, State: engine.StateCancelled, Error: "no", Finished: true}}
		holder()
	case 4: // snoozed
		out.Others = []engine.Transition{{ID: j.ID, State: engine.StateScheduled, RunAt: w.now.Add(500 * time.Millisecond), AttemptDelta: -1}}
	case 5: // an upstream 429: hold its budgets back, give its slot back
		const wait = 1500 * time.Millisecond
		tr := engine.Transition{ID: j.ID, State: engine.StateScheduled, RunAt: w.now.Add(wait), AttemptDelta: -1, Error: "429"}
		for _, rk := range j.RateKeys {
			if spec, ok := w.lim.RateSpec(j.Kind, rk.Key); ok {
				out.Pushes = append(out.Pushes, engine.BudgetPush{Key: rk.Key, Wait: wait, Params: spec.Params, Run: run})
			}
		}
		for _, l := range w.lim.QueueLimits(j.Queue) {
			out.Pushes = append(out.Pushes, engine.BudgetPush{Key: l.Key, Wait: wait, Params: l.Spec.Params, Run: run})
		}
		if len(out.Pushes) > 0 {
			tr.WaitKey = out.Pushes[0].Key
		}
		out.Others = []engine.Transition{tr}
		holder()
	}
	for i := range out.Others {
		out.Others[i].Claim = j.Claims
	}
	// As a worker writes results: waiting for no semaphore another
	// transaction holds. None does here, so every outcome lands.
	left, err := w.s.FinishUnwaiting(w.ctx, pid, w.clock(), out)
	if err != nil {
		return err
	}
	if len(left) > 0 {
		return fmt.Errorf("finish left jobs %v unwritten, though no other transaction holds a semaphore", left)
	}
	delete(w.running[pid], j.ID)
	w.stats.finishes++
	return nil
}

// row is one job as the checks read it.
type row struct {
	id          int64
	state       engine.State
	holdsSlot   bool
	concKey     string
	waitKey     string
	coalesceKey string
	processID   int64
	runAt       int64
}

func (w *walk) rows() ([]row, error) {
	rs, err := w.base.DB().Query(w.ctx, `SELECT id, state, holds_slot, COALESCE(conc_key, ''), COALESCE(wait_key, ''),
  COALESCE(coalesce_key, ''), COALESCE(process_id, 0), run_at FROM sluice_jobs ORDER BY id`)
	if err != nil {
		return nil, err
	}
	defer rs.Close()
	var out []row
	for rs.Next() {
		var r row
		var st string
		if err := rs.Scan(&r.id, &st, &r.holdsSlot, &r.concKey, &r.waitKey, &r.coalesceKey, &r.processID, &r.runAt); err != nil {
			return nil, err
		}
		r.state = engine.State(st)
		out = append(out, r)
	}
	return out, rs.Err()
}

// check returns what is wrong with the store after a step, or "".
func (w *walk) check() string {
	rows, err := w.rows()
	if err != nil {
		return "read jobs: " + err.Error()
	}
	// 1. Every job is in exactly one known state, and none was lost.
	if len(rows) != len(w.created) {
		return fmt.Sprintf("%d jobs in the table, %d enqueued", len(rows), len(w.created))
	}
	holders, blocked, parked := map[string]int{}, map[string]int{}, map[string]int{}
	for _, r := range rows {
		if !w.created[r.id] {
			return fmt.Sprintf("job %d is not one that was enqueued", r.id)
		}
		if _, err := engine.ParseState(string(r.state)); err != nil {
			return fmt.Sprintf("job %d: %v", r.id, err)
		}
		switch {
		case r.holdsSlot && r.concKey == "":
			return fmt.Sprintf("job %d holds a slot but has no concurrency key", r.id)
		case r.holdsSlot && !slices.Contains([]engine.State{engine.StateReady, engine.StateScheduled, engine.StateRunning}, r.state):
			return fmt.Sprintf("job %d holds a slot while %s", r.id, r.state)
		case r.state == engine.StateReady && r.concKey != "" && !r.holdsSlot:
			return fmt.Sprintf("job %d is ready without a slot of its key %s: claimed, it would run beside the key's holders", r.id, r.concKey)
		case r.state == engine.StateBlocked && r.concKey == "":
			return fmt.Sprintf("job %d is blocked without a concurrency key", r.id)
		case r.state == engine.StateParked && r.waitKey == "":
			return fmt.Sprintf("job %d is parked on no budget", r.id)
		case r.state == engine.StateRunning && r.processID == 0:
			return fmt.Sprintf("job %d runs for no process", r.id)
		case r.coalesceKey != "" && !slices.Contains([]engine.State{engine.StateReady, engine.StateScheduled, engine.StateParked, engine.StateBlocked}, r.state):
			return fmt.Sprintf("job %d holds coalesce key %s while %s", r.id, r.coalesceKey, r.state)
		case r.state == engine.StateScheduled && r.runAt <= 0:
			return fmt.Sprintf("job %d is scheduled at %d", r.id, r.runAt)
		}
		if r.holdsSlot {
			holders[r.concKey]++
		}
		if r.state == engine.StateBlocked {
			blocked[r.concKey]++
		}
		if r.state == engine.StateParked {
			parked[r.waitKey]++
		}
	}
	// 2. Semaphores count their holders exactly, and a slot was handed out
	// only when one was free: under the key's limit before the step, or the
	// one an enqueue of the step declared (the last, as one step's
	// enqueues all declare the same To), never the To a job that came back
	// was enqueued under.
	sems, err := w.base.ListSemaphores(w.ctx)
	if err != nil {
		return "list semaphores: " + err.Error()
	}
	seen := map[string]bool{}
	for _, m := range sems {
		seen[m.Name] = true
		if m.Held != holders[m.Name] {
			return fmt.Sprintf("semaphore %s counts %d held, %d jobs hold a slot", m.Name, m.Held, holders[m.Name])
		}
		if h := holders[m.Name]; h > w.holders[m.Name] && h > max(m.Limit, w.semLimit[m.Name]) {
			return fmt.Sprintf("semaphore %s: holders rose from %d to %d, over its limit %d (%d before the step)", m.Name, w.holders[m.Name], h, m.Limit, w.semLimit[m.Name])
		}
		w.semLimit[m.Name] = m.Limit
	}
	for k, n := range holders {
		if !seen[k] {
			return fmt.Sprintf("%d jobs hold a slot of %s, which has no semaphore", n, k)
		}
	}
	for k, n := range blocked {
		if !seen[k] {
			return fmt.Sprintf("%d jobs are blocked on %s, which has no semaphore: nothing will hand them a slot", n, k)
		}
	}
	w.holders = holders
	// 3. Every parked job is counted by its budget, which brings the
	// dispatcher back to it.
	bs, err := w.base.ListBudgets(w.ctx)
	if err != nil {
		return "list budgets: " + err.Error()
	}
	counted := map[string]int{}
	for _, b := range bs {
		counted[b.Name] = b.Parked
	}
	for k, n := range parked {
		if counted[k] < n {
			return fmt.Sprintf("budget %s counts %d parked jobs, %d are parked", k, counted[k], n)
		}
	}
	// 4. No window of Per holds more than To, under any one limit.
	return w.lim.overLimit(w.admits)
}

// overLimit checks the admissions of each budget key against the limit
// its scope had when each was admitted, one version of the limit at a
// time (a window that spans a change may hold more than either, as
// documented), and says what the first budget that admitted more than To
// in one window of Per did; "" when none did.
func (l *modelLimits) overLimit(admits map[string][]admission) string {
	for key, as := range admits {
		byVersion := map[int][]admission{}
		for _, a := range as {
			byVersion[a.version] = append(byVersion[a.version], a)
		}
		scope := ratelimit.ScopeOf(key)
		if strings.HasPrefix(key, engine.QueueScope+"/") {
			scope = key
		}
		for v, as := range byVersion {
			spec := l.hist[scope][v-1]
			if most := busiestCost(as, spec.Per.Nanoseconds()); most > spec.To {
				return fmt.Sprintf("budget %s admitted %d in one window of %s under %s", key, most, spec.Per, spec)
			}
		}
	}
	return ""
}

// busiestCost returns the most cost admitted in any half-open window of
// length per.
func busiestCost(as []admission, per int64) int {
	sort.Slice(as, func(i, j int) bool { return as[i].at < as[j].at })
	best, sum, j := 0, 0, 0
	for i := range as {
		sum += as[i].cost
		for as[i].at-as[j].at >= per {
			sum -= as[j].cost
			j++
		}
		best = max(best, sum)
	}
	return best
}

// drain lets time run, with the dispatcher's work and claims, until every
// job has finished: a waiting job that never moves is one without a
// future event.
//
// It gives up only when no job has finished for drainIdleRounds rounds,
// not after a fixed count of rounds: a walk may leave a backlog that its
// tightest limit clears only over many minutes of the clock (the queue
// limit covers every job, and 4 per 3s with a burst of 4 admits one job
// every 3s), which a fixed count mistook for jobs without a future event.
func (w *walk) drain() string {
	w.faults.Clear()
	for scope, spec := range w.lim.specs {
		if spec.Params.Paused {
			w.lim.set(scope, 4) // lift every pause: a paused limit holds its jobs by design
		}
	}
	lastOpen, idle := -1, 0
	for round := 0; round < drainMaxRounds && idle < drainIdleRounds; round++ {
		rows, err := w.rows()
		if err != nil {
			return err.Error()
		}
		open := 0
		for _, r := range rows {
			if r.state != engine.StateCompleted && r.state != engine.StateFailed && r.state != engine.StateCancelled {
				open++
			}
		}
		if open == 0 {
			return ""
		}
		if lastOpen < 0 || open < lastOpen {
			idle = 0
		} else {
			idle++
		}
		lastOpen = open
		// The reaper runs in production whatever else happens. A walk's
		// reap finds every process it has not heard from dead (they do
		// not heartbeat), so a process it keeps may claim with its row
		// gone, and the job is released once its claim is older than the
		// threshold, by a later reap, which a walk may end before. No job
		// of the walk's processes runs at this point of a round.
		if _, err := w.s.ReapDeadProcesses(w.ctx, w.clock(), time.Nanosecond); err != nil {
			return err.Error()
		}
		for _, o := range []op{{kind: opPromote, a: 19}, {kind: opUnpark, a: 4}, {kind: opMaintain}} {
			if err := w.apply(o); err != nil {
				return err.Error()
			}
		}
		for i := range w.pids {
			if err := w.apply(op{kind: opClaim, a: i, b: 5}); err != nil {
				return err.Error()
			}
			for len(w.running[w.pids[i]]) > 0 {
				if err := w.apply(op{kind: opFinish, a: i, b: 0}); err != nil {
					return err.Error()
				}
			}
		}
		if msg := w.check(); msg != "" {
			return msg
		}
		w.now = w.now.Add(700 * time.Millisecond)
		if round%20 == 19 {
			w.now = w.now.Add(10 * time.Second) // let expired slots and backoffs pass
		}
	}
	rows, _ := w.rows()
	var stuck []string
	for _, r := range rows {
		if r.state != engine.StateCompleted && r.state != engine.StateFailed && r.state != engine.StateCancelled {
			stuck = append(stuck, fmt.Sprintf("%d:%s(wait %q conc %q slot %v)", r.id, r.state, r.waitKey, r.concKey, r.holdsSlot))
		}
	}
	return "jobs never finished: " + strings.Join(stuck, " ")
}

// drainIdleRounds is how many rounds without a job finishing the drain
// takes for stuck jobs: over 90s of the clock, with four of its 10s jumps,
// longer than any backoff, horizon or slot expiry a walk sets.
// drainMaxRounds bounds a drain that keeps finishing jobs.
const (
	drainIdleRounds = 80
	drainMaxRounds  = 20000
)

// shrunk is a smaller failing trace.
type shrunk struct {
	trace trace
	msg   string
}

func (s shrunk) String() string { return s.trace.String() + "  fails: " + s.msg }

// shrink removes steps from a failing trace while it still fails, within
// a bounded number of replays.
func shrink(t testing.TB, b testdb.Backend, tr trace) shrunk {
	best := shrunk{trace: tr, msg: "(as found)"}
	replays := 0
	for size := len(tr) / 2; size >= 1 && replays < 80; size /= 2 {
		for start := 0; start+size <= len(best.trace) && replays < 80; {
			cand := append(slices.Clone(best.trace[:start]), best.trace[start+size:]...)
			replays++
			if f := runWalk(t, b, cand, false); f != nil {
				best = shrunk{trace: cand[:f.step+1], msg: f.msg}
				continue
			}
			start += size
		}
	}
	return best
}
