package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sluicequeue/sluice/dispatcher"
	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/human"
	"github.com/sluicequeue/sluice/internal/keys"
)

func printJSON(e *Env, v any) error {
	enc := json.NewEncoder(e.Stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// table prints rows aligned under header (its columns separated by tabs).
// Each cell is escaped (human.Text): a name or error from the database
// holds no control character that a terminal would obey, nor a tab or
// line break that would break the table.
func table(e *Env, header string, rows [][]string) error {
	tw := tabwriter.NewWriter(e.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, header)
	cells := []string{}
	for _, r := range rows {
		cells = cells[:0]
		for _, c := range r {
			cells = append(cells, human.Text(c))
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t"))
	}
	return tw.Flush()
}

func runStats(ctx context.Context, env *Env, args []string) error {
	fs, url := env.FlagSet("stats", "stats [--json] [flags]")
	asJSON := fs.Bool("json", false, "print JSON for scripts")
	s, err := env.open(ctx, fs, url, args, 0)
	if err != nil {
		return err
	}
	defer s.Close()
	st, err := s.Stats(ctx)
	if err != nil {
		return err
	}
	// The first page of budgets: `budgets` lists the others.
	bs, next, err := s.PageBudgets(ctx, engine.KeyPage{})
	if err != nil {
		return err
	}
	ps, err := processes(ctx, s)
	if err != nil {
		return err
	}
	workers, dispatchers := liveCounts(ps)
	var notes []string
	if dispatchers == 0 {
		notes = append(notes, env.noDispatcher())
	}
	if more := env.moreAfter("budgets", next); more != "" {
		notes = append(notes, fmt.Sprintf("the first %d budgets are shown; %s", len(bs), more))
	}
	now := time.Now()
	if *asJSON {
		queues := map[string]map[engine.State]int64{}
		for _, q := range st {
			counts := map[engine.State]int64{}
			for _, state := range engine.States {
				counts[state] = q.Counts[state]
			}
			queues[q.Queue] = counts
		}
		budgets := make([]map[string]any, len(bs))
		for i, b := range bs {
			budgets[i] = map[string]any{"key": b.Name, "waiting": b.Waiting, "next_admission": jsonTime(b.NextAdmission(now))}
		}
		return printJSON(env, map[string]any{"queues": queues, "budgets": budgets,
			"live_workers": workers, "live_dispatchers": dispatchers, "notes": nonNil(notes)})
	}
	rows := make([][]string, 0, len(st))
	for _, q := range st {
		row := []string{q.Queue}
		for _, state := range engine.States {
			row = append(row, strconv.FormatInt(q.Counts[state], 10))
		}
		rows = append(rows, row)
	}
	header := "QUEUE"
	for _, state := range engine.States {
		header += "\t" + strings.ToUpper(string(state))
	}
	if err := table(env, header, rows); err != nil {
		return err
	}
	if len(bs) > 0 {
		rows = rows[:0]
		for _, b := range bs {
			rows = append(rows, []string{b.Name, strconv.Itoa(b.Waiting), nextAdmission(b, now)})
		}
		fmt.Fprintln(env.Stdout)
		if err := table(env, "BUDGET\tWAITING\tNEXT ADMISSION", rows); err != nil {
			return err
		}
	}
	fmt.Fprintf(env.Stdout, "\n%d live workers, %d live dispatchers (see `%s processes`)\n", workers, dispatchers, env.App.name())
	for _, n := range notes {
		fmt.Fprintf(env.Stdout, "note: %s\n", n)
	}
	return nil
}

// jsonTime is t for JSON, or nil for the zero time.
func jsonTime(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t
}

// nonNil makes an empty list print as [] rather than null.
func nonNil[T any](v []T) []T {
	if v == nil {
		return []T{}
	}
	return v
}

// nextAdmission says when a budget next admits a job: "paused", or
// "never" for one held back past what its times reach.
func nextAdmission(b engine.BudgetInfo, now time.Time) string {
	switch t := b.NextAdmission(now); {
	case !t.IsZero():
		return fmtIn(t, now)
	case b.Params().Paused:
		return "paused"
	}
	return "never"
}

// stateNames lists every job state, comma-separated.
func stateNames() string {
	names := make([]string, len(engine.States))
	for i, st := range engine.States {
		names[i] = string(st)
	}
	return strings.Join(names, ", ")
}

func runJobs(ctx context.Context, env *Env, args []string) error {
	fs, url := env.FlagSet("jobs", "jobs [--state S] [--kind K] [--queue Q] [--limit N] [--json]")
	state := fs.String("state", "", "only jobs in this state: "+stateNames())
	kind := fs.String("kind", "", "only jobs of this kind")
	queue := fs.String("queue", "", "only jobs in this queue")
	limit := decimalFlag(fs, "limit", 50, "at most `N`, newest first")
	asJSON := fs.Bool("json", false, "print JSON for scripts")
	if err := Parse(fs, args); err != nil {
		return err
	}
	if err := noMoreArgs(fs, 0); err != nil {
		return err // "sluice jobs failed" means --state failed
	}
	f := engine.JobFilter{Kind: *kind, Queue: *queue, Limit: *limit}
	for _, c := range []struct{ flag, v string }{{"--kind", f.Kind}, {"--queue", f.Queue}} {
		// A value no job can hold is bad usage, by the rule every stored
		// name follows, as the dashboard's filter refuses it: the
		// databases would answer it three ways (MySQL's comparison ignores
		// a trailing space; PostgreSQL refuses bytes that are not UTF-8).
		if c.v != "" {
			if err := keys.Check(c.flag, c.v); err != nil {
				return Usagef("%v", err)
			}
		}
	}
	if *state != "" {
		st, err := engine.ParseState(*state)
		if err != nil {
			return Usagef("--state: %v", err)
		}
		f.State = st
	}
	if *limit < 1 {
		return Usagef("--limit must be at least 1")
	}
	s, err := env.openEngine(ctx, url, true)
	if err != nil {
		return err
	}
	defer s.Close()
	js, err := s.ListJobs(ctx, f)
	if err != nil {
		return err
	}
	if *asJSON {
		out := make([]map[string]any, len(js))
		for i, j := range js {
			out[i] = jobJSON(j)
		}
		return printJSON(env, out)
	}
	now := time.Now()
	rows := make([][]string, len(js))
	for i, j := range js {
		rows[i] = []string{strconv.FormatInt(j.ID, 10), j.Kind, j.Queue, j.Describe(), fmt.Sprintf("%d/%d", j.Attempt, j.MaxAttempts),
			fmtIn(j.RunAt, now), strconv.Itoa(j.Deferrals), human.Cell(metadataText(j.Metadata), 40), human.Cell(j.LastError, 60)}
	}
	return table(env, "ID\tKIND\tQUEUE\tSTATE\tATTEMPT\tRUN AT\tDEFERRED\tMETADATA\tLAST ERROR", rows)
}

func jobJSON(j *engine.JobInfo) map[string]any {
	orNil := func(s string) any {
		if s == "" {
			return nil
		}
		return s
	}
	var reason any
	switch {
	case j.State == engine.StateBlocked:
		reason = "concurrency limit"
	case j.WaitKey != "":
		reason = "rate limited"
	}
	var metadata any
	if j.Metadata != "" {
		if md, err := engine.DecodeMetadata(j.Metadata); err == nil {
			metadata = md
		} else {
			metadata = j.Metadata // as stored, when it cannot be read
		}
	}
	var deferredAt any
	if !j.DeferredAt.IsZero() {
		deferredAt = j.DeferredAt
	}
	var finished any
	if !j.FinishedAt.IsZero() {
		finished = j.FinishedAt
	}
	return map[string]any{
		"id": j.ID, "kind": j.Kind, "queue": j.Queue, "priority": j.Priority, "state": j.State,
		"attempt": j.Attempt, "max_attempts": j.MaxAttempts, "args": json.RawMessage(j.Args),
		"created_at": j.CreatedAt, "run_at": j.RunAt, "finished_at": finished,
		"waiting_on": orNil(j.WaitKey), "reason": reason,
		"concurrency_key": orNil(j.ConcKey), "holds_slot": j.HoldsSlot,
		"last_error": orNil(j.LastError),
		"metadata":   metadata, "deferrals": j.Deferrals, "deferral_reason": orNil(j.DeferralReason),
		"deferred_at": deferredAt,
	}
}

// metadataText shows a job's metadata as sorted key=value pairs, or "-".
func metadataText(stored string) string {
	md, err := engine.DecodeMetadata(stored)
	switch {
	case err != nil:
		return stored
	case len(md) == 0:
		return "-"
	}
	escape := func(s string) string { q := strconv.Quote(s); return q[1 : len(q)-1] }
	pairs := make([]string, 0, len(md))
	for k, v := range md {
		pairs = append(pairs, escape(k)+"="+escape(v))
	}
	slices.Sort(pairs)
	return strings.Join(pairs, " ")
}

func parseIDs(args []string) ([]int64, error) {
	if len(args) == 0 {
		return nil, Usagef("give at least one job id")
	}
	ids := make([]int64, len(args))
	for i, a := range args {
		id, err := strconv.ParseInt(a, 10, 64)
		if err != nil || id < 1 {
			return nil, Usagef("%q is not a job id", a)
		}
		ids[i] = id
	}
	return ids, nil
}

func runRetry(ctx context.Context, env *Env, args []string) error {
	fs, url := env.FlagSet("retry", "retry ID... [flags]")
	return operateJobs(ctx, env, fs, url, args, func(s *engine.Store, ids []int64) ([]engine.Moved, error) {
		return s.RetryJobs(ctx, engine.DatabaseTime(time.Now), ids)
	})
}

func runCancel(ctx context.Context, env *Env, args []string) error {
	fs, url := env.FlagSet("cancel", "cancel ID... [--reason TEXT] [flags]")
	reason := fs.String("reason", "cancelled by an operator", "recorded as the job's last error")
	return operateJobs(ctx, env, fs, url, args, func(s *engine.Store, ids []int64) ([]engine.Moved, error) {
		return s.CancelJobs(ctx, engine.DatabaseTime(time.Now), ids, *reason)
	})
}

// operateJobs runs an operator's action on the job ids among args and
// says, per job moved, what it became; the error names each job refused
// (the others are still acted on).
func operateJobs(ctx context.Context, env *Env, fs *flag.FlagSet, url *string, args []string,
	op func(*engine.Store, []int64) ([]engine.Moved, error)) error {
	if err := Parse(fs, args); err != nil {
		return err
	}
	ids, err := parseIDs(fs.Args())
	if err != nil {
		return err
	}
	s, err := env.openEngine(ctx, url, true)
	if err != nil {
		return err
	}
	defer s.Close()
	moved, err := op(s, ids)
	for _, m := range moved {
		fmt.Fprintf(env.Stdout, "job %d is %s\n", m.ID, m.State)
	}
	return err
}

func runQueues(ctx context.Context, env *Env, args []string) error {
	fs, url := env.FlagSet("queues", "queues [list | pause QUEUE | resume QUEUE] [flags]")
	asJSON := fs.Bool("json", false, "print JSON for scripts")
	verb, rest, err := parseVerb(fs, args, "list", "list", "pause", "resume")
	if err != nil {
		return err
	}
	switch {
	case verb == "list" && len(rest) > 0:
		return Usagef("queues list takes no arguments, got %q", strings.Join(rest, " "))
	case verb != "list" && len(rest) == 0:
		return Usagef("%s takes one queue name", verb)
	case verb != "list" && len(rest) > 1:
		return Usagef("%s takes one queue name, got %q", verb, strings.Join(rest, " "))
	case verb != "list":
		if err := engine.CheckQueue("queue", rest[0]); err != nil {
			return Usagef("%v", err)
		}
	}
	s, err := env.openEngine(ctx, url, true)
	if err != nil {
		return err
	}
	defer s.Close()
	switch verb {
	case "list":
		qs, err := s.ListQueues(ctx)
		if err != nil {
			return err
		}
		if *asJSON {
			out := make([]map[string]any, len(qs))
			for i, q := range qs {
				out[i] = map[string]any{"name": q.Name, "paused": q.Paused}
			}
			return printJSON(env, out)
		}
		rows := make([][]string, len(qs))
		for i, q := range qs {
			rows[i] = []string{q.Name, map[bool]string{true: "paused", false: "active"}[q.Paused]}
		}
		return table(env, "QUEUE\tSTATE", rows)
	default: // pause, resume
		q := rest[0]
		if verb == "pause" {
			err = s.PauseQueue(ctx, q, time.Now())
		} else {
			err = s.ResumeQueue(ctx, q, time.Now())
		}
		if err != nil {
			return err
		}
		if *asJSON {
			return printJSON(env, map[string]any{"name": q, "paused": verb == "pause"})
		}
		fmt.Fprintf(env.Stdout, "queue %s is %sd\n", q, verb)
		return nil
	}
}

func runBudgets(ctx context.Context, env *Env, args []string) error {
	fs, url := env.FlagSet("budgets", "budgets [list [--limit N] [--after KEY] | clear-idle [--batch-size N] [--pause D]] [flags]")
	asJSON := fs.Bool("json", false, "print JSON for scripts")
	paging := addKeyPageFlags(fs, "budgets")
	batch := decimalFlag(fs, "batch-size", 500, "with clear-idle: `N` rows deleted per batch")
	pause := fs.Duration("pause", 0, "with clear-idle: pause between batches")
	verb, rest, err := parseVerb(fs, args, "list", "list", "clear-idle")
	if err != nil {
		return err
	}
	set := setFlags(fs)
	switch {
	case len(rest) > 0:
		return Usagef("budgets %s takes no arguments, got %q", verb, strings.Join(rest, " "))
	case verb == "list" && (set["batch-size"] || set["pause"]):
		return Usagef("--batch-size and --pause go with budgets clear-idle, not budgets list")
	case verb == "clear-idle" && (set["limit"] || set["after"]):
		return Usagef("--limit and --after go with budgets list, not budgets clear-idle")
	case *batch < 1 || *batch > dispatcher.MaxBatchSize:
		// A batch's delete lists its keys, as a promotion its jobs.
		return Usagef("--batch-size is %d; it must be from 1 to %d", *batch, dispatcher.MaxBatchSize)
	case *pause < 0:
		return Usagef("--pause is %s; it must not be negative", *pause)
	}
	if err := paging.check(); err != nil {
		return err
	}
	s, err := env.openEngine(ctx, url, true)
	if err != nil {
		return err
	}
	defer s.Close()
	if verb == "clear-idle" {
		n, err := s.ClearIdleBudgets(ctx, engine.DatabaseTime(time.Now), *batch, *pause)
		if err != nil {
			return err
		}
		if *asJSON {
			return printJSON(env, map[string]any{"cleared": n})
		}
		fmt.Fprintf(env.Stdout, "cleared %d idle budgets\n", n)
		return nil
	}
	bs, next, err := s.PageBudgets(ctx, paging.page())
	if err != nil {
		return err
	}
	overrides, err := s.ListOverrides(ctx)
	if err != nil {
		return err
	}
	now := time.Now()
	if *asJSON {
		out := make([]map[string]any, len(bs))
		for i, b := range bs {
			var slot any
			if b.NextSlot != 0 {
				slot = engine.FromNanos(b.NextSlot)
			}
			out[i] = map[string]any{"key": b.Name, "waiting": b.Waiting, "parked": b.Parked, "limit": env.describeLimit(b, overrides),
				"interval_ns": b.IntervalNS, "burst": b.Burst, "paused": b.Params().Paused,
				"next_admission": jsonTime(b.NextAdmission(now)), "next_slot": slot}
		}
		return env.printJSONPage(out, "budgets", next)
	}
	rows := make([][]string, len(bs))
	for i, b := range bs {
		rows[i] = []string{b.Name, env.describeLimit(b, overrides), strconv.Itoa(b.Waiting), strconv.Itoa(b.Parked), nextAdmission(b, now)}
	}
	if err := table(env, "BUDGET\tLIMIT\tWAITING\tPARKED\tNEXT ADMISSION", rows); err != nil {
		return err
	}
	if more := env.moreAfter("budgets", next); more != "" {
		fmt.Fprintf(env.Stdout, "\n%s\n", more)
	}
	return nil
}

func runSemaphores(ctx context.Context, env *Env, args []string) error {
	fs, url := env.FlagSet("semaphores", "semaphores [--limit N] [--after KEY] [--json] [flags]")
	asJSON := fs.Bool("json", false, "print JSON for scripts")
	paging := addKeyPageFlags(fs, "concurrency keys")
	s, err := env.open(ctx, fs, url, args, 0, paging.check)
	if err != nil {
		return err
	}
	defer s.Close()
	sems, next, err := s.PageSemaphores(ctx, paging.page())
	if err != nil {
		return err
	}
	now := time.Now()
	if *asJSON {
		out := make([]map[string]any, len(sems))
		for i, m := range sems {
			var expires any
			if m.Held > 0 {
				expires = engine.FromMicros(m.ExpiresAt)
			}
			out[i] = map[string]any{"key": m.Name, "limit": m.Limit, "free": m.Free(), "held": m.Held, "holding": m.Holding,
				"blocked": m.Blocked, "expires_at": expires}
		}
		return env.printJSONPage(out, "semaphores", next)
	}
	rows := make([][]string, len(sems))
	for i, m := range sems {
		expires := "-"
		if m.Held > 0 {
			expires = fmtIn(engine.FromMicros(m.ExpiresAt), now)
		}
		rows[i] = []string{m.Name, strconv.Itoa(m.Limit), strconv.Itoa(m.Free()), strconv.Itoa(m.Holding), strconv.Itoa(m.Blocked), expires}
	}
	if err := table(env, "KEY\tLIMIT\tFREE\tHOLDING\tBLOCKED\tEXPIRES", rows); err != nil {
		return err
	}
	if more := env.moreAfter("semaphores", next); more != "" {
		fmt.Fprintf(env.Stdout, "\n%s\n", more)
	}
	return nil
}
