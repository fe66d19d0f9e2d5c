package testdb

import (
	"reflect"
	"testing"

	"github.com/sluicequeue/sluice/internal/engine"
)

// EachStatement renders every statement of d's catalog (each method of
// engine.SQL that returns a string, given zero values and lists of two)
// and calls fn with the method's name, the text and its arguments (nil
// where the method returns none). It returns how many it rendered.
func EachStatement(t testing.TB, d engine.Dialect, fn func(name, text string, args []any)) int {
	t.Helper()
	q, err := engine.NewSQL(d)
	if err != nil {
		t.Fatalf("the %s catalog: %v", d.Name(), err)
	}
	v := reflect.ValueOf(q)
	n := 0
	for i := range v.NumMethod() {
		m, name := v.Method(i), v.Type().Method(i).Name
		if m.Type().NumOut() == 0 || m.Type().Out(0).Kind() != reflect.String {
			continue
		}
		var in []reflect.Value
		for k := range m.Type().NumIn() {
			at := m.Type().In(k)
			if at.Kind() == reflect.Slice {
				in = append(in, reflect.MakeSlice(at, 2, 2)) // two of each list
			} else {
				in = append(in, reflect.Zero(at))
			}
		}
		out := m.Call(in)
		var args []any
		if len(out) > 1 {
			args, _ = out[1].Interface().([]any)
		}
		fn(name, out[0].String(), args)
		n++
	}
	return n
}
