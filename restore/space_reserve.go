package restore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// Scratch space across parallel restores. Each restore checks the room
// under a limited volume (EnvScratchLimit, EnvVolumeLimits) before it
// downloads; restores that run at once in one process (restore-all's
// --parallel) would all pass that check before any of them wrote, and
// together outgrow the limit (the kubelet evicts the pod). So a restore
// reserves what it will write: the check subtracts what the others
// reserved, a restore that does not fit beside them waits for them to
// finish (bounded by its context), and one that could not fit even alone
// fails at once with the SpaceError. A reservation is held for as long as
// the directory it stages into exists (a restore's private scratch dir,
// removed when it ends), or until released.

// spaceReservation is one restore's reserved bytes per limited root.
type spaceReservation struct {
	dir string // held while this directory exists (when it did at first)
	// existed: dir existed when reserved; else the reservation is held
	// until released, or the process ends.
	existed bool
	bytes   map[string]int64
}

var reserved struct {
	mu   sync.Mutex
	list []*spaceReservation
}

// reservePoll is how often a waiting restore checks again (the others'
// directories going away, and du, are not signalled).
var reservePoll = 200 * time.Millisecond

// reservedBy is what the live reservations hold per limited root; the
// ones whose directory is gone are dropped. Called with reserved.mu held.
func reservedBy() map[string]int64 {
	out := map[string]int64{}
	live := reserved.list[:0]
	for _, r := range reserved.list {
		if _, err := os.Stat(r.dir); err != nil && r.existed {
			continue
		}
		live = append(live, r)
		for root, n := range r.bytes {
			out[root] += n
		}
	}
	clear(reserved.list[len(live):])
	reserved.list = live
	return out
}

// ReservedSpace is what the restores of this process hold reserved under
// the scratch root's limit now (0 without one).
func ReservedSpace(scratchRoot string) int64 {
	root, _ := filepath.Abs(scratchRoot)
	reserved.mu.Lock()
	defer reserved.mu.Unlock()
	return reservedBy()[root]
}

// reserveSpace checks needs as CheckSpace does, less what the other
// restores of this process reserved, and reserves what falls under a
// limited root for as long as dir exists (release ends it sooner). It
// waits while the needs fit only once the others are done, until ctx
// ends; it fails at once when they would not fit with nothing reserved.
func reserveSpace(ctx context.Context, scratchRoot, dir string, needs []SpaceNeed) (release func(), err error) {
	limits, err := volumeLimits(scratchRoot)
	if err != nil {
		return func() {}, err
	}
	return reserveIn(ctx, limits, dir, needs)
}

func reserveIn(ctx context.Context, limits []limitedRoot, dir string, needs []SpaceNeed) (func(), error) {
	mine := map[string]int64{}
	for _, l := range limits {
		for _, n := range needs {
			if p, err := filepath.Abs(n.Path); err == nil && n.Bytes > 0 && (p == l.root || within(l.root, p)) {
				mine[l.root] += n.Bytes
			}
		}
	}
	start := time.Now()
	for {
		reserved.mu.Lock()
		others := reservedBy()
		err := checkLimits(limits, needs, others)
		if err == nil {
			err = checkFS(needs)
		}
		if err == nil {
			if len(mine) == 0 {
				reserved.mu.Unlock()
				return func() {}, nil
			}
			_, serr := os.Stat(dir)
			r := &spaceReservation{dir: dir, existed: serr == nil, bytes: mine}
			reserved.list = append(reserved.list, r)
			reserved.mu.Unlock()
			return func() { releaseSpace(r) }, nil
		}
		var se *SpaceError
		wait := false
		for root := range mine {
			wait = wait || others[root] > 0
		}
		reserved.mu.Unlock()
		if !wait || !errors.As(err, &se) || se.Reserved == 0 || se.Need > se.Limit-max(se.Used-se.Reserved, 0) {
			// Short even with nothing else reserved: waiting would not help.
			return func() {}, err
		}
		select {
		case <-ctx.Done():
			return func() {}, fmt.Errorf("waited %v for the restores running beside it to free scratch space: %w (%w)",
				time.Since(start).Round(time.Millisecond), err, ctx.Err())
		case <-time.After(reservePoll):
		}
	}
}

// releaseSpace ends a reservation.
func releaseSpace(r *spaceReservation) {
	reserved.mu.Lock()
	defer reserved.mu.Unlock()
	for i, x := range reserved.list {
		if x == r {
			reserved.list = append(reserved.list[:i], reserved.list[i+1:]...)
			return
		}
	}
}
