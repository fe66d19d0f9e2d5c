// Package sqlgen renders the placeholder lists of the "?"-style dialects
// (MySQL and SQLite), whose drivers take no arrays. It never sees user
// input: only counts.
package sqlgen

import "strings"

// List returns n placeholders separated by commas: "?, ?, ?".
func List(n int) string {
	if n <= 0 {
		return ""
	}
	return strings.Repeat("?, ", n-1) + "?"
}

// Tuples returns rows parenthesized tuples of tuple, separated by commas:
// Tuples(2, "(?, ?)") is "(?, ?), (?, ?)".
func Tuples(rows int, tuple string) string {
	if rows <= 0 {
		return ""
	}
	return strings.Repeat(tuple+", ", rows-1) + tuple
}

// Int64s returns ids as arguments.
func Int64s(ids []int64) []any {
	out := make([]any, len(ids))
	for i, id := range ids {
		out[i] = id
	}
	return out
}

// Strings returns ss as arguments.
func Strings(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

// Bool returns b as 0 or 1, which both dialects store booleans as.
func Bool(b bool) int {
	if b {
		return 1
	}
	return 0
}
