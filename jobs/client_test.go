package jobs_test

import (
	"context"
	"database/sql"
	"github.com/sluicequeue/sluice/internal/testdb"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/driver/postgres"
	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/sqldb"
	"github.com/sluicequeue/sluice/jobs"
)

func TestEnqueueAppliesKindDefaultsAndOverrides(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		require.NoError(t, jobs.Register(h.reg, func(context.Context, *jobs.Job[email]) error { return nil },
			jobs.Queue("mail"), jobs.Priority(3), jobs.MaxAttempts(7)))
		id := h.enqueue(email{To: "a@example.com", Subject: "hi"})
		j := h.job(id)
		require.Equal(t, "email", j.Kind)
		require.Equal(t, "mail", j.Queue)
		require.Equal(t, 3, j.Priority)
		require.Equal(t, 7, j.MaxAttempts)
		require.Equal(t, engine.StateReady, j.State)
		require.JSONEq(t, `{"to":"a@example.com","subject":"hi"}`, string(j.Args))

		id = h.enqueue(email{}, jobs.Queue("urgent"), jobs.Priority(-1), jobs.MaxAttempts(2), jobs.Delay(time.Minute))
		j = h.job(id)
		require.Equal(t, "urgent", j.Queue)
		require.Equal(t, -1, j.Priority)
		require.Equal(t, 2, j.MaxAttempts)
		require.Equal(t, engine.StateScheduled, j.State)
		require.Equal(t, t0.Add(time.Minute), j.RunAt)

		id = h.enqueue(email{}, jobs.RunAt(t0.Add(time.Hour)))
		require.Equal(t, t0.Add(time.Hour), h.job(id).RunAt)
	})
}

func TestEnqueueRefusesBadInputBeforeWriting(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		_, err := h.client.Enqueue(ctx, email{})
		require.ErrorIs(t, err, jobs.ErrUnknownKind)
		require.ErrorContains(t, err, `"email"`)

		require.NoError(t, jobs.Declare[email](h.reg))
		small := jobs.NewClient(testdb.Public(h.store), h.reg, jobs.ClientConfig{Clock: h.clock, MaxArgsBytes: 64})
		_, err = small.Enqueue(ctx, email{Subject: strings.Repeat("x", 100)})
		require.ErrorIs(t, err, jobs.ErrArgsTooLarge)
		require.ErrorContains(t, err, "122 bytes encoded, the cap is 64")

		_, err = small.EnqueueMany(ctx, []jobs.Item{{Args: email{}}, {Args: email{}}, {Args: email{Subject: strings.Repeat("x", 100)}}})
		require.ErrorContains(t, err, "enqueue item 2")
		require.ErrorIs(t, err, jobs.ErrArgsTooLarge)

		_, err = h.client.Enqueue(ctx, email{}, jobs.Delay(-time.Second))
		require.ErrorContains(t, err, "Delay is -1s")

		_, err = h.client.Enqueue(ctx, nil)
		require.ErrorContains(t, err, "args are nil")

		stats, err := h.store.Stats(ctx)
		require.NoError(t, err)
		require.Empty(t, stats, "nothing was written")
	})
}

func TestEnqueueManyReturnsIDsInOrder(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		require.NoError(t, jobs.Declare[noop](h.reg))
		items := make([]jobs.Item, 2500)
		for i := range items {
			items[i] = jobs.Item{Args: noop{N: i}}
		}
		ids, err := h.client.EnqueueMany(context.Background(), items)
		require.NoError(t, err)
		require.Len(t, ids, len(items))
		for _, i := range []int{0, 999, 1000, 2499} {
			require.JSONEq(t, `{"N":`+strconv.Itoa(i)+`}`, string(h.job(ids[i].ID).Args))
		}
	})
}

// callerTx begins a transaction of the caller's own kind on the store's
// database: pgx.Tx on PostgreSQL, *sql.Tx elsewhere.
func callerTx(t *testing.T, s *engine.Store) (tx any, commit, rollback func()) {
	ctx := context.Background()
	switch db := s.DB().(type) {
	case *postgres.DB:
		tx, err := db.Pool().Begin(ctx)
		require.NoError(t, err)
		return tx, func() { require.NoError(t, tx.Commit(ctx)) }, func() { require.NoError(t, tx.Rollback(ctx)) }
	case *sqldb.DB:
		tx, err := db.SQL().BeginTx(ctx, nil)
		require.NoError(t, err)
		return tx, func() { require.NoError(t, tx.Commit()) }, func() { require.NoError(t, tx.Rollback()) }
	}
	t.Fatalf("unknown DB %T", s.DB())
	return nil, nil, nil
}

func TestEnqueueTxCommitsAndRollsBackWithTheCaller(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		require.NoError(t, jobs.Declare[email](h.reg))

		tx, _, rollback := callerTx(t, h.store)
		id, err := h.client.EnqueueTx(ctx, tx, email{To: "gone"})
		require.NoError(t, err)
		rollback()
		_, err = h.store.GetJob(ctx, id.ID)
		require.ErrorIs(t, err, engine.ErrNotFound)

		tx, commit, _ := callerTx(t, h.store)
		ids, err := h.client.EnqueueManyTx(ctx, tx, []jobs.Item{{Args: email{To: "kept"}}, {Args: email{To: "kept too"}}})
		require.NoError(t, err)
		commit()
		require.Equal(t, engine.StateReady, h.job(ids[0].ID).State)
		require.Equal(t, engine.StateReady, h.job(ids[1].ID).State)

		var wrong any = &sql.Tx{}
		want := "takes a pgx.Tx, not a *sql.Tx"
		if h.store.Dialect().Name() != "postgres" {
			wrong, want = "not a tx", "takes a *sql.Tx, not a string"
		}
		_, err = h.client.EnqueueTx(ctx, wrong, email{})
		require.ErrorContains(t, err, want)
	})
}
