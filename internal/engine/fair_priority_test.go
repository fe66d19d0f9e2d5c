package engine_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
)

// atPriority sets a job's priority.
func atPriority(p int) func(*engine.NewJob) { return func(j *engine.NewJob) { j.Priority = p } }

// Guards docs/fairness.md, Arrival ("a key that was idle gets its first
// job claimed within one round of the active keys") and "fair order
// applies among jobs of one priority". The queue's virtual time was the
// start of its head by priority, then start: the start of a more urgent
// key's job became the virtual time of every priority, and a key arriving
// at a less urgent level started behind that level's whole flood. Each
// priority level now has a virtual time of its own.
func TestFairIdleKeyAtALessUrgentPriorityStartsBesideTheFlood(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		r := newFairRig(t, s)
		r.add("urgent", 1, 200, atPriority(0))
		r.add("flood", 1, 100, atPriority(1))
		// The urgent key runs first (priority first): all but its last.
		for range 199 / 50 {
			r.claim(50)
		}
		r.claim(199 % 50)
		require.Equal(t, 1, r.meter.Backlog("urgent"))
		// An idle key arrives at the flood's priority.
		r.add("late", 1, 1, atPriority(1))
		require.Equal(t, []string{"urgent"}, r.claim(1))
		// Now "flood" and "late" are the active keys of priority 1: a round
		// is two claims. "late" must be taken within about one round.
		var got []string
		for range 3 {
			got = append(got, r.claim(2)...)
		}
		require.Contains(t, got, "late", "the idle key's first job waited behind the flood: first claims %s", strings.Join(got, ","))
	})
}

// Guards "fair order applies among jobs of one priority" and Arrival for a
// key that was busy at another priority: its turns at one level are not
// spent at another. A key's last finish was one for all priorities, so a
// key that had just run 50 urgent jobs waited, at the flood's priority,
// behind 50 of the flood's jobs. Finishes are now kept per level.
func TestFairTurnsAtOnePriorityAreNotSpentAtAnother(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		r := newFairRig(t, s)
		r.add("flood", 1, 100, atPriority(1))
		r.claim(10)
		r.add("x", 1, 50, atPriority(0))
		require.Equal(t, strings.Repeat("x ", 50), strings.Repeat("x ", len(r.claim(50))))
		require.Equal(t, 0, r.meter.Backlog("x"))
		// x was idle at priority 1: it starts beside the flood's next job.
		r.add("x", 1, 1, atPriority(1))
		require.ElementsMatch(t, []string{"flood", "x"}, r.claim(2))
	})
}

// Guards docs/fairness.md, Pruning: "A key's next job starts at the
// virtual time whether its row is there or not, so this changes no start
// (the one exception: a retried job ...)". No job is retried here; the
// queue mixes priorities. The prune read one virtual time for the queue,
// the start of its most urgent head, and deleted the rows of keys of a
// less urgent level that still had ready jobs; their next jobs started
// earlier than they would have. It now prunes each level against its own
// virtual time: the claim order is the same with and without it.
func TestFairPruneChangesNoStartWhenPrioritiesMix(t *testing.T) {
	run := func(t *testing.T, s *engine.Store, prune bool) []string {
		r := newFairRig(t, s)
		r.add("a", 1, 10, atPriority(1))
		r.add("k", 1, 3, atPriority(1))
		r.add("b", 1, 200, atPriority(0))
		// The hourly prune runs while b's last job is the queue's head.
		for range 3 {
			r.claim(50)
		}
		r.claim(49)
		require.Equal(t, 1, r.meter.Backlog("b"))
		if prune {
			_, err := s.PruneFairKeys(context.Background())
			require.NoError(t, err)
		}
		require.Equal(t, []string{"b"}, r.claim(1))
		r.add("k", 1, 1, atPriority(1))
		return r.claim(14)
	}
	for _, b := range testdb.Backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			without := run(t, b.Open(t), false)
			with := run(t, b.Open(t), true)
			require.Equal(t, without, with, "pruning changed the claim order")
		})
	}
}

// Guards docs/fairness.md, Overflow: "an enqueue that would pass it is
// refused with an error naming the key" (it held already).
func TestFairOverflowIsRefusedNamingTheKey(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		enqueue(t, s, t0, fairJob("big", 1))
		_, err := s.DB().Exec(ctx, "UPDATE sluice_fair_keys SET finish = 9223372036854775000")
		require.NoError(t, err)
		_, err = s.Enqueue(ctx, nil, engine.At(t0), []engine.NewJob{fairJob("big", 1)})
		require.ErrorContains(t, err, `"big"`)
		require.ErrorContains(t, err, "overflow")
	})
}

// fairStarts returns the starts of key's jobs, lowest first.
func fairStarts(t *testing.T, s *engine.Store, key string) []int64 {
	t.Helper()
	rows, err := s.DB().Query(context.Background(), "SELECT fair_start FROM sluice_jobs WHERE fair_key = '"+key+"' ORDER BY fair_start")
	require.NoError(t, err)
	defer rows.Close()
	var out []int64
	for rows.Next() {
		var v int64
		require.NoError(t, rows.Scan(&v))
		out = append(out, v)
	}
	require.NoError(t, rows.Err())
	return out
}

// Guards docs/fairness.md: "Enqueues of one key wait for each other on its
// row, so each gets its own starts" (it held already). Four processes
// enqueue one key (and another) at once, from a key that does not exist
// yet: the key's starts are one step apart, none given twice.
func TestFairConcurrentEnqueuesOfOneKeyGetTheirOwnStarts(t *testing.T) {
	testdb.EachPool(t, func(t *testing.T, s *engine.Store, open func() *engine.Store) {
		const procs, each = 4, 10
		stores := make([]*engine.Store, procs)
		for i := range stores {
			stores[i] = open()
		}
		errs := make(chan error, procs)
		start := make(chan struct{})
		for _, ps := range stores {
			go func() {
				<-start
				for range each {
					if _, err := ps.Enqueue(context.Background(), nil, engine.At(t0), []engine.NewJob{fairJob("k", 1), fairJob("other", 2)}); err != nil {
						errs <- err
						return
					}
				}
				errs <- nil
			}()
		}
		close(start)
		for range procs {
			require.NoError(t, <-errs)
		}
		got := fairStarts(t, s, "k")
		require.Len(t, got, procs*each)
		for i := range got {
			require.Equal(t, int64(i)*engine.FairScale, got[i], "starts of k: %v", got)
		}
	})
}

// Guards docs/fairness.md: "enqueues of different keys do not wait for
// each other" (it held already). One enqueue of key "c" holds its
// transaction open; another process enqueues new keys and existing ones
// on either side of "c". SQLite has one writer at a time, so only the
// servers are checked.
func TestFairEnqueuesOfDifferentKeysDoNotWait(t *testing.T) {
	testdb.EachPool(t, func(t *testing.T, s *engine.Store, open func() *engine.Store) {
		if s.Dialect().Name() == "sqlite" {
			t.Skip("one writer at a time")
		}
		ctx := context.Background()
		enqueue(t, s, t0, fairJob("a", 1), fairJob("c", 1), fairJob("e", 1))
		tx, err := s.DB().Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }()
		_, err = s.Enqueue(ctx, tx, engine.At(t0), []engine.NewJob{fairJob("c", 1)})
		require.NoError(t, err)
		other := open()
		for _, key := range []string{"a", "b", "d", "f"} {
			bctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			_, err = other.Enqueue(bctx, nil, engine.At(t0), []engine.NewJob{fairJob(key, 1)})
			cancel()
			require.NoError(t, err, "an enqueue of key %q waited for an open enqueue of key \"c\"", key)
		}
	})
}

// Guards docs/fairness.md: fair enqueues are batched for EnqueueMany,
// "whatever the number of jobs and keys". tagFair bound every key of a
// queue in one statement: on SQLite (32,766 parameters at most) an
// EnqueueMany of more than 10,922 keys failed with "too many SQL
// variables". The key statements are now split as job inserts are. The
// test crosses a statement's bound lowered to 100 keys (smallBatches) with
// 250 keys, and checks that each statement carried at most 100 of them
// and that both the statement that inserts the keys' rows and the one
// that saves their finishes took three runs: binding every key of the
// queue in one statement fails it.
func TestFairEnqueueManyOfMoreKeysThanAStatementBinds(t *testing.T) {
	testdb.Each(t, func(t *testing.T, base *engine.Store) {
		const batch, n = 100, 250
		s, _, log := smallBatches(t, base, batch)
		jobs := make([]engine.NewJob, n)
		for i := range jobs {
			jobs[i] = fairJob(fmt.Sprintf("t%05d", i), 1)
		}
		_, err := s.Enqueue(context.Background(), nil, engine.At(t0), jobs)
		require.NoError(t, err)
		for _, keys := range log.keys("", "t0") {
			require.LessOrEqual(t, keys, batch, "a statement carried more keys than it may bind")
		}
		require.Equal(t, []int{100, 100, 50}, log.keys("INSERT INTO sluice_fair_keys (queue, priority, fair_key)", "t0"),
			"the keys' rows were inserted in runs")
		require.Equal(t, []int{100, 100, 50}, log.keys("INSERT INTO sluice_fair_keys (queue, priority, fair_key, finish)", "t0"),
			"their finishes were saved in runs")
		// Every key's row, its finish saved one step after its start.
		rows, err := s.DB().Query(context.Background(), fmt.Sprintf("SELECT COUNT(*) FROM sluice_fair_keys WHERE finish = %d", engine.FairScale))
		require.NoError(t, err)
		defer rows.Close()
		var saved int
		for rows.Next() {
			require.NoError(t, rows.Scan(&saved))
		}
		require.NoError(t, rows.Err())
		require.Equal(t, n, saved)
	})
}

// Guards migration 015's promise (docs/fairness.md): no key's next start
// moves back at the upgrade. Its down migration keeps each key's latest
// finish; its up migration copies each key's finish to every priority its
// queue has fair jobs at.
func TestFairMigration015KeepsEachKeysFinish(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		const step = engine.FairScale
		r := newFairRig(t, s)
		r.add("a", 1, 3, atPriority(0))
		r.add("a", 1, 1, atPriority(1))
		r.add("b", 1, 2, atPriority(1))
		keys := func() []string {
			rows, err := s.DB().Query(ctx, "SELECT priority, fair_key, finish FROM sluice_fair_keys ORDER BY priority, fair_key")
			require.NoError(t, err)
			defer rows.Close()
			var out []string
			for rows.Next() {
				var p, f int64
				var k string
				require.NoError(t, rows.Scan(&p, &k, &f))
				out = append(out, fmt.Sprintf("%d %s %d", p, k, f/step))
			}
			require.NoError(t, rows.Err())
			return out
		}
		require.Equal(t, []string{"0 a 3", "1 a 1", "1 b 2"}, keys())
		all, err := s.Migrations()
		require.NoError(t, err)
		_, err = s.MigrateDown(ctx, len(all)-14) // 015 and those after it
		require.NoError(t, err)
		_, err = s.MigrateUp(ctx, 0)
		require.NoError(t, err)
		require.Equal(t, []string{"0 a 3", "0 b 2", "1 a 3", "1 b 2"}, keys())
	})
}
