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
}

// Open opens a fresh store on b, migrated unless raw.
func (b Backend) Open(t testing.TB) *engine.Store {
	t.Helper()
	s := b.OpenRaw(t)
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
		out = append(out, Backend{Name: b.Name, URL: func(t testing.TB) string { return scratch(t, b, base) }})
	}
	return out
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
			open := Opener(t, b.URL(t))
			s := open()
			if _, err := s.MigrateUp(context.Background(), 0); err != nil {
				t.Fatalf("%s: migrate: %v", b.Name, err)
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
