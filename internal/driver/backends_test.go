package driver_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/driver"
)

func TestEveryBackendIsFoundByNameAndByURL(t *testing.T) {
	urls := map[string][]string{
		"postgres": {"postgres://u@h/db", "postgresql://u@h/db"},
		"mysql":    {"mysql://root@h:3306/db", "MySQL://root@h/db"},
		"sqlite":   {"sqlite:x.db", "sqlite://x.db", "file:x.db", "x.db", "/var/lib/x.db", `C:\jobs\x.db`},
	}
	for _, b := range driver.Backends() {
		got, err := driver.ByName(b.Name)
		require.NoError(t, err)
		require.Equal(t, b.Name, got.Name)
		require.Equal(t, b.Name, b.Dialect.Name(), "the entry's dialect is its own")
		for _, a := range b.Aliases {
			got, err := driver.ByName(a)
			require.NoError(t, err, a)
			require.Equal(t, b.Name, got.Name, a)
		}
		require.NotEmpty(t, urls[b.Name], "a test URL for every backend")
		for _, u := range urls[b.Name] {
			got, err := driver.ForURL(u)
			require.NoError(t, err, u)
			require.Equal(t, b.Name, got.Name, u)
			require.NoError(t, got.Check(u), u)
		}
		require.NotNil(t, b.Open, b.Name)
		require.NotNil(t, b.Scratch, b.Name)
	}
	_, err := driver.ByName("oracle")
	require.ErrorContains(t, err, `unknown dialect "oracle"`)
	_, err = driver.ForURL("redis://localhost:6379")
	require.ErrorContains(t, err, `unknown database URL scheme "redis"`)
	require.ErrorContains(t, err, "postgres:")
}

// A PostgreSQL keyword/value connection string has no scheme: it was
// taken for a SQLite file path, and store.Open created a file of that
// name. It is refused, naming its keywords and never a value, with the
// URL form to use; plain paths, and sqlite:PATH for a file whose name
// looks like one, still pick SQLite.
func TestForURLRefusesAKeywordValueConnectionString(t *testing.T) {
	for _, s := range []string{
		"host=localhost user=app dbname=jobs sslmode=disable",
		"host=localhost user=app password=s3cret dbname=jobs",
		"dbname=jobs",
		" host = db  port=5432 ",
		`host=db password='a b\' c' user=app`,
		`host=db password=a\ b user=app`,
		"user=app application_name=worker connect_timeout=5",
		"hostaddr=127.0.0.1 port=5432 target_session_attrs=read-write",
		"host=/var/run/postgresql dbname=jobs",
		"host=db password=x:y@z dbname=jobs",
	} {
		_, err := driver.ForURL(s)
		require.Error(t, err, s)
		require.ErrorContains(t, err, "keyword/value connection string", s)
		require.ErrorContains(t, err, "postgres://user@host:5432/db", s)
		require.ErrorContains(t, err, "sqlite:PATH", s)
		for _, secret := range []string{"s3cret", "a b", `a\ b`, "x:y@z"} {
			require.NotContains(t, err.Error(), secret, s)
		}
	}
	for _, s := range []string{
		"./jobs.db", "/var/lib/app/sluice.db", `C:\x\y.db`, "sqlite:host=x.db",
		"sqlite:host=db user=app", "jobs v2.db", "a=b.db", "./host=x.db",
		"/srv/host=db user=app", "x=1 y=2", "host=db 'unclosed",
		"host=x.db?synchronous=normal extra",
	} {
		b, err := driver.ForURL(s)
		require.NoError(t, err, s)
		require.Equal(t, "sqlite", b.Name, s)
	}
}

// A go-sql-driver/mysql DSN has no scheme either: it is refused with the
// URL to write instead of being opened as a SQLite file of that name, and
// the error does not show the password.
func TestForURLRefusesAMySQLDriverDSN(t *testing.T) {
	for _, s := range []string{
		"root@tcp(127.0.0.1:3306)/test",
		"app:s3cret@tcp(db.internal:3306)/jobs?parseTime=true",
		"app:s3cret@tcp6([::1]:3306)/jobs",
		"app@unix(/run/mysqld/mysqld.sock)/jobs",
		"app:s3cret@/jobs",
	} {
		_, err := driver.ForURL(s)
		require.Error(t, err, s)
		require.ErrorContains(t, err, "go-sql-driver/mysql DSN", s)
		require.ErrorContains(t, err, "mysql://user:password@host:3306/db", s)
		require.NotContains(t, err.Error(), "s3cret", s)
	}
	for _, s := range []string{"./jobs@2024.db", "/srv/app@host/jobs.db", "backup (1).db", "a@b.db"} {
		b, err := driver.ForURL(s)
		require.NoError(t, err, s)
		require.Equal(t, "sqlite", b.Name, s)
	}
}
