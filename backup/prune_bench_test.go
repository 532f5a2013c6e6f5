package backup_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/ibm-cos-sdk-go/aws"
	"github.com/IBM/ibm-cos-sdk-go/aws/session"
	"github.com/IBM/ibm-cos-sdk-go/service/s3"

	"github.com/armada/etcd-recovery/backup"
	"github.com/armada/etcd-recovery/internal/testenv"
	"github.com/armada/etcd-recovery/internal/testfix"
)

// BenchmarkPruneAll is one `prune --all` over a carrier-sized bucket:
// 1,800 clusters with 8 committed backups of 3 objects each (43,200
// objects), in a dedicated MinIO. Every manifest (14,400) is read and
// checked, DefaultCheckParallel at a time, and the uploads of the exact
// snapshot key of every backup deleted are listed. The default policy
// keeps 4 backups per cluster and deletes 4 (7,200 manifests, then 14,400
// other objects).
// Setup is excluded from the timing; meant for -benchtime 1x:
//
//	go test -run '^$' -bench BenchmarkPruneAll -benchtime 1x ./backup/
func BenchmarkPruneAll(b *testing.B) {
	const clusters = 1800
	mi := testenv.StartMinIO(b)
	bucket := mi.NewBucket(b)
	st := testfix.Store(b, mi, bucket)
	l := backup.Layout{Prefix: "etcd-backups"}
	var all []folder
	for i := range clusters {
		all = append(all, scheduledRuns(fmt.Sprintf("cluster-%04d", i), at("2100-01-13 19:00"), pruneNow)...)
	}
	if len(all) != clusters*8 {
		b.Fatalf("fixture: %d backups", len(all))
	}
	opts := backup.PruneOptions{Store: st, Layout: l, All: true, Policy: backup.DefaultPolicy(), Now: pruneNow}

	setupStart := time.Now()
	benchPut(b, mi, bucket, l, all)
	b.Logf("setup: %d objects in %s", len(all)*3, time.Since(setupStart).Round(time.Millisecond))

	var lastReport *backup.PruneReport
	var listed, deleted int
	var listDur, deleteDur, wall time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if i > 0 {
			b.StopTimer()
			var gone []folder
			for _, c := range lastReport.Clusters {
				for _, a := range c.Backups {
					if a.Action == backup.ActionDeleted {
						gone = append(gone, folder{cluster: a.ClusterID, at: a.Time, kind: a.Kind})
					}
				}
			}
			benchPut(b, mi, bucket, l, gone)
			b.StartTimer()
		}
		rep, err := backup.Prune(context.Background(), opts)
		if err != nil {
			b.Fatal(err)
		}
		if rep.Deleted != clusters*4 || rep.Kept != clusters*4 || rep.Stats.ObjectsListed != clusters*8*3 || rep.Stats.ObjectsDeleted != clusters*4*3 {
			b.Fatalf("prune: deleted %d kept %d listed %d objects deleted %d", rep.Deleted, rep.Kept, rep.Stats.ObjectsListed, rep.Stats.ObjectsDeleted)
		}
		lastReport = rep
		listed += rep.Stats.ObjectsListed
		deleted += rep.Stats.ObjectsDeleted
		listDur += rep.Stats.ListDuration
		deleteDur += rep.Stats.DeleteDuration
		wall += rep.Stats.Duration
	}
	b.StopTimer()
	b.ReportMetric(float64(listed)/listDur.Seconds(), "list-objects/s")
	b.ReportMetric(float64(deleted)/deleteDur.Seconds(), "delete-objects/s")
	b.ReportMetric(wall.Seconds()/float64(b.N), "wall-s")
	s := lastReport.Stats
	b.Logf("checked %d manifests in %s (%.0f/s); %d exact-key upload listings", s.ManifestsRead, s.CheckDuration.Round(time.Millisecond),
		float64(s.ManifestsRead)/s.CheckDuration.Seconds(), s.KeyUploadLists)
	b.Logf("prune --all: %d clusters, %d objects listed in %s (%.0f/s); %d backups / %d objects deleted in %d requests in %s (%.0f/s); total %s",
		len(lastReport.Clusters), s.ObjectsListed, s.ListDuration.Round(time.Millisecond), float64(s.ObjectsListed)/s.ListDuration.Seconds(),
		lastReport.Deleted, s.ObjectsDeleted, s.DeleteRequests, s.DeleteDuration.Round(time.Millisecond),
		float64(s.ObjectsDeleted)/s.DeleteDuration.Seconds(), s.Duration.Round(time.Millisecond))
}

// benchPut writes the folders' objects (tiny bodies) with 32 concurrent
// PutObject requests on a plain S3 client.
func benchPut(tb testing.TB, mi *testenv.MinIO, bucket string, l backup.Layout, folders []folder) {
	tb.Helper()
	cfg := mi.AWSConfig()
	cfg.HTTPClient = &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	sess, err := session.NewSession(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	svc := s3.New(sess)
	type obj struct {
		key  string
		body []byte
	}
	keys := make(chan obj, 256)
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
	for _, f := range folders {
		for _, k := range f.keys(l) {
			body := []byte("x") // the manifest's snapshot size
			if strings.HasSuffix(k, "/"+backup.ManifestObject) {
				body = manifestBody(tb, f)
			}
			keys <- obj{k, body}
		}
	}
	close(keys)
	wg.Wait()
	if p := failed.Load(); p != nil {
		tb.Fatalf("put: %v", *p)
	}
}
