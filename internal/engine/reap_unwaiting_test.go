package engine_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
)

// guarantees.md, "Delivery: at least once": a process is presumed dead
// only when it stops heartbeating. Every process's heartbeat loop reaps
// the others between its beats, so a reap must wait for no lock that
// another transaction holds, or the process that reaps stops beating.
// Here an app's transaction holds the semaphores of two keys (it enqueued
// jobs of them, and has not committed): the reap returns at once. It
// releases the dead process's plain job; it blocks the job whose key
// expired while it ran (it needs a slot of a key it cannot lock now);
// and it leaves the job that fails for good, which gives its slot back,
// to a later reap, keeping the process's row. Once the app's transaction
// ends, the next reap fails that job and removes the process, and the
// dispatcher's round hands the blocked job its slot.
func TestAReapWaitsForNoSemaphoreAnotherTransactionHolds(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		if s.Dialect().Name() == "sqlite" {
			t.Skip("one writer: an open transaction stops every other")
		}
		ctx := context.Background()
		last := concJob("x", 1, time.Hour)
		last.MaxAttempts = 1
		ids := enqueue(t, s, t0, last, concJob("y", 1, time.Minute), job("k", "default", 0))
		fails, slotless, plain := ids[0], ids[1], ids[2]
		dead := register(t, s, t0)
		require.Len(t, claim(t, s, dead, t0, 3).Jobs, 3)
		freed, _, err := s.MaintainSemaphores(ctx, engine.At(at(time.Minute+time.Second)), 100)
		require.NoError(t, err)
		require.Equal(t, 1, freed, "y expires: its running holder loses its slot")

		app, err := s.DB().Begin(ctx)
		require.NoError(t, err)
		ended := false
		defer func() {
			if !ended {
				_ = app.Rollback(ctx)
			}
		}()
		rows, err := app.Query(ctx, "SELECT name FROM sluice_semaphores WHERE name IN ('x', 'y') FOR UPDATE")
		require.NoError(t, err)
		for rows.Next() {
		}
		require.NoError(t, rows.Err())
		rows.Close()

		bounded, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		n, err := s.ReapDeadProcesses(bounded, engine.At(at(10*time.Minute)), 5*time.Minute)
		require.NoError(t, err, "the reap waited for the app's transaction")
		require.Equal(t, 2, n)
		require.Equal(t, engine.StateReady, state(t, s, plain).State)
		require.Equal(t, engine.StateBlocked, state(t, s, slotless).State, "its key's semaphore is held: it waits for a slot")
		require.Equal(t, engine.StateRunning, state(t, s, fails).State, "its slot is given back with it: a later reap")
		ps, err := s.ListProcesses(ctx)
		require.NoError(t, err)
		require.Len(t, ps, 1, "the dead process keeps its row while a job runs under it")

		require.NoError(t, app.Rollback(ctx))
		ended = true
		n, err = s.ReapDeadProcesses(ctx, engine.At(at(10*time.Minute+time.Second)), 5*time.Minute)
		require.NoError(t, err)
		require.Equal(t, 1, n)
		j := state(t, s, fails)
		require.Equal(t, engine.StateFailed, j.State)
		require.Equal(t, engine.LostError, j.LastError)
		require.Zero(t, semaphore(t, s, "x").Held, "its slot is given back")
		ps, err = s.ListProcesses(ctx)
		require.NoError(t, err)
		require.Empty(t, ps, "the dead process is removed")

		_, unblocked, err := s.MaintainSemaphores(ctx, engine.At(at(10*time.Minute+2*time.Second)), 100)
		require.NoError(t, err)
		require.Equal(t, 1, unblocked)
		require.Equal(t, engine.StateReady, state(t, s, slotless).State)
		require.Equal(t, 1, semaphore(t, s, "y").Held)
	})
}

// The same reap for a slotless job of a paused queue: a job of a paused
// queue takes no slot (docs/concurrency.md), so whether or not its key's
// semaphore is free it waits scheduled for the resume, not blocked, and
// takes its slot when the dispatcher promotes it after the resume.
func TestAReapedSlotlessJobOfAPausedQueueWaitsForTheResumeThoughItsKeyIsBusy(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		if s.Dialect().Name() == "sqlite" {
			t.Skip("one writer: an open transaction stops every other")
		}
		ctx := context.Background()
		j := concJob("z", 1, time.Minute)
		j.Queue = "bulk"
		id := enqueue(t, s, t0, j)[0]
		dead := register(t, s, t0)
		require.Len(t, claim(t, s, dead, t0, 1, "bulk").Jobs, 1)
		freed, _, err := s.MaintainSemaphores(ctx, engine.At(at(time.Minute+time.Second)), 100)
		require.NoError(t, err)
		require.Equal(t, 1, freed, "z expires: its running holder loses its slot")
		require.NoError(t, s.PauseQueue(ctx, "bulk", at(2*time.Minute)))

		app, err := s.DB().Begin(ctx)
		require.NoError(t, err)
		rows, err := app.Query(ctx, "SELECT name FROM sluice_semaphores WHERE name = 'z' FOR UPDATE")
		require.NoError(t, err)
		for rows.Next() {
		}
		require.NoError(t, rows.Err())
		rows.Close()
		bounded, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		n, err := s.ReapDeadProcesses(bounded, engine.At(at(10*time.Minute)), 5*time.Minute)
		require.NoError(t, app.Rollback(ctx))
		require.NoError(t, err, "the reap waited for the app's transaction")
		require.Equal(t, 1, n)
		require.Equal(t, engine.StateScheduled, state(t, s, id).State, "its queue is paused: it waits for the resume")
		require.False(t, state(t, s, id).HoldsSlot)

		require.NoError(t, s.ResumeQueue(ctx, "bulk", at(11*time.Minute)))
		_, _, err = s.Promote(ctx, engine.At(at(11*time.Minute)), 10)
		require.NoError(t, err)
		got := state(t, s, id)
		require.Equal(t, engine.StateReady, got.State)
		require.True(t, got.HoldsSlot, "it takes its slot as it becomes ready")
	})
}

// A reap locks the dead processes' rows and no live one's: a live
// process's heartbeat, stamped while another process's reap is under
// way, does not wait for it. MariaDB read the dead processes through the
// index of heartbeats and kept the lock of the first entry past them, the
// live process with the oldest heartbeat, until the reap committed.
func TestAReapLocksNoLiveProcessRow(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		if s.Dialect().Name() == "sqlite" {
			t.Skip("one writer: a heartbeat waits for any transaction")
		}
		ctx := context.Background()
		dead := register(t, s, t0)
		live := register(t, s, t0)
		other := register(t, s, t0)
		enqueue(t, s, t0, job("k", "default", 0), job("k", "default", 0))
		require.Len(t, claim(t, s, dead, t0, 1).Jobs, 1)
		require.Len(t, claim(t, s, live, t0, 1).Jobs, 1)
		for i, pid := range []int64{live, other} {
			ok, err := s.Heartbeat(ctx, pid, engine.At(at(9*time.Minute+time.Duration(i)*time.Second)))
			require.NoError(t, err)
			require.True(t, ok)
		}

		rs, rec := testdb.Record(s)
		var once sync.Once
		beats := map[int64]error{}
		rec.Before = func(q string) {
			if !strings.Contains(q, "FROM sluice_jobs j") || !strings.Contains(q, "sluice_processes p") {
				return
			}
			once.Do(func() { // the reap has locked the dead processes
				for _, pid := range []int64{live, other} {
					bounded, cancel := context.WithTimeout(ctx, 5*time.Second)
					_, beats[pid] = s.Heartbeat(bounded, pid, engine.At(at(10*time.Minute)))
					cancel()
				}
			})
		}
		n, err := rs.ReapDeadProcesses(ctx, engine.At(at(10*time.Minute)), 5*time.Minute)
		require.NoError(t, err)
		require.Equal(t, 1, n)
		require.Len(t, beats, 2, "the reap looked for lost jobs")
		for pid, err := range beats {
			require.NoError(t, err, "process %d's heartbeat waited for the reap", pid)
		}
	})
}
