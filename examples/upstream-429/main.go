// Command upstream-429 shows the contract with an upstream that
// rate-limits: a handler that gets a 429 returns jobs.RetryAfterResponse,
// and the job goes back to wait for the Retry-After without spending an
// attempt, while its whole budget is held back until then, so the other
// jobs that share it do not walk into the same 429s.
//
// The program starts a local server that allows 5 requests a second and
// answers 429 with a Retry-After above that, and sends it 25 jobs whose
// declared limit (10 a second) is looser than the server's.
package main

import (
	"context"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicequeue/sluice/dispatcher"
	"github.com/sluicequeue/sluice/examples/internal/recipe"
	"github.com/sluicequeue/sluice/jobs"
	"github.com/sluicequeue/sluice/ratelimit"
	"github.com/sluicequeue/sluice/store"
)

// upstream is an API that allows perSecond requests in each second.
type upstream struct {
	mu          sync.Mutex
	perSecond   int
	window      time.Time
	used        int
	ok, tooMany atomic.Int64
}

func (u *upstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	u.mu.Lock()
	now := time.Now()
	if now.Sub(u.window) >= time.Second {
		u.window, u.used = now, 0
	}
	allowed := u.used < u.perSecond
	if allowed {
		u.used++
	}
	wait := time.Second - now.Sub(u.window)
	u.mu.Unlock()
	if !allowed {
		u.tooMany.Add(1)
		w.Header().Set("Retry-After", strconv.Itoa(int(wait/time.Second)+1))
		http.Error(w, "rate limited", http.StatusTooManyRequests)
		return
	}
	u.ok.Add(1)
	w.WriteHeader(http.StatusOK)
}

// Notify sends one notification through the upstream.
type Notify struct{ N int }

// Kind names the job type.
func (Notify) Kind() string { return "notify" }

// report is what a run saw.
type report struct {
	Jobs, Requests, TooMany int
	// Attempts is the highest attempt any job completed on.
	Attempts int
}

func run(ctx context.Context, s *store.Store, n int) (report, error) {
	up := &upstream{perSecond: 5}
	srv := httptest.NewServer(up)
	defer srv.Close()
	var maxAttempt atomic.Int64
	done := make(chan struct{}, n)
	reg := jobs.NewRegistry()
	err := jobs.Register(reg, func(ctx context.Context, j *jobs.Job[Notify]) error {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if resp.StatusCode == http.StatusTooManyRequests {
			return jobs.RetryAfterResponse(resp, time.Second) // wait, and hold the budget back
		}
		for {
			if m := maxAttempt.Load(); int64(j.Attempt) <= m || maxAttempt.CompareAndSwap(m, int64(j.Attempt)) {
				break
			}
		}
		done <- struct{}{}
		return nil
	}, jobs.RateLimit(ratelimit.Limit[Notify]{To: 10, Per: time.Second, Burst: 2, Key: "global"}))
	if err != nil {
		return report{}, err
	}
	items := make([]jobs.Item, n)
	for i := range items {
		items[i] = jobs.Item{Args: Notify{N: i}}
	}
	if _, err := jobs.NewClient(s, reg, jobs.ClientConfig{}).EnqueueMany(ctx, items); err != nil {
		return report{}, err
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	w, err := jobs.NewWorker(s, reg, jobs.WorkerConfig{Concurrency: 5, PollInterval: 20 * time.Millisecond, Logger: quiet})
	if err != nil {
		return report{}, err
	}
	d, err := dispatcher.New(s, dispatcher.Config{Interval: 50 * time.Millisecond, Logger: quiet})
	if err != nil {
		return report{}, err
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); _ = w.Run(runCtx) }()
	go func() { defer wg.Done(); _ = d.Run(runCtx) }()
	for i := 0; i < n; i++ {
		select {
		case <-done:
		case <-ctx.Done():
			stop()
			wg.Wait()
			return report{}, ctx.Err()
		}
	}
	stop()
	wg.Wait()
	return report{Jobs: n, Requests: int(up.ok.Load() + up.tooMany.Load()), TooMany: int(up.tooMany.Load()), Attempts: int(maxAttempt.Load())}, nil
}

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, closeFn, err := recipe.TempStore(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer closeFn()
	began := time.Now()
	r, err := run(ctx, s, 25)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%d jobs in %.1fs: %d requests, %d answered 429; every job completed on attempt %d\n",
		r.Jobs, time.Since(began).Seconds(), r.Requests, r.TooMany, r.Attempts)
}
