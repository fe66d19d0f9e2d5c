package engine

import "context"

// Backend is one database sluice runs on: the URLs it opens, how it opens
// them, and how a test gets a scratch database on it. The table of them is
// internal/driver.Backends; package store, the CLI, the bench and the
// tests find a backend there and nowhere else, so a new database is one
// new entry.
type Backend struct {
	// Name is the backend's name ("postgres", "mysql", "sqlite"), as
	// `migrate sql --dialect` and test names use it.
	Name string
	// Aliases are other names for it ("postgresql", "mariadb").
	Aliases []string
	// Schemes are the URL schemes it opens; "" stands for a bare path.
	Schemes []string
	// Dialect is its SQL, for printing migrations without connecting.
	Dialect Dialect
	// Check reports what is wrong with a URL, without connecting.
	Check func(rawURL string) error
	// Open connects to the database rawURL names. It does not migrate.
	Open func(ctx context.Context, rawURL string) (*Store, error)
	// TestEnv names the environment variable that points tests at a
	// server of this kind; empty when the backend needs no server.
	TestEnv string
	// Scratch creates a fresh, empty database on the server at base (for
	// a backend without a server, in the directory base) and returns its
	// URL and a function that drops it.
	Scratch func(ctx context.Context, base string) (rawURL string, drop func(context.Context) error, err error)
}
