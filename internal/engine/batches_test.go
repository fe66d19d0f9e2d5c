package engine_test

import (
	"strings"
	"sync"
	"testing"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
)

// smallBatches returns a store over s's database whose statements carry at
// most batch rows or keys each (engine.SetMaxInsertBatch), the faults of
// its pool, and a log of the statements it runs (pipelined ones too: the
// pool keeps the database's pipelining). The tests of "more than a
// statement binds" cross this threshold instead of the database's own
// bound on parameters (SQLite's 32,766): the same splitting code, with
// hundreds of rows instead of tens of thousands, which under -race cost
// SQLite tens of seconds a test. Each checks with the log that it did
// cross the threshold, and that no statement carried more than batch of
// its keys: with the production batch that is what keeps every statement
// under the database's bound.
func smallBatches(t testing.TB, s *engine.Store, batch int) (*engine.Store, *testdb.Faults, *stmtLog) {
	t.Helper()
	small, faults := testdb.WithFaults(s)
	engine.SetMaxInsertBatch(small, batch)
	log := &stmtLog{}
	faults.Observe = log.add
	return small, faults, log
}

// stmtLog is the statements a store ran: their texts and arguments.
type stmtLog struct {
	mu    sync.Mutex
	stmts []loggedStmt
}

type loggedStmt struct {
	q    string
	args []any
}

func (l *stmtLog) add(q string, args []any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.stmts = append(l.stmts, loggedStmt{q, args})
}

// reset forgets the statements logged so far.
func (l *stmtLog) reset() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.stmts = nil
}

// keys returns, for each logged statement whose text contains text ("" for
// any) and that binds a key beginning with prefix, how many such keys it
// binds (binds).
func (l *stmtLog) keys(text, prefix string) []int {
	var out []int
	for _, n := range l.binds(text, prefix) {
		if n > 0 {
			out = append(out, n)
		}
	}
	return out
}

// binds returns, for each logged statement whose text contains text, how
// many values beginning with prefix it binds: one parameter each where
// lists are spelled out, elements of one array parameter where they are
// bound as arrays (PostgreSQL).
func (l *stmtLog) binds(text, prefix string) []int {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []int
	for _, st := range l.stmts {
		if !strings.Contains(st.q, text) {
			continue
		}
		n := 0
		for _, a := range st.args {
			switch v := a.(type) {
			case string:
				if strings.HasPrefix(v, prefix) {
					n++
				}
			case []string:
				for _, s := range v {
					if strings.HasPrefix(s, prefix) {
						n++
					}
				}
			}
		}
		out = append(out, n)
	}
	return out
}

// count returns how many logged statements contain text.
func (l *stmtLog) count(text string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, st := range l.stmts {
		if strings.Contains(st.q, text) {
			n++
		}
	}
	return n
}
