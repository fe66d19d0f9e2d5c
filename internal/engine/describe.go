package engine

// Describe says in a few words where a job is and, for a waiting job,
// what holds it: "parked (rate limited: Stripe/global)".
func (j *JobInfo) Describe() string {
	switch {
	case j.State == StateBlocked:
		return "blocked (concurrency: " + j.ConcKey + ")"
	case j.WaitKey != "" && j.State == StateScheduled:
		return "scheduled (rate limited: " + j.WaitKey + ")"
	case j.WaitKey != "" && j.State == StateParked:
		return "parked (rate limited: " + j.WaitKey + ")"
	}
	return string(j.State)
}
