package prune_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/ibm-cos-sdk-go/aws"
	"github.com/IBM/ibm-cos-sdk-go/aws/session"
	"github.com/IBM/ibm-cos-sdk-go/service/s3"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/prune"
	"github.com/armada/etcd-recovery/internal/retention"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
)

// BenchmarkPruneAll is one `prune --all` over a carrier-sized bucket:
// 1,800 clusters with 8 committed backups of 3 objects each (43,200
// objects), in a dedicated MinIO. Every manifest (14,400) is read and
// checked, DefaultCheckParallel at a time, and the uploads of the exact
// snapshot key of every backup deleted are listed. The default policy
// keeps 4 backups per cluster and deletes 4 (7,200 manifests, then 14,400
// other objects).
//
// Two variants, each on its own bucket of the same MinIO, in this order:
//
//	drills=none    no drill records (the bucket before restore drills)
//	drills=newest  a passed drill.json on every cluster's newest backup
//	               (1,800 more objects listed, 1,800 records read); the
//	               drilled rule then keeps the newest backup, which the
//	               newest rule keeps anyway, so both delete the same
//
// drills=newest also reports the records' reads (drill-read-s, and
// drill-share of its wall time) and its wall time against drills=none's as
// "x-none" (only when both ran; on a shared machine x-none swings with the
// load, drill-share much less). Setup is excluded from the timing; meant
// for -benchtime 1x:
//
//	go test -run '^$' -bench BenchmarkPruneAll -benchtime 1x ./backup/
func BenchmarkPruneAll(b *testing.B) {
	mi := testenv.StartMinIO(b)
	var noneWall time.Duration // drills=none's wall time per prune
	b.Run("drills=none", func(b *testing.B) {
		noneWall = benchPruneAll(b, mi, false, 0)
	})
	b.Run("drills=newest", func(b *testing.B) {
		benchPruneAll(b, mi, true, noneWall)
	})
}

// benchPruneAll builds the 1,800-cluster fixture in a new bucket (with a
// passed drill record on each cluster's newest backup when drills), runs
// b.N prunes over it, reports them and returns the wall time per prune.
// A non-zero baseline is drills=none's wall time: the ratio is reported.
func benchPruneAll(b *testing.B, mi *testenv.MinIO, drills bool, baseline time.Duration) time.Duration {
	const clusters = 1800
	bucket := mi.NewBucket(b)
	st := testfix.Store(b, mi, bucket)
	l := catalog.Layout{Prefix: "etcd-backups"}
	var all []folder
	var records []benchObject
	for i := range clusters {
		runs := scheduledRuns(fmt.Sprintf("cluster-%04d", i), at("2100-01-13 19:00"), pruneNow)
		all = append(all, runs...)
		if drills {
			newest := runs[len(runs)-1]
			r := drillRecord(newest.cluster, newest.name(), true, newest.at.Add(30*time.Minute))
			r.Format = catalog.DrillFormat // PutDrill's default, written directly here
			body, err := catalog.MarshalDrill(r)
			if err != nil {
				b.Fatal(err)
			}
			records = append(records, benchObject{l.Key(newest.cluster, newest.name(), catalog.DrillObject), body})
		}
	}
	if len(all) != clusters*8 {
		b.Fatalf("fixture: %d backups", len(all))
	}
	opts := prune.PruneOptions{Store: st, Layout: l, All: true, Policy: retention.DefaultPolicy(), Now: pruneNow}

	setupStart := time.Now()
	benchPut(b, mi, bucket, l, all)
	benchPutObjects(b, mi, bucket, records)
	b.Logf("setup: %d objects in %s", len(all)*3+len(records), time.Since(setupStart).Round(time.Millisecond))

	wantListed := clusters*8*3 + len(records)
	var lastReport *prune.PruneReport
	var listed, deleted int
	var listDur, deleteDur, drillDur, wall time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if i > 0 {
			b.StopTimer()
			var gone []folder
			for _, c := range lastReport.Clusters {
				for _, a := range c.Backups {
					if a.Action == prune.ActionDeleted {
						gone = append(gone, folder{cluster: a.ClusterID, at: a.Time, kind: a.Kind})
					}
				}
			}
			benchPut(b, mi, bucket, l, gone)
			b.StartTimer()
		}
		rep, err := prune.Prune(context.Background(), opts)
		if err != nil {
			b.Fatal(err)
		}
		if rep.Deleted != clusters*4 || rep.Kept != clusters*4 || rep.Stats.ObjectsListed != wantListed || rep.Stats.ObjectsDeleted != clusters*4*3 ||
			rep.Stats.DrillsRead != len(records) {
			b.Fatalf("prune: deleted %d kept %d listed %d objects deleted %d drill records read %d", rep.Deleted, rep.Kept, rep.Stats.ObjectsListed,
				rep.Stats.ObjectsDeleted, rep.Stats.DrillsRead)
		}
		if drills {
			// Every cluster's newest backup is kept by the drilled rule too.
			for _, c := range rep.Clusters {
				newest := -1
				for k, a := range c.Backups {
					if newest < 0 || a.Time.After(c.Backups[newest].Time) {
						newest = k
					}
				}
				if newest < 0 || !slices.Contains(c.Backups[newest].Rules, retention.RuleDrilled) {
					b.Fatalf("prune: cluster %s: the newest backup is not kept by the drilled rule: %+v", c.ClusterID, c.Backups)
				}
			}
		}
		lastReport = rep
		listed += rep.Stats.ObjectsListed
		deleted += rep.Stats.ObjectsDeleted
		listDur += rep.Stats.ListDuration
		deleteDur += rep.Stats.DeleteDuration
		drillDur += rep.Stats.DrillDuration
		wall += rep.Stats.Duration
	}
	b.StopTimer()
	perPrune := wall / time.Duration(b.N)
	b.ReportMetric(float64(listed)/listDur.Seconds(), "list-objects/s")
	b.ReportMetric(float64(deleted)/deleteDur.Seconds(), "delete-objects/s")
	b.ReportMetric(perPrune.Seconds(), "wall-s")
	if drills {
		b.ReportMetric(drillDur.Seconds()/float64(b.N), "drill-read-s")
		// The drill records' own cost: their reads against the whole
		// prune (x-none also carries the load of a shared machine).
		b.ReportMetric(drillDur.Seconds()/wall.Seconds(), "drill-share")
		if baseline > 0 {
			b.ReportMetric(perPrune.Seconds()/baseline.Seconds(), "x-none")
		}
	}
	s := lastReport.Stats
	b.Logf("checked %d manifests in %s (%.0f/s); %d drill records read in %s; %d exact-key upload listings", s.ManifestsRead,
		s.CheckDuration.Round(time.Millisecond), float64(s.ManifestsRead)/s.CheckDuration.Seconds(), s.DrillsRead,
		s.DrillDuration.Round(time.Millisecond), s.KeyUploadLists)
	b.Logf("prune --all: %d clusters, %d objects listed in %s (%.0f/s); %d backups / %d objects deleted in %d requests in %s (%.0f/s); total %s",
		len(lastReport.Clusters), s.ObjectsListed, s.ListDuration.Round(time.Millisecond), float64(s.ObjectsListed)/s.ListDuration.Seconds(),
		lastReport.Deleted, s.ObjectsDeleted, s.DeleteRequests, s.DeleteDuration.Round(time.Millisecond),
		float64(s.ObjectsDeleted)/s.DeleteDuration.Seconds(), s.Duration.Round(time.Millisecond))
	if drills && baseline > 0 {
		b.Logf("with a drill record per cluster: %s per prune against %s without (x%.2f)", perPrune.Round(time.Millisecond),
			baseline.Round(time.Millisecond), perPrune.Seconds()/baseline.Seconds())
	}
	return perPrune
}

// benchPut writes the folders' objects (tiny bodies) with 32 concurrent
// PutObject requests on a plain S3 client.
func benchPut(tb testing.TB, mi *testenv.MinIO, bucket string, l catalog.Layout, folders []folder) {
	tb.Helper()
	var objs []benchObject
	for _, f := range folders {
		for _, k := range f.keys(l) {
			body := []byte("x") // the manifest's snapshot size
			if strings.HasSuffix(k, "/"+catalog.ManifestObject) {
				body = manifestBody(tb, f)
			}
			objs = append(objs, benchObject{k, body})
		}
	}
	benchPutObjects(tb, mi, bucket, objs)
}

// benchObject is one object to write.
type benchObject struct {
	key  string
	body []byte
}

// benchPutObjects writes the objects with 32 concurrent PutObject requests
// on a plain S3 client.
func benchPutObjects(tb testing.TB, mi *testenv.MinIO, bucket string, objs []benchObject) {
	tb.Helper()
	if len(objs) == 0 {
		return
	}
	cfg := mi.AWSConfig()
	cfg.HTTPClient = &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	sess, err := session.NewSession(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	svc := s3.New(sess)
	keys := make(chan benchObject, 256)
	var failed atomic.Pointer[error]
	var wg sync.WaitGroup
	for range 32 {
		wg.Go(func() {
			for o := range keys {
				if failed.Load() != nil {
					continue
				}
				_, err := svc.PutObject(&s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(o.key), Body: bytes.NewReader(o.body)})
				if err != nil {
					failed.CompareAndSwap(nil, &err)
				}
			}
		})
	}
	for _, o := range objs {
		keys <- o
	}
	close(keys)
	wg.Wait()
	if p := failed.Load(); p != nil {
		tb.Fatalf("put: %v", *p)
	}
}
