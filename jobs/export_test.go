package jobs

// WaitRuns waits until every run w's last Run started has returned, those
// its shutdown released included: for tests of what a run does after its
// release.
func WaitRuns(w *Worker) { w.jobs.Wait() }

// HeldRetryFirst is the first pause before a result left for a key
// another transaction holds is written again.
const HeldRetryFirst = heldRetryFirst
