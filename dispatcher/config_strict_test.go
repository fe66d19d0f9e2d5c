package dispatcher_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/dispatcher"
)

// recurring.md: a config file's bad task "stops the dispatcher at start
// with an error that names the task", and the file is read strictly. A
// misspelled field of a task's args ("perod" for "period") was dropped
// silently once: the dispatcher started, and every tick enqueued the job
// with its zero value, a nightly report of no period. A task's own
// unknown fields and wrong types were refused, but by an error that did
// not say which task.
func TestAConfigTasksMisspelledArgsFieldIsRefusedNamingTheTask(t *testing.T) {
	reg := registry(t)
	_, err := dispatcher.LoadConfig(strings.NewReader(
		`{"tasks": [{"key": "nightly", "schedule": "0 3 * * *", "kind": "report", "args": {"perod": "daily"}}]}`), reg)
	require.Error(t, err, "an args field the kind does not have is a typo, not a value")
	require.ErrorContains(t, err, "task nightly")
	require.ErrorContains(t, err, "perod")

	for _, c := range []struct{ json, want string }{
		{`{"tasks": [{"key": "nightly", "schedule": "@daily", "kind": "report", "priority": "high"}]}`,
			"dispatcher config: task nightly: priority is a JSON string; it takes a whole number"},
		{`{"tasks": [{"key": "nightly", "schedule": "@daily", "kind": "report", "queue": 5}]}`,
			"dispatcher config: task nightly: queue is a JSON number; it takes a JSON string"},
		{`{"tasks": [{"key": "nightly", "schedule": "@daily", "kinds": "report"}]}`,
			`dispatcher config: task nightly: json: unknown field "kinds"`},
		{`{"tasks": [{"key": "a", "schedule": "@daily", "kind": "report"}, {"schedule": "@daily", "kind": "report", "prority": 1}]}`,
			`dispatcher config: task #2: json: unknown field "prority"`},
		{`{"tasks": [5]}`, "dispatcher config: task #1: the task is a JSON number; it takes a JSON object"},
		{`{"tasks": [{"key": "nightly", "schedule": "@daily", "kind": "report", "args": {"period": "daily"} "x": 1}]}`,
			"dispatcher config: invalid character"},
	} {
		_, err := dispatcher.LoadConfig(strings.NewReader(c.json), reg)
		require.ErrorContains(t, err, c.want, c.json)
	}

	// The listing reads the args of a kind it knows as strictly.
	_, err = dispatcher.LoadConfigToList(strings.NewReader(
		`{"tasks": [{"key": "nightly", "schedule": "0 3 * * *", "kind": "report", "args": {"perod": "daily"}}]}`), reg)
	require.ErrorContains(t, err, `task nightly: decode args of report: json: unknown field "perod"`)

	// A well-formed task still loads. (A job's stored args, which a newer
	// version of the app may write with more fields, are decoded
	// leniently: jobs' TestStoredArgsMayCarryFieldsTheKindDoesNotHave.)
	fc, err := dispatcher.LoadConfig(strings.NewReader(
		`{"tasks": [{"key": "nightly", "schedule": "0 3 * * *", "kind": "report", "args": {"period": "daily"}, "priority": 2}]}`), reg)
	require.NoError(t, err)
	require.Len(t, fc.Tasks, 1)
}
