// Package keys turns the key declarations of rate limits, concurrency
// limits and coalescing rules into strings. All three follow one set of
// rules, kept here so they cannot drift apart.
package keys

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"
	"time"
)

// Keyer is implemented by values that name a record in a key, such as an
// account: the key part is whatever SluiceKey returns.
type Keyer interface {
	SluiceKey() string
}

// Func computes the key value of one job's args. An empty result means the
// bare scope (the kind's or the group's whole budget).
type Func[T any] func(args T) (string, error)

// Compile turns a declaration into a key function. decl may be:
//
//   - nil: no key; Compile returns a nil Func, which callers read as
//     "the rule is off";
//   - a string: a literal, the same for every job;
//   - func(T) any or func(T) (any, error): computed from the job's args.
//
// field names the declaration in errors ("RateLimit.Key").
func Compile[T any](field string, decl any) (Func[T], error) {
	switch d := decl.(type) {
	case nil:
		return nil, nil
	case string:
		return func(T) (string, error) { return d, nil }, nil
	case func(T) any:
		return guard(field, func(a T) (any, error) { return d(a), nil }), nil
	case func(T) (any, error):
		return guard(field, d), nil
	case func(T) string:
		return guard(field, func(a T) (any, error) { return d(a), nil }), nil
	default:
		var zero T
		return nil, fmt.Errorf("%s: unsupported declaration of type %T; use a string literal or a func(%T) any", field, decl, zero)
	}
}

// guard wraps a user key function: it turns a panic into an error and
// joins the result into a string.
func guard[T any](field string, f func(T) (any, error)) Func[T] {
	return func(a T) (key string, err error) {
		defer func() {
			if r := recover(); r != nil {
				err = fmt.Errorf("%s: key function panicked: %v", field, r)
			}
		}()
		v, err := f(a)
		if err != nil {
			return "", fmt.Errorf("%s: %w", field, err)
		}
		key, err = Join(v)
		if err != nil {
			return "", fmt.Errorf("%s: %w", field, err)
		}
		return key, nil
	}
}

// Scoped returns the stored form of a key: scope alone when value is
// empty, otherwise scope and value joined with "/".
func Scoped(scope, value string) string {
	if value == "" {
		return scope
	}
	return scope + "/" + value
}

// ErrUnsupported is returned by Join for values that cannot name a key,
// such as maps and functions.
var ErrUnsupported = errors.New("unsupported key value")

// Join turns a key function's result into a string:
//
//   - nil (or a nil pointer) gives "";
//   - a Keyer gives its SluiceKey;
//   - strings, integers, unsigned integers and booleans give their text, so
//     1 and "1" give the same key; so does a float that holds a whole
//     number within the int64 range (what encoding/json decodes a number
//     into as any), so 42.0 gives "42"; any other float is an error, since
//     its text would not name one key for one number;
//   - a time.Time gives its instant in UTC, RFC 3339 with nanoseconds
//     (time.RFC3339Nano: "2026-02-28T23:00:00Z", "…T23:00:00.5Z"), so
//     the same instant gives one key in any location, with or without a
//     monotonic clock reading (its String would give neither);
//   - a slice or array gives its items joined with "/";
//   - a struct (or pointer to one) with an exported field named ID gives
//     "TypeName/ID";
//   - any other fmt.Stringer gives its String.
//
// Anything else is an error wrapping ErrUnsupported.
func Join(v any) (string, error) {
	if v == nil {
		return "", nil
	}
	switch x := v.(type) {
	case Keyer:
		if isNilPointer(x) {
			return "", nil
		}
		return x.SluiceKey(), nil
	case string:
		return x, nil
	case bool:
		return strconv.FormatBool(x), nil
	case time.Time:
		return x.UTC().Format(time.RFC3339Nano), nil
	}
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return strconv.FormatInt(rv.Int(), 10), nil
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return strconv.FormatUint(rv.Uint(), 10), nil
	case reflect.Float32, reflect.Float64:
		f := rv.Float()
		if f != math.Trunc(f) || f < -(1<<63) || f >= 1<<63 {
			return "", fmt.Errorf("%w: the float %v (a float key must be a whole number within the int64 range; return an integer or a string)", ErrUnsupported, f)
		}
		return strconv.FormatInt(int64(f), 10), nil
	case reflect.String:
		return rv.String(), nil
	case reflect.Slice, reflect.Array:
		parts := make([]string, 0, rv.Len())
		for i := 0; i < rv.Len(); i++ {
			p, err := Join(rv.Index(i).Interface())
			if err != nil {
				return "", err
			}
			if p != "" {
				parts = append(parts, p)
			}
		}
		return strings.Join(parts, "/"), nil
	case reflect.Pointer:
		if rv.IsNil() {
			return "", nil
		}
		return Join(rv.Elem().Interface())
	case reflect.Struct:
		if id := rv.FieldByName("ID"); id.IsValid() && rv.Type().Name() != "" {
			if f, _ := rv.Type().FieldByName("ID"); f.IsExported() {
				idText, err := Join(id.Interface())
				if err != nil {
					return "", err
				}
				return rv.Type().Name() + "/" + idText, nil
			}
		}
	}
	if s, ok := v.(fmt.Stringer); ok {
		return s.String(), nil
	}
	return "", fmt.Errorf("%w: %T (return a string, a number, a slice of them, a struct with an ID field, or implement SluiceKey() string)", ErrUnsupported, v)
}

func isNilPointer(v any) bool {
	rv := reflect.ValueOf(v)
	return rv.Kind() == reflect.Pointer && rv.IsNil()
}
