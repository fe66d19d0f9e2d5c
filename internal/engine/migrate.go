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
	"time"
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
	Applied bool
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
	if err != nil || len(ms) == 0 {
		return 0, err
	}
	return ms[len(ms)-1].Version, nil
}

func (s *Store) applied(ctx context.Context, ex Executor) (map[int]bool, error) {
	versions, err := queryInt64s(ctx, ex, s.q.AppliedMigrations(), nil)
	if err != nil {
		return nil, err
	}
	out := make(map[int]bool, len(versions))
	for _, v := range versions {
		out[int(v)] = true
	}
	return out, nil
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
	done, err := s.applied(ctx, ex)
	if err != nil {
		if !s.d.IsUndefinedTable(err) {
			return nil, fmt.Errorf("migration status: %w", err)
		}
		done = map[int]bool{}
	}
	out := make([]MigrationStatus, len(ms))
	for i, m := range ms {
		out[i] = MigrationStatus{Migration: m, Applied: done[m.Version]}
	}
	return out, nil
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
	st, err := s.migrationStatus(ctx, ex)
	if err != nil {
		return s.wrap(err)
	}
	var pending []string
	for _, m := range st {
		if !m.Applied {
			pending = append(pending, fmt.Sprintf("%03d_%s", m.Version, m.Name))
		}
	}
	if len(pending) > 0 {
		return fmt.Errorf("%w: %s", ErrPendingMigrations, strings.Join(pending, ", "))
	}
	s.schemaOK.Store(true)
	return nil
}

// MigrateUp applies every pending migration up to and including target
// (0: all of them), each in its own transaction, and returns those it
// applied. A target that is no migration's version is refused before
// anything is applied.
func (s *Store) MigrateUp(ctx context.Context, target int) ([]Migration, error) {
	ms, err := s.Migrations()
	if err != nil {
		return nil, err
	}
	if err := CheckTarget(ms, target); err != nil {
		return nil, err
	}
	if err := s.createMigrationsTable(ctx); err != nil {
		return nil, err
	}
	var done []Migration
	for _, m := range ms {
		if target > 0 && m.Version > target {
			break
		}
		ran, err := s.migrateOne(ctx, m, true)
		if err != nil {
			return done, err
		}
		if ran {
			done = append(done, m)
		}
	}
	return done, nil
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
// those it reverted.
func (s *Store) MigrateDown(ctx context.Context, steps int) ([]Migration, error) {
	ms, err := s.Migrations()
	if err != nil {
		return nil, err
	}
	if err := s.createMigrationsTable(ctx); err != nil {
		return nil, err
	}
	var done []Migration
	for i := len(ms) - 1; i >= 0 && len(done) < steps; i-- {
		ran, err := s.migrateOne(ctx, ms[i], false)
		if err != nil {
			return done, err
		}
		if ran {
			done = append(done, ms[i])
		}
	}
	s.schemaOK.Store(false)
	return done, nil
}

// createMigrationsTable creates the table of applied migrations unless it
// exists. Migrators that start together on an empty database race here,
// before any lock exists: on PostgreSQL a CREATE TABLE IF NOT EXISTS that
// loses fails on the catalog's unique index instead of finding the table.
// The loser tries once more, and finds it.
func (s *Store) createMigrationsTable(ctx context.Context) error {
	_, err := s.db.Exec(ctx, s.q.CreateMigrationsTable())
	if err != nil {
		_, err = s.db.Exec(ctx, s.q.CreateMigrationsTable())
	}
	if err != nil {
		return fmt.Errorf("create migrations table: %w", err)
	}
	return nil
}

// migrateOne applies (up) or reverts (down) m unless that is already done,
// under the migration lock, and reports whether it ran.
func (s *Store) migrateOne(ctx context.Context, m Migration, up bool) (bool, error) {
	ran := false
	err := s.inTx(ctx, func(tx Tx) error {
		if q := s.q.LockMigrations(); q != "" {
			if _, err := tx.Exec(ctx, q); err != nil {
				return fmt.Errorf("lock migrations: %w", err)
			}
		}
		done, err := s.applied(ctx, tx)
		if err != nil {
			return fmt.Errorf("read applied migrations: %w", err)
		}
		if done[m.Version] == up {
			return s.unlockMigrations(ctx, tx)
		}
		body, verb := m.Up, "apply"
		if !up {
			body, verb = m.Down, "revert"
		}
		for _, stmt := range Statements(body) {
			if _, err := tx.Exec(ctx, stmt); err != nil {
				return fmt.Errorf("%s migration %03d_%s: %w\n%s", verb, m.Version, m.Name, err, stmt)
			}
		}
		var q string
		var args []any
		if up {
			q, args = s.q.RecordMigration(m.Version, m.Name, Micros(time.Now()))
		} else {
			q, args = s.q.ForgetMigration(m.Version)
		}
		if _, err := exec(ctx, tx, q, args); err != nil {
			return fmt.Errorf("record migration %03d: %w", m.Version, err)
		}
		ran = true
		return s.unlockMigrations(ctx, tx)
	})
	return ran, err
}

func (s *Store) unlockMigrations(ctx context.Context, tx Tx) error {
	if q := s.q.UnlockMigrations(); q != "" {
		if _, err := tx.Exec(ctx, q); err != nil {
			return fmt.Errorf("unlock migrations: %w", err)
		}
	}
	return nil
}
