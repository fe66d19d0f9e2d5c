package jobs

import (
	"errors"
	"fmt"
	"reflect"
	"strconv"

	"github.com/sluicequeue/sluice/internal/engine"
)

// MaxFairWeight is the largest weight FairWeight may give a key.
const MaxFairWeight = engine.MaxFairWeight

type fairOption struct{ key any }

// Fair gives the kind a fairness key: while several keys of a queue have
// ready jobs, claims share the queue among them in proportion to their
// weights (FairWeight; 1 by default), and a key that was idle gets its
// first job claimed within about one round of the busy keys. key returns a
// string or an integer (of any size); keys are per queue, shared by every
// fair kind of the queue, and follow the rule of every key (1 to 255 bytes
// of valid UTF-8, no control characters). See docs/fairness.md.
func Fair[T Args](key func(T) any) RegisterOption { return fairOption{key: key} }

func (f fairOption) applyRegister(k *kindConfig) error {
	k.fair = append(k.fair, f.key)
	return nil
}

type fairWeightOption struct{ weight any }

// FairWeight gives each fairness key a weight, 1 to MaxFairWeight: a key
// of weight 2 gets twice the claims of a key of weight 1 while both have
// work. It needs Fair. A job is tagged with its key's weight at enqueue.
// Defaults to 1 for every key.
func FairWeight[T Args](weight func(T) int) RegisterOption { return fairWeightOption{weight: weight} }

func (f fairWeightOption) applyRegister(k *kindConfig) error {
	k.fairWeight = append(k.fairWeight, f.weight)
	return nil
}

// fairRule is a compiled fairness key and weight with its type erased.
type fairRule struct {
	key    func(args any) (string, error)
	weight func(args any) (int, error)
}

// compileFair checks a kind's Fair and FairWeight declarations.
func compileFair[T Args](cfg kindConfig) (*fairRule, error) {
	var zero T
	switch {
	case len(cfg.fair) > 1:
		return nil, errors.New("Fair is declared more than once; a kind has one fairness key")
	case len(cfg.fairWeight) > 1:
		return nil, errors.New("FairWeight is declared more than once; a kind has one")
	case len(cfg.fair) == 0 && len(cfg.fairWeight) > 0:
		return nil, errors.New("FairWeight needs Fair: declare the fairness key too")
	case len(cfg.fair) == 0:
		return nil, nil
	}
	key, ok := cfg.fair[0].(func(T) any)
	if !ok {
		return nil, fmt.Errorf("Fair: declared as %T, but the kind's args are %T", cfg.fair[0], zero)
	}
	if key == nil {
		return nil, errors.New("Fair: the key function is nil")
	}
	rule := &fairRule{
		key: func(a any) (k string, err error) {
			defer recoverAs(&err, "Fair: key function")
			return fairKeyString(key(a.(T)))
		},
		weight: func(any) (int, error) {
			return 1, nil
		},
	}
	if len(cfg.fairWeight) == 1 {
		weight, ok := cfg.fairWeight[0].(func(T) int)
		if !ok {
			return nil, fmt.Errorf("FairWeight: declared as %T, but the kind's args are %T", cfg.fairWeight[0], zero)
		}
		if weight == nil {
			return nil, errors.New("FairWeight: the weight function is nil")
		}
		rule.weight = func(a any) (w int, err error) {
			defer recoverAs(&err, "FairWeight: weight function")
			w = weight(a.(T))
			if w < 1 || w > MaxFairWeight {
				return 0, fmt.Errorf("FairWeight returned %d; a weight must be between 1 and %d", w, MaxFairWeight)
			}
			return w, nil
		}
	}
	return rule, nil
}

// fairKeyString turns a fairness key into its stored form: a string as
// it is, an integer in decimal.
func fairKeyString(v any) (string, error) {
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.String:
		if rv.Len() == 0 {
			return "", errors.New("Fair returned an empty key")
		}
		return rv.String(), nil
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return strconv.FormatInt(rv.Int(), 10), nil
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return strconv.FormatUint(rv.Uint(), 10), nil
	case reflect.Invalid:
		return "", errors.New("Fair returned nil; a fairness key is a string or an integer")
	}
	return "", fmt.Errorf("Fair returned a %T; a fairness key is a string or an integer", v)
}

// fairKey computes a job's fairness key and weight at enqueue; "" and 0
// for a kind without one.
func (k *kind) fairKey(args any) (string, int, error) {
	if k.fair == nil {
		return "", 0, nil
	}
	key, err := k.fair.key(args)
	if err != nil {
		return "", 0, err
	}
	if err := engine.CheckKey("fairness key", key); err != nil {
		return "", 0, err
	}
	w, err := k.fair.weight(args)
	if err != nil {
		return "", 0, fmt.Errorf("fairness key %q: %w", key, err)
	}
	return key, w, nil
}
