package engine

import (
	"strconv"
	"strings"
)

// stateJobs are the predicates that select the jobs of each state through
// its own index, from the catalog's state fragments, so that the rule of
// which index holds which state is written once (MySQL replaces the
// fragments with reads of its generated key columns).
var stateJobs = map[State]string{
	StateReady:     "({ReadyPlainJob} OR {ReadyLimitedJob} OR {ReadyFairJob})",
	StateScheduled: "{ScheduledJob}",
	StateParked:    "({ParkedPlainJob} OR {ParkedFairJob})",
	StateBlocked:   "{BlockedJob}",
	StateRunning:   "{RunningJob}",
	StateCompleted: "{DoneJob} AND j.state = 'completed'",
	StateCancelled: "{DoneJob} AND j.state = 'cancelled'",
	StateFailed:    "{FailedJob}",
}

// PageJobs lists up to f.Limit jobs matching f with an id below f.Before
// (any id when 0), newest first. Columns: JobInfoColumns.
func (q *SQL) PageJobs(f JobPage) (string, []any) {
	where, args := jobPageWhere(f, q.states, true, q.c.Arrays)
	return `SELECT ` + JobInfoColumns + ` FROM sluice_jobs j` + where + ` ORDER BY id DESC LIMIT ` + strconv.Itoa(f.Limit), args
}

// PageJobIDs is PageJobs returning only ids. Columns: id.
func (q *SQL) PageJobIDs(f JobPage) (string, []any) {
	where, args := jobPageWhere(f, q.states, true, q.c.Arrays)
	return `SELECT id FROM sluice_jobs j` + where + ` ORDER BY id DESC LIMIT ` + strconv.Itoa(f.Limit), args
}

// CountJobs counts the jobs matching f (ignoring Before and Limit), up to
// limit. Columns: count. Without a state, whose index would bound the
// read, it counts from the newest rows, where waiting jobs are, instead
// of reading every finished job first.
func (q *SQL) CountJobs(f JobPage, limit int) (string, []any) {
	where, args := jobPageWhere(f, q.states, false, q.c.Arrays)
	order := ""
	if f.State == "" {
		order = " ORDER BY id DESC"
	}
	return `SELECT count(*) FROM (SELECT 1 FROM sluice_jobs j` + where + order + ` LIMIT ` + strconv.Itoa(limit) + `) c`, args
}

// jobPageWhere returns the WHERE clause that selects the jobs of a
// dashboard page and its arguments: the state through the dialect's
// condition for it (state, from the fixed set of states), then kind,
// queue, wait key and, with before, ids below f.Before, each an argument.
// Placeholders are "?", or "$1", "$2"… when numbered (PostgreSQL). The
// columns are the same on every database; only the state's condition
// differs.
func jobPageWhere(f JobPage, state map[State]string, before, numbered bool) (string, []any) {
	conds := []string{"1 = 1"}
	var args []any
	arg := func(cond string, v any) {
		args = append(args, v)
		if numbered {
			cond = strings.Replace(cond, "?", "$"+strconv.Itoa(len(args)), 1)
		}
		conds = append(conds, cond)
	}
	if c, ok := state[f.State]; ok {
		conds = append(conds, c)
	}
	if f.Kind != "" {
		arg("kind = ?", f.Kind)
	}
	if f.Queue != "" {
		arg("queue = ?", f.Queue)
	}
	if f.WaitKey != "" {
		arg("wait_key = ?", f.WaitKey)
	}
	if before && f.Before > 0 {
		arg("id < ?", f.Before)
	}
	return " WHERE " + strings.Join(conds, " AND "), args
}
