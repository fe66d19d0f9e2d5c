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

	"github.com/sluicequeue/sluice/store"
)

func printJSON(e *Env, v any) error {
	enc := json.NewEncoder(e.Stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func table(e *Env, header string, rows [][]string) error {
	tw := tabwriter.NewWriter(e.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, header)
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	return tw.Flush()
}

func runStats(ctx context.Context, env *Env, args []string) error {
	fs, url := env.FlagSet("stats", "stats [--json] [flags]")
	asJSON := fs.Bool("json", false, "print JSON for scripts")
	s, err := env.open(ctx, fs, url, args)
	if err != nil {
		return err
	}
	defer s.Close()
	st, err := s.Stats(ctx)
	if err != nil {
		return err
	}
	bs, err := s.ListBudgets(ctx)
	if err != nil {
		return err
	}
	now := time.Now()
	if *asJSON {
		queues := map[string]map[store.State]int64{}
		for _, q := range st {
			queues[q.Queue] = q.Counts
		}
		budgets := make([]map[string]any, len(bs))
		for i, b := range bs {
			budgets[i] = map[string]any{"key": b.Name, "waiting": b.Waiting, "next_admission": b.NextAdmission(now)}
		}
		return printJSON(env, map[string]any{"queues": queues, "budgets": budgets})
	}
	rows := make([][]string, 0, len(st))
	for _, q := range st {
		row := []string{q.Queue}
		for _, state := range store.States {
			row = append(row, strconv.FormatInt(q.Counts[state], 10))
		}
		rows = append(rows, row)
	}
	header := "QUEUE"
	for _, state := range store.States {
		header += "\t" + strings.ToUpper(string(state))
	}
	if err := table(env, header, rows); err != nil || len(bs) == 0 {
		return err
	}
	rows = rows[:0]
	for _, b := range bs {
		rows = append(rows, []string{b.Name, strconv.Itoa(b.Waiting), nextAdmission(b, now)})
	}
	fmt.Fprintln(env.Stdout)
	return table(env, "BUDGET\tWAITING\tNEXT ADMISSION", rows)
}

// nextAdmission says when a budget next admits a job.
func nextAdmission(b store.BudgetInfo, now time.Time) string {
	if t := b.NextAdmission(now); !t.IsZero() {
		return fmtIn(t, now)
	}
	return "paused"
}

func runJobs(ctx context.Context, env *Env, args []string) error {
	fs, url := env.FlagSet("jobs", "jobs [--state S] [--kind K] [--queue Q] [--limit N] [--json]")
	state := fs.String("state", "", "only jobs in this state: ready, scheduled, parked, running, completed, failed, cancelled")
	kind := fs.String("kind", "", "only jobs of this kind")
	queue := fs.String("queue", "", "only jobs in this queue")
	limit := fs.Int("limit", 50, "at most this many, newest first")
	asJSON := fs.Bool("json", false, "print JSON for scripts")
	if err := Parse(fs, args); err != nil {
		return err
	}
	f := store.JobFilter{Kind: *kind, Queue: *queue, Limit: *limit}
	if *state != "" {
		st, err := store.ParseState(*state)
		if err != nil {
			return Usagef("--state: %v", err)
		}
		f.State = st
	}
	if *limit < 1 {
		return Usagef("--limit must be at least 1")
	}
	s, err := OpenChecked(ctx, *url)
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
		rows[i] = []string{strconv.FormatInt(j.ID, 10), j.Kind, j.Queue, describeState(j), fmt.Sprintf("%d/%d", j.Attempt, j.MaxAttempts),
			fmtIn(j.RunAt, now), strconv.Itoa(j.Deferrals), clip(metadataText(j.Metadata), 40), clip(j.LastError, 60)}
	}
	return table(env, "ID\tKIND\tQUEUE\tSTATE\tATTEMPT\tRUN AT\tDEFERRED\tMETADATA\tLAST ERROR", rows)
}

// describeState says why a waiting job waits.
func describeState(j *store.JobInfo) string {
	switch {
	case j.State == store.StateBlocked:
		return "blocked (concurrency: " + j.ConcKey + ")"
	case j.WaitKey != "" && j.State == store.StateScheduled:
		return "scheduled (rate limited: " + j.WaitKey + ")"
	case j.WaitKey != "" && j.State == store.StateParked:
		return "parked (rate limited: " + j.WaitKey + ")"
	}
	return string(j.State)
}

func jobJSON(j *store.JobInfo) map[string]any {
	m := map[string]any{
		"id": j.ID, "kind": j.Kind, "queue": j.Queue, "priority": j.Priority, "state": j.State,
		"attempt": j.Attempt, "max_attempts": j.MaxAttempts, "args": json.RawMessage(j.Args),
		"created_at": j.CreatedAt, "run_at": j.RunAt,
	}
	if j.WaitKey != "" {
		m["waiting_on"] = j.WaitKey
		m["reason"] = "rate limited"
	}
	if j.ConcKey != "" {
		m["concurrency_key"] = j.ConcKey
		m["holds_slot"] = j.HoldsSlot
		if j.State == store.StateBlocked {
			m["reason"] = "concurrency limit"
		}
	}
	if j.LastError != "" {
		m["last_error"] = j.LastError
	}
	if j.Metadata != "" {
		if md, err := store.DecodeMetadata(j.Metadata); err == nil {
			m["metadata"] = md
		} else {
			m["metadata"] = j.Metadata // as stored, when it cannot be read
		}
	}
	if j.Deferrals > 0 {
		m["deferrals"] = j.Deferrals
		m["deferral_reason"] = j.DeferralReason
	}
	if !j.DeferredAt.IsZero() {
		m["deferred_at"] = j.DeferredAt
	}
	if !j.FinishedAt.IsZero() {
		m["finished_at"] = j.FinishedAt
	}
	return m
}

// metadataText shows a job's metadata as sorted key=value pairs, or "-".
func metadataText(stored string) string {
	md, err := store.DecodeMetadata(stored)
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

func clip(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > n {
		return s[:n-1] + "…"
	}
	return s
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
	return operateJobs(ctx, env, fs, url, args, "ready", func(s *store.Store, ids []int64) ([]int64, error) {
		return s.RetryJobs(ctx, store.DatabaseTime(time.Now), ids)
	})
}

func runCancel(ctx context.Context, env *Env, args []string) error {
	fs, url := env.FlagSet("cancel", "cancel ID... [--reason TEXT] [flags]")
	reason := fs.String("reason", "cancelled by an operator", "recorded as the job's last error")
	return operateJobs(ctx, env, fs, url, args, "cancelled", func(s *store.Store, ids []int64) ([]int64, error) {
		return s.CancelJobs(ctx, store.DatabaseTime(time.Now), ids, *reason)
	})
}

// operateJobs runs an operator's action on the job ids among args and
// says, per job, what it became.
func operateJobs(ctx context.Context, env *Env, fs *flag.FlagSet, url *string, args []string, became string,
	op func(*store.Store, []int64) ([]int64, error)) error {
	if err := Parse(fs, args); err != nil {
		return err
	}
	ids, err := parseIDs(fs.Args())
	if err != nil {
		return err
	}
	s, err := OpenChecked(ctx, *url)
	if err != nil {
		return err
	}
	defer s.Close()
	done, err := op(s, ids)
	for _, id := range done {
		fmt.Fprintf(env.Stdout, "job %d is %s\n", id, became)
	}
	return err
}

func runQueues(ctx context.Context, env *Env, args []string) error {
	verb := "list"
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		verb, args = args[0], args[1:]
	}
	fs, url := env.FlagSet("queues "+verb, "queues [list|pause QUEUE|resume QUEUE] [flags]")
	asJSON := fs.Bool("json", false, "print JSON for scripts")
	s, err := env.open(ctx, fs, url, args)
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
			return printJSON(env, qs)
		}
		rows := make([][]string, len(qs))
		for i, q := range qs {
			rows[i] = []string{q.Name, map[bool]string{true: "paused", false: "active"}[q.Paused]}
		}
		return table(env, "QUEUE\tSTATE", rows)
	case "pause", "resume":
		if fs.NArg() != 1 {
			return Usagef("%s takes one queue name", verb)
		}
		q := fs.Arg(0)
		if verb == "pause" {
			err = s.PauseQueue(ctx, q, time.Now())
		} else {
			err = s.ResumeQueue(ctx, q, time.Now())
		}
		if err != nil {
			return err
		}
		fmt.Fprintf(env.Stdout, "queue %s is %sd\n", q, verb)
		return nil
	}
	return Usagef("unknown queues action %q: use list, pause or resume", verb)
}

func runBudgets(ctx context.Context, env *Env, args []string) error {
	verb := "list"
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		verb, args = args[0], args[1:]
	}
	fs, url := env.FlagSet("budgets "+verb, "budgets [list|clear-idle] [flags]")
	asJSON := fs.Bool("json", false, "print JSON for scripts")
	batch := fs.Int("batch-size", 500, "with clear-idle: rows deleted per batch")
	pause := fs.Duration("pause", 0, "with clear-idle: pause between batches")
	s, err := env.open(ctx, fs, url, args)
	if err != nil {
		return err
	}
	defer s.Close()
	switch verb {
	case "clear-idle":
		n, err := s.ClearIdleBudgets(ctx, store.DatabaseTime(time.Now), *batch, *pause)
		if err != nil {
			return err
		}
		fmt.Fprintf(env.Stdout, "cleared %d idle budgets\n", n)
		return nil
	case "list":
	default:
		return Usagef("unknown budgets action %q: use list or clear-idle", verb)
	}
	bs, err := s.ListBudgets(ctx)
	if err != nil {
		return err
	}
	now := time.Now()
	if *asJSON {
		out := make([]map[string]any, len(bs))
		for i, b := range bs {
			out[i] = map[string]any{"key": b.Name, "waiting": b.Waiting, "parked": b.Parked, "limit": describeLimit(b),
				"next_admission": b.NextAdmission(now), "next_slot": store.FromNanos(b.NextSlot)}
		}
		return printJSON(env, out)
	}
	rows := make([][]string, len(bs))
	for i, b := range bs {
		rows[i] = []string{b.Name, describeLimit(b), strconv.Itoa(b.Waiting), strconv.Itoa(b.Parked), nextAdmission(b, now)}
	}
	return table(env, "BUDGET\tLIMIT\tWAITING\tPARKED\tNEXT ADMISSION", rows)
}

// describeLimit prints the limit a budget was last charged under.
func describeLimit(b store.BudgetInfo) string {
	switch {
	case b.IntervalNS == 0:
		return "-"
	case b.Burst == 0:
		return "paused (To: 0)"
	}
	return fmt.Sprintf("1 per %s, burst %d", time.Duration(b.IntervalNS), b.Burst)
}

func runSemaphores(ctx context.Context, env *Env, args []string) error {
	fs, url := env.FlagSet("semaphores", "semaphores [--json] [flags]")
	asJSON := fs.Bool("json", false, "print JSON for scripts")
	s, err := env.open(ctx, fs, url, args)
	if err != nil {
		return err
	}
	defer s.Close()
	sems, err := s.ListSemaphores(ctx)
	if err != nil {
		return err
	}
	now := time.Now()
	if *asJSON {
		out := make([]map[string]any, len(sems))
		for i, m := range sems {
			out[i] = map[string]any{"key": m.Name, "limit": m.Limit, "free": m.Free(), "held": m.Held, "holding": m.Holding,
				"blocked": m.Blocked, "expires_at": store.FromMicros(m.ExpiresAt)}
		}
		return printJSON(env, out)
	}
	rows := make([][]string, len(sems))
	for i, m := range sems {
		expires := "-"
		if m.Held > 0 {
			expires = fmtIn(store.FromMicros(m.ExpiresAt), now)
		}
		rows[i] = []string{m.Name, strconv.Itoa(m.Limit), strconv.Itoa(m.Free()), strconv.Itoa(m.Holding), strconv.Itoa(m.Blocked), expires}
	}
	return table(env, "KEY\tLIMIT\tFREE\tHOLDING\tBLOCKED\tEXPIRES", rows)
}
