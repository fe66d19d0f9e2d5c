package cli_test

import (
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// migrate sql --format writes each tool's layout; internal/migrationtools
// applies the files with the tools themselves.
func TestMigrateSQLWritesEachToolsLayout(t *testing.T) {
	for _, dialect := range []string{"postgres", "mysql", "sqlite"} {
		code, plain, _ := run(t, "migrate", "sql", "--dialect", dialect)
		require.Equal(t, 0, code)
		versions := strings.Count(plain, "INSERT INTO sluice_migrations")
		require.GreaterOrEqual(t, versions, 10)
		for _, format := range []string{"goose", "golang-migrate", "atlas"} {
			dir := filepath.Join(t.TempDir(), "out")
			code, out, stderr := run(t, "migrate", "sql", "--dialect", dialect, "--format", format, "--out", dir)
			require.Equal(t, 0, code, stderr)
			entries, err := os.ReadDir(dir)
			require.NoError(t, err)
			var names []string
			for _, e := range entries {
				names = append(names, e.Name())
				require.Contains(t, out, "wrote "+filepath.Join(dir, e.Name())+"\n")
			}
			sort.Strings(names)
			read := func(name string) string {
				b, err := os.ReadFile(filepath.Join(dir, name))
				require.NoError(t, err)
				return string(b)
			}
			switch format {
			case "goose":
				require.Len(t, names, versions)
				require.Equal(t, "00001_sluice_core.sql", names[0])
				body := read(names[0])
				up, down := strings.Index(body, "\n-- +goose Up\n"), strings.Index(body, "\n-- +goose Down\n")
				require.True(t, up > 0 && down > up, body)
				require.Contains(t, body[up:down], "CREATE TABLE IF NOT EXISTS sluice_migrations")
				require.Contains(t, body[up:down], "INSERT INTO sluice_migrations (version, name, applied_at) VALUES (1, 'core', 0);")
				require.Contains(t, body[down:], "DELETE FROM sluice_migrations WHERE version = 1;")
				require.NotContains(t, read(names[1]), "CREATE TABLE IF NOT EXISTS sluice_migrations")
			case "golang-migrate":
				require.Len(t, names, 2*versions)
				require.Equal(t, []string{"00001_sluice_core.down.sql", "00001_sluice_core.up.sql"}, names[:2])
				require.Contains(t, read(names[1]), "INSERT INTO sluice_migrations (version, name, applied_at) VALUES (1, 'core', 0);")
				require.Contains(t, read(names[0]), "DELETE FROM sluice_migrations WHERE version = 1;")
				require.NotContains(t, read(names[0]), "+goose")
			case "atlas":
				require.Len(t, names, versions+1)
				require.Equal(t, "00001_sluice_core.sql", names[0])
				require.Equal(t, "atlas.sum", names[len(names)-1])
				sum := strings.Split(strings.TrimSpace(read("atlas.sum")), "\n")
				require.Len(t, sum, versions+1)
				require.Regexp(t, `^h1:[A-Za-z0-9+/=]{44}$`, sum[0])
				require.Regexp(t, `^00001_sluice_core.sql h1:[A-Za-z0-9+/=]{44}$`, sum[1])
				require.NotContains(t, read(names[0]), "DELETE FROM sluice_migrations", "atlas plans its own downs")
			}
		}
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--format", "goose"}, "--format goose writes files: say where with --out DIR"},
		{[]string{"--out", "x"}, "--out writes a tool's files: say which with --format"},
		{[]string{"--format", "flyway", "--out", t.TempDir()}, `unknown --format "flyway": use plain, goose, golang-migrate or atlas`},
		{[]string{"--format", "atlas", "--out", t.TempDir(), "--down"}, "--down is for the plain format"},
	} {
		code, _, stderr := run(t, append([]string{"migrate", "sql", "--dialect", "postgres"}, c.args...)...)
		require.Equal(t, 2, code, "%v", c.args)
		require.Contains(t, stderr, c.want)
	}
}
