package dispatcher_test

import (
	"reflect"
	"sort"
	"testing"
	"time"

	"github.com/robfig/cron/v3"
	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/dispatcher"
)

func zone(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	require.NoError(t, err)
	return loc
}

func parse(t *testing.T, spec string) cron.Schedule {
	t.Helper()
	sched, err := dispatcher.ParseSchedule(spec)
	require.NoError(t, err, spec)
	return sched
}

// ticks returns the ticks of sched after from and before to, each the
// Next of the one before.
func ticks(t *testing.T, sched cron.Schedule, from, to time.Time) []time.Time {
	t.Helper()
	var out []time.Time
	for n := sched.Next(from); n.Before(to); n = sched.Next(n) {
		require.False(t, n.IsZero(), "no tick after %s", from)
		out = append(out, n)
	}
	return out
}

// walls shows ticks on the wall clock of loc, with their offsets.
func walls(ts []time.Time, loc *time.Location) []string {
	out := []string{}
	for _, t := range ts {
		out = append(out, t.In(loc).Format("01-02 15:04 -0700"))
	}
	return out
}

// A cron expression that can never fire (February 30th, April 31st)
// parses, and robfig's Next gives the zero time for it: refused.
func TestAScheduleThatNeverFiresIsRefused(t *testing.T) {
	for _, spec := range []string{"0 0 30 2 *", "0 0 31 4 *", "0 0 0 31 2,4 *", "CRON_TZ=Europe/Paris 0 0 30 2 *"} {
		_, err := dispatcher.ParseSchedule(spec)
		require.ErrorContains(t, err, "never fires", spec)
	}
	// February 29th fires every leap year; February 30th or any Monday
	// fires on Mondays (cron takes either day field when both are set).
	for _, spec := range []string{"0 0 29 2 *", "0 0 30 2 1", "CRON_TZ=Pacific/Apia 0 0 30 12 *"} {
		parse(t, spec)
	}
}

// robfig's search gives up after five years: February 29th finds no tick
// from that day in 2096 until 2099 (2100 is no leap year). The dispatcher
// skips such a task meanwhile (TestATaskWithNoTickIsSkippedAndLoggedOnce).
func TestAScheduleOfFebruary29thFindsNoTickForTheFiveYearsWithoutOne(t *testing.T) {
	sched := parse(t, "0 0 29 2 *")
	require.Equal(t, time.Date(2096, 2, 29, 0, 0, 0, 0, time.UTC), sched.Next(time.Date(2095, 3, 1, 0, 0, 0, 0, time.UTC)))
	require.Zero(t, sched.Next(time.Date(2096, 2, 29, 0, 0, 0, 0, time.UTC)))
	require.Zero(t, sched.Next(time.Date(2098, 6, 1, 0, 0, 0, 0, time.UTC)))
	require.Equal(t, time.Date(2104, 2, 29, 0, 0, 0, 0, time.UTC), sched.Next(time.Date(2099, 3, 1, 0, 0, 0, 0, time.UTC)))
}

// robfig's Every turns an interval under a second (zero, negative) into
// one second and drops fractions: "@every -1h" ran every second.
func TestEveryIsAWholeNumberOfSecondsAtLeastOne(t *testing.T) {
	for spec, want := range map[string]string{
		"@every -1h":             "@every -1h: the interval must be a whole number of seconds, at least one",
		"@every 0s":              "at least one",
		"@every 500ms":           "at least one",
		"@every 1500ms":          "@every 1500ms: the interval must be a whole number of seconds",
		"CRON_TZ=UTC @every 0s":  "at least one",
		"@every":                 "@every takes one interval",
		"@every 1m 2m":           "@every takes one interval",
		"@every a minute":        "@every takes one interval",
		"@every fortnight":       `@every: time: invalid duration "fortnight"`,
		"TZ=Nowhere/City @every": `time zone "Nowhere/City"`,
	} {
		_, err := dispatcher.ParseSchedule(spec)
		require.ErrorContains(t, err, want, spec)
	}
	for spec, every := range map[string]time.Duration{"@every 1s": time.Second, "@every 90s": 90 * time.Second, "@every 1h30m": 90 * time.Minute} {
		require.Equal(t, t0.Add(every), parse(t, spec).Next(t0), spec)
	}
}

// robfig's parser panicked on a time zone with no schedule after it.
func TestATimeZoneWithNoScheduleIsRefused(t *testing.T) {
	_, err := dispatcher.ParseSchedule("CRON_TZ=UTC")
	require.EqualError(t, err, "CRON_TZ=UTC is followed by no schedule")
	_, err = dispatcher.ParseSchedule("TZ=Europe/Paris")
	require.EqualError(t, err, "TZ=Europe/Paris is followed by no schedule")
	_, err = dispatcher.ParseSchedule("CRON_TZ=Nowhere/City 0 3 * * *")
	require.ErrorContains(t, err, `time zone "Nowhere/City"`)
}

// docs/recurring.md: @every D ticks "on the hour for a divisor of an
// hour", in the dispatcher clock's zone or CRON_TZ's, including zones
// whose offset is not whole hours.
func TestEveryTicksOnTheLocalHour(t *testing.T) {
	kolkata := zone(t, "Asia/Kolkata")
	require.Equal(t, "13:00", parse(t, "@every 1h").Next(time.Date(2026, 3, 1, 12, 10, 0, 0, kolkata)).Format("15:04"))
	for _, name := range []string{"Asia/Kolkata", "Asia/Kathmandu", "America/St_Johns", "Australia/Lord_Howe", "Pacific/Chatham"} {
		loc := zone(t, name)
		for _, now := range []time.Time{time.Date(2026, 3, 1, 12, 10, 0, 0, loc), time.Date(2026, 7, 1, 23, 59, 59, 0, loc)} {
			for spec, step := range map[string]time.Duration{"@every 1h": time.Hour, "@every 10m": 10 * time.Minute} {
				next := parse(t, spec).Next(now).In(loc)
				require.True(t, next.After(now) && !next.After(now.Add(step)), "%s after %s in %s: %s", spec, now, name, next)
				require.Zero(t, next.Minute()%int(step.Minutes()), "%s after %s in %s: %s", spec, now, name, next)
				require.Zero(t, next.Second(), "%s after %s in %s: %s", spec, now, name, next)
				// CRON_TZ applies to a time in another zone.
				zoned := parse(t, "CRON_TZ="+name+" "+spec).Next(now.UTC())
				require.True(t, next.Equal(zoned), "%s: %s, with CRON_TZ %s", spec, next, zoned)
			}
		}
	}
}

// In a zone of whole-hour offsets @every ticks at the multiples of its
// interval counted in UTC, as before CRON_TZ and offsets were taken into
// account: dispatchers of either version reach the same ticks.
func TestEveryTicksAsBeforeInWholeHourZones(t *testing.T) {
	for _, name := range []string{"UTC", "America/New_York", "Europe/Paris", "Asia/Tokyo"} {
		loc := zone(t, name)
		for _, every := range []time.Duration{time.Second, 7 * time.Minute, 10 * time.Minute, time.Hour, 5 * time.Hour, 24 * time.Hour} {
			plain := parse(t, "@every "+every.String())
			zoned := parse(t, "CRON_TZ="+name+" @every "+every.String())
			for at := time.Date(2026, 1, 1, 0, 0, 0, 0, loc); at.Year() == 2026; at = at.Add(3*time.Hour + 17*time.Minute + 13*time.Second) {
				want := at.Truncate(every).Add(every)
				require.Equal(t, want, plain.Next(at), "@every %s after %s", every, at)
				require.True(t, want.Equal(zoned.Next(at.UTC())), "CRON_TZ=%s @every %s after %s", name, every, at)
			}
		}
	}
}

// Vixie cron's rule for schedules that name their hours: on the day the
// clocks go back a wall time shown twice runs the first time only; on the
// day they go forward a wall time skipped runs at the first instant after
// the change. In a zone of 30-minute changes too.
func TestAScheduleOfNamedHoursRunsOnceOnDSTDays(t *testing.T) {
	ny, lh := zone(t, "America/New_York"), zone(t, "Australia/Lord_Howe")
	for _, c := range []struct {
		name, spec string
		loc        *time.Location
		day        time.Time // the day of the change, at midnight
		want       []string  // the ticks of the day before, that day and the day after
	}{
		{"New York falls back", "30 1 * * *", ny, time.Date(2026, 11, 1, 0, 0, 0, 0, ny),
			[]string{"10-31 01:30 -0400", "11-01 01:30 -0400", "11-02 01:30 -0500"}},
		{"New York springs forward", "30 2 * * *", ny, time.Date(2026, 3, 8, 0, 0, 0, 0, ny),
			[]string{"03-07 02:30 -0500", "03-08 03:00 -0400", "03-09 02:30 -0400"}},
		{"New York springs forward over four ticks", "*/15 2 * * *", ny, time.Date(2026, 3, 8, 0, 0, 0, 0, ny),
			[]string{"03-07 02:00 -0500", "03-07 02:15 -0500", "03-07 02:30 -0500", "03-07 02:45 -0500",
				"03-08 03:00 -0400",
				"03-09 02:00 -0400", "03-09 02:15 -0400", "03-09 02:30 -0400", "03-09 02:45 -0400"}},
		{"Lord Howe falls back", "45 1 * * *", lh, time.Date(2026, 4, 5, 0, 0, 0, 0, lh),
			[]string{"04-04 01:45 +1100", "04-05 01:45 +1100", "04-06 01:45 +1030"}},
		{"Lord Howe falls back: the hour after the repeated half", "0 2 * * *", lh, time.Date(2026, 4, 5, 0, 0, 0, 0, lh),
			[]string{"04-04 02:00 +1100", "04-05 02:00 +1030", "04-06 02:00 +1030"}},
		{"Lord Howe springs forward", "15 2 * * *", lh, time.Date(2026, 10, 4, 0, 0, 0, 0, lh),
			[]string{"10-03 02:15 +1030", "10-04 02:30 +1100", "10-05 02:15 +1100"}},
		{"Lord Howe springs forward: the hour after the gap", "15 3 * * *", lh, time.Date(2026, 10, 4, 0, 0, 0, 0, lh),
			[]string{"10-03 03:15 +1030", "10-04 03:15 +1100", "10-05 03:15 +1100"}},
		{"Lord Howe falls back, with CRON_TZ", "CRON_TZ=Australia/Lord_Howe 45 1 * * *", time.UTC, time.Date(2026, 4, 5, 0, 0, 0, 0, lh),
			[]string{"04-03 14:45 +0000", "04-04 14:45 +0000", "04-05 15:15 +0000"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			from := c.day.AddDate(0, 0, -1).In(c.loc)
			got := ticks(t, parse(t, c.spec), from, c.day.AddDate(0, 0, 2))
			require.Equal(t, c.want, walls(got, c.loc))
		})
	}
}

// A schedule of every hour runs as the wall clock passes: at each of the
// two times the clock shows a repeated wall time, at no wall time the
// clock skips.
func TestAScheduleOfEveryHourRunsAsTheWallClockPasses(t *testing.T) {
	ny, lh := zone(t, "America/New_York"), zone(t, "Australia/Lord_Howe")
	for _, c := range []struct {
		name, spec string
		loc        *time.Location
		from       time.Time
		want       []string
	}{
		{"New York falls back", "30 * * * *", ny, time.Date(2026, 11, 1, 0, 0, 0, 0, ny),
			[]string{"11-01 00:30 -0400", "11-01 01:30 -0400", "11-01 01:30 -0500", "11-01 02:30 -0500"}},
		{"New York springs forward", "30 * * * *", ny, time.Date(2026, 3, 8, 0, 0, 0, 0, ny),
			[]string{"03-08 00:30 -0500", "03-08 01:30 -0500", "03-08 03:30 -0400", "03-08 04:30 -0400"}},
		{"Lord Howe falls back", "45 * * * *", lh, time.Date(2026, 4, 5, 0, 0, 0, 0, lh),
			[]string{"04-05 00:45 +1100", "04-05 01:45 +1100", "04-05 01:45 +1030", "04-05 02:45 +1030"}},
		{"Lord Howe falls back, on the hour", "@hourly", lh, time.Date(2026, 4, 5, 0, 0, 0, 0, lh),
			[]string{"04-05 01:00 +1100", "04-05 02:00 +1030", "04-05 03:00 +1030"}},
		{"Lord Howe springs forward", "15 * * * *", lh, time.Date(2026, 10, 4, 0, 0, 0, 0, lh),
			[]string{"10-04 00:15 +1030", "10-04 01:15 +1030", "10-04 03:15 +1100", "10-04 04:15 +1100"}},
		{"Lord Howe springs forward, past the gap", "45 * * * *", lh, time.Date(2026, 10, 4, 0, 0, 0, 0, lh),
			[]string{"10-04 00:45 +1030", "10-04 01:45 +1030", "10-04 02:45 +1100", "10-04 03:45 +1100"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := ticks(t, parse(t, c.spec), c.from, c.from.Add(4*time.Hour))
			require.Equal(t, c.want, walls(got, c.loc))
		})
	}
}

// Next is the first of a fixed set of instants after t, whatever t:
// several dispatchers, whenever they started, reach the same ticks; and
// it increases with t. Checked from every half minute and around every
// tick of a day each side of both changes of the year, in zones of
// whole-hour, 30-minute and fixed fractional offsets.
func TestNextIsTheFirstTickAfterAnyInstant(t *testing.T) {
	specs := []string{"30 1 * * *", "30 2 * * *", "*/15 2 * * *", "45 1-3 * * *", "0 0 * * *", "* 1 * * *",
		"30 * * * *", "@hourly", "*/20 * * * * *", "@every 1h", "@every 7m", "@every 5h", "@every 36h"}
	days := map[string][]time.Time{
		"America/New_York":    {time.Date(2026, 3, 8, 0, 0, 0, 0, time.UTC), time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)},
		"Australia/Lord_Howe": {time.Date(2026, 4, 4, 12, 0, 0, 0, time.UTC), time.Date(2026, 10, 3, 12, 0, 0, 0, time.UTC)},
		"Asia/Kolkata":        {time.Date(2026, 3, 8, 0, 0, 0, 0, time.UTC)},
		"UTC":                 {time.Date(2026, 3, 8, 0, 0, 0, 0, time.UTC)},
	}
	for name, ds := range days {
		loc := zone(t, name)
		for _, day := range ds {
			from, to := day.Add(-24*time.Hour).In(loc), day.Add(24*time.Hour).In(loc)
			for _, spec := range specs {
				sched := parse(t, spec)
				ts := ticks(t, sched, from.Add(-36*time.Hour), to.Add(36*time.Hour))
				for i := 1; i < len(ts); i++ {
					require.True(t, ts[i].After(ts[i-1]), "%s in %s: ticks %s then %s", spec, name, ts[i-1], ts[i])
				}
				// The checks call require only when they fail (comparing
				// as require.Equal does, with reflect.DeepEqual): its
				// bookkeeping on each of some 450,000 checks was most of
				// this test's time under -race.
				first := func(x time.Time) time.Time { // the first tick after x
					i := sort.Search(len(ts), func(i int) bool { return ts[i].After(x) })
					if i >= len(ts) {
						require.Less(t, i, len(ts), "%s in %s: no tick after %s", spec, name, x)
					}
					return ts[i]
				}
				check := func(x time.Time) {
					if want, got := first(x), sched.Next(x); !reflect.DeepEqual(want, got) {
						require.Equal(t, want, got, "%s in %s after %s", spec, name, x)
					}
				}
				for x := from; x.Before(to); x = x.Add(30 * time.Second) {
					check(x)
				}
				for _, tick := range ts {
					if tick.After(from) && tick.Before(to) {
						check(tick.Add(-time.Second))
						check(tick.Add(-time.Nanosecond))
						check(tick)
						check(tick.Add(time.Nanosecond))
					}
				}
			}
		}
	}
}
