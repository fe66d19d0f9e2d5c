package engine

// SetMaxInsertBatch lowers the most rows or keys one statement of s carries
// (its dialect's Capabilities.MaxInsertBatch, which splits job inserts and
// every statement of many keys) to n, for s alone. A test of the split
// crosses it with hundreds of rows instead of the tens of thousands a
// database's own bound on parameters takes, which under -race on SQLite
// cost tens of seconds a test; the code that splits is the production
// code, only the threshold is lower. Set it before s runs anything.
func SetMaxInsertBatch(s *Store, n int) {
	if n < 1 {
		panic("SetMaxInsertBatch: n must be at least 1")
	}
	s.q.c.MaxInsertBatch = n
}
