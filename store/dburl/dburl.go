// Package dburl opens the store a database URL names, linking all three
// drivers. Programs that use one database can import its store package
// directly instead.
package dburl

import (
	"context"
	"fmt"
	"net/url"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicequeue/sluice/store"
	"github.com/sluicequeue/sluice/store/mysql"
	"github.com/sluicequeue/sluice/store/postgres"
	"github.com/sluicequeue/sluice/store/sqlite"
)

// Default is the URL used when none is given: the embedded SQLite file.
const Default = "sqlite:sluice.db"

// Open opens the store rawURL names:
//
//	postgres://user@host:5432/db   PostgreSQL (pgx parameters apply)
//	mysql://user:pass@host:3306/db MySQL 8 or MariaDB 10.6+
//	sqlite:PATH or a file path     SQLite; ?synchronous=normal trades
//	                               durability on power loss for speed
//
// It does not migrate. Its errors never show the URL's password (see
// Redact).
func Open(ctx context.Context, rawURL string) (*store.Store, error) {
	open, err := parse(rawURL)
	if err != nil {
		return nil, RedactError(err, rawURL)
	}
	s, err := open(ctx)
	if err != nil {
		return nil, RedactError(err, rawURL)
	}
	return s, nil
}

// parse checks rawURL without connecting and returns how to open it.
func parse(rawURL string) (func(context.Context) (*store.Store, error), error) {
	scheme, rest := split(rawURL)
	switch scheme {
	case "postgres", "postgresql":
		if _, err := pgxpool.ParseConfig(rawURL); err != nil {
			// postgres.Open fails as it parses, without connecting, and
			// its error leaves out the URL.
			_, err = postgres.Open(context.Background(), rawURL)
			return nil, fmt.Errorf("%w (in %s)", err, Redact(rawURL))
		}
		return func(ctx context.Context) (*store.Store, error) { return postgres.Open(ctx, rawURL) }, nil
	case "mysql":
		if _, err := mysql.Config(rawURL); err != nil {
			return nil, fmt.Errorf("%w (in %s)", err, Redact(rawURL))
		}
		return func(ctx context.Context) (*store.Store, error) { return mysql.Open(ctx, rawURL) }, nil
	case "sqlite", "file", "":
		path, opts, err := sqliteOptions(rest)
		if err != nil {
			return nil, err
		}
		return func(ctx context.Context) (*store.Store, error) { return sqlite.Open(ctx, path, opts) }, nil
	}
	return nil, fmt.Errorf("unknown database URL scheme %q: use postgres://…, mysql://… or sqlite:PATH", scheme)
}

// split returns the URL's scheme (empty for a plain path) and the rest.
func split(rawURL string) (scheme, rest string) {
	i := strings.Index(rawURL, ":")
	if i <= 1 { // no scheme, or a Windows drive letter
		return "", rawURL
	}
	scheme = strings.ToLower(rawURL[:i])
	for _, r := range scheme {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '+' || r == '-' || r == '.') {
			return "", rawURL
		}
	}
	return scheme, strings.TrimPrefix(rawURL[i+1:], "//")
}

func sqliteOptions(rest string) (string, sqlite.Options, error) {
	path, query, _ := strings.Cut(rest, "?")
	var opts sqlite.Options
	if path == "" {
		return "", opts, fmt.Errorf("sqlite: the URL names no file (sqlite:PATH)")
	}
	q, err := url.ParseQuery(query)
	if err != nil {
		return "", opts, fmt.Errorf("sqlite: %w", err)
	}
	for k := range q {
		switch k {
		case "synchronous":
			opts.Synchronous = q.Get(k)
		default:
			return "", opts, fmt.Errorf("sqlite: unknown URL parameter %q (known: synchronous)", k)
		}
	}
	return path, opts, nil
}

// Dialect returns a dialect by name ("postgres", "mysql" or "sqlite"),
// without connecting: for printing its migrations.
func Dialect(name string) (store.Dialect, error) {
	switch strings.ToLower(name) {
	case "postgres", "postgresql":
		return postgres.Dialect{}, nil
	case "mysql", "mariadb":
		return mysql.Dialect{}, nil
	case "sqlite":
		return sqlite.Dialect{}, nil
	}
	return nil, fmt.Errorf("unknown dialect %q: use postgres, mysql or sqlite", name)
}

// SQLitePath returns the file a SQLite URL names, and false for any other
// URL (or one that does not parse).
func SQLitePath(rawURL string) (string, bool) {
	scheme, rest := split(rawURL)
	switch scheme {
	case "sqlite", "file", "":
		path, _, err := sqliteOptions(rest)
		return path, err == nil
	}
	return "", false
}
