package catalog

import (
	"testing"
	"time"

	"github.com/armada/etcd-recovery/internal/store"
)

// An undelete's records are the tool's own keys (Classify: an undelete
// run, with its cluster and run), never unknown; anything else under
// _undeletes/ is unknown (reported, never touched).
func TestClassifyUndeleteRecords(t *testing.T) {
	t.Parallel()
	l := Layout{Prefix: "kubx-etcd-01/"}
	run := NewUndeleteRunID(time.Date(2026, 11, 29, 21, 0, 0, 123e6, time.UTC))
	var objs []store.ObjectInfo
	for _, start := range []bool{true, false} {
		key := l.UndeleteRecordKey("etcd-c1", run, start)
		if ki := l.Classify(key); ki.Kind != KeyUndelete || ki.ClusterID != "etcd-c1" || ki.Name != run {
			t.Errorf("%s: classified %+v, want an undelete run of etcd-c1, run %s", key, ki, run)
		}
		objs = append(objs, store.ObjectInfo{Key: key})
	}
	if u := UnknownKeys(l, objs); len(u) != 0 {
		t.Errorf("undelete records reported as unknown: %v", u)
	}
	for _, bad := range []string{
		l.UndeletesRoot() + "etcd-c1/notarun.json",
		l.UndeletesRoot() + "etcd-c1/" + run + ".end.txt",
		l.UndeletesRoot() + "_bad/" + run + ".json",
		l.UndeletesRoot() + run + ".json",
		l.UndeletesRoot() + "etcd-c1/sub/" + run + ".json",
	} {
		if ki := l.Classify(bad); ki.Kind != KeyUnknown {
			t.Errorf("%s: classified %v, want unknown", bad, ki.Kind)
		}
	}
	// Another prefix's records are not this layout's.
	other := Layout{Prefix: "kubx-etcd-02/"}
	if ki := l.Classify(other.UndeleteRecordKey("etcd-c1", run, false)); ki.Kind != KeyUnknown {
		t.Errorf("another prefix's record classified %v", ki.Kind)
	}
}
