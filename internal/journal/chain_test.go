package journal_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/journal"
	"github.com/armada/etcd-recovery/internal/store"
	"github.com/armada/etcd-recovery/internal/store/memstore"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
)

// A key that straddles the journal's own segments (a forged X holding
// revisions 150-405 beside A 101-200, B 201-300, C 301-400) is a second
// chain over the same revisions: a replay from 150 never takes X's
// reach, it stops before the first revision both hold, naming both
// segments. Before, the chain reaching furthest (X) was replayed and A-C
// were passed over in silence. A replay that ends before the conflict is
// unaffected.
func TestSourceRefusesAStraddlingSegment(t *testing.T) {
	t.Parallel()
	ctx := testfix.Context(t, 30*time.Second)
	st := memstore.NewVersioned()
	layout := memLayout
	writePuts(t, ctx, st, layout, 101, 200, nil)
	writePuts(t, ctx, st, layout, 201, 300, nil)
	writePuts(t, ctx, st, layout, 301, 400, nil)
	src := journal.NewSource(st, layout, "c1", nil)
	if segs, err := src.Segments(ctx, 150, 400); err != nil || len(segs) != 3 {
		t.Fatalf("before the forgery: %v %v", segs, err)
	}
	writePuts(t, ctx, st, layout, 150, 405, nil)
	src = journal.NewSource(st, layout, "c1", nil)
	_, err := src.Segments(ctx, 150, 300)
	var re *journal.ReachError
	if !errors.As(err, &re) || re.Reach != 149 || !journal.IsReason(err, journal.ReasonOverlap) || !strings.Contains(err.Error(), "0000000000000101-0000000000000200") {
		t.Fatalf("a replay from 150 with a straddling key: %v, want the journal to reach 149 only, naming the overlap", err)
	}
	// From 120: A holds 120-149 alone.
	if segs, err := src.Segments(ctx, 120, 149); err != nil || len(segs) != 1 {
		t.Fatalf("a replay that ends before the straddling key: %v %v", segs, err)
	}
	if _, err := src.Segments(ctx, 120, 160); !journal.IsReason(err, journal.ReasonOverlap) {
		t.Fatalf("a replay from 120 across the straddling key: %v, want the overlap named", err)
	}
}

// deniedVersions is a versioned store whose credential may not read the
// bucket's versions (an optional permission): every version call is
// refused as S3 refuses it, permanently.
type deniedVersions struct{ *memstore.Store }

var errDenied = &store.Error{Backend: "mem", Op: "get versioning", Err: errors.New("AccessDenied: Access Denied")}

func (d deniedVersions) Versioning(context.Context) (bool, error) { return false, errDenied }
func (d deniedVersions) ListVersions(context.Context, string) ([]store.Version, error) {
	return nil, errDenied
}

// Without the right to read versions, a replay reads the current segments
// (as restore does for backups) and says so, never failing on it.
func TestSourceWithoutVersionRights(t *testing.T) {
	t.Parallel()
	ctx := testfix.Context(t, 30*time.Second)
	inner := memstore.NewVersioned()
	layout := memLayout
	writePuts(t, ctx, inner, layout, 11, 20, nil)
	writePuts(t, ctx, inner, layout, 21, 30, nil)
	src := journal.NewSource(deniedVersions{inner}, layout, "c1", nil)
	seq, err := src.Events(ctx, 11, 30)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, err := range seq {
		if err != nil {
			t.Fatal(err)
		}
		n++
	}
	if n != 20 || src.VersionsUnread() == nil || !strings.Contains(src.VersionsUnread().Error(), "AccessDenied") {
		t.Fatalf("%d events, versions unread: %v", n, src.VersionsUnread())
	}
	if _, err := catalog.ListJournalProofs(ctx, deniedVersions{inner}, layout, "c1"); err != nil {
		t.Fatalf("proofs without the right to read versions: %v", err)
	}
}

// A forged version over the last stored segment, then the journal
// restarted (real etcd 3.5, a versioned memstore): the capture continues
// from the journal's own (earliest) version, names the overwrite in an
// error log, and the next segment names that version's sha256, so a
// replay across them reads the journal's history, not a false "forged".
func TestCaptureResumesFromTheJournalsVersion(t *testing.T) {
	t.Parallel()
	ctx := testfix.Context(t, 60*time.Second)
	_, cli := startEtcd(t, testenv.V35)
	base := headRev(t, ctx, cli)
	st := memstore.NewVersioned()
	layout := catalog.Layout{Prefix: testenv.Prefix(t)}
	o := captureOptions(t, cli, st, layout, zstdEnc, base)
	var logs testfix.SyncBuffer
	o.Log = slog.New(slog.NewTextHandler(&logs, nil))
	stop := startCapture(ctx, o)
	testenv.PutKeys(t, cli, "/a/", 20, 16)
	first := waitLastSegment(t, ctx, st, layout, base, cli)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	// The forgery: the last segment, one value changed, PUT over it.
	h, evs, err := journal.ReadSegment(ctx, st, layout, first.Key, nil, journal.Want{ClusterID: "c1"})
	if err != nil {
		t.Fatal(err)
	}
	evs[len(evs)-1].Value = []byte("forged")
	raw, err := journal.EncodeSegment(h, evs)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Put(ctx, first.Key, bytes.NewReader(raw)); err != nil {
		t.Fatal(err)
	}
	stop = startCapture(ctx, o)
	testenv.PutKeys(t, cli, "/b/", 20, 16)
	last := waitLastSegment(t, ctx, st, layout, base, cli)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), "written over") {
		t.Errorf("no log of the overwritten last segment:\n%s", logs.String())
	}
	src := journal.NewSource(st, layout, "c1", nil)
	seq, err := src.Events(ctx, base+1, last.LastRev)
	if err != nil {
		t.Fatal(err)
	}
	for ev, err := range seq {
		if err != nil {
			t.Fatalf("a replay across the restart: %v", err)
		}
		if string(ev.Value) == "forged" {
			t.Fatalf("the forged value was replayed at revision %d", ev.Rev)
		}
	}
	if rs := src.Replaced(); len(rs) != 1 || rs[0].Key != first.Key || rs[0].Replaced != 1 {
		t.Fatalf("replaced: %+v, want %s", rs, first.Key)
	}
}
