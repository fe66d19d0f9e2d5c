package jobs_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/sluicequeue/sluice/clock"
	"github.com/sluicequeue/sluice/jobs"
	"github.com/sluicequeue/sluice/ratelimit"
	"github.com/sluicequeue/sluice/store"
)

// SendWelcome is a job's args: a struct with a Kind.
type SendWelcome struct {
	UserID int64 `json:"user_id"`
}

func (SendWelcome) Kind() string { return "send_welcome" }

func Example() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "sluice-example")
	defer os.RemoveAll(dir)
	s, _ := store.Open(ctx, "sqlite:"+filepath.Join(dir, "jobs.db"))
	defer s.Close()
	_, _ = s.MigrateUp(ctx, 0)

	reg := jobs.NewRegistry()
	_ = jobs.Register(reg, func(ctx context.Context, j *jobs.Job[SendWelcome]) error {
		fmt.Println("welcome, user", j.Args.UserID, "attempt", j.Attempt)
		return nil
	}, jobs.Queue("mail"))

	client := jobs.NewClient(s, reg, jobs.ClientConfig{})
	_, _ = client.Enqueue(ctx, SendWelcome{UserID: 42})

	// Run works until its context ends; Drain works what is ready and
	// returns, which suits an example.
	w, _ := jobs.NewWorker(s, reg, jobs.WorkerConfig{Queues: []string{"mail"}})
	res, _ := w.Drain(ctx)
	fmt.Println("completed:", res.Completed)
	// Output:
	// welcome, user 42 attempt 1
	// completed: 1
}

// SyncAccount calls an API whose quota is per account.
type SyncAccount struct{ AccountID int64 }

func (SyncAccount) Kind() string { return "sync_account" }

func ExampleRateLimit() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "sluice-example")
	defer os.RemoveAll(dir)
	s, _ := store.Open(ctx, "sqlite:"+filepath.Join(dir, "jobs.db"))
	defer s.Close()
	_, _ = s.MigrateUp(ctx, 0)
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))

	reg := jobs.NewRegistry()
	_ = jobs.Register(reg, func(ctx context.Context, j *jobs.Job[SyncAccount]) error {
		fmt.Println(clk.Now().Format("15:04:05"), "sync account", j.Args.AccountID)
		return nil
	}, jobs.RateLimit(ratelimit.Limit[SyncAccount]{
		To: 2, Per: time.Minute, Burst: 2, // 2 at once, then one a minute
		Key: func(a SyncAccount) any { return a.AccountID },
	}))
	client := jobs.NewClient(s, reg, jobs.ClientConfig{Clock: clk})
	for i := 0; i < 3; i++ {
		_, _ = client.Enqueue(ctx, SyncAccount{AccountID: 7})
	}
	w, _ := jobs.NewWorker(s, reg, jobs.WorkerConfig{Clock: clk})
	res, _ := w.Drain(ctx) // the third waits: it is deferred, not run
	fmt.Println("deferred:", res.Deferred)
	clk.Advance(time.Minute)
	_, _ = w.Drain(ctx)
	// Output:
	// 00:00:00 sync account 7
	// 00:00:00 sync account 7
	// deferred: 1
	// 00:01:00 sync account 7
}

func ExampleSnooze() {
	reg := jobs.NewRegistry()
	_ = jobs.Register(reg, func(ctx context.Context, j *jobs.Job[SendWelcome]) error {
		if j.Args.UserID == 0 {
			// The user is not created yet: look again in a minute,
			// without spending an attempt.
			return jobs.Snooze(time.Minute)
		}
		return nil
	})
	err := jobs.Perform(context.Background(), reg, SendWelcome{})
	fmt.Println(err)
	// Output: job snoozed for 1m0s
}
