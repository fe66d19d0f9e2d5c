package engine

import "context"

// Stmt is one statement of a pipeline.
type Stmt struct {
	SQL  string
	Args []any
	// Rows is set for a statement whose rows the caller reads.
	Rows bool
}

// Pipeliner is implemented by transactions that can send several
// statements in one round trip (pgx's batches on PostgreSQL). The server
// runs them in order, each after the one before has finished, so a
// statement that reads the clock after one that takes locks reads it after
// the locks.
type Pipeliner interface {
	Pipeline(ctx context.Context, stmts []Stmt, read func(i int, rows Rows) error) error
}

// CommitPipeliner is implemented by transactions that can send their last
// statements and COMMIT in one round trip (PostgreSQL's). Once
// PipelineCommit returns nil the transaction has committed, and Commit
// does nothing more; on an error it is rolled back as usual.
type CommitPipeliner interface {
	PipelineCommit(ctx context.Context, stmts []Stmt, read func(i int, rows Rows) error) error
}

// pipelineCommit runs a transaction's last statements and commits, in one
// round trip where tx can; elsewhere it runs them, and inTx commits after.
// Nothing may run in tx after it.
func pipelineCommit(ctx context.Context, tx Tx, stmts []Stmt, read func(i int, rows Rows) error) error {
	if p, ok := tx.(CommitPipeliner); ok && len(stmts) > 0 {
		return p.PipelineCommit(ctx, stmts, read)
	}
	return pipeline(ctx, tx, stmts, read)
}

// pipeline runs stmts in order through ex, in one round trip where ex can,
// calling read with the rows of each statement that has Rows set.
func pipeline(ctx context.Context, ex Executor, stmts []Stmt, read func(i int, rows Rows) error) error {
	if p, ok := ex.(Pipeliner); ok && len(stmts) > 1 {
		return p.Pipeline(ctx, stmts, read)
	}
	for i, st := range stmts {
		if !st.Rows {
			if _, err := ex.Exec(ctx, st.SQL, st.Args...); err != nil {
				return err
			}
			continue
		}
		rows, err := ex.Query(ctx, st.SQL, st.Args...)
		if err != nil {
			return err
		}
		if err := ReadRows(i, rows, read); err != nil {
			return err
		}
	}
	return nil
}

// ReadRows hands statement i's rows to read and closes them, and returns
// read's error or else the rows' own: what a pipeline does with each
// statement that returns rows, whoever sends it.
func ReadRows(i int, rows Rows, read func(i int, rows Rows) error) error {
	err := read(i, rows)
	rows.Close()
	if err == nil {
		err = rows.Err()
	}
	return err
}

// stmt makes a Stmt from a dialect method's result.
func stmt(q string, args []any) Stmt { return Stmt{SQL: q, Args: args} }

// query makes a Stmt whose rows are read.
func query(q string, args []any) Stmt { return Stmt{SQL: q, Args: args, Rows: true} }
