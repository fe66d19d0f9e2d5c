package concurrency

// Semaphore is one concurrency key's slot accounting: how many slots its
// jobs hold and how many its limit allows. It is the one place the rules
// live; the store keeps a Semaphore per key in a row and applies these
// methods to it inside the transaction that moves the jobs.
//
// The rules:
//
//   - a slot is handed out only while Held < To;
//   - Held counts the jobs that hold a slot, exactly: each take adds one
//     and each give takes one away, and the store gives a job's slot back
//     only when the job's own flag says it holds one, so each slot is
//     given back once;
//   - lowering To never takes a slot from a holder: the holders finish and
//     give theirs back, and no new slot is handed out until Held is below
//     the new To;
//   - expiring a key (its holders are presumed lost after Duration without
//     any activity) sets Held to 0; the store clears the holders' flags in
//     the same transaction, so a presumed-lost holder that finishes later
//     gives nothing back.
type Semaphore struct {
	// Held is how many jobs hold a slot. It never goes below 0.
	Held int
	// To is the limit as last declared: at most To holders once the
	// holders taken under a higher limit have finished.
	To int
}

// Free returns how many slots may be handed out now: To − Held, or 0 while
// holders taken under a higher limit are still out.
func (s Semaphore) Free() int { return max(s.To-s.Held, 0) }

// Declare records the limit an enqueue, or a worker's start, declares; a
// job that comes back declares none, and takes a slot under the limit as
// last declared.
// Holders are never taken away: a lower limit only stops new grants until
// enough holders give theirs back.
func (s *Semaphore) Declare(to int) { s.To = to }

// Take hands out one slot if one is free and reports whether it did.
func (s *Semaphore) Take() bool {
	if s.Held >= s.To {
		return false
	}
	s.Held++
	return true
}

// Give takes one holder's slot back. It reports false, changing nothing,
// when no slot is held: the caller gave back a slot it did not hold, which
// the store's flag on each job is there to prevent.
func (s *Semaphore) Give() bool {
	if s.Held <= 0 {
		return false
	}
	s.Held--
	return true
}

// Expire frees every slot (their holders are presumed lost) and returns
// how many were held.
func (s *Semaphore) Expire() int {
	n := s.Held
	s.Held = 0
	return n
}
