package backup

import (
	"sort"

	"github.com/armada/etcd-recovery/internal/probe"
)

// SnapshotCandidates orders the probed members to snapshot, best first.
// With quorum it prefers healthy followers (probe.Member.Healthy: serving
// linearizable reads, no alarm), sparing the leader, most up to date
// first, then the leader, then members that answer their status but are
// not healthy. Without quorum any member that answers its status will do,
// the one with the highest raft index first: the seed runbook backs up the
// one pod that is left. Learners are never candidates.
func SnapshotCandidates(members []probe.Member, quorum bool) []probe.Member {
	var alive []probe.Member
	for _, m := range members {
		if m.Alive() && !m.Learner() {
			alive = append(alive, m)
		}
	}
	rank := func(m probe.Member) int {
		switch {
		case !quorum:
			return 0
		case !m.Healthy():
			return 3 // an alarm raised against it, or no linearizable read: last resort
		case m.IsLeader():
			return 2
		default:
			return 1
		}
	}
	sort.SliceStable(alive, func(i, j int) bool {
		ri, rj := rank(alive[i]), rank(alive[j])
		if ri != rj {
			return ri < rj
		}
		return alive[i].Status.RaftIndex > alive[j].Status.RaftIndex
	})
	return alive
}
