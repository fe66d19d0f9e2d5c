package jobs

// WaitRuns waits until every run w started has returned, those a shutdown
// released included: for tests of what a run does after its release.
func WaitRuns(w *Worker) { w.jobs.Wait() }
