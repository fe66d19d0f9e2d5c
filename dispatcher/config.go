package dispatcher

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"time"

	"github.com/sluicequeue/sluice/jobs"
)

// FileConfig is what a dispatcher's JSON config file declares: recurring
// tasks, by kind name and raw args, and the built-in tasks' schedules.
//
//	{
//	  "tasks": [
//	    {"key": "nightly-report", "schedule": "0 3 * * *", "kind": "build_report",
//	     "args": {"period": "daily"}, "queue": "reports", "priority": 1}
//	  ],
//	  "maintenance": {
//	    "clear_idle_budgets": {"schedule": "27 * * * *"},
//	    "clear_finished_jobs": {"retention": "48h"},
//	    "free_expired_slots": {"off": true}
//	  }
//	}
type FileConfig struct {
	// Tasks are the file's recurring tasks; default none.
	Tasks []Task
	// Maintenance changes the built-in tasks' schedules (or turns them
	// off); the zero value keeps their defaults.
	Maintenance Maintenance
}

type fileTask struct {
	Key      string          `json:"key"`
	Schedule string          `json:"schedule"`
	Kind     string          `json:"kind"`
	Args     json.RawMessage `json:"args"`
	Queue    string          `json:"queue"`
	Priority *int            `json:"priority"`
}

type fileMaintenanceTask struct {
	Schedule  string `json:"schedule"`
	Off       bool   `json:"off"`
	Retention string `json:"retention"`
}

type fileConfig struct {
	// Tasks are decoded one by one (decodeTask), so that an error in one
	// names it.
	Tasks       []json.RawMessage `json:"tasks"`
	Maintenance struct {
		ClearIdleBudgets  fileMaintenanceTask `json:"clear_idle_budgets"`
		ClearFinishedJobs fileMaintenanceTask `json:"clear_finished_jobs"`
		FreeExpiredSlots  fileMaintenanceTask `json:"free_expired_slots"`
	} `json:"maintenance"`
}

// LoadConfig reads a config file. The tasks' kinds must be registered in
// reg, which decodes their args: a task whose kind a binary does not know
// is refused rather than enqueued without its limits.
//
// The file is read strictly: a field a task or its kind's args do not
// have, or a value of the wrong type, is an error that names the task.
func LoadConfig(r io.Reader, reg *jobs.Registry) (FileConfig, error) {
	return loadConfig(r, reg, false)
}

// LoadConfigToList reads a config file as LoadConfig does, but keeps a
// task whose kind reg does not know (every task, with a nil reg) with its
// args undecoded instead of refusing it: for listing the tasks from a
// program that does not know the app's kinds, as the standalone sluice
// binary. A dispatcher must not run such tasks: each tick would fail to
// enqueue them.
func LoadConfigToList(r io.Reader, reg *jobs.Registry) (FileConfig, error) {
	return loadConfig(r, reg, true)
}

// decodeTask decodes the i-th task of a config file strictly (a field it
// does not know is an error) and returns it with the name errors give it:
// its key, or "#N" (its place in the file) when it has none.
func decodeTask(raw json.RawMessage, i int) (fileTask, string, error) {
	name := fmt.Sprintf("#%d", i+1)
	var named struct {
		Key string `json:"key"`
	}
	if json.Unmarshal(raw, &named) == nil && named.Key != "" {
		name = named.Key
	}
	var t fileTask
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&t); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			// not json's "Go struct field fileTask.priority of type int"
			want := "a JSON object"
			switch {
			case te.Field != "" && te.Type.Kind() == reflect.Int:
				want = "a whole number"
			case te.Field != "":
				want = "a JSON " + te.Type.String()
			}
			return fileTask{}, name, fmt.Errorf("%s is a JSON %s; it takes %s", cmp.Or(te.Field, "the task"), te.Value, want)
		}
		return fileTask{}, name, err
	}
	return t, name, nil
}

// unregistered stands for the args of a task whose kind the program does
// not know.
type unregistered struct{ kind string }

func (u unregistered) Kind() string { return u.kind }

func loadConfig(r io.Reader, reg *jobs.Registry, listing bool) (FileConfig, error) {
	var raw fileConfig
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&raw); err != nil {
		return FileConfig{}, fmt.Errorf("dispatcher config: %w", err)
	}
	var out FileConfig
	for i, rawTask := range raw.Tasks {
		t, name, err := decodeTask(rawTask, i)
		if err != nil {
			return FileConfig{}, fmt.Errorf("dispatcher config: task %s: %w", name, err)
		}
		if t.Kind == "" {
			return FileConfig{}, fmt.Errorf("dispatcher config: task %s: kind is missing", name)
		}
		if _, err := ParseSchedule(t.Schedule); err != nil {
			return FileConfig{}, fmt.Errorf("dispatcher config: task %s: schedule %q: %w", name, t.Schedule, err)
		}
		var args jobs.Args
		err = jobs.ErrUnknownKind
		if reg != nil {
			args, err = reg.ArgsFromJSON(t.Kind, t.Args)
		}
		if errors.Is(err, jobs.ErrUnknownKind) && listing {
			args, err = unregistered{t.Kind}, nil
		}
		if errors.Is(err, jobs.ErrUnknownKind) {
			return FileConfig{}, fmt.Errorf("dispatcher config: task %s: kind %s is not registered in this program; run the dispatcher from your app (cli.Main) so that its kinds are known", name, t.Kind)
		}
		if err != nil {
			return FileConfig{}, fmt.Errorf("dispatcher config: task %s: %w", name, err)
		}
		var opts []jobs.EnqueueOption
		if t.Queue != "" {
			opts = append(opts, jobs.Queue(t.Queue))
		}
		if t.Priority != nil {
			opts = append(opts, jobs.Priority(*t.Priority))
		}
		out.Tasks = append(out.Tasks, Task{Key: t.Key, Schedule: t.Schedule, Args: args, Options: opts})
	}
	m := raw.Maintenance
	out.Maintenance = Maintenance{
		ClearIdleBudgets:  MaintenanceTask{Schedule: m.ClearIdleBudgets.Schedule, Off: m.ClearIdleBudgets.Off},
		ClearFinishedJobs: MaintenanceTask{Schedule: m.ClearFinishedJobs.Schedule, Off: m.ClearFinishedJobs.Off},
		FreeExpiredSlots:  MaintenanceTask{Schedule: m.FreeExpiredSlots.Schedule, Off: m.FreeExpiredSlots.Off},
	}
	if m.ClearFinishedJobs.Retention != "" {
		d, err := time.ParseDuration(m.ClearFinishedJobs.Retention)
		if err != nil || d <= 0 {
			return FileConfig{}, fmt.Errorf("dispatcher config: clear_finished_jobs: retention %q is not a positive duration", m.ClearFinishedJobs.Retention)
		}
		out.Maintenance.Retention = d
	}
	return out, nil
}
