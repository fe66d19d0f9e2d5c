package engine

// DataErrorer is implemented by dialects that can tell an error about the
// data a statement carried (a value the database refuses: invalid text, a
// number out of range, a constraint) from an error about the connection or
// the server, after which the same statement may well succeed.
type DataErrorer interface {
	// IsDataError reports whether err says the database refused a value.
	IsDataError(err error) bool
}

// IsDataError reports whether err, returned by one of s's operations, says
// the database refused a value: running the same statement again would fail
// the same way. It is false for connection and transient errors, and for
// every error on a dialect that does not implement DataErrorer.
func IsDataError(s *Store, err error) bool {
	if err == nil || s == nil {
		return false
	}
	d, ok := s.d.(DataErrorer)
	return ok && d.IsDataError(err)
}
