package catalog_test

import (
	"testing"

	"github.com/armada/etcd-recovery/internal/catalog"
)

// A journal gap's record has its key in the layout, classified as such
// (never unknown, never a segment), and malformed names under gaps/ are
// unknown.
func TestJournalGapKey(t *testing.T) {
	t.Parallel()
	l := catalog.Layout{Prefix: "etcd-backups/kubx-etcd-01"}
	key := l.JournalGapKey("c1", 1234)
	if want := "etcd-backups/kubx-etcd-01/_journal/c1/gaps/0000000000001234.json"; key != want {
		t.Fatalf("JournalGapKey: %s, want %s", key, want)
	}
	r := l.RootPrefix()
	for _, c := range []struct {
		key  string
		want catalog.KeyInfo
	}{
		{key, catalog.KeyInfo{Kind: catalog.KeyJournalGap, ClusterID: "c1", FirstRev: 1234}},
		{l.JournalGapKey("c1", 1), catalog.KeyInfo{Kind: catalog.KeyJournalGap, ClusterID: "c1", FirstRev: 1}},
		{r + "_journal/c1/gaps/1234.json", catalog.KeyInfo{Kind: catalog.KeyUnknown}},
		{r + "_journal/c1/gaps/0000000000001234.json.tmp", catalog.KeyInfo{Kind: catalog.KeyUnknown}},
		{r + "_journal/c1/gaps/x/0000000000001234.json", catalog.KeyInfo{Kind: catalog.KeyUnknown}},
		{r + "_journal/-bad/gaps/0000000000001234.json", catalog.KeyInfo{Kind: catalog.KeyUnknown}},
		{r + "_journal/c1/gaps/0000000000000001-0000000000000002.seg", catalog.KeyInfo{Kind: catalog.KeyUnknown}},
		// A segment beside it is still a segment.
		{l.JournalSegmentKey("c1", 7, 42), catalog.KeyInfo{Kind: catalog.KeyJournal, ClusterID: "c1", FirstRev: 7, LastRev: 42}},
	} {
		if got := l.Classify(c.key); got != c.want {
			t.Errorf("Classify(%s) = %+v, want %+v", c.key, got, c.want)
		}
	}
	// Listings (list, prune, delete, the orphan pass) report as unknown
	// only what Classify calls unknown: the record is not.
	if l.Classify(key).Kind == catalog.KeyUnknown {
		t.Fatal("a gap record is unknown")
	}
}
