// Package testdb opens a fresh, migrated store per test on every database
// the run has: SQLite always, and each backend of internal/driver's table
// whose TestEnv variable names a server (SLUICE_TEST_POSTGRES_URL,
// SLUICE_TEST_MYSQL_URL). When CI is set, a missing or unreachable server
// fails the test instead of being skipped.
//
// Each test gets a scratch database of its own (a schema on PostgreSQL, a
// database on MySQL, a file on SQLite), dropped when the test ends, so
// packages can run in parallel against one server.
package testdb

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/sluicequeue/sluice/internal/driver"
	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/store"
)

// Backend opens stores on one database.
type Backend struct {
	// Name is the backend's name: "sqlite", "postgres" or "mysql".
	Name string
	// URL opens a fresh, empty database and returns its URL; the database
	// is dropped when the test ends.
	URL func(t testing.TB) string
	// migrated, for a backend without a test server (SQLite), opens a
	// fresh database already migrated (a copy of one migrated once per
	// test binary) and returns its URL; nil for the others.
	migrated func(t testing.TB) string
}

// migratedURL returns a fresh migrated database's URL where b can copy
// one, or a fresh empty one's (and false).
func (b Backend) migratedURL(t testing.TB) (string, bool) {
	if b.migrated != nil {
		return b.migrated(t), true
	}
	return b.URL(t), false
}

// Open opens a fresh store on b, migrated.
func (b Backend) Open(t testing.TB) *engine.Store {
	t.Helper()
	u, done := b.migratedURL(t)
	s := Opener(t, u)()
	if done {
		return s
	}
	if _, err := s.MigrateUp(context.Background(), 0); err != nil {
		t.Fatalf("%s: migrate: %v", b.Name, err)
	}
	return s
}

// OpenRaw opens a fresh store on b without migrating it.
func (b Backend) OpenRaw(t testing.TB) *engine.Store {
	t.Helper()
	return Opener(t, b.URL(t))()
}

// Opener returns a function that opens another store (its own connection
// pool) on the database at u, closed when the test ends: for tests of
// several processes sharing one database.
func Opener(t testing.TB, u string) func() *engine.Store {
	return func() *engine.Store {
		t.Helper()
		s, err := OpenURL(context.Background(), u)
		if err != nil {
			t.Fatalf("open %s: %v", u, err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
}

// OpenURL opens a store from one of the URLs a Backend returns.
func OpenURL(ctx context.Context, u string) (*engine.Store, error) {
	s, err := store.Open(ctx, u)
	if err != nil {
		return nil, err
	}
	return engine.From(s), nil
}

// Public returns the *store.Store around e, for handing a store a test
// built (with faults, a recorder or a clock of its own) to jobs, the
// dispatcher or the CLI.
func Public(e *engine.Store) *store.Store { return engine.Public(e).(*store.Store) }

// Backends returns every database this run tests against.
func Backends(t testing.TB) []Backend {
	t.Helper()
	var out []Backend
	for _, b := range driver.Backends() {
		base := ""
		if b.TestEnv != "" {
			if base = need(t, b.TestEnv); base == "" {
				continue
			}
		}
		tb := Backend{Name: b.Name, URL: func(t testing.TB) string { return scratch(t, b, base) }}
		if b.TestEnv == "" {
			tb.migrated = func(t testing.TB) string { return migratedCopy(t, b) }
		}
		out = append(out, tb)
	}
	return out
}

// Named returns the backend of that name (as driver.Backends names it:
// "postgres", "mysql", "sqlite") if this run tests against it.
func Named(t testing.TB, name string) (Backend, bool) {
	t.Helper()
	for _, b := range Backends(t) {
		if b.Name == name {
			return b, true
		}
	}
	return Backend{}, false
}

// migratedFiles holds, per backend without a test server, the files of a
// database made and migrated once per test binary: running every
// migration takes about a quarter of a second per test under -race.
var migratedFiles sync.Map // backend name → *migratedTemplate

type migratedTemplate struct {
	once  sync.Once
	files map[string][]byte
	err   error
}

// migratedCopy makes a fresh database of b, in a temporary directory,
// from a copy of the files of one migrated once, and returns its URL.
func migratedCopy(t testing.TB, b engine.Backend) string {
	t.Helper()
	v, _ := migratedFiles.LoadOrStore(b.Name, &migratedTemplate{})
	tpl := v.(*migratedTemplate)
	tpl.once.Do(func() { tpl.files, tpl.err = migrateOnce(b) })
	if tpl.err != nil {
		t.Fatalf("%s: a migrated database to copy: %v", b.Name, tpl.err)
	}
	dir := t.TempDir()
	for name, data := range tpl.files {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatalf("%s: copy a migrated database: %v", b.Name, err)
		}
	}
	u, _, err := b.Scratch(context.Background(), dir)
	if err != nil {
		t.Fatalf("%s: %v", b.Name, err)
	}
	return u
}

// migrateOnce makes a database of b in a directory of its own, migrates
// it, closes it, and returns its files.
func migrateOnce(b engine.Backend) (map[string][]byte, error) {
	dir, err := os.MkdirTemp("", "sluice-migrated-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	ctx := context.Background()
	u, _, err := b.Scratch(ctx, dir)
	if err != nil {
		return nil, err
	}
	s, err := OpenURL(ctx, u)
	if err != nil {
		return nil, err
	}
	_, err = s.MigrateUp(ctx, 0)
	if cerr := s.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, err
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	files := map[string][]byte{}
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		if files[e.Name()], err = os.ReadFile(filepath.Join(dir, e.Name())); err != nil {
			return nil, err
		}
	}
	return files, nil
}

// scratch makes a fresh database on b's test server (base), or in a
// temporary directory for a backend without one, dropped when t ends.
func scratch(t testing.TB, b engine.Backend, base string) string {
	t.Helper()
	if b.TestEnv == "" {
		base = t.TempDir()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	u, drop, err := b.Scratch(ctx, base)
	if err != nil {
		t.Fatalf("%s: %s: %v", b.Name, b.TestEnv, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = drop(ctx)
	})
	return u
}

// Each runs fn as a subtest per backend, with a fresh migrated store.
func Each(t *testing.T, fn func(t *testing.T, s *engine.Store)) {
	for _, b := range Backends(t) {
		t.Run(b.Name, func(t *testing.T) { fn(t, b.Open(t)) })
	}
}

// EachPublic is Each for tests that use only sluice's public API.
func EachPublic(t *testing.T, fn func(t *testing.T, s *store.Store)) {
	Each(t, func(t *testing.T, s *engine.Store) { fn(t, Public(s)) })
}

// EachPool runs fn as a subtest per backend, with a fresh migrated store
// and a function that opens another pool on the same database, as another
// process would.
func EachPool(t *testing.T, fn func(t *testing.T, s *engine.Store, open func() *engine.Store)) {
	for _, b := range Backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			u, done := b.migratedURL(t)
			open := Opener(t, u)
			s := open()
			if !done {
				if _, err := s.MigrateUp(context.Background(), 0); err != nil {
					t.Fatalf("%s: migrate: %v", b.Name, err)
				}
			}
			fn(t, s, open)
		})
	}
}

// need returns the URL in env, failing the test when CI is set and it is
// missing.
func need(t testing.TB, env string) string {
	u := os.Getenv(env)
	if u == "" && os.Getenv("CI") != "" {
		t.Fatalf("%s is not set, and CI is: the suite must run against every database", env)
	}
	return u
}

// String describes the backends, for logs.
func String(bs []Backend) string {
	names := make([]string, len(bs))
	for i, b := range bs {
		names[i] = b.Name
	}
	return fmt.Sprint(names)
}
