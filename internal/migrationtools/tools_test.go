package migrationtools_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	atlasmigrate "ariga.io/atlas/sql/migrate"
	atlasmysql "ariga.io/atlas/sql/mysql"
	atlaspostgres "ariga.io/atlas/sql/postgres"
	atlassqlite "ariga.io/atlas/sql/sqlite"
	"github.com/golang-migrate/migrate/v4"
	gmdatabase "github.com/golang-migrate/migrate/v4/database"
	gmmysql "github.com/golang-migrate/migrate/v4/database/mysql"
	gmpgx "github.com/golang-migrate/migrate/v4/database/pgx/v5"
	gmsqlite "github.com/golang-migrate/migrate/v4/database/sqlite"
	"github.com/golang-migrate/migrate/v4/source/iofs"
	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/cli"
	"github.com/sluicequeue/sluice/internal/driver/mysql"
	"github.com/sluicequeue/sluice/internal/testdb"
	"github.com/sluicequeue/sluice/jobs"
)

type ping struct{}

func (ping) Kind() string { return "ping" }

// run runs one command line of an app over a registry of one kind.
func run(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	reg := jobs.NewRegistry()
	require.NoError(t, jobs.Register(reg, func(context.Context, *jobs.Job[ping]) error { return nil }))
	var out, errOut bytes.Buffer
	app := &cli.App{Name: "myapp", Registry: reg, Stdout: &out, Stderr: &errOut}
	code := app.Run(context.Background(), args)
	return code, out.String(), errOut.String()
}

// openDB opens a *sql.DB on a test database the way each tool's docs say:
// pgx's database/sql driver, go-sql-driver/mysql with multiStatements
// (golang-migrate runs a file as one Exec), modernc's sqlite.
func openDB(t *testing.T, backend, url string) *sql.DB {
	var db *sql.DB
	var err error
	switch backend {
	case "postgres":
		db, err = sql.Open("pgx", url)
	case "mysql":
		cfg, cerr := mysql.Config(url)
		require.NoError(t, cerr)
		cfg.MultiStatements = true
		db, err = sql.Open("mysql", cfg.FormatDSN())
	default:
		db, err = sql.Open("sqlite", strings.TrimPrefix(url, "sqlite:"))
	}
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// sluiceSees runs `myapp check` and `myapp migrate status` and says
// whether the schema is current in sluice's eyes.
func sluiceSees(t *testing.T, url string) (current bool) {
	t.Helper()
	code, out, stderr := run(t, "check", "--database-url", url)
	if strings.Contains(out, "E001") {
		require.Equal(t, 1, code)
		return false
	}
	require.Equal(t, 0, code, "%s%s", out, stderr)
	require.Contains(t, out, "0 errors")
	code, out, stderr = run(t, "migrate", "status", "--database-url", url)
	require.Equal(t, 0, code, stderr)
	require.NotContains(t, out, "pending", "check passed, so every migration is applied")
	return true
}

// write writes the migrations for tool into a fresh directory.
func write(t *testing.T, dialect, tool string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), tool)
	code, out, stderr := run(t, "migrate", "sql", "--dialect", dialect, "--format", tool, "--out", dir)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, "wrote "+dir)
	return dir
}

// Each tool applies the files written for it to an empty database, and
// sluice then finds its schema current; goose and golang-migrate revert
// them all again.
func TestToolsApplyTheirFiles(t *testing.T) {
	ctx := context.Background()
	for _, b := range testdb.Backends(t) {
		t.Run(b.Name+"/goose", func(t *testing.T) {
			url := b.URL(t)
			dir := write(t, b.Name, "goose")
			dialect := map[string]goose.Dialect{"postgres": goose.DialectPostgres, "mysql": goose.DialectMySQL, "sqlite": goose.DialectSQLite3}[b.Name]
			p, err := goose.NewProvider(dialect, openDB(t, b.Name, url), os.DirFS(dir), goose.WithTableName("sluice_goose_version"))
			require.NoError(t, err)
			res, err := p.Up(ctx)
			require.NoError(t, err)
			require.NotEmpty(t, res)
			require.True(t, sluiceSees(t, url))
			_, err = p.DownTo(ctx, 0)
			require.NoError(t, err)
			require.False(t, sluiceSees(t, url))
			_, err = p.Up(ctx)
			require.NoError(t, err)
			require.True(t, sluiceSees(t, url), "up again after a full down")
		})

		t.Run(b.Name+"/golang-migrate", func(t *testing.T) {
			url := b.URL(t)
			dir := write(t, b.Name, "golang-migrate")
			db := openDB(t, b.Name, url)
			var drv gmdatabase.Driver
			var err error
			switch b.Name {
			case "postgres":
				drv, err = gmpgx.WithInstance(db, &gmpgx.Config{MigrationsTable: "sluice_schema_migrations"})
			case "mysql":
				drv, err = gmmysql.WithInstance(db, &gmmysql.Config{MigrationsTable: "sluice_schema_migrations"})
			default:
				drv, err = gmsqlite.WithInstance(db, &gmsqlite.Config{MigrationsTable: "sluice_schema_migrations"})
			}
			require.NoError(t, err)
			src, err := iofs.New(os.DirFS(dir), ".")
			require.NoError(t, err)
			m, err := migrate.NewWithInstance("iofs", src, b.Name, drv)
			require.NoError(t, err)
			require.NoError(t, m.Up())
			require.True(t, sluiceSees(t, url))
			require.NoError(t, m.Down())
			require.False(t, sluiceSees(t, url))
			require.NoError(t, m.Up())
			require.True(t, sluiceSees(t, url), "up again after a full down")
		})

		t.Run(b.Name+"/atlas", func(t *testing.T) {
			url := b.URL(t)
			dir := write(t, b.Name, "atlas")
			local, err := atlasmigrate.NewLocalDir(dir)
			require.NoError(t, err)
			require.NoError(t, atlasmigrate.Validate(local), "atlas.sum matches the files, as atlas computes it")
			db := openDB(t, b.Name, url)
			var drv atlasmigrate.Driver
			switch b.Name {
			case "postgres":
				drv, err = atlaspostgres.Open(db)
			case "mysql":
				drv, err = atlasmysql.Open(db)
			default:
				drv, err = atlassqlite.Open(db)
			}
			require.NoError(t, err)
			ex, err := atlasmigrate.NewExecutor(schemaScoped{drv}, local, &revisions{})
			require.NoError(t, err)
			require.NoError(t, ex.ExecuteN(ctx, 0))
			require.True(t, sluiceSees(t, url))
			// The directory checks out after a change too: atlas refuses
			// a file edited by hand.
			require.NoError(t, os.WriteFile(filepath.Join(dir, "00001_sluice_core.sql"), []byte("-- edited\n"), 0o644))
			require.ErrorIs(t, atlasmigrate.Validate(local), atlasmigrate.ErrChecksumMismatch)
		})
	}
}

// schemaScoped is atlas's driver for one fresh schema (database, on
// MySQL). Given a *sql.DB rather than a URL, atlas's clean check inspects
// every schema of the server, where other tests create and drop theirs at
// the same time; atlas's CLI scopes it to the URL's schema. The test's
// schema is new and empty, which is what the check would find.
type schemaScoped struct{ atlasmigrate.Driver }

func (schemaScoped) CheckClean(context.Context, *atlasmigrate.TableIdent) error { return nil }

// revisions keeps atlas's revisions in memory: the test needs no table
// of atlas's own.
type revisions struct {
	mu   sync.Mutex
	revs []*atlasmigrate.Revision
}

func (r *revisions) Ident() *atlasmigrate.TableIdent {
	return &atlasmigrate.TableIdent{Name: "atlas_schema_revisions"}
}

func (r *revisions) ReadRevisions(context.Context) ([]*atlasmigrate.Revision, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*atlasmigrate.Revision(nil), r.revs...), nil
}

func (r *revisions) ReadRevision(_ context.Context, v string) (*atlasmigrate.Revision, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rev := range r.revs {
		if rev.Version == v {
			return rev, nil
		}
	}
	return nil, atlasmigrate.ErrRevisionNotExist
}

func (r *revisions) WriteRevision(_ context.Context, rev *atlasmigrate.Revision) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, old := range r.revs {
		if old.Version == rev.Version {
			r.revs[i] = rev
			return nil
		}
	}
	r.revs = append(r.revs, rev)
	return nil
}

func (r *revisions) DeleteRevision(_ context.Context, v string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, rev := range r.revs {
		if rev.Version == v {
			r.revs = append(r.revs[:i], r.revs[i+1:]...)
			return nil
		}
	}
	return errors.New("no such revision")
}
