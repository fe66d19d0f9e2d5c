package engine_test

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
)

// The statements that write or read listed jobs find each through the
// primary key, whatever the other indexes look like. A worker completes up
// to a thousand jobs in one statement while a thousand run: PostgreSQL's
// generic plan (which pgx's prepared statements get after five runs) once
// found them through the partial index of running jobs and compared each
// with every listed id, 40–100 ms a batch at 1,500 jobs per worker; a
// promotion did the same over every scheduled job.
func TestListedJobsAreFoundByTheirKey(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		// Enough rows that no database reads the whole table instead.
		many := make([]engine.NewJob, 2000)
		for i := range many {
			many[i] = job("k", "default", 0)
		}
		ids := enqueue(t, s, t0, many...)[:3]
		q := s.SQL()
		stmts := map[string]func() (string, []any){
			"MarkRunning":    func() (string, []any) { return q.MarkRunning(ids, 1, 1) },
			"CompleteJobs":   func() (string, []any) { return q.CompleteJobs(ids, 1, 1, 1) },
			"DeleteJobs":     func() (string, []any) { return q.DeleteJobs(ids, 1, 1) },
			"MarkReady":      func() (string, []any) { return q.MarkReady(ids) },
			"DeleteJobsByID": func() (string, []any) { return q.DeleteJobsByID(ids) },
			"LockRuns":       func() (string, []any) { return q.LockRuns(ids, 1) },
			"SetJobs": func() (string, []any) {
				rows := make([]engine.SetRow, len(ids))
				for i, id := range ids {
					rows[i] = engine.SetRow{ID: id, State: engine.StateCompleted}
				}
				return s.Dialect().SetJobs(engine.StateRunning, 1, 1, rows)
			},
		}
		name := s.Dialect().Name()
		// On PostgreSQL, the statistics of a table with no running or
		// scheduled job, as an ANALYZE between bursts sees it: the partial
		// indexes look nearly empty.
		for stmt, via := range plansOf(t, s, stmts) {
			require.NotEmpty(t, via, "%s: the plan reads sluice_jobs", stmt)
			for _, v := range via {
				require.Equal(t, "primary key", v, "%s: %s finds sluice_jobs' rows through %s", name, stmt, v)
			}
		}
	})
}

// plansOf returns, for each named statement, how the database's plan for
// it reaches sluice_jobs' rows (on PostgreSQL, its generic plan, after an
// ANALYZE of the table as it stands), one entry per read of the table.
func plansOf(t *testing.T, s *engine.Store, stmts map[string]func() (string, []any)) map[string][]string {
	t.Helper()
	return tablePlans(t, s, planTable{"sluice_jobs", "j"}, stmts)
}

// planTable is a table whose reads a plan reader reports, and the alias
// the statements give it.
type planTable struct{ name, alias string }

// tablePlans is plansOf for the rows of another table: "primary key" for
// a read of rows by their key (equal to one or a list), else the index or
// scan the plan uses.
func tablePlans(t *testing.T, s *engine.Store, table planTable, stmts map[string]func() (string, []any)) map[string][]string {
	t.Helper()
	name := s.Dialect().Name()
	if name == "postgres" {
		_, err := s.DB().Exec(context.Background(), "ANALYZE "+table.name)
		require.NoError(t, err)
	}
	out := make(map[string][]string, len(stmts))
	for stmt, render := range stmts {
		text, args := render()
		switch name {
		case "postgres":
			out[stmt] = postgresReads(t, table, postgresGenericPlanJSON(t, s, text, len(args)))
		case "sqlite":
			out[stmt] = sqlitePlan(t, s, table, text, args)
		case "mysql":
			out[stmt] = mysqlPlan(t, s, table, text, args)
		default:
			t.Fatalf("no plan reader for %s", name)
		}
	}
	return out
}

// postgresReads returns how a PostgreSQL plan, as JSON, reaches the
// table's rows, one entry per scan of it: "primary key", or the index or
// scan it uses instead.
func postgresReads(t *testing.T, table planTable, out string) []string {
	t.Helper()
	var plans []struct{ Plan planNode }
	require.NoError(t, json.Unmarshal([]byte(out), &plans), out)
	var via []string
	var walk func(n planNode)
	walk = func(n planNode) {
		if n.Relation == table.name && n.Type != "ModifyTable" {
			switch {
			case n.Index == table.name+"_pkey" && strings.Contains(n.Cond, " = "):
				via = append(via, "primary key")
			case n.Index != "":
				via = append(via, fmt.Sprintf("%s (%s)", n.Index, n.Cond))
			default:
				via = append(via, n.Type)
			}
		}
		for _, c := range n.Plans {
			walk(c)
		}
	}
	for _, p := range plans {
		walk(p.Plan)
	}
	return via
}

// postgresGenericPlanJSON returns PostgreSQL's generic plan of text, as
// JSON.
func postgresGenericPlanJSON(t *testing.T, s *engine.Store, text string, params int) string {
	t.Helper()
	ctx := context.Background()
	tx, err := s.DB().Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, "SET LOCAL plan_cache_mode = force_generic_plan")
	require.NoError(t, err)
	_, err = tx.Exec(ctx, "PREPARE listed AS "+text)
	require.NoError(t, err, text)
	execute := "EXECUTE listed"
	if params > 0 {
		execute += "(" + strings.TrimSuffix(strings.Repeat("NULL, ", params), ", ") + ")"
	}
	rows, err := tx.Query(ctx, "EXPLAIN (FORMAT JSON) "+execute)
	require.NoError(t, err)
	var out string
	for rows.Next() {
		require.NoError(t, rows.Scan(&out))
	}
	require.NoError(t, rows.Err())
	rows.Close()
	_, err = tx.Exec(ctx, "DEALLOCATE listed")
	require.NoError(t, err)
	return out
}

// planNode is the part of PostgreSQL's JSON plan the test reads.
type planNode struct {
	Type     string     `json:"Node Type"`
	Relation string     `json:"Relation Name"`
	Index    string     `json:"Index Name"`
	Cond     string     `json:"Index Cond"`
	Plans    []planNode `json:"Plans"`
}

// sqlitePlan returns how SQLite's plan for text reaches the table.
func sqlitePlan(t *testing.T, s *engine.Store, table planTable, text string, args []any) []string {
	t.Helper()
	rows, err := s.DB().Query(context.Background(), "EXPLAIN QUERY PLAN "+text, args...)
	require.NoError(t, err, text)
	defer rows.Close()
	var via []string
	for rows.Next() {
		var id, parent, unused int
		var detail string
		require.NoError(t, rows.Scan(&id, &parent, &unused, &detail))
		switch {
		case !strings.Contains(detail, table.name) && !strings.Contains(detail, " "+table.alias+" "):
		case strings.Contains(detail, "rowid=?"), strings.Contains(detail, "sqlite_autoindex_"+table.name+"_1 (name=?)"):
			via = append(via, "primary key")
		default:
			via = append(via, detail)
		}
	}
	require.NoError(t, rows.Err())
	return via
}

// mysqlPlan returns how MySQL's plan for text reaches the table.
func mysqlPlan(t *testing.T, s *engine.Store, table planTable, text string, args []any) []string {
	t.Helper()
	rows, err := s.DB().Query(context.Background(), "EXPLAIN FORMAT=JSON "+text, args...)
	require.NoError(t, err, text)
	defer rows.Close()
	var out string
	for rows.Next() {
		require.NoError(t, rows.Scan(&out))
	}
	require.NoError(t, rows.Err())
	var via []string
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			if v["table_name"] == table.alias || v["table_name"] == table.name {
				key, _ := v["key"].(string)
				if key == "PRIMARY" {
					via = append(via, "primary key")
				} else {
					via = append(via, fmt.Sprintf("%v via %q", v["access_type"], key))
				}
			}
			for _, c := range v {
				walk(c)
			}
		case []any:
			for _, c := range v {
				walk(c)
			}
		}
	}
	var plan any
	require.NoError(t, json.Unmarshal([]byte(out), &plan), out)
	walk(plan)
	return via
}

// The statements that take the limited jobs around a swept flood each read
// one range of the index of ready limited jobs, bounded by priority (and
// id), so that a claim beside a sweep of 50,000 jobs walks neither them
// nor the older jobs of the table.
func TestTheJobsAroundASweptFloodAreReadAsIndexRanges(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		many := make([]engine.NewJob, 2000)
		for i := range many {
			many[i] = job("k", "default", 0)
			if i >= 1000 {
				many[i] = limited("k", "k/flood")
			}
		}
		first := enqueue(t, s, t0, many...)[1000]
		q := s.SQL()
		stmts := map[string]func() (string, []any){
			"LockReadyLimitedBefore": func() (string, []any) { return q.LockReadyLimitedBefore("default", 0, 10) },
			"LockReadyLimitedAt":     func() (string, []any) { return q.LockReadyLimitedAt("default", 0, 0, first, 10) },
			"LockReadyLimitedAfter":  func() (string, []any) { return q.LockReadyLimitedAfter("default", 0, 10) },
		}
		name := s.Dialect().Name()
		for stmt, via := range plansOf(t, s, stmts) {
			require.Len(t, via, 1, "%s: one read of sluice_jobs", stmt)
			require.Contains(t, via[0], "sluice_jobs_ready_limited", "%s: %s", name, stmt)
			if name != "mysql" { // MySQL's JSON plan names the index and "range" only
				require.Contains(t, via[0], "priority", "%s: %s bounds the priority", name, stmt)
			} else {
				require.True(t, strings.HasPrefix(via[0], "range"), "%s: %s", name, via[0])
			}
		}
	})
}

// The virtual time of a fair priority level, which every fair enqueue
// reads, is one read of the index of ready fair jobs bounded by queue and
// priority (its first entry, whatever the backlog of the level or of the
// levels more urgent than it) and, for when none is ready (migration 018),
// one of the index of waiting fair jobs bounded the same way, and probes
// of the index of waiting fair jobs by key (one per key looked at, at
// most 16, fairServedKeys). The prune reads it with the lowest waiting
// start, in one statement: one more read of the index of waiting fair
// jobs, bounded the same way; and with the keys it holds, one more probe
// of the index of waiting fair jobs by key for each. Its reads of the
// keys, the latest finishes first, sort nothing.
func TestTheFairVirtualTimeIsReadAtTheHeadOfItsLevel(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		many := make([]engine.NewJob, 4000)
		for i := range many {
			many[i] = fairJob(fmt.Sprintf("k%02d", i%20), 1)
			many[i].Priority = i % 2
			if i >= 2000 {
				many[i].RunAt = at(time.Hour)
			}
		}
		enqueue(t, s, t0, many...)
		stmts := map[string]func() (string, []any){
			"FairVirtualTime": func() (string, []any) { return s.SQL().FairVirtualTime("default", 1) },
			"FairPruneBound":  func() (string, []any) { return s.SQL().FairPruneBound("default", 1) },
			"ReadPrunableFairKeys": func() (string, []any) {
				return s.SQL().ReadPrunableFairKeys("default", 1, []string{"k01", "k03"})
			},
		}
		name := s.Dialect().Name()
		for stmt, via := range plansOf(t, s, stmts) {
			t.Logf("%s: %s: %v", name, stmt, via)
			indexes := []string{"sluice_jobs_ready_fair", "sluice_jobs_waiting_fair", "sluice_jobs_waiting_fair_key"}
			reads := len(indexes)
			switch stmt {
			case "FairPruneBound":
				reads++ // the lowest waiting start, read again beside the virtual time
			case "ReadPrunableFairKeys":
				reads += 2 // and a probe by key for the keys' waiting jobs
			}
			require.Len(t, via, reads, "%s: %s reads sluice_jobs once per index: %v", name, stmt, via)
			for _, index := range indexes {
				named := regexp.MustCompile(`(^|[^a-z_])` + index + `([^a-z_]|$)`)
				require.True(t, slices.ContainsFunc(via, named.MatchString), "%s: %s reads %s: %v", name, stmt, index, via)
			}
			for _, v := range via {
				if name != "mysql" { // MySQL's JSON plan names the index and its access only
					require.Contains(t, v, "priority", "%s: %s bounds the priority", name, stmt)
				}
			}
		}
		stmts["LockFairAnchor"] = func() (string, []any) { return s.SQL().LockFairAnchor("default", 1) }
		for _, stmt := range []string{"FairVirtualTime", "FairPruneBound", "ReadPrunableFairKeys", "LockFairAnchor"} {
			text, args := stmts[stmt]()
			require.False(t, sorts(t, s, text, args), "%s: %s sorts", name, stmt)
		}
	})
}

// A budget's parked jobs are unparked through their two indexes, one read
// of each bounded by the budget, in index order (no sort): the cost of an
// unpark is the jobs it takes, whatever the backlog parked behind them,
// and the fair stream costs one empty read where no job is fair.
func TestParkedJobsAreUnparkedThroughTheirIndexes(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		many := make([]engine.NewJob, 2000)
		for i := range many {
			many[i] = limited("p", "api/global")
			if i%2 == 0 {
				many[i] = fairJob(fmt.Sprintf("k%02d", i%20), 1)
				many[i].RateKeys = []engine.RateKey{{Key: "api/global", Cost: 1}}
			}
			many[i].Priority = i % 3
		}
		enqueue(t, s, t0, many...)
		_, err := s.DB().Exec(ctx, "UPDATE sluice_jobs SET state = 'parked', wait_key = 'api/global'")
		require.NoError(t, err)
		text, args := s.SQL().LockParked("api/global", 10)
		stmts := map[string]func() (string, []any){"LockParked": func() (string, []any) { return text, args }}
		name := s.Dialect().Name()
		for stmt, via := range plansOf(t, s, stmts) {
			require.Len(t, via, 2, "%s: %s reads sluice_jobs twice: %v", name, stmt, via)
			require.Contains(t, via[0]+via[1], "sluice_jobs_parked_fair", "%s: %v", name, via)
			for _, v := range via {
				require.Contains(t, v, "sluice_jobs_parked", "%s: %s", name, stmt)
			}
			t.Logf("%s: %v", name, via)
		}
		require.False(t, sorts(t, s, text, args), "%s: LockParked sorts", name)
	})
}

// A concurrency key's blocked jobs are handed a freed slot through two
// indexes, one read of each bounded by the key, in index order (no sort):
// the first blocked jobs by priority and id, and the first fair ones by
// priority and start (migration 018). A handoff costs the slots it hands,
// whatever the backlog blocked behind them, and the fair read is an empty
// range where no job is fair. The limit a key with none declared takes
// from its first blocked job is read the same way.
func TestBlockedJobsAreHandedSlotsThroughTheirIndexes(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		many := make([]engine.NewJob, 2000)
		for i := range many {
			many[i] = job("p", "default", 0)
			if i%2 == 0 {
				many[i] = fairJob(fmt.Sprintf("k%02d", i%20), 1)
			}
			many[i].Conc = &engine.Conc{Key: "export/global", To: 1, Duration: time.Hour}
			many[i].Priority = i % 3
		}
		enqueue(t, s, t0, many...)
		text, args := s.SQL().LockBlocked("export/global", 10)
		stmts := map[string]func() (string, []any){"LockBlocked": func() (string, []any) { return text, args }}
		name := s.Dialect().Name()
		for stmt, via := range plansOf(t, s, stmts) {
			t.Logf("%s: %v", name, via)
			require.Len(t, via, 2, "%s: %s reads sluice_jobs twice: %v", name, stmt, via)
			require.Contains(t, via[0]+via[1], "sluice_jobs_blocked_fair", "%s: %v", name, via)
			for _, v := range via {
				require.Contains(t, v, "sluice_jobs_blocked", "%s: %s", name, stmt)
			}
		}
		require.False(t, sorts(t, s, text, args), "%s: LockBlocked sorts", name)

		// The limit a key with none declared takes from its first
		// blocked job (fill) is read from one entry of the index.
		text, args = s.SQL().BlockedLimit("export/global")
		stmts = map[string]func() (string, []any){"BlockedLimit": func() (string, []any) { return text, args }}
		for stmt, via := range plansOf(t, s, stmts) {
			t.Logf("%s: %v", name, via)
			require.Len(t, via, 1, "%s: %s: %v", name, stmt, via)
			require.Contains(t, via[0], "sluice_jobs_blocked", "%s: %s", name, stmt)
		}
		require.False(t, sorts(t, s, text, args), "%s: BlockedLimit sorts", name)
	})
}

// sorts reports whether the database's plan for text sorts rows (on
// PostgreSQL, its generic plan), rather than reading them in index order.
func sorts(t *testing.T, s *engine.Store, text string, args []any) bool {
	t.Helper()
	ctx := context.Background()
	switch name := s.Dialect().Name(); name {
	case "postgres":
		return strings.Contains(postgresGenericPlanJSON(t, s, text, len(args)), `"Node Type": "Sort"`)
	case "sqlite":
		rows, err := s.DB().Query(ctx, "EXPLAIN QUERY PLAN "+text, args...)
		require.NoError(t, err)
		defer rows.Close()
		sorted := false
		for rows.Next() {
			var id, parent, unused int
			var detail string
			require.NoError(t, rows.Scan(&id, &parent, &unused, &detail))
			sorted = sorted || strings.Contains(detail, "TEMP B-TREE")
		}
		require.NoError(t, rows.Err())
		return sorted
	case "mysql":
		rows, err := s.DB().Query(ctx, "EXPLAIN FORMAT=JSON "+text, args...)
		require.NoError(t, err)
		defer rows.Close()
		var out string
		for rows.Next() {
			require.NoError(t, rows.Scan(&out))
		}
		require.NoError(t, rows.Err())
		return strings.Contains(out, "filesort")
	default:
		t.Fatalf("no plan reader for %s", name)
		return false
	}
}

// The oldest waiting job's read of the delayed jobs (scheduled, no rate
// limit holding them: migration 019) takes the lowest run_at of each queue
// as one entry of their index, however many are scheduled: on PostgreSQL
// and SQLite a loose index scan spelled out by recursion (the first queue,
// then each next one after the last, then each one's lowest run_at), on
// MySQL its own ("Using index for group-by"); never a read of the table or
// of the index of every scheduled job.
func TestTheOldestDelayedJobIsReadOncePerQueue(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		many := make([]engine.NewJob, 4000)
		for i := range many {
			many[i] = job("k", fmt.Sprintf("q%d", i%4), 0)
			many[i].RunAt = at(time.Duration(i) * time.Second)
		}
		enqueue(t, s, t0.Add(-time.Hour), many...)
		// A tenth wait for a rate limit's slot.
		_, err := s.DB().Exec(ctx, "UPDATE sluice_jobs SET wait_key = 'k/x' WHERE id % 10 = 0")
		require.NoError(t, err)
		text := s.SQL().OldestWaiting()
		name := s.Dialect().Name()
		var via []string
		switch name {
		case "postgres":
			// The plan as it ran: EXPLAIN alone leaves out the subquery of
			// the recursive step.
			_, err := s.DB().Exec(ctx, "ANALYZE sluice_jobs")
			require.NoError(t, err)
			rows, err := s.DB().Query(ctx, "EXPLAIN (ANALYZE, FORMAT JSON) "+text)
			require.NoError(t, err)
			var out string
			for rows.Next() {
				require.NoError(t, rows.Scan(&out))
			}
			require.NoError(t, rows.Err())
			rows.Close()
			via = postgresReads(t, planTable{"sluice_jobs", "j"}, out)
		default:
			via = plansOf(t, s, map[string]func() (string, []any){"OldestWaiting": func() (string, []any) { return text, nil }})["OldestWaiting"]
		}
		t.Logf("%s: %v", name, via)
		var delayed []string
		for _, v := range via {
			require.NotContains(t, v, "sluice_jobs_scheduled", "%s: the index of every scheduled job", name)
			require.NotContains(t, v, "Seq Scan", "%s: a read of the table", name)
			require.NotEqual(t, "SCAN j", v, "%s: a read of the table", name)
			require.NotContains(t, v, `"ALL"`, "%s: a read of the table", name)
			if strings.Contains(v, "sluice_jobs_delayed") {
				delayed = append(delayed, v)
			}
		}
		switch name {
		case "mysql":
			require.Len(t, delayed, 1, "%v", via)
			rows, err := s.DB().Query(ctx, "EXPLAIN FORMAT=JSON "+text)
			require.NoError(t, err)
			var out string
			for rows.Next() {
				require.NoError(t, rows.Scan(&out))
			}
			require.NoError(t, rows.Err())
			rows.Close()
			require.Contains(t, out, `"using_index_for_group_by": true`)
		default:
			require.Len(t, delayed, 3, "the first queue, the next one, each one's lowest run_at: %v", via)
			bounds := strings.ReplaceAll(strings.Join(delayed, ""), " ", "")
			require.Contains(t, bounds, "queue>", "the next queue after the last")
			require.Contains(t, bounds, "queue=", "each queue's lowest run_at")
		}

		oldest, err := s.OldestWaiting(ctx)
		require.NoError(t, err)
		require.ElementsMatch(t, []engine.Oldest{
			{Queue: "q0", Since: at(0)}, {Queue: "q1", Since: at(time.Second)}, {Queue: "q2", Since: at(2 * time.Second)},
			{Queue: "q3", Since: at(3 * time.Second)},
			{Queue: "q1", Throttled: true, Since: t0.Add(-time.Hour)}, {Queue: "q3", Throttled: true, Since: t0.Add(-time.Hour)},
		}, oldest)
	})
}
