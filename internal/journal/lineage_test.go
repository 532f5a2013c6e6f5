package journal_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/journal"
	"github.com/armada/etcd-recovery/internal/store/memstore"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
)

// A cluster that goes back (its data replaced by an older or an empty
// one under the same name, URLs and token: the same etcd cluster ID, as a
// restore without a revision bump gives) is never spliced into its
// journal: the running capture finds it (the watch's probe reads a
// revision below what the watch delivered) and ends with a
// *LineageError, having stored nothing of the new history; a restart
// refuses at once; once a gap record seals the chain, a cluster past its
// end is a gap (a full backup heals it), never a continuation. Another
// etcd cluster past the journal's end (a bumped restore, a recreated
// cluster) is a *GapError.
func TestCaptureLineage(t *testing.T) {
	t.Parallel()
	ctx := testfix.Context(t, 90*time.Second)
	rig := newCaptureRig(t, ctx)
	c, cli, base, st, layout, o := rig.etcd, rig.cli, rig.base, rig.st, rig.layout, rig.o
	oldID := rig.etcdID
	o.WatchStallTimeout = 2 * time.Second
	stop := startCapture(ctx, o)
	var last int64
	for i := range 30 {
		p, err := cli.Put(ctx, fmt.Sprintf("/old/%d", i%7), fmt.Sprint(i))
		if err != nil {
			t.Fatal(err)
		}
		last = p.Header.Revision
	}
	chain := waitReach(t, ctx, st, layout, base, last)
	if err := stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}
	for _, s := range chain.Segments {
		h, _, err := journal.ReadSegment(ctx, st, layout, s.Key, nil, journal.Want{ClusterID: "c1"})
		if err != nil || h.EtcdClusterID != oldID {
			t.Fatalf("segment %s records etcd cluster %q (%v), want %q", s.Key, h.EtcdClusterID, err, oldID)
		}
	}

	// The running capture, then the member's data replaced by a new
	// history: same name, URLs and token, so the same etcd cluster ID.
	stop = startCaptureErr(ctx, o)
	time.Sleep(1500 * time.Millisecond) // watching
	m := c.Members[0]
	m.Kill()
	fresh := testenv.StartEtcdMember(t, testenv.MemberSpec{Version: testenv.V35, Name: m.Name, DataDir: filepath.Join(t.TempDir(), "new.etcd"),
		ClientURL: m.ClientURL, PeerURL: m.PeerURL, InitialClusterToken: c.Token})
	fresh.WaitReady(t)
	for i := range 3 {
		if _, err := cli.Put(ctx, fmt.Sprintf("/new/%d", i), "new"); err != nil {
			t.Fatal(err)
		}
	}
	r, err := cli.Get(ctx, "nothing")
	if err != nil {
		t.Fatal(err)
	}
	if got := journal.EtcdID(r.Header.ClusterId); got != oldID || r.Header.Revision >= last {
		t.Fatalf("the new history: etcd cluster %s at revision %d, want %s below %d (the test's premise)", got, r.Header.Revision, oldID, last)
	}
	began := time.Now()
	err = stop()
	var lin *journal.LineageError
	if !errors.As(err, &lin) || lin.Reach != last || lin.LiveRev >= last {
		t.Fatalf("the running capture ended with %v, want a LineageError at the journal's end %d", err, last)
	}
	t.Logf("running capture: %v (%s after the new history's writes)", err, time.Since(began).Round(time.Millisecond))
	assertReach(t, ctx, st, layout, base, last)

	// A restart refuses at once.
	err = journal.Capture(ctx, o)
	if !errors.As(err, &lin) || lin.Reach != last || lin.LiveRev >= last {
		t.Fatalf("a restart: %v, want a LineageError", err)
	}

	// The gap record seals the chain (fleet writes it): a cluster past its
	// end is a gap now, never a continuation.
	if _, err := st.Put(ctx, layout.JournalGapKey("c1", last+1), bytes.NewReader([]byte("{}"))); err != nil {
		t.Fatal(err)
	}
	for i := int64(0); i < last; i++ {
		if _, err := cli.Put(ctx, fmt.Sprintf("/new/%d", i%5), "new"); err != nil {
			t.Fatal(err)
		}
	}
	err = journal.Capture(ctx, o)
	var gap *journal.GapError
	if !errors.As(err, &gap) || gap.From != last+1 {
		t.Fatalf("a cluster past the sealed journal's end: %v, want a GapError from %d", err, last+1)
	}
	assertReach(t, ctx, st, layout, base, last)

	// Another etcd cluster (a recreated one: its own ID): below the
	// journal's end a lineage break, past it a gap.
	st2 := memstore.New()
	o2 := o
	o2.Store = st2
	stop = startCapture(ctx, o2)
	for i := range 5 {
		if _, err := cli.Put(ctx, fmt.Sprintf("/x/%d", i), "x"); err != nil {
			t.Fatal(err)
		}
	}
	r, _ = cli.Get(ctx, "nothing")
	waitReach(t, ctx, st2, layout, base, r.Header.Revision)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	reach2 := r.Header.Revision
	_, ocli := startEtcd(t, testenv.V35)
	o2.Client = ocli
	err = journal.Capture(ctx, o2)
	if !errors.As(err, &lin) || lin.StoredID == lin.LiveID {
		t.Fatalf("another etcd cluster below the journal's end: %v, want a LineageError", err)
	}
	for i := int64(0); i < reach2; i++ {
		if _, err := ocli.Put(ctx, "/other", "o"); err != nil {
			t.Fatal(err)
		}
	}
	err = journal.Capture(ctx, o2)
	if !errors.As(err, &gap) || gap.From != reach2+1 {
		t.Fatalf("another etcd cluster past the journal's end: %v, want a GapError from %d", err, reach2+1)
	}
	assertReach(t, ctx, st2, layout, base, reach2)
}

func assertReach(t *testing.T, ctx context.Context, st *memstore.Store, layout catalog.Layout, base, want int64) {
	t.Helper()
	chain, err := journal.ListSegments(ctx, st, layout, "c1", base)
	if err != nil || chain.Problem != nil || chain.Reach != want || len(chain.All) != len(chain.Segments) {
		t.Fatalf("the journal: reach %d (%v %v, %d segments stored, %d chained), want it to end at %d with nothing of the new history", chain.Reach, err, chain.Problem, len(chain.All), len(chain.Segments), want)
	}
}

// The heal after an ordinary gap on an idle cluster: the gap was recorded
// at R+1 and the full backup that heals it is at R (nothing written since).
// A journal starting afresh from that backup continues no stored segment,
// so the record does not seal it: it journals, no lineage break.
func TestCaptureAfterAGapOnAnIdleCluster(t *testing.T) {
	t.Parallel()
	ctx := testfix.Context(t, 60*time.Second)
	rig := newCaptureRig(t, ctx)
	cli, base, st, layout, o := rig.cli, rig.base, rig.st, rig.layout, rig.o
	if _, err := st.Put(ctx, layout.JournalGapKey("c1", base+1), bytes.NewReader([]byte("{}"))); err != nil {
		t.Fatal(err)
	}
	stop := startCapture(ctx, o)
	var last int64
	for i := range 3 {
		p, err := cli.Put(ctx, fmt.Sprint("/k", i), "v")
		if err != nil {
			t.Fatal(err)
		}
		last = p.Header.Revision
	}
	waitReach(t, ctx, st, layout, base, last)
	if err := stop(); err != nil {
		t.Fatalf("the capture from the heal backup: %v", err)
	}
}
