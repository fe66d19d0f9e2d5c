package engine

// Capabilities says how a database spells what the statement catalog
// (sql/*.sql) writes once: placeholders and lists, booleans, upserts,
// RETURNING, row locks. The catalog is rendered from them once, when a
// store is made.
type Capabilities struct {
	// Arrays binds each list as one array parameter, numbered $1, $2…
	// (x IN (:ids) becomes x = ANY($1), VALUES :rows(…) becomes SELECT *
	// FROM unnest(…), and casts such as :n::bigint are kept), so each
	// statement has one text. Otherwise parameters are "?", a list is
	// spelled out one placeholder per element, VALUES :rows(…) one tuple
	// per row, and casts are dropped.
	Arrays bool
	// Booleans keeps TRUE and FALSE and binds Go bools as they are;
	// otherwise they become 1 and 0.
	Booleans bool
	// Returning keeps INSERT … RETURNING id; otherwise the clause is
	// dropped and ids come from the insert's reported last id.
	Returning bool
	// RowLocks keeps FOR UPDATE [SKIP LOCKED]; otherwise (SQLite, whose
	// transactions hold the only write lock) the clauses are dropped.
	RowLocks bool
	// DuplicateKey spells ON CONFLICT (…) DO UPDATE SET c = EXCLUDED.c as
	// ON DUPLICATE KEY UPDATE c = VALUES(c), and DO NOTHING as an update
	// of the key to itself (MySQL).
	DuplicateKey bool
	// MaxKeyLength is the longest key (in characters) the key columns
	// hold; 0 means no limit.
	MaxKeyLength int
	// MaxInsertBatch is how many jobs one InsertJobs may carry.
	MaxInsertBatch int
}
