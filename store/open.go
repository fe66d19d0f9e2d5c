package store

import (
	"context"
	"fmt"

	"github.com/sluicequeue/sluice/internal/driver"
	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/store/dburl"
)

// Open connects to the database rawURL names:
//
//	postgres://user@host:5432/db   PostgreSQL (pgx parameters apply)
//	mysql://user:pass@host:3306/db MySQL 8 or MariaDB 10.6+
//	sqlite:PATH or a file path     SQLite; ?synchronous=normal trades
//	                               durability on power loss for speed
//
// A sqlite: (or file:) URL is a URL: its path is percent-decoded, so
// sqlite:///var/lib/a%20b.db and sqlite:a%20b.db name "a b.db", a '%' of
// the file name is written %25 (a bad escape such as %zz is refused) and
// a '#' is written %23. A file path without a scheme is the file's name as
// it is, '%' included; one that holds ':' needs sqlite:. A string with no
// scheme that reads as a PostgreSQL keyword/value connection string
// ("host=db user=app dbname=jobs") is refused, not taken for a file name:
// write it as postgres://user@host:5432/db.
//
// It does not migrate (see MigrateUp). Its errors never show the URL's
// password. A MySQL URL whose charset is not utf8mb4 (or whose collation
// is not one of utf8mb4's) is refused: sluice writes job args into the
// statements' text, safely only in utf8mb4. A MySQL URL that turns out
// to name a TiDB server is refused:
// TiDB ignores FOR UPDATE when SKIP LOCKED is given, so two workers would
// run the same job.
func Open(ctx context.Context, rawURL string, opts ...Option) (*Store, error) {
	b, err := check(rawURL)
	if err != nil {
		return nil, err
	}
	e, err := b.Open(ctx, rawURL)
	if err != nil {
		return nil, dburl.RedactError(err, rawURL)
	}
	return wrap(e, opts), nil
}

// check finds rawURL's backend and checks the URL, without connecting.
func check(rawURL string) (engine.Backend, error) {
	b, err := driver.ForURL(rawURL)
	if err != nil {
		return b, dburl.RedactError(err, rawURL)
	}
	if err := b.Check(rawURL); err != nil {
		return b, dburl.RedactError(fmt.Errorf("%w (in %s)", err, dburl.Redact(rawURL)), rawURL)
	}
	return b, nil
}

// Option changes how a store behaves; pass options to Open.
type Option func(*engine.Store)

// DeleteOnComplete deletes jobs when they complete instead of keeping them
// as completed rows for the cleaner to delete after the retention. Failed
// and cancelled jobs are kept either way.
func DeleteOnComplete() Option {
	return func(e *engine.Store) { e.DeleteOnComplete = true }
}

// wrap returns the public store around e, with opts applied.
func wrap(e *engine.Store, opts []Option) *Store {
	for _, o := range opts {
		o(e)
	}
	return &Store{e: e}
}
