package main

import (
	"time"

	"github.com/urfave/cli/v2"
)

// pitrFlags are restore's point-in-time flags, checked: --to-revision,
// --to-time or --to-latest, at most one.
type pitrFlags struct {
	// revision is --to-revision; at is --to-time, resolved to a revision
	// once the journal is read.
	revision int64
	at       time.Time
	atText   string
	latest   bool
}

func (p pitrFlags) any() bool { return p.revision > 0 || !p.at.IsZero() || p.latest }

// pointInTime checks the point-in-time flags (usage errors name them).
func (o *restoreOpts) pointInTime(c *cli.Context) (pitrFlags, error) {
	var set []string
	for _, f := range []string{"to-revision", "to-time", "to-latest"} {
		if c.IsSet(f) {
			set = append(set, "--"+f)
		}
	}
	if len(set) > 1 {
		return pitrFlags{}, usagef("restore: %s and %s: give one", set[0], set[1])
	}
	p := pitrFlags{revision: o.toRevision, latest: o.toLatest, atText: o.toTime}
	switch {
	case o.acceptUnprovenJournal && len(set) == 0:
		return pitrFlags{}, usagef("restore: --accept-unproven-journal goes with --to-revision, --to-time or --to-latest")
	case c.IsSet("to-revision") && o.toRevision <= 0:
		return pitrFlags{}, usagef("restore: --to-revision must be a revision (positive)")
	case o.toTime != "":
		t, err := parseTimeFlag("restore", "to-time", o.toTime, time.Now())
		if err != nil {
			return pitrFlags{}, err
		}
		p.at = t
	}
	return p, nil
}
