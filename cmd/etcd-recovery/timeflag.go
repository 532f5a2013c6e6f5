package main

import (
	"strings"
	"time"
)

// timeFlagForms is what a time flag (--since, --to-time) accepts, for its
// usage text and its error.
const timeFlagForms = "RFC 3339 (2006-01-02T15:04:05Z) or a duration before now (2h, 15m, 1h30m)"

// parseTimeFlag reads a time flag's value: an RFC 3339 time, or a Go
// duration that far before now ("--since 2h": two hours ago). A bad value
// is a usage error naming the command, the flag and the forms it takes.
func parseTimeFlag(command, flag, v string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
		return t, nil
	}
	d, err := time.ParseDuration(strings.TrimSpace(v))
	switch {
	case err != nil:
		return time.Time{}, usagef("%s: --%s %q: want %s", command, flag, v, timeFlagForms)
	case d < 0:
		return time.Time{}, usagef("%s: --%s %q: a duration is how long before now, so not negative (want %s)", command, flag, v, timeFlagForms)
	case d == 0:
		// "Now" is a moment that has not been journaled yet: --since 0
		// would find nothing and read as "never changed", --to-time 0 is
		// --to-latest without its checks.
		return time.Time{}, usagef("%s: --%s %q: a duration of zero is now, which no journal holds yet (for the newest state, restore --to-latest); want %s", command, flag, v, timeFlagForms)
	}
	return now.Add(-d), nil
}
