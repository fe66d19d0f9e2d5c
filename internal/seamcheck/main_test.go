package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A profile in which one driver method never ran is caught, and one in
// which every method ran passes.
func TestAMethodNoTestRanIsReported(t *testing.T) {
	root := t.TempDir()
	write := func(rel, body string) {
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("internal/engine/dialect.go", "package engine\n\ntype Dialect interface {\n\tName() string\n\tLockReady() string\n}\n\ntype IDStep interface{ IDStep() int64 }\n")
	write("internal/driver/x/x.go", "package x\n\ntype Dialect struct{}\n\nfunc (Dialect) Name() string {\n\treturn \"x\"\n}\n\nfunc (Dialect) LockReady() string {\n\treturn \"SELECT\"\n}\n\nfunc (Dialect) IDStep() int64 {\n\treturn 1\n}\n\nfunc (Dialect) helper() {}\n")
	prof := filepath.Join(root, "cover.out")
	pkg := module + "internal/driver/x/x.go"
	write("cover.out", "mode: atomic\n"+pkg+":5.30,7.2 1 3\n"+pkg+":9.35,11.2 1 0\n"+pkg+":13.32,15.2 1 2\n")
	missing, checked, err := check(prof, root)
	if err != nil {
		t.Fatal(err)
	}
	if checked != 3 || len(missing) != 1 || !strings.Contains(missing[0], "LockReady") {
		t.Fatalf("checked %d, missing %v; want 3 checked and LockReady missing", checked, missing)
	}
	write("cover.out", "mode: atomic\n"+pkg+":5.30,7.2 1 3\n"+pkg+":9.35,11.2 1 1\n"+pkg+":13.32,15.2 1 2\n")
	if missing, _, err = check(prof, root); err != nil || len(missing) != 0 {
		t.Fatalf("missing %v, err %v; want none", missing, err)
	}
}
