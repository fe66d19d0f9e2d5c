// Package dburl handles database URLs as text: the default one, the file
// a SQLite URL names, and masking the password in a URL and in errors
// that may quote it. Opening a URL is store.Open.
package dburl

import (
	"github.com/sluicequeue/sluice/internal/driver"
	"github.com/sluicequeue/sluice/internal/driver/sqlite"
)

// Default is the URL used when none is given: the embedded SQLite file.
const Default = "sqlite:sluice.db"

// SQLitePath returns the file a SQLite URL names (a sqlite: URL's path
// percent-decoded, a bare path as it is), and false for any other URL (or
// one that does not parse).
func SQLitePath(rawURL string) (string, bool) {
	b, err := driver.ForURL(rawURL)
	if err != nil || b.Name != "sqlite" {
		return "", false
	}
	path, err := sqlite.Path(rawURL)
	return path, err == nil
}
