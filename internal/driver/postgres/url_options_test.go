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
