// Command seamcheck checks that the test suite exercised the whole seam
// between the engine and the databases: each method a driver's Dialect
// implements of engine.Dialect (and of the optional interfaces declared
// beside it), on every backend, and each statement of the engine's
// catalog (a method of engine.SQL), according to a coverage profile of the
// drivers and the engine written by the suite.
//
//	go test -coverpkg=./internal/driver/...,./internal/engine -coverprofile=seam.out ./...
//	go run ./internal/seamcheck seam.out
//
// .ci/run does both: with CI set, the suite runs on every backend, so a
// statement of the seam that no behaviour test runs on some database
// fails the build.
package main

import (
	"bufio"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

const module = "github.com/sluicequeue/sluice/"

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: seamcheck COVERPROFILE")
		os.Exit(2)
	}
	missing, checked, err := check(os.Args[1], ".")
	if err != nil {
		fmt.Fprintln(os.Stderr, "seamcheck:", err)
		os.Exit(2)
	}
	for _, m := range missing {
		fmt.Println("not exercised by any test:", m)
	}
	if len(missing) > 0 {
		fmt.Printf("seamcheck: %d of %d methods of the seam were never run\n", len(missing), checked)
		os.Exit(1)
	}
	fmt.Printf("seamcheck: all %d methods of the seam ran, on every backend\n", checked)
}

// check returns the driver methods of the seam that the profile shows
// never ran, and how many it checked.
func check(profile, root string) ([]string, int, error) {
	seam, err := seamMethods(filepath.Join(root, "internal/engine"))
	if err != nil {
		return nil, 0, err
	}
	covered, err := readProfile(profile)
	if err != nil {
		return nil, 0, err
	}
	drivers, err := filepath.Glob(filepath.Join(root, "internal/driver/*"))
	if err != nil {
		return nil, 0, err
	}
	var missing []string
	checked := 0
	for _, dir := range drivers {
		if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
			continue
		}
		methods, err := dialectMethods(dir)
		if err != nil {
			return nil, 0, err
		}
		if len(methods) == 0 {
			continue
		}
		pkg := module + filepath.ToSlash(filepath.Join("internal/driver", filepath.Base(dir)))
		for _, m := range methods {
			if !seam[m.name] {
				continue
			}
			checked++
			if !covered.ran(pkg+"/"+m.file, m.from, m.to) {
				missing = append(missing, fmt.Sprintf("%s Dialect.%s (%s:%d)", filepath.Base(dir), m.name, m.file, m.from))
			}
		}
	}
	// The catalog's statements: written once, rendered for every backend
	// (a test renders each for each), run through engine.SQL's methods.
	catalog, err := methodsOf(filepath.Join(root, "internal/engine"), "SQL", "queries")
	if err != nil {
		return nil, 0, err
	}
	for _, m := range catalog {
		checked++
		if !covered.ran(module+"internal/engine/"+m.file, m.from, m.to) {
			missing = append(missing, fmt.Sprintf("catalog SQL.%s (%s:%d)", m.name, m.file, m.from))
		}
	}
	sort.Strings(missing)
	if checked == 0 {
		return nil, 0, fmt.Errorf("found no Dialect methods under %s", filepath.Join(root, "internal/driver"))
	}
	return missing, checked, nil
}

// seamMethods returns the names of the methods of the interfaces the
// engine declares (Dialect, and the optional ones a dialect may add:
// the dashboard's reads, MySQL's id step, …).
func seamMethods(dir string) (map[string]bool, error) {
	_, files, err := parseFiles(dir, "")
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, f := range files {
		ast.Inspect(f, func(n ast.Node) bool {
			if it, ok := n.(*ast.InterfaceType); ok {
				for _, m := range it.Methods.List {
					for _, name := range m.Names {
						out[name.Name] = true
					}
				}
			}
			return true
		})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no interface methods in %s", dir)
	}
	return out, nil
}

type method struct {
	name, file string
	from, to   int
}

// dialectMethods returns the methods declared on the type Dialect in dir.
func dialectMethods(dir string) ([]method, error) { return methodsOf(dir, "Dialect", "") }

// methodsOf returns the exported methods declared on the type recv (or
// *recv) in the files of dir whose names start with prefix.
func methodsOf(dir, recv, prefix string) ([]method, error) {
	fset, files, err := parseFiles(dir, prefix)
	if err != nil {
		return nil, err
	}
	var out []method
	{
		for name, f := range files {
			for _, d := range f.Decls {
				fd, ok := d.(*ast.FuncDecl)
				if !ok || fd.Recv == nil || len(fd.Recv.List) != 1 || fd.Body == nil {
					continue
				}
				t := fd.Recv.List[0].Type
				if st, ok := t.(*ast.StarExpr); ok {
					t = st.X
				}
				if id, ok := t.(*ast.Ident); !ok || id.Name != recv || !fd.Name.IsExported() {
					continue
				}
				out = append(out, method{
					name: fd.Name.Name, file: filepath.Base(name),
					from: fset.Position(fd.Body.Lbrace).Line, to: fset.Position(fd.Body.Rbrace).Line,
				})
			}
		}
	}
	return out, nil
}

// profile holds, per file, the line ranges of blocks that ran.
type profile map[string][][2]int

// ran reports whether any block of file between lines from and to ran.
func (p profile) ran(file string, from, to int) bool {
	for _, b := range p[file] {
		if b[0] <= to && b[1] >= from {
			return true
		}
	}
	return false
}

// readProfile reads a coverage profile ("file:l.c,l.c stmts count").
func readProfile(path string) (profile, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	p := profile{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "mode:") || line == "" {
			continue
		}
		file, rest, ok := strings.Cut(line, ":")
		fields := strings.Fields(rest)
		if !ok || len(fields) != 3 {
			return nil, fmt.Errorf("%s: malformed line %q", path, line)
		}
		if n, err := strconv.Atoi(fields[2]); err != nil || n == 0 {
			continue
		}
		start, end, _ := strings.Cut(fields[0], ",")
		l1, _, _ := strings.Cut(start, ".")
		l2, _, _ := strings.Cut(end, ".")
		a, err1 := strconv.Atoi(l1)
		b, err2 := strconv.Atoi(l2)
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("%s: malformed block %q", path, fields[0])
		}
		p[file] = append(p[file], [2]int{a, b})
	}
	return p, sc.Err()
}

// parseFiles parses the Go files of dir (tests left out) whose names
// start with prefix, by name.
func parseFiles(dir, prefix string) (*token.FileSet, map[string]*ast.File, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, nil, err
	}
	fset := token.NewFileSet()
	files := map[string]*ast.File{}
	for _, e := range entries {
		n := e.Name()
		if e.IsDir() || !strings.HasSuffix(n, ".go") || strings.HasSuffix(n, "_test.go") || !strings.HasPrefix(n, prefix) {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, n), nil, 0)
		if err != nil {
			return nil, nil, err
		}
		files[n] = f
	}
	return fset, files, nil
}
