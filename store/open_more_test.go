package store_test

import (
	"context"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicequeue/sluice/internal/testdb"
	"github.com/sluicequeue/sluice/store"
)

// README: on MySQL "the driver's DSN parameters apply". They (tls, timeout,
// charset) were sent to the server as session variables, which it
// refused, so none could be set from a mysql:// URL.
func TestOpenMySQLTakesTheDriversParameters(t *testing.T) {
	for _, b := range testdb.Backends(t) {
		if b.Name != "mysql" {
			continue
		}
		base := b.URL(t)
		for _, p := range []string{"tls=false", "timeout=5s", "charset=utf8mb4"} {
			u, err := url.Parse(base)
			if err != nil {
				t.Fatal(err)
			}
			u.RawQuery = p
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			s, err := store.Open(ctx, u.String())
			cancel()
			if err != nil {
				t.Errorf("Open with ?%s: %v", p, err)
				continue
			}
			_ = s.Close()
		}
	}
}

// An IPv6 host without a port gets the default port as a host name does
// (mysql://root@localhost/test opens on 3306); its address was bracketed
// twice ("[[::1]]:3306") and never dialled.
func TestOpenMySQLIPv6HostWithoutAPort(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	_, err := store.Open(ctx, "mysql://root@[::1]/test")
	if err != nil && (strings.Contains(err.Error(), "[[::1]]") || strings.Contains(err.Error(), "missing port")) {
		t.Fatalf("IPv6 host without port: %v", err)
	}
}

// README: "`sqlite:PATH` or a file path (one that holds `:` needs the
// `sqlite:`)": the error for a path read as an unknown scheme says so.
func TestAFilePathHoldingAColonIsOpenedWithSQLitePrefix(t *testing.T) {
	t.Chdir(t.TempDir())
	_, err := store.Open(context.Background(), "backup-10:30.db")
	if err == nil || !strings.Contains(err.Error(), "sqlite:PATH for a path that holds") {
		t.Fatalf("Open a relative file path with ':': %v", err)
	}
	s, err := store.Open(context.Background(), "sqlite:backup-10:30.db")
	if err != nil {
		t.Fatalf("Open sqlite:backup-10:30.db: %v", err)
	}
	_ = s.Close()
}

// Promises that held: Open's "errors never show the URL's password", for
// passwords holding '@', '%', '"', spaces, bad escapes, and URLs that fail
// to parse or to connect (nothing listens on port 1).
func TestOpenErrorsNeverShowThePassword(t *testing.T) {
	for raw, secrets := range map[string][]string{
		"mysql://root:p%40ss%25w0rd@127.0.0.1:1/test":                          {"p%40ss%25w0rd", "p@ss%w0rd"},
		"mysql://root:s3cr@t@127.0.0.1:1/test":                                 {"s3cr@t"},
		`mysql://root:s3"cret@127.0.0.1:1/test`:                                {`s3"cret`, `s3\"cret`},
		"mysql://root:s3cret%zz@127.0.0.1:1/test":                              {"s3cret"},
		"mysql://root:s3 cret@127.0.0.1:1/test":                                {"s3 cret"},
		"postgres://postgres:p%40ss%25w0rd@127.0.0.1:1/test":                   {"p%40ss%25w0rd", "p@ss%w0rd"},
		"postgres://postgres:s3cr@t@127.0.0.1:1/test":                          {"s3cr@t"},
		`postgres://postgres:s3"cret@127.0.0.1:1/test`:                         {`s3"cret`, `s3\"cret`},
		"postgres://postgres:s3cret%zz@127.0.0.1:1/test":                       {"s3cret"},
		"postgres://postgres:s3 cret@127.0.0.1:1/test":                         {"s3 cret"},
		"postgres://postgres:s3cret@127.0.0.1:1/test?sslmode=bogus":            {"s3cret"},
		"postgres://postgres:s3cret@127.0.0.1:1/test?connect_timeout=s3cretxx": {"s3cret"},
		"postgres:///test?host=/nonexistent&password=s3cret":                   {"s3cret"},
		"postgres://postgres:s3cret@127.0.0.1:1/test?sluice_notify=s3cret":     {"s3cret"},
		"postgres://postgres:s3cret@[::1/test":                                 {"s3cret"},
		"mysql://root:s3cret@host:notaport/db":                                 {"s3cret"},
		"sqlite:" + filepath.Join("/nonexistent", "x.db") + "?password=s3cret": {"s3cret"},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		s, err := store.Open(ctx, raw)
		cancel()
		if err == nil {
			_ = s.Close()
			t.Errorf("%q opened", raw)
			continue
		}
		for _, sec := range secrets {
			if strings.Contains(err.Error(), sec) {
				t.Errorf("Open(%q) error shows the password: %v", raw, err)
			}
		}
	}
}

// operations.md: a MySQL URL's charset must be utf8mb4 and its collation
// one of utf8mb4's, or the store refuses it, naming the parameter and what
// to write, before it connects (here to a port nothing listens on), and
// without the password.
func TestOpenMySQLRefusesACharsetOtherThanUTF8MB4BeforeConnecting(t *testing.T) {
	for param, want := range map[string]string{
		"charset=gbk":  `URL parameter charset is "gbk"; sluice needs utf8mb4`,
		"charset=utf8": `URL parameter charset is "utf8"; sluice needs utf8mb4`,
		"charset=latin1&collation=latin1_swedish_ci":        `URL parameter charset is "latin1"`,
		"collation=gbk_chinese_ci":                          `URL parameter collation is "gbk_chinese_ci", not a collation of utf8mb4`,
		"interpolateParams=true&collation=sjis_japanese_ci": `URL parameter collation is "sjis_japanese_ci"`,
	} {
		_, err := store.Open(context.Background(), "mysql://root:s3cret@127.0.0.1:1/test?"+param)
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "utf8mb4") || strings.Contains(err.Error(), "s3cret") {
			t.Errorf("Open with ?%s: %v, want %q", param, err, want)
		}
	}
}
