package postgres

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/sluicequeue/sluice/internal/engine"
)

// Backend is PostgreSQL's entry in the table of backends.
func Backend() engine.Backend {
	return engine.Backend{
		Name:    "postgres",
		Aliases: []string{"postgresql"},
		Schemes: []string{"postgres", "postgresql"},
		Dialect: Dialect{},
		Check: func(rawURL string) error {
			u, _, err := options(rawURL)
			if err == nil {
				_, err = config(u)
			}
			return err
		},
		Open:    Open,
		TestEnv: "SLUICE_TEST_POSTGRES_URL",
		Scratch: scratch,
	}
}

// scratch creates a schema of its own on the server at base and returns
// base with search_path set to it.
func scratch(ctx context.Context, base string) (string, func(context.Context) error, error) {
	u, err := url.Parse(base)
	if err != nil {
		return "", nil, fmt.Errorf("postgres: parse the test server's URL: %w", err)
	}
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		return "", nil, fmt.Errorf("postgres: test server unreachable: %w", err)
	}
	defer conn.Close(context.Background())
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	schema := "sluice_t_" + hex.EncodeToString(b)
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		return "", nil, fmt.Errorf("postgres: create schema: %w", err)
	}
	drop := func(ctx context.Context) error {
		c, err := pgx.Connect(ctx, base)
		if err != nil {
			return err
		}
		defer c.Close(ctx)
		_, err = c.Exec(ctx, "DROP SCHEMA "+schema+" CASCADE")
		return err
	}
	// Appended to the URL as written: re-encoding its query would turn
	// a %20 into a +, which pgx, as libpq, does not read as a space.
	sep := "?"
	if u.RawQuery != "" || strings.HasSuffix(base, "?") {
		sep = "&"
	}
	return base + sep + "search_path=" + schema, drop, nil
}
