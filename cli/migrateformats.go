package cli

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/sluicequeue/sluice/internal/engine"
)

// Migration tool formats of `migrate sql --format`.
const (
	formatGoose         = "goose"
	formatGolangMigrate = "golang-migrate"
	formatAtlas         = "atlas"
)

// file is one file to write.
type file struct {
	name string
	body string
}

// recordSQL records m as applied in sluice_migrations, which sluice reads
// to know the schema is current however the migration was run.
func recordSQL(m engine.Migration) string {
	return fmt.Sprintf("INSERT INTO sluice_migrations (version, name, applied_at) VALUES (%d, '%s', 0)", m.Version, m.Name)
}

// forgetSQL records m as reverted.
func forgetSQL(m engine.Migration) string {
	return fmt.Sprintf("DELETE FROM sluice_migrations WHERE version = %d", m.Version)
}

// upSQL is m's up migration as a tool runs it: the first also creates
// sluice_migrations, and each records itself there.
func upSQL(d engine.Dialect, m engine.Migration, first bool) string {
	var b strings.Builder
	if first {
		fmt.Fprintf(&b, "%s;\n", engine.MustSQL(d).CreateMigrationsTable())
	}
	fmt.Fprintf(&b, "%s\n%s;\n", strings.TrimSpace(m.Up), recordSQL(m))
	return b.String()
}

// downSQL is m's down migration as a tool runs it.
func downSQL(m engine.Migration) string {
	return fmt.Sprintf("%s\n%s;\n", strings.TrimSpace(m.Down), forgetSQL(m))
}

// toolFiles lays out the migrations as format's tool reads them, one
// version per sluice migration, with sluice's numbers:
//
//	goose           00001_sluice_core.sql with -- +goose Up / -- +goose Down
//	golang-migrate  00001_sluice_core.up.sql and 00001_sluice_core.down.sql
//	atlas           00001_sluice_core.sql (up only: atlas plans its own
//	                downs) and atlas.sum, the directory's checksums
func toolFiles(format string, d engine.Dialect, ms []engine.Migration, program string) ([]file, error) {
	header := func(m engine.Migration, what string) string {
		return fmt.Sprintf("-- sluice migration %03d_%s for %s (%s), written by `%s migrate sql --dialect %s --format %s`.\n"+
			"-- Apply sluice's migrations in their own directory and version table; do not edit them.\n",
			m.Version, m.Name, d.Name(), what, program, d.Name(), format)
	}
	var out []file
	for i, m := range ms {
		base := fmt.Sprintf("%05d_sluice_%s", m.Version, m.Name)
		switch format {
		case formatGoose:
			out = append(out, file{base + ".sql", header(m, "up and down") +
				"\n-- +goose Up\n" + upSQL(d, m, i == 0) + "\n-- +goose Down\n" + downSQL(m)})
		case formatGolangMigrate:
			out = append(out,
				file{base + ".up.sql", header(m, "up") + upSQL(d, m, i == 0)},
				file{base + ".down.sql", header(m, "down") + downSQL(m)})
		case formatAtlas:
			out = append(out, file{base + ".sql", header(m, "up") + upSQL(d, m, i == 0)})
		default:
			return nil, Usagef("unknown --format %q: use plain, goose, golang-migrate or atlas", format)
		}
	}
	if format == formatAtlas {
		out = append(out, file{"atlas.sum", atlasSum(out)})
	}
	return out, nil
}

// atlasSum is atlas's integrity file over files, in order: a hash of each
// file chained over the names and contents before it, and a hash of them
// all (atlas's migrate.HashFile).
func atlasSum(files []file) string {
	chain := sha256.New()
	var lines bytes.Buffer
	all := sha256.New()
	for _, f := range files {
		chain.Write([]byte(f.name))
		chain.Write([]byte(f.body))
		h := base64.StdEncoding.EncodeToString(chain.Sum(nil))
		fmt.Fprintf(&lines, "%s h1:%s\n", f.name, h)
		all.Write([]byte(f.name))
		all.Write([]byte(h))
	}
	return "h1:" + base64.StdEncoding.EncodeToString(all.Sum(nil)) + "\n" + lines.String()
}

// writeFiles writes files into dir, creating it, and names each.
func writeFiles(env *Env, dir string, files []file) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, f := range files {
		path := filepath.Join(dir, f.name)
		if err := os.WriteFile(path, []byte(f.body), 0o644); err != nil {
			return err
		}
		fmt.Fprintf(env.Stdout, "wrote %s\n", path)
	}
	return nil
}
