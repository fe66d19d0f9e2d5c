package jobs

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"
	"unicode"

	"golang.org/x/text/unicode/norm"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/ratelimit"
	"github.com/sluicequeue/sluice/store"
)

// Severity says whether a finding stops a deploy.
type Severity string

// Severities of findings.
const (
	SeverityError   Severity = "error"
	SeverityWarning Severity = "warning"
)

// Finding is one thing Check found, with a stable code to look it up by.
type Finding struct {
	// Code is the finding's stable code (E001, W001, …), documented in
	// docs/rate-limits.md.
	Code string
	// Severity is SeverityError or SeverityWarning.
	Severity Severity
	// Message says what was found, naming the kind, limit or key.
	Message string
}

// String prints the finding as "W002 warning: …".
func (f Finding) String() string { return fmt.Sprintf("%s %s: %s", f.Code, f.Severity, f.Message) }

// The codes Check reports.
const (
	// CodePendingMigrations: the schema is missing or older than this
	// version of sluice needs.
	CodePendingMigrations = "E001"
	// CodeFoldedScopes: two limits' scopes differ only by case or accents,
	// which MySQL's default collation would merge.
	CodeFoldedScopes = "W001"
	// CodeGroupMismatch: kinds in one rate-limit group declare different
	// limits, so each job is charged with its own kind's.
	CodeGroupMismatch = "W002"
	// CodeUnclaimedQueue: a queue has a limit but no running worker claims
	// it.
	CodeUnclaimedQueue = "W003"
	// CodeStrayOverride: an override names no declared limit. Not
	// reported by a registry that declares no kind and no queue limit
	// (the plain sluice binary's), which cannot tell.
	CodeStrayOverride = "W004"
	// CodeConcurrencyGroupMismatch: kinds in one concurrency group declare
	// different limits (To or Duration).
	CodeConcurrencyGroupMismatch = "W005"
	// CodeImpreciseDrain: a limit is so fine that a backlog drains slower
	// than declared (ratelimit.Spec.DrainPrecise); the bound still holds.
	CodeImpreciseDrain = "W006"
	// CodeUnservedQueue: registered kinds go to a queue that no live
	// worker claims, so their jobs wait however many are enqueued.
	CodeUnservedQueue = "W007"
	// CodeNoDispatcher: no dispatcher heartbeated recently, so scheduled
	// jobs (retries, delayed and rate-limited ones) are not made ready.
	CodeNoDispatcher = "W008"
	// CodeSlowDrain: a limit's burst is so large that once it is spent a
	// backlog drains at less than half of To per Per
	// (ratelimit.Spec.DrainsSlowly); the bound holds.
	CodeSlowDrain = "W009"
	// CodeNewerMigrations: the database records migrations newer than
	// this version of sluice knows (a newer sluice migrated it), which it
	// can neither revert nor account for.
	CodeNewerMigrations = "W010"
	// CodeStrandedJobs: a queue that no live worker claims and no
	// registered kind goes to holds jobs waiting to run (a queue renamed,
	// a kind moved to another queue, a kind removed), which wait for good.
	CodeStrandedJobs = "W011"
)

// LiveAfter is how recent a process's heartbeat must be for Check to
// count it as live: DefaultDeadAfter, past which any process may presume
// it dead.
const LiveAfter = DefaultDeadAfter

// Check validates a registry against a database at start-up, as
// `sluice check` does. Errors should stop a deploy; warnings name
// declarations that are probably not what was meant.
func Check(ctx context.Context, r *Registry, pub *store.Store) ([]Finding, error) {
	s := engine.From(pub)
	var out []Finding
	add := func(code string, sev Severity, format string, args ...any) {
		out = append(out, Finding{Code: code, Severity: sev, Message: fmt.Sprintf(format, args...)})
	}
	if err := s.CheckSchema(ctx); err != nil {
		if !errors.Is(err, engine.ErrPendingMigrations) {
			return nil, err
		}
		add(CodePendingMigrations, SeverityError, "%v", err)
		return out, nil
	}
	newer, err := s.NewerMigrationStatus(ctx)
	if err != nil {
		return nil, err
	}
	if len(newer) > 0 {
		add(CodeNewerMigrations, SeverityWarning, "the database has %s, newer than this version of sluice knows (its newest is %03d): "+
			"a newer sluice migrated it; this one runs beside it, but `migrate down` reverts nothing until that sluice reverts %s",
			engine.NewerList(newer, true), latestVersion(s), map[bool]string{true: "it", false: "them"}[len(newer) == 1])
	}

	concScopes := r.concScopes()
	r.mu.RLock()
	scopes := map[string]map[string]ratelimit.Spec{} // rate scope → kind → spec
	for name, k := range r.kinds {
		for _, rule := range k.rules {
			if scopes[rule.spec.Scope] == nil {
				scopes[rule.spec.Scope] = map[string]ratelimit.Spec{}
			}
			scopes[rule.spec.Scope][name] = rule.spec
		}
	}
	queues := make([]string, 0, len(r.queues))
	for q, ls := range r.queues {
		queues = append(queues, q)
		scopes[engine.QueueScope+"/"+q] = nil
		for _, l := range ls {
			drainFindings(add, "the limit on queue "+q, l.Spec)
		}
	}
	r.mu.RUnlock()
	for _, sc := range sortedKeys(scopes) {
		for _, kind := range sortedKeys(scopes[sc]) {
			drainFindings(add, "the rate limit of "+kind+" on "+sc, scopes[sc][kind])
		}
	}

	names := make([]string, 0, len(scopes))
	for sc := range scopes {
		names = append(names, sc)
	}
	sort.Strings(names)
	folded := map[string]string{}
	for _, sc := range names {
		f := fold(sc)
		if other, ok := folded[f]; ok {
			add(CodeFoldedScopes, SeverityWarning, "rate-limit scopes %q and %q differ only by case or accents: "+
				"they are two budgets here, but MySQL's default collation would merge them; rename one", other, sc)
			continue
		}
		folded[f] = sc
	}
	for _, sc := range names {
		kinds := scopes[sc]
		if len(kinds) < 2 {
			continue
		}
		var desc []string
		seen := map[string]bool{}
		for _, kind := range sortedKeys(kinds) {
			d := kinds[kind].String()
			seen[d] = true
			desc = append(desc, kind+": "+d)
		}
		if len(seen) > 1 {
			add(CodeGroupMismatch, SeverityWarning, "group %s is declared with different limits (%s); each job is charged with its own kind's, "+
				"so the group can admit more than the stricter one", sc, strings.Join(desc, "; "))
		}
	}
	for _, sc := range sortedKeys(concScopes) {
		kinds := concScopes[sc]
		if mixedLimits(kinds) {
			var desc []string
			for _, kind := range sortedKeys(kinds) {
				desc = append(desc, fmt.Sprintf("%s: To %d, Duration %s", kind, kinds[kind].To, kinds[kind].Duration))
			}
			add(CodeConcurrencyGroupMismatch, SeverityWarning, "concurrency group %s is declared with different limits (%s); "+
				"a key's limit is the one of the kind enqueued last, and a worker's start declares none on the group's keys", sc, strings.Join(desc, "; "))
		}
	}

	procs, err := s.Processes(ctx, engine.DatabaseTime(time.Now))
	if err != nil {
		return nil, err
	}
	claimed := map[string]bool{}
	dispatchers := 0
	for _, p := range procs {
		if p.Age >= LiveAfter {
			continue
		}
		switch p.Kind {
		case "worker":
			for _, q := range strings.Split(p.Queues, ",") {
				claimed[q] = true
			}
		case "dispatcher":
			dispatchers++
		}
	}
	sort.Strings(queues)
	for _, q := range queues {
		if !claimed[q] {
			add(CodeUnclaimedQueue, SeverityWarning, "queue %s has a rate limit, but no running worker claims it", q)
		}
	}
	byQueue := map[string][]string{}
	for _, name := range r.Kinds() {
		q := r.lookup(name).cfg.queue
		byQueue[q] = append(byQueue[q], name)
	}
	for _, q := range sortedKeys(byQueue) {
		if !claimed[q] {
			add(CodeUnservedQueue, SeverityWarning, "no live worker claims queue %s, where kinds %s go: their jobs wait until a worker claims it (worker --queues %s)",
				q, strings.Join(byQueue[q], ", "), q)
		}
	}
	if err := strandedFindings(ctx, s, add, claimed, byQueue); err != nil {
		return nil, err
	}
	if dispatchers == 0 {
		add(CodeNoDispatcher, SeverityWarning, "no dispatcher has heartbeated in the last %s: scheduled jobs (retries, jobs to run later, rate-limited jobs waiting for a slot) are not made ready; run one (dispatcher)", LiveAfter)
	}

	overrides, err := s.ListOverrides(ctx)
	if err != nil {
		return nil, err
	}
	// A registry that declares nothing (the plain sluice binary's) cannot
	// tell a stray override from one the app's workers apply.
	declares := len(r.Kinds()) > 0 || len(queues) > 0
	for _, o := range overrides {
		if !declares {
			break
		}
		if _, ok := scopes[o.Target]; ok {
			continue
		}
		if o.Target == engine.QueueScope && len(queues) > 0 {
			continue // every queue limit's budget falls back to it
		}
		if _, ok := scopes[ratelimit.ScopeOf(o.Target)]; ok && !strings.HasPrefix(o.Target, engine.QueueScope) {
			continue
		}
		add(CodeStrayOverride, SeverityWarning, "the override of %s names no declared limit; it changes nothing", o.Target)
	}
	for _, o := range overrides {
		p, burst, err := ratelimit.NewParams(o.To, o.Per, o.Burst)
		if err != nil {
			continue
		}
		drainFindings(add, "the override of "+o.Target, ratelimit.Spec{To: o.To, Per: o.Per, Burst: burst, Params: p})
	}
	return out, nil
}

// drainFindings adds the warnings about how a backlog drains under spec,
// the limit that what names.
func drainFindings(add func(code string, sev Severity, format string, args ...any), what string, spec ratelimit.Spec) {
	if ok, why := spec.DrainPrecise(); !ok {
		add(CodeImpreciseDrain, SeverityWarning, "%s (%s): %s", what, spec, why)
	}
	if slow, why := spec.DrainsSlowly(); slow {
		add(CodeSlowDrain, SeverityWarning, "%s (%s): %s", what, spec, why)
	}
}

// fold drops case and the accents of Latin and Greek letters, as MySQL's
// default collation compares.
func fold(s string) string {
	var b strings.Builder
	for _, r := range norm.NFD.String(s) {
		if unicode.Is(unicode.Mn, r) {
			continue
		}
		b.WriteRune(unicode.ToLower(r))
	}
	return b.String()
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// latestVersion is the newest migration s's sluice knows, or 0.
func latestVersion(s *engine.Store) int {
	v, _ := s.LatestVersion()
	return v
}

// waitingStates are the states of a job that waits to run.
var waitingStates = []engine.State{engine.StateReady, engine.StateScheduled, engine.StateParked, engine.StateBlocked}

// strandedFindings warns of the queues whose jobs wait with no live worker
// claiming them and no registered kind going to them (W007 speaks of
// those): jobs left behind in a queue a deploy renamed or moved a kind
// away from.
func strandedFindings(ctx context.Context, s *engine.Store, add func(code string, sev Severity, format string, args ...any), claimed map[string]bool, kinds map[string][]string) error {
	depth, err := s.Depth(ctx)
	if err != nil {
		return fmt.Errorf("check: count waiting jobs: %w", err)
	}
	for _, d := range depth {
		if claimed[d.Queue] || kinds[d.Queue] != nil {
			continue
		}
		var n int64
		for _, st := range waitingStates {
			n += d.Counts[st]
		}
		if n > 0 {
			add(CodeStrandedJobs, SeverityWarning, "queue %s holds %d job(s) waiting to run, but no live worker claims it and no registered kind goes to it "+
				"(a queue renamed, or a kind moved or removed, leaves its jobs there): claim it until they are done (worker --queues %s), or cancel them",
				d.Queue, n, d.Queue)
		}
	}
	return nil
}
