package dispatcher_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/dispatcher"
)

// recurring.md: a config file's bad task "stops the dispatcher at start
// with an error that names the task", and LoadConfig refuses a field the
// file does not know ("kinds" for "kind"). A misspelled field of a task's
// args ("perod" for "period") was dropped silently instead: the dispatcher
// started, and every tick enqueued the job with its zero value, a
// nightly report of no period. An app's hand-written config deserves the
// strictness the rest of the file gets.
func TestReviewNewUserATasksMisspelledArgsFieldIsRefusedNamingTheTask(t *testing.T) {
	reg := registry(t)
	_, err := dispatcher.LoadConfig(strings.NewReader(
		`{"tasks": [{"key": "nightly", "schedule": "0 3 * * *", "kind": "report", "args": {"perod": "daily"}}]}`), reg)
	require.Error(t, err, "an args field the kind does not have is a typo, not a value")
	require.ErrorContains(t, err, "task nightly")
	require.ErrorContains(t, err, "perod")
}
