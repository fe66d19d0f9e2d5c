// Package fairshare measures how fairly claims share a queue among keys:
// the tests and the bench feed it what was enqueued and what each claim
// took, and it reports each key's claims over its weighted fair share and
// the claim rounds in which each key's first and last jobs were taken.
package fairshare

import "sort"

// Meter accounts claims against weighted fair shares. The zero value is
// not ready; use New.
type Meter struct {
	weight        map[string]int
	backlog       map[string]int
	fair, got     map[string]float64
	first, last   map[string]int
	rounds, claim int
}

// New returns an empty meter.
func New() *Meter {
	return &Meter{
		weight: map[string]int{}, backlog: map[string]int{},
		fair: map[string]float64{}, got: map[string]float64{},
		first: map[string]int{}, last: map[string]int{},
	}
}

// Add records n jobs of key, of weight w (at least 1), made ready.
func (m *Meter) Add(key string, w, n int) {
	m.weight[key] = max(w, 1)
	m.backlog[key] += n
}

// Round records one claim that took jobs of the given keys. While at least
// two keys had work before it, each key with work is owed its weighted
// share of the claim (water-filled: a key's share is at most its backlog,
// and what it cannot take goes to the others), and credited with what it
// took.
func (m *Meter) Round(took []string) {
	m.rounds++
	var active []string
	for k, n := range m.backlog {
		if n > 0 {
			active = append(active, k)
		}
	}
	if len(active) >= 2 {
		for k, share := range m.shares(active, len(took)) {
			m.fair[k] += share
		}
		for _, k := range took {
			m.got[k]++
		}
	}
	for _, k := range took {
		m.backlog[k]--
		m.claim++
		if _, ok := m.first[k]; !ok {
			m.first[k] = m.rounds
		}
		m.last[k] = m.rounds
	}
}

// shares splits n claims among active keys by weight, no key more than its
// backlog.
func (m *Meter) shares(active []string, n int) map[string]float64 {
	out := map[string]float64{}
	open := append([]string(nil), active...)
	left := float64(n)
	for len(open) > 0 && left > 1e-9 {
		total := 0
		for _, k := range open {
			total += m.weight[k]
		}
		var still []string
		spent := 0.0
		for _, k := range open {
			s := left * float64(m.weight[k]) / float64(total)
			if room := float64(m.backlog[k]) - out[k]; s >= room {
				out[k] += room
				spent += room
				continue
			}
			still = append(still, k)
		}
		if len(still) == len(open) {
			for _, k := range open {
				out[k] += left * float64(m.weight[k]) / float64(total)
			}
			break
		}
		open, left = still, left-spent
	}
	return out
}

// Share is one key's account.
type Share struct {
	Key string
	// Got is the claims the key got while at least two keys had work, and
	// Fair its weighted fair share of them.
	Got, Fair float64
	// First and Last are the claim rounds (1-based) that took the key's
	// first and last jobs; 0 when none was taken.
	First, Last int
}

// Ratio is Got over Fair (1 when the key was owed nothing).
func (s Share) Ratio() float64 {
	if s.Fair == 0 {
		return 1
	}
	return s.Got / s.Fair
}

// Shares returns every key's account, by key.
func (m *Meter) Shares() []Share {
	out := make([]Share, 0, len(m.weight))
	for k := range m.weight {
		out = append(out, Share{Key: k, Got: m.got[k], Fair: m.fair[k], First: m.first[k], Last: m.last[k]})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out
}

// Worst returns the account of the key with the lowest ratio.
func (m *Meter) Worst() Share {
	var worst Share
	for i, s := range m.Shares() {
		if i == 0 || s.Ratio() < worst.Ratio() {
			worst = s
		}
	}
	return worst
}

// Backlog returns how many of key's jobs are not yet claimed.
func (m *Meter) Backlog(key string) int { return m.backlog[key] }

// Rounds returns how many claims were recorded.
func (m *Meter) Rounds() int { return m.rounds }
