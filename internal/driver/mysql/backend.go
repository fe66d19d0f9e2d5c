package mysql

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"net/url"

	"github.com/sluicequeue/sluice/internal/engine"
)

// Backend is MySQL's and MariaDB's entry in the table of backends.
func Backend() engine.Backend {
	return engine.Backend{
		Name:    "mysql",
		Aliases: []string{"mariadb"},
		Schemes: []string{"mysql"},
		Dialect: Dialect{},
		Check: func(rawURL string) error {
			_, err := Config(rawURL)
			return err
		},
		Open:    Open,
		TestEnv: "SLUICE_TEST_MYSQL_URL",
		Scratch: scratch,
	}
}

// scratch creates a database of its own on the server at base and returns
// base naming it.
func scratch(ctx context.Context, base string) (string, func(context.Context) error, error) {
	cfg, err := Config(base)
	if err != nil {
		return "", nil, err
	}
	u, err := url.Parse(base)
	if err != nil {
		return "", nil, fmt.Errorf("mysql: parse the test server's URL: %w", err)
	}
	db, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		return "", nil, fmt.Errorf("mysql: %w", err)
	}
	defer db.Close()
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	name := "sluice_t_" + hex.EncodeToString(b)
	if _, err := db.ExecContext(ctx, "CREATE DATABASE "+name); err != nil {
		return "", nil, fmt.Errorf("mysql: test server unreachable or refused CREATE DATABASE: %w", err)
	}
	drop := func(ctx context.Context) error {
		db, err := sql.Open("mysql", cfg.FormatDSN())
		if err != nil {
			return err
		}
		defer db.Close()
		_, err = db.ExecContext(ctx, "DROP DATABASE IF EXISTS "+name)
		return err
	}
	u.Path = "/" + name
	return u.String(), drop, nil
}
