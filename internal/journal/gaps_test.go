package journal_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/armada/etcd-recovery/internal/journal"
	"github.com/armada/etcd-recovery/internal/output"
	"github.com/armada/etcd-recovery/internal/prune"
	"github.com/armada/etcd-recovery/internal/retention"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
)

// list shows the journal's gap records next to the window's holes, on
// MinIO: backup 100 with segments 101-150, a gap from 151 (the journal's
// record: its reason, its error), backup 200 with segments 201-220, and a
// record that does not parse. The WINDOW lines name the hole 151-199, each
// record's revisions, time and reason (the unreadable one says why), and
// -o json carries them as journalGaps on every row.
func TestListShowsGapRecords(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rig := testfix.NewStoreRig(t)
	st, l := rig.Store, rig.Layout
	const id = "jgaps"
	now := time.Now().UTC()
	b1 := putBackup(t, st, l, id, now.Add(-3*time.Hour), 100)
	putSegment(t, st, l, id, b1, 101, 150, now.Add(-150*time.Minute))
	b2 := putBackup(t, st, l, id, now.Add(-2*time.Hour), 200)
	putSegment(t, st, l, id, b2, 201, 220, now.Add(-time.Minute))
	found := now.Add(-125 * time.Minute).Truncate(time.Second)
	rec, err := json.Marshal(map[string]any{"clusterID": id, "from": 151, "reason": "watch compacted past", "error": "mvcc: required revision has been compacted", "time": found})
	if err != nil {
		t.Fatal(err)
	}
	for key, body := range map[string][]byte{l.JournalGapKey(id, 151): rec, l.JournalGapKey(id, 221): []byte("{not json")} {
		if _, err := st.Put(ctx, key, bytes.NewReader(body)); err != nil {
			t.Fatal(err)
		}
	}

	res, err := journal.List(ctx, prune.ListOptions{Store: st, Layout: l, ClusterID: id, Policy: retention.DefaultPolicy(), Now: now})
	if err != nil || res.Err != nil {
		t.Fatalf("list: %v %v", err, res.Err)
	}
	if len(res.Gaps) != 2 || res.GapsTotal != 2 {
		t.Fatalf("gap records %+v (total %d), want 2", res.Gaps, res.GapsTotal)
	}
	g := res.Gaps[0]
	if g.From != 151 || g.Reason != "watch compacted past" || !g.Time.Equal(found) || g.ReadError != "" {
		t.Errorf("first gap record %+v", g)
	}
	if u := res.Gaps[1]; u.From != 221 || u.ReadError == "" {
		t.Errorf("unreadable gap record %+v: want From 221 and why it was not read", u)
	}
	var b strings.Builder
	if err := output.Render(&b, output.FormatWide, res.Tables()[0], nil); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"gaps 151-199",
		fmt.Sprintf("WINDOW gap: revisions 151 to the backup that healed it, found %s: watch compacted past (mvcc: required revision has been compacted)", found.Format("2006-01-02 15:04:05")),
		"WINDOW gap: revisions 221 to the backup that healed it, found",
		"(record not read: gap record " + l.JournalGapKey(id, 221),
	} {
		if !strings.Contains(out, want) {
			t.Errorf("list lacks %q:\n%s", want, out)
		}
	}
	for _, r := range res.Rows() {
		if len(r.Gaps) != 2 || r.Gaps[0].From != 151 {
			t.Errorf("row %s: journalGaps %+v", r.Name, r.Gaps)
		}
	}
}
