package cos

import (
	"testing"
	"time"

	"github.com/armada/etcd-recovery/internal/store"
)

// The object versions of a key keep the service's order (by creation),
// whatever their LastModified says (a multipart upload's is its start,
// chosen by whoever uploads): the earliest version stays the last of its
// key. Delete markers are merged in by time, the latest first.
func TestMergeVersionsKeepsTheServicesOrder(t *testing.T) {
	t.Parallel()
	at := func(s int) time.Time { return time.Unix(int64(s), 0) }
	objs := []store.Version{
		{Key: "a", VersionID: "v3", LastModified: at(1), IsLatest: false}, // started first, completed last
		{Key: "a", VersionID: "v2", LastModified: at(9)},
		{Key: "a", VersionID: "v1", LastModified: at(5)},
		{Key: "b", VersionID: "b1", LastModified: at(3)},
	}
	markers := []store.Version{
		{Key: "a", VersionID: "m2", LastModified: at(20), IsLatest: true, DeleteMarker: true},
		{Key: "a", VersionID: "m1", LastModified: at(7), DeleteMarker: true},
		{Key: "c", VersionID: "c1", LastModified: at(2), IsLatest: true, DeleteMarker: true},
	}
	objs[3].IsLatest = true
	var got []string
	for _, v := range mergeVersions(objs, markers) {
		got = append(got, v.Key+":"+v.VersionID)
	}
	// m1 is newer than v3 by time (v3 claims an early start); v3, v2, v1
	// stay in the service's order.
	want := []string{"a:m2", "a:m1", "a:v3", "a:v2", "a:v1", "b:b1", "c:c1"}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("got %v, want %v", got, want)
		}
	}
}
