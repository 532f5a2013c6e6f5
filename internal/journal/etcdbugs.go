package journal

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// CompactionBug reports whether etcd server version v (as Status reports
// it, "3.5.12") has the watch bug by which a compaction at exactly the
// revision a watch starts or resumes from can drop a delete event (etcd
// issues #18089 and #19179): 3.4.33 and older, 3.5.15 and older. A
// journal on such a member can lose a delete that happens at a compaction
// while it re-watches (a restart, a stall, a paused watch). Restore's
// replay then refuses the journal when that key is written again
// (etcdinternals.HistoryError: a put of a new key the state still holds),
// and the proof at the next backup fails; a key never written again stays
// in a point-in-time restore. The journal warns at every start; upgrading
// the members (3.4.34, 3.5.16 or later) is the remedy. An unparsable
// version is not judged.
func CompactionBug(v string) bool {
	v = strings.TrimPrefix(v, "v")
	parts := strings.SplitN(v, ".", 3)
	if len(parts) < 3 {
		return false
	}
	pf := strings.FieldsFunc(parts[2], func(r rune) bool { return r == '-' || r == '+' })
	if len(pf) == 0 {
		return false
	}
	major, err1 := strconv.Atoi(parts[0])
	minor, err2 := strconv.Atoi(parts[1])
	patch, err3 := strconv.Atoi(pf[0])
	if err1 != nil || err2 != nil || err3 != nil || major != 3 {
		return false
	}
	switch minor {
	case 0, 1, 2, 3:
		return true
	case 4:
		return patch <= 33
	case 5:
		return patch <= 15
	}
	return false
}

// warnEtcdBugs logs, at the capture's start, a member whose etcd version
// has a known bug that can make the journal inexact (CompactionBug). Only
// the first endpoint that answers within a few seconds is asked.
func (c *capture) warnEtcdBugs(ctx context.Context) {
	for _, ep := range c.o.Client.Endpoints() {
		sctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		st, err := c.o.Client.Status(sctx, ep)
		cancel()
		if err != nil {
			continue
		}
		if CompactionBug(st.Version) {
			c.o.Log.Error(fmt.Sprintf("journal: etcd %s has a known watch bug: a compaction at exactly the revision a watch resumes from can drop a delete (an etcd bug fixed in 3.4.34 and 3.5.16); "+
				"upgrade the members to 3.4.34, 3.5.16 or later. Restores check every replayed change against the state before it and refuse an inexact journal, "+
				"but a dropped delete of a key never written again is not seen", st.Version),
				"cluster", c.o.ClusterID, "endpoint", ep, "etcdVersion", st.Version)
		}
		return
	}
}
