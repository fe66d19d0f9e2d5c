package engine

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
)

// ErrNewerMigrations is returned by MigrateDown, and by MigrateUp when it
// has migrations to apply, while the database records a migration newer
// than this version of sluice knows, applied or under way: a newer sluice
// migrated it.
var ErrNewerMigrations = errors.New("the database has migrations newer than this version of sluice knows")

// NewerMigration is a migration newer than every one this version of
// sluice knows that the database records: one a newer sluice applied, or,
// where a migration that failed part way keeps the statements that ran
// (MySQL), one it applied or reverted part way.
type NewerMigration struct {
	Version int
	// Partly is how far the newer sluice's move of it got while one is
	// under way; nil when it is applied whole. All is 0: only that sluice
	// knows the migration's statements.
	Partly *Progress
}

// State says where the migration stands, for people: "applied by a newer
// sluice (unknown to this one)", or how far a move of it under way got
// ("partly applied by a newer sluice: 1 statement ran (unknown to this
// one)").
func (m NewerMigration) State() string {
	if m.Partly == nil {
		return "applied by a newer sluice (unknown to this one)"
	}
	ran := fmt.Sprintf("%d statements ran", m.Partly.Done)
	if m.Partly.Done == 1 {
		ran = "1 statement ran"
	}
	return fmt.Sprintf("%s by a newer sluice: %s (unknown to this one)", m.state(), ran)
}

// state is "applied", "partly applied" or "partly reverted".
func (m NewerMigration) state() string {
	switch {
	case m.Partly == nil:
		return "applied"
	case m.Partly.Up:
		return "partly applied"
	}
	return "partly reverted"
}

// NewerList says which newer migrations the database records and how:
// "019 applied", "019, 020 applied, 021 partly applied"; with noun,
// "migration 019 applied", "migrations 019, 020 applied, migration 021
// partly applied".
func NewerList(newer []NewerMigration, noun bool) string {
	return describeNewer(newer, noun, false)
}

// describeNewer lists newer in groups of one state, each group its
// versions ("019, 020"), after "migration(s) " with noun, before " is" or
// " are" with verb, then its state.
func describeNewer(newer []NewerMigration, noun, verb bool) string {
	var groups []string
	for i := 0; i < len(newer); {
		var vs []string
		j := i
		for ; j < len(newer) && newer[j].state() == newer[i].state(); j++ {
			vs = append(vs, fmt.Sprintf("%03d", newer[j].Version))
		}
		g := strings.Join(vs, ", ")
		if noun {
			g = plural(len(vs), "migration ", "migrations ") + g
		}
		if verb {
			g += plural(len(vs), " is", " are")
		}
		groups = append(groups, g+" "+newer[i].state())
		i = j
	}
	return strings.Join(groups, ", ")
}

// newerError names the migrations newer than ms that the database
// records.
func newerError(ms []Migration, newer []NewerMigration) error {
	return fmt.Errorf("%w: %s, and this one's newest is %03d (a newer sluice migrated the database)",
		ErrNewerMigrations, describeNewer(newer, true, true), latestOf(ms))
}

// plural returns one if n is 1, else many.
func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// NewerMigrations returns the versions newer than every migration this
// version of sluice knows that the database records as applied or, on
// MySQL, as under way (applied or reverted part way): a newer sluice
// migrated the database. `migrate status` and `sluice check` report
// them; MigrateDown refuses to revert anything while there are any.
func (s *Store) NewerMigrations(ctx context.Context) ([]int, error) {
	newer, err := s.NewerMigrationStatus(ctx)
	if err != nil {
		return nil, err
	}
	vs := make([]int, len(newer))
	for i, m := range newer {
		vs[i] = m.Version
	}
	return vs, nil
}

// NewerMigrationStatus returns the migrations NewerMigrations names, in
// order, with how far each under way got.
func (s *Store) NewerMigrationStatus(ctx context.Context) ([]NewerMigration, error) {
	ms, err := s.Migrations()
	if err != nil {
		return nil, err
	}
	rec, err := s.readRecorded(ctx, s.db)
	if err != nil {
		return nil, fmt.Errorf("read applied migrations: %w", err)
	}
	return rec.newer(ms), nil
}

// newer returns the migrations r records, applied or under way, that are
// newer than the newest of ms, in order.
func (r recorded) newer(ms []Migration) []NewerMigration {
	latest := latestOf(ms)
	seen := map[int]bool{}
	for v, ok := range r.applied {
		if ok && v > latest {
			seen[v] = true
		}
	}
	for v := range r.progress {
		if _, partly := r.partly(v); partly && v > latest {
			seen[v] = true
		}
	}
	out := make([]NewerMigration, 0, len(seen))
	for v := range seen {
		m := NewerMigration{Version: v}
		if p, ok := r.partly(v); ok {
			m.Partly = &Progress{Up: p.up, Done: p.done}
		}
		out = append(out, m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	return out
}
