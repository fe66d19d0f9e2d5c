package dispatcher

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
)

// parser reads cron expressions and descriptors; ParseSchedule reads
// "@every D" itself.
var parser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// fireCheckFrom is where ParseSchedule looks for a schedule's first tick.
// robfig's search gives up after five years; from the start of a leap
// year every date that exists, February 29th included, and every weekday
// of every month come within five years, so a schedule without a tick
// there never fires.
var fireCheckFrom = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

// ParseSchedule parses a cron expression or descriptor as tasks take them,
// after an optional time zone ("CRON_TZ=Europe/Paris 0 3 * * *"). It
// refuses a schedule that never fires (February 30th) and an "@every D"
// whose D is not a whole number of seconds, at least one.
func ParseSchedule(spec string) (cron.Schedule, error) {
	if spec == "" {
		return nil, errors.New("the schedule is empty")
	}
	loc, rest, err := splitZone(spec)
	if err != nil {
		return nil, err
	}
	if fields := strings.Fields(rest); len(fields) > 0 && fields[0] == "@every" {
		return parseEvery(fields[1:], loc)
	}
	sched, err := parser.Parse(spec)
	if err != nil {
		return nil, err
	}
	cs, ok := sched.(*cron.SpecSchedule)
	if !ok {
		return nil, fmt.Errorf("unexpected schedule type %T", sched)
	}
	if cs.Next(fireCheckFrom).IsZero() {
		return nil, errors.New("it never fires: no time in five years matches it (a date no month has, as February 30th?)")
	}
	return wallSchedule{spec: cs, everyHour: cs.Hour&allHours == allHours}, nil
}

// splitZone splits the time zone off a spec that starts "CRON_TZ=Zone "
// or "TZ=Zone ", as robfig's parser reads it, and loads it. The zone is
// nil when the spec names none.
func splitZone(spec string) (*time.Location, string, error) {
	if !strings.HasPrefix(spec, "CRON_TZ=") && !strings.HasPrefix(spec, "TZ=") {
		return nil, spec, nil
	}
	prefix, rest, _ := strings.Cut(spec, "=")
	zone, rest, ok := strings.Cut(rest, " ")
	if !ok {
		return nil, "", fmt.Errorf("%s=%s is followed by no schedule", prefix, zone)
	}
	loc, err := time.LoadLocation(zone)
	if err != nil {
		return nil, "", fmt.Errorf("time zone %q: %w", zone, err)
	}
	return loc, strings.TrimSpace(rest), nil
}

// parseEvery reads the interval of "@every D" (args are the words after
// "@every"). robfig's parser would run an interval under a second, zero
// or negative every second, and drop a fraction of a second: those are
// refused.
func parseEvery(args []string, loc *time.Location) (cron.Schedule, error) {
	if len(args) != 1 {
		return nil, errors.New("@every takes one interval, as in @every 5m")
	}
	d, err := time.ParseDuration(args[0])
	if err != nil {
		return nil, fmt.Errorf("@every: %w", err)
	}
	if d < time.Second || d%time.Second != 0 {
		return nil, fmt.Errorf("@every %s: the interval must be a whole number of seconds, at least one", args[0])
	}
	return alignedEvery{every: d, loc: loc}, nil
}

// zoneOf returns the zone a schedule reads t in: its own (CRON_TZ), or
// else t's. time.Local stands for t's, as robfig's schedules take it.
func zoneOf(loc *time.Location, t time.Time) *time.Location {
	if loc == nil || loc == time.Local {
		return t.Location()
	}
	return loc
}

// alignedEvery is "@every D" ticking at fixed instants rather than D after
// each dispatcher's start: every dispatcher, however late it started or
// restarted, reaches the same ticks, so each runs once.
//
// The ticks are the multiples of D counted from Go's zero time
// (0001-01-01 00:00 UTC) on a clock that reads UTC plus the part of the
// zone's UTC offset at the tick that is not whole hours (30 minutes in
// Asia/Kolkata, none in most zones): a D that divides an hour ticks on the
// local hour. In whole-hour zones the ticks are the multiples of D counted
// in UTC, as they were before zones were taken into account.
type alignedEvery struct {
	every time.Duration
	loc   *time.Location // the CRON_TZ zone; nil for the time's own
}

// maxStretches bounds alignedEvery's search: an interval of several years
// crosses a few stretches of one offset per year.
const maxStretches = 1000

// Next returns the first tick after t: the first multiple of the interval,
// on the clock of the offset in force at it, in the first stretch of
// constant offset that holds one. Next is the same for every t between two
// ticks, so dispatchers agree however they reached t.
func (e alignedEvery) Next(t time.Time) time.Time {
	loc := zoneOf(e.loc, t)
	from := t.Add(time.Nanosecond)
	var n time.Time
	for range maxStretches {
		st := stretchAt(from, loc)
		n = e.firstFrom(from, st.offset)
		if st.end.IsZero() || n.Before(st.end) {
			break
		}
		from = st.end
	}
	return n.In(t.Location())
}

// firstFrom returns the first tick at or after from on the clock of a zone
// whose UTC offset is offset seconds.
func (e alignedEvery) firstFrom(from time.Time, offset int) time.Time {
	shift := time.Duration(offset) * time.Second % time.Hour
	if shift < 0 {
		shift += time.Hour
	}
	return from.Add(shift - time.Nanosecond).Truncate(e.every).Add(e.every - shift)
}

// allHours are the bits of a cron hour field that names every hour.
const allHours = 1<<24 - 1

// wallSchedule is a cron expression read on the wall clock of its zone
// (CRON_TZ's, or else the time's own). It searches one stretch of constant
// UTC offset at a time, in which robfig's search is exact (across a change
// it steps by whole hours, and misses ticks where the clock changes by 30
// minutes).
//
// A schedule that names its hours (whose hour field is not every hour:
// "30 2 * * *", "0 */6 * * *") follows Vixie cron's rule on the days
// the offset changes: a wall time the clock shows twice runs the first
// time only, and a wall time the clock skips runs at the first instant
// after the change. A schedule of every hour ("30 * * * *", "@hourly")
// runs as the wall clock passes: twice in a repeated hour, never at a wall
// time that does not exist.
type wallSchedule struct {
	spec      *cron.SpecSchedule
	everyHour bool
}

// Next returns the first tick after t. The ticks are fixed instants of the
// zone's calendar, so Next is the same for every t between two ticks and
// increases with t: dispatchers agree however they reached t. Next returns
// the zero time if there is no tick within five years, as robfig's does.
func (w wallSchedule) Next(t time.Time) time.Time {
	loc := zoneOf(w.spec.Location, t)
	at := t.Truncate(time.Second).Add(time.Second) // the first whole second after t
	limit := at.AddDate(5, 0, 0)
	for at.Before(limit) {
		st := stretchAt(at, loc)
		if !w.everyHour && at.Equal(st.start) && w.skipped(st) {
			return at.In(t.Location()) // a wall time of the gap the clock skipped
		}
		n := w.firstFrom(at, st.offset)
		switch {
		case n.IsZero():
			return time.Time{}
		case !st.holds(n):
			at = st.end
		case !w.everyHour && st.repeats(n):
			at = st.start.Add(-st.jump) // its wall time came before the clock went back
		default:
			return n.In(t.Location())
		}
	}
	return time.Time{}
}

// skipped reports whether a wall time of the spec is in the gap the clock
// skipped at the start of st, if it went forward there.
func (w wallSchedule) skipped(st stretch) bool {
	if st.jump <= 0 {
		return false
	}
	before := st.offset - int(st.jump/time.Second)
	return w.firstFrom(st.start, before).Before(st.start.Add(st.jump))
}

// firstFrom returns the first wall time of the spec at or after at, read
// in a zone of a constant UTC offset of offset seconds; zero if none comes
// within five years.
func (w wallSchedule) firstFrom(at time.Time, offset int) time.Time {
	fixed := *w.spec
	fixed.Location = time.FixedZone("", offset)
	return fixed.Next(at.Add(-time.Nanosecond))
}

// stretch is a span of time in a zone over which its UTC offset does not
// change.
type stretch struct {
	// start and end bound it, [start, end); zero when it has no bound.
	start, end time.Time
	// offset is the UTC offset throughout, in seconds east of UTC.
	offset int
	// jump is how far the clock moved at start: forward (positive) over a
	// gap of wall times, back (negative) to repeat some, or not at all.
	jump time.Duration
}

// stretchAt returns the stretch of loc that holds t.
func stretchAt(t time.Time, loc *time.Location) stretch {
	local := t.In(loc)
	_, offset := local.Zone()
	st := stretch{offset: offset}
	st.start, st.end = local.ZoneBounds()
	if !st.start.IsZero() {
		_, before := st.start.Add(-time.Nanosecond).Zone()
		st.jump = time.Duration(offset-before) * time.Second
	}
	return st
}

// holds reports whether the instant t, not before the start, is in the
// stretch.
func (st stretch) holds(t time.Time) bool { return st.end.IsZero() || t.Before(st.end) }

// repeats reports whether the wall time at t came once already, before
// the clock went back at the start of the stretch.
func (st stretch) repeats(t time.Time) bool { return st.jump < 0 && t.Before(st.start.Add(-st.jump)) }
