package postgres

import (
	"strings"
	"testing"
)

func TestURLParametersTurnOffNotifyAndTheAdvisoryLock(t *testing.T) {
	u, d, err := options("postgres://u:pw@h/db?sslmode=disable&sluice_notify=off&sluice_advisory_lock=false")
	if err != nil {
		t.Fatal(err)
	}
	if !d.NoNotify || !d.NoAdvisoryLock {
		t.Fatalf("dialect %+v: both should be off", d)
	}
	if strings.Contains(u, "sluice_") || !strings.Contains(u, "sslmode=disable") {
		t.Fatalf("%s: sluice's parameters must go, pgx's stay", u)
	}
	if _, err := config(u); err != nil {
		t.Fatalf("pgx refuses what is left: %v", err)
	}
	_, d, err = options("postgres://h/db?sluice_notify=on")
	if err != nil || d.NoNotify || d.NoAdvisoryLock {
		t.Fatalf("on keeps them: %+v, %v", d, err)
	}
	if _, _, err := options("postgres://h/db?sluice_notify=maybe"); err == nil || !strings.Contains(err.Error(), "sluice_notify") {
		t.Fatalf("a bad value is refused, naming the parameter: %v", err)
	}
	if u, d, err := options("host=h dbname=db"); err != nil || u != "host=h dbname=db" || d.NoNotify {
		t.Fatalf("a keyword=value string passes as it is: %q %+v %v", u, d, err)
	}
}

// The URL is passed on as written, sluice's parameters taken out: pgx
// reads a URL as libpq does, where + is a plus and a space is %20, so
// re-encoding the query (which writes a space as +) made
// options=-c%20statement_timeout%3D5s a parameter named
// "+statement_timeout", refused by the server at connect.
func TestURLParametersKeepTheirEncoding(t *testing.T) {
	for in, want := range map[string]string{
		"postgres://h/db?options=-c%20statement_timeout%3D5s&sluice_notify=off": "postgres://h/db?options=-c%20statement_timeout%3D5s",
		"postgres://h/db?sluice_notify=off&application_name=a+b%20c":            "postgres://h/db?application_name=a+b%20c",
		"postgres://h/db?sluice_notify=off":                                     "postgres://h/db",
		"postgres://h/db?options=-c%20a%3Db":                                    "postgres://h/db?options=-c%20a%3Db",
		"postgres://h/db":                                                       "postgres://h/db",
	} {
		got, _, err := options(in)
		if err != nil || got != want {
			t.Errorf("options(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	cfg, err := config("postgres://h/db?options=-c%20statement_timeout%3D5s")
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.ConnConfig.RuntimeParams["options"]; got != "-c statement_timeout=5s" {
		t.Fatalf("pgx reads options as %q", got)
	}
}
