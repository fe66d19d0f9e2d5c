package sqlite

// SetWALSizeLimit sets the size the write-ahead log is truncated back to,
// for the DSNs built from then on, and returns a function that restores it.
func SetWALSizeLimit(n int64) (restore func()) {
	old := walSizeLimit
	walSizeLimit = n
	return func() { walSizeLimit = old }
}
