package ratelimit_test

import (
	"fmt"
	"time"

	"github.com/sluicequeue/sluice/ratelimit"
)

func ExampleParams_Allow() {
	// 100 per minute, 10 at once: one every 60s/91 after the burst.
	p, _, _ := ratelimit.NewParams(100, time.Minute, 10)
	var budget ratelimit.State
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	admitted := 0
	for i := 0; i < 15; i++ {
		if ok, _ := p.Allow(&budget, now, 1); ok {
			admitted++
		}
	}
	_, next := p.Check(budget, now, 1)
	fmt.Println("admitted at once:", admitted)
	fmt.Println("next admission in:", time.Duration(next-now))
	// Output:
	// admitted at once: 10
	// next admission in: 659.34066ms
}
