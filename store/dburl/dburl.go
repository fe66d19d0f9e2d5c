// Package dburl handles database URLs as text: the default one, and
// masking the password in a URL and in errors that may quote it. Opening
// a URL is store.Open.
package dburl

// Default is the URL used when none is given: the embedded SQLite file.
const Default = "sqlite:sluice.db"
