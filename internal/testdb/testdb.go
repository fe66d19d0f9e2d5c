// Package testdb opens a fresh, migrated store per test on every database
// the run has: SQLite always, PostgreSQL when SLUICE_TEST_POSTGRES_URL is
// set, MySQL when SLUICE_TEST_MYSQL_URL is set. When CI is set, a missing or
// unreachable database fails the test instead of being skipped.
//
// Each PostgreSQL test gets a schema of its own and each MySQL test a
// database of its own, dropped when the test ends, so packages can run in
// parallel against one server.
package testdb

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluicequeue/sluice/internal/driver/mysql"
	"github.com/sluicequeue/sluice/internal/driver/postgres"
	"github.com/sluicequeue/sluice/internal/driver/sqlite"
	"github.com/sluicequeue/sluice/internal/engine"
)

// Env names the variables that point tests at the servers.
const (
	PostgresEnv = "SLUICE_TEST_POSTGRES_URL"
	MySQLEnv    = "SLUICE_TEST_MYSQL_URL"
)

// Backend opens stores on one database.
type Backend struct {
	// Name is "sqlite", "postgres" or "mysql".
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
	s, err := OpenURL(context.Background(), b.URL(t))
	if err != nil {
		t.Fatalf("%s: %v", b.Name, err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
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
	switch {
	case strings.HasPrefix(u, "postgres://"), strings.HasPrefix(u, "postgresql://"):
		return postgres.Open(ctx, u)
	case strings.HasPrefix(u, "mysql://"):
		return mysql.Open(ctx, u)
	default:
		return sqlite.Open(ctx, strings.TrimPrefix(u, "sqlite:"), sqlite.Options{Synchronous: sqlite.SyncNormal})
	}
}

// Backends returns every database this run tests against.
func Backends(t testing.TB) []Backend {
	t.Helper()
	out := []Backend{{Name: "sqlite", URL: sqliteURL}}
	if u := need(t, PostgresEnv); u != "" {
		out = append(out, Backend{Name: "postgres", URL: func(t testing.TB) string { return postgresURL(t, u) }})
	}
	if u := need(t, MySQLEnv); u != "" {
		out = append(out, Backend{Name: "mysql", URL: func(t testing.TB) string { return mysqlURL(t, u) }})
	}
	return out
}

// Each runs fn as a subtest per backend, with a fresh migrated store.
func Each(t *testing.T, fn func(t *testing.T, s *engine.Store)) {
	for _, b := range Backends(t) {
		t.Run(b.Name, func(t *testing.T) { fn(t, b.Open(t)) })
	}
}

// EachPool runs fn as a subtest per backend, with a fresh migrated store
// and a function that opens another pool on the same database, as another
// process would.
func EachPool(t *testing.T, fn func(t *testing.T, s *engine.Store, open func() *engine.Store)) {
	for _, b := range Backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			u := b.URL(t)
			open := Opener(t, u)
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

func suffix() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func sqliteURL(t testing.TB) string {
	return "sqlite:" + filepath.Join(t.TempDir(), "sluice.db")
}

func postgresURL(t testing.TB, base string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatalf("postgres: %s unreachable: %v", PostgresEnv, err)
	}
	defer conn.Close(context.Background())
	schema := "sluice_t_" + suffix()
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		t.Fatalf("postgres: create schema: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if c, err := pgx.Connect(ctx, base); err == nil {
			_, _ = c.Exec(ctx, "DROP SCHEMA "+schema+" CASCADE")
			_ = c.Close(ctx)
		}
	})
	return withParam(t, base, "search_path", schema)
}

func mysqlURL(t testing.TB, base string) string {
	cfg, err := mysql.Config(base)
	if err != nil {
		t.Fatalf("mysql: %v", err)
	}
	db, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		t.Fatalf("mysql: %v", err)
	}
	defer db.Close()
	name := "sluice_t_" + suffix()
	if _, err := db.Exec("CREATE DATABASE " + name); err != nil {
		t.Fatalf("mysql: %s unreachable or refused CREATE DATABASE: %v", MySQLEnv, err)
	}
	t.Cleanup(func() {
		if db, err := sql.Open("mysql", cfg.FormatDSN()); err == nil {
			_, _ = db.Exec("DROP DATABASE IF EXISTS " + name)
			_ = db.Close()
		}
	})
	u, _ := url.Parse(base)
	u.Path = "/" + name
	return u.String()
}

func withParam(t testing.TB, base, k, v string) string {
	u, err := url.Parse(base)
	if err != nil {
		t.Fatalf("parse %s: %v", base, err)
	}
	q := u.Query()
	q.Set(k, v)
	u.RawQuery = q.Encode()
	return u.String()
}

// String describes the backends, for logs.
func String(bs []Backend) string {
	names := make([]string, len(bs))
	for i, b := range bs {
		names[i] = b.Name
	}
	return fmt.Sprint(names)
}
