package engine

import (
	"context"
	"fmt"
	"io/fs"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// Migration is one numbered schema change.
type Migration struct {
	Version int
	Name    string
	Up      string
	Down    string
}

// MigrationStatus is a migration and whether it is applied.
type MigrationStatus struct {
	Migration
	// Applied reports whether the migration is applied whole (one partly
	// reverted is not).
	Applied bool
	// Partly is how far the migration got where it failed part way on a
	// database whose DDL commits at once (MySQL): the statements that ran
	// stay, and the next run in the same direction resumes after them.
	// Nil otherwise.
	Partly *Progress
}

// Progress is how many statements of a migration have run in one
// direction.
type Progress struct {
	// Up is true while the migration is being applied, false while it is
	// being reverted.
	Up bool
	// Done is how many of its All statements have run.
	Done, All int
}

// State says where the migration stands, for people: "applied",
// "pending", or how far one that failed part way got ("partly applied: 2
// of 3 statements", "partly reverted: 1 of 3 statements").
func (m MigrationStatus) State() string {
	switch {
	case m.Partly != nil:
		verb := "reverted"
		if m.Partly.Up {
			verb = "applied"
		}
		return fmt.Sprintf("partly %s: %d of %d statements", verb, m.Partly.Done, m.Partly.All)
	case m.Applied:
		return "applied"
	}
	return "pending"
}

var migrationFile = regexp.MustCompile(`^(\d+)_([a-z0-9_]+)\.(up|down)\.sql$`)

// LoadMigrations reads NNN_name.up.sql / NNN_name.down.sql pairs from fsys,
// in version order.
func LoadMigrations(fsys fs.FS) ([]Migration, error) {
	entries, err := fs.ReadDir(fsys, ".")
	if err != nil {
		return nil, fmt.Errorf("read migrations: %w", err)
	}
	byVersion := map[int]*Migration{}
	for _, e := range entries {
		m := migrationFile.FindStringSubmatch(e.Name())
		if m == nil {
			continue
		}
		v, _ := strconv.Atoi(m[1])
		body, err := fs.ReadFile(fsys, e.Name())
		if err != nil {
			return nil, fmt.Errorf("read migration %s: %w", e.Name(), err)
		}
		mg := byVersion[v]
		if mg == nil {
			mg = &Migration{Version: v, Name: m[2]}
			byVersion[v] = mg
		}
		if m[3] == "up" {
			mg.Up = string(body)
		} else {
			mg.Down = string(body)
		}
	}
	out := make([]Migration, 0, len(byVersion))
	for _, m := range byVersion {
		if m.Up == "" || m.Down == "" {
			return nil, fmt.Errorf("migration %03d_%s needs both an up and a down file", m.Version, m.Name)
		}
		out = append(out, *m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	return out, nil
}

// Statements splits a migration into statements at lines ending in ";".
func Statements(sql string) []string {
	var out []string
	var cur strings.Builder
	for _, line := range strings.Split(sql, "\n") {
		trimmed := strings.TrimSpace(line)
		if trimmed == "" || strings.HasPrefix(trimmed, "--") {
			continue
		}
		cur.WriteString(line)
		cur.WriteByte('\n')
		if strings.HasSuffix(trimmed, ";") {
			stmt := strings.TrimSuffix(strings.TrimSpace(cur.String()), ";")
			out = append(out, stmt)
			cur.Reset()
		}
	}
	if rest := strings.TrimSpace(cur.String()); rest != "" {
		out = append(out, rest)
	}
	return out
}

// Migrations returns the dialect's migrations.
func (s *Store) Migrations() ([]Migration, error) { return LoadMigrations(s.d.Migrations()) }

// LatestVersion returns the newest migration this version of sluice has.
func (s *Store) LatestVersion() (int, error) {
	ms, err := s.Migrations()
	if err != nil {
		return 0, err
	}
	return latestOf(ms), nil
}

// latestOf is the newest version of ms (in order), 0 for none.
func latestOf(ms []Migration) int {
	if len(ms) == 0 {
		return 0
	}
	return ms[len(ms)-1].Version
}

// MigrationStatus lists every migration and whether it is applied.
func (s *Store) MigrationStatus(ctx context.Context) ([]MigrationStatus, error) {
	return s.migrationStatus(ctx, s.db)
}

func (s *Store) migrationStatus(ctx context.Context, ex Executor) ([]MigrationStatus, error) {
	ms, err := s.Migrations()
	if err != nil {
		return nil, err
	}
	rec, err := s.readRecorded(ctx, ex)
	if err != nil {
		return nil, fmt.Errorf("migration status: %w", err)
	}
	out := make([]MigrationStatus, len(ms))
	for i, m := range ms {
		out[i] = MigrationStatus{Migration: m, Applied: rec.applied[m.Version]}
		if p, ok := rec.partly(m.Version); ok {
			out[i].Applied = false
			out[i].Partly = &Progress{Up: p.up, Done: p.done, All: len(Statements(m.body(p.up)))}
		}
	}
	return out, nil
}

// Pending names the migrations of st that are not applied whole, with
// how far each that failed part way got ("013_fairness (partly applied: 2
// of 3 statements)").
func Pending(st []MigrationStatus) []string {
	var out []string
	for _, m := range st {
		switch {
		case m.Partly != nil:
			out = append(out, fmt.Sprintf("%03d_%s (%s)", m.Version, m.Name, m.State()))
		case !m.Applied:
			out = append(out, fmt.Sprintf("%03d_%s", m.Version, m.Name))
		}
	}
	return out
}

// CheckSchema returns ErrPendingMigrations unless every migration this
// version of sluice has is applied. A success is remembered.
func (s *Store) CheckSchema(ctx context.Context) error {
	return s.checkSchema(ctx, s.db)
}

// checkSchema reads the applied migrations through ex, which may be a
// transaction holding the store's only connection (SQLite).
func (s *Store) checkSchema(ctx context.Context, ex Executor) error {
	if s.schemaOK.Load() {
		return nil
	}
	var st []MigrationStatus
	read := func() (err error) {
		st, err = s.migrationStatus(ctx, ex)
		return err
	}
	var err error
	if ex == s.db {
		err = read()
	} else {
		// In the caller's transaction, under a savepoint it always rolls
		// back to (the read writes nothing): a read of a table that is not
		// there aborts a PostgreSQL transaction, even where the read
		// takes the error for "nothing applied", and the transaction must
		// go on after the enqueue is refused.
		var ran bool
		if ran, err = s.underSavepoint(ctx, ex, true, read); !ran {
			err = read()
		}
	}
	if err != nil {
		return s.wrap(err)
	}
	if pending := Pending(st); len(pending) > 0 {
		return fmt.Errorf("%w: %s", ErrPendingMigrations, strings.Join(pending, ", "))
	}
	s.schemaOK.Store(true)
	return nil
}

// MigrateUp applies every pending migration up to and including target
// (0: all of them), under the migration lock, and returns those it
// applied. Each runs in a transaction of its own (a savepoint of the
// run's transaction, where the lock belongs to one), or, where DDL
// commits at once (MySQL), statement by statement, resuming one that
// failed part way after the statements that ran. A target that is no
// migration's version is refused before anything is applied.
//
// What to apply is decided once the lock is held, from what is applied
// then. While the database records a migration newer than this version of
// sluice knows, applied or (MySQL) under way (ErrNewerMigrations),
// MigrateUp applies nothing: it succeeds if nothing of its own is
// pending, and refuses otherwise.
func (s *Store) MigrateUp(ctx context.Context, target int) ([]Migration, error) {
	ms, err := s.Migrations()
	if err != nil {
		return nil, err
	}
	if err := CheckTarget(ms, target); err != nil {
		return nil, err
	}
	plan := func(rec recorded) ([]Migration, error) {
		var todo []Migration
		for _, m := range ms {
			if target > 0 && m.Version > target {
				break
			}
			if rec.needs(m.Version, true) {
				todo = append(todo, m)
			}
		}
		if newer := rec.newer(ms); len(todo) > 0 && len(newer) > 0 {
			return nil, fmt.Errorf("migrate up: %w; it would apply %s below %s: upgrade sluice, whose newer version has them",
				newerError(ms, newer), names(todo), plural(len(newer), "it", "them"))
		}
		return todo, nil
	}
	return s.migrate(ctx, true, plan)
}

// CheckTarget refuses a migration target that is neither 0 (the newest)
// nor the version of one of ms.
func CheckTarget(ms []Migration, target int) error {
	if target == 0 || slices.ContainsFunc(ms, func(m Migration) bool { return m.Version == target }) {
		return nil
	}
	if len(ms) == 0 {
		return fmt.Errorf("migrate up: no migration has version %d (there are none)", target)
	}
	return fmt.Errorf("migrate up: no migration has version %d: give 0 for the newest, or one of %d to %d", target, ms[0].Version, ms[len(ms)-1].Version)
}

// MigrateDown reverts the newest steps applied migrations and returns
// those it reverted, as MigrateUp applies them.
//
// It takes the database back steps migrations from where it finds it
// when called: once it holds the migration lock it reverts, newest
// first, at most steps of the migrations applied then, and none at or
// below the one that was steps below the newest when it was called. A
// migrator that reverted some of them meanwhile leaves it less to do (two
// MigrateDown(ctx, 1) at once revert the newest once); one that applied
// more meanwhile has its newest reverted first, so the migrations applied
// always stay the oldest ones.
//
// While the database records a migration newer than this version of
// sluice knows, applied or (MySQL) under way, MigrateDown reverts nothing
// and fails with ErrNewerMigrations: the newest applied is one it cannot
// revert.
func (s *Store) MigrateDown(ctx context.Context, steps int) ([]Migration, error) {
	ms, err := s.Migrations()
	if err != nil {
		return nil, err
	}
	if steps <= 0 {
		return nil, nil
	}
	defer s.schemaOK.Store(false)
	floor := -1 // unknown until the first plan, made before the lock
	plan := func(rec recorded) ([]Migration, error) {
		if newer := rec.newer(ms); len(newer) > 0 {
			them := plural(len(newer), "it", "them")
			return nil, fmt.Errorf("migrate down: %w; revert %s first with the sluice that applied %s: this one reverts nothing from under %s",
				newerError(ms, newer), them, them, them)
		}
		var applied []Migration
		for i := len(ms) - 1; i >= 0; i-- {
			if rec.needs(ms[i].Version, false) {
				applied = append(applied, ms[i])
			}
		}
		if floor < 0 {
			floor = 0
			if steps < len(applied) {
				floor = applied[steps].Version
			}
		}
		var todo []Migration
		for _, m := range applied {
			if m.Version <= floor || len(todo) == steps {
				break
			}
			todo = append(todo, m)
		}
		return todo, nil
	}
	return s.migrate(ctx, false, plan)
}

// names lists ms as "016_parked_fair, 017_claims".
func names(ms []Migration) string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = fmt.Sprintf("%03d_%s", m.Version, m.Name)
	}
	return strings.Join(out, ", ")
}

// prepareMigrations creates the migrator's tables unless they exist and
// reads what they record, before any lock is taken: a migrator with
// nothing to do never waits for one. What it reads only says whether
// there may be anything to do: the run decides what to do once it holds
// the lock.
func (s *Store) prepareMigrations(ctx context.Context) (recorded, error) {
	for _, q := range []string{s.q.CreateMigrationsTable(), s.q.CreateMigrationProgressTable()} {
		if err := s.createMigratorTable(ctx, q); err != nil {
			return recorded{}, err
		}
	}
	rec, err := s.readRecorded(ctx, s.db)
	if err != nil {
		return recorded{}, fmt.Errorf("read applied migrations: %w", err)
	}
	return rec, nil
}

// createMigratorTable runs q, which creates one of the migrator's tables
// unless it exists ("" creates none). Migrators that start together on an
// empty database race here, before any lock exists: on PostgreSQL a
// CREATE TABLE IF NOT EXISTS that loses fails on the catalog's unique
// index instead of finding the table. The loser tries once more, and
// finds it.
func (s *Store) createMigratorTable(ctx context.Context, q string) error {
	if q == "" {
		return nil
	}
	_, err := s.db.Exec(ctx, q)
	if err != nil {
		_, err = s.db.Exec(ctx, q)
	}
	if err != nil {
		return fmt.Errorf("create migrations table: %w", err)
	}
	return nil
}

// body returns m's up or down statements.
func (m Migration) body(up bool) string {
	if up {
		return m.Up
	}
	return m.Down
}

// recorded is what the database records of its migrations: the versions
// applied, and the progress of those applied or reverted part way.
type recorded struct {
	applied  map[int]bool
	progress map[int]progressRow
}

// progressRow is a row of the migration progress: the direction and how
// many statements of it have run.
type progressRow struct {
	up   bool
	done int
}

// partly returns version v's progress while its move is under way: a row
// whose direction its record already shows done (applied and "up", or not
// applied and "down") was left by a migrator that stopped between
// recording the migration and clearing its progress, and counts for
// nothing.
func (r recorded) partly(v int) (progressRow, bool) {
	p, ok := r.progress[v]
	if !ok || p.up == r.applied[v] {
		return progressRow{}, false
	}
	return p, true
}

// needs reports whether applying (up) or reverting v leaves anything to
// do, or, for a migration under way in the other direction, to refuse.
func (r recorded) needs(v int, up bool) bool {
	_, partly := r.partly(v)
	return partly || r.applied[v] != up
}

// readRecorded reads the applied migrations and their progress through
// ex; a table not there yet records nothing.
func (s *Store) readRecorded(ctx context.Context, ex Executor) (recorded, error) {
	rec := recorded{applied: map[int]bool{}, progress: map[int]progressRow{}}
	versions, err := queryInt64s(ctx, ex, s.q.AppliedMigrations(), nil)
	if err != nil && !s.d.IsUndefinedTable(err) {
		return recorded{}, err
	}
	for _, v := range versions {
		rec.applied[int(v)] = true
	}
	if !s.q.TracksMigrationProgress() {
		return rec, nil
	}
	if err := s.readProgress(ctx, ex, rec.progress); err != nil && !s.d.IsUndefinedTable(err) {
		return recorded{}, fmt.Errorf("read migration progress: %w", err)
	}
	return rec, nil
}

// readProgress reads the rows of the migration progress into out.
func (s *Store) readProgress(ctx context.Context, ex Executor, out map[int]progressRow) error {
	rows, err := ex.Query(ctx, s.q.MigrationProgress())
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var version, done int64
		var direction string
		if err := rows.Scan(&version, &direction, &done); err != nil {
			return err
		}
		out[int(version)] = progressRow{up: direction == "up", done: int(done)}
	}
	return rows.Err()
}
