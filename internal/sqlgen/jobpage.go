package sqlgen

import (
	"strconv"
	"strings"

	"github.com/sluicequeue/sluice/internal/engine"
)

// JobPageWhere returns the WHERE clause that selects the jobs of a
// dashboard page and its arguments: the state through the dialect's
// condition for it (state, from the fixed set of states), then kind,
// queue, wait key and, with before, ids below f.Before, each an argument.
// Placeholders are "?", or "$1", "$2"… when numbered (PostgreSQL). The
// columns are the same on every database; only the state's condition
// differs.
func JobPageWhere(f engine.JobPage, state map[engine.State]string, before, numbered bool) (string, []any) {
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
