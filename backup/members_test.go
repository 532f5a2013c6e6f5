package backup_test

import (
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/armada/etcd-recovery/backup"
	"github.com/armada/etcd-recovery/internal/probe"
)

// probed is a member as probe.Members leaves it: id, leader, raft index,
// linearizable read, alarms.
func probed(name string, id, leader, index uint64, linear bool, alarm pb.AlarmType) probe.Member {
	m := probe.Member{Name: name, ID: id, ClientURL: "https://" + name, Probed: true, LinearizableOK: linear, SerializableOK: true,
		Status: &clientv3.StatusResponse{Header: &pb.ResponseHeader{MemberId: id}, Leader: leader, RaftIndex: index}}
	if alarm != pb.AlarmType_NONE {
		// As etcd does: every member lists every alarm, in its status too.
		m.AlarmList = []*pb.AlarmMember{{MemberID: 2, Alarm: alarm}}
		m.Status.Errors = []string{"memberID:2 alarm:" + alarm.String() + " "}
	}
	return m
}

// With quorum: healthy followers (newest first), then the leader, then
// members that are not healthy by probe.Member.Healthy (an alarm, or no
// linearizable read). Without quorum: the highest raft index. Learners and
// members that did not answer are never candidates.
func TestSnapshotCandidates(t *testing.T) {
	t.Parallel()
	down := probe.Member{Name: "down", ID: 9, ClientURL: "https://down", Probed: true}
	learner := probed("learner", 8, 1, 500, false, pb.AlarmType_NONE)
	learner.IsLearner = true
	ms := []probe.Member{
		probed("leader", 1, 1, 100, true, pb.AlarmType_NONE),
		probed("nospace", 2, 1, 300, true, pb.AlarmType_NOSPACE),
		probed("old", 3, 1, 90, true, pb.AlarmType_NOSPACE),
		probed("new", 4, 1, 110, true, pb.AlarmType_NONE),
		probed("noquorum", 5, 0, 200, false, pb.AlarmType_NONE),
		down, learner,
	}
	if !probe.Quorum(ms) {
		t.Fatal("no quorum seen")
	}
	names := func(ms []probe.Member) []string {
		var out []string
		for _, m := range ms {
			out = append(out, m.Name)
		}
		return out
	}
	check := func(got, want []string) {
		t.Helper()
		if len(got) != len(want) {
			t.Fatalf("candidates %v, want %v", got, want)
		}
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("candidates %v, want %v", got, want)
			}
		}
	}
	check(names(backup.SnapshotCandidates(ms, true)), []string{"new", "old", "leader", "nospace", "noquorum"})
	check(names(backup.SnapshotCandidates(ms, false)), []string{"nospace", "noquorum", "new", "leader", "old"})
	if ms[1].Healthy() || !ms[0].Healthy() || ms[4].Healthy() || ms[4].Health() != probe.NoQuorum || down.Health() != probe.Down {
		t.Errorf("healthy: leader %v nospace %v noquorum %v/%s down %s", ms[0].Healthy(), ms[1].Healthy(), ms[4].Healthy(), ms[4].Health(), down.Health())
	}
}
