package replicate_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/journal"
	"github.com/armada/etcd-recovery/internal/store/cos"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
	"github.com/armada/etcd-recovery/replicate"
)

// BenchmarkReplicateCost counts what the second site costs: every S3
// request the copier makes on both stores (a counting transport under
// each: one count per request as the server sees it, a page of a listing,
// a part of an upload) and their bytes, over a realistic run, then per
// cluster per day with the arithmetic printed.
//
// BENCH_REPLICATE_COST_CLUSTERS (default 10) clusters on real MinIO
// servers, each with a journal written as the capture writes it (the
// journal's own segment writer, zstd, create-only) of
// BENCH_REPLICATE_SEGMENT_EVENTS (default 600: a cluster writing 20
// writes/s, 30 s a segment) Kubernetes-like pod objects a segment, and
// two backups (one before the copier starts, one during the run) of
// BENCH_REPLICATE_BACKUP_MB (default 16) MiB stored; time is compressed
// BENCH_REPLICATE_SCALE (default 30) times: a segment every 30 s / scale
// a cluster, the copier's journal polls every 5 s / scale, scans every 2
// min / scale, status record every 30 s / scale. The run lasts
// BENCH_REPLICATE_COST_SECONDS (default 45), then the copier catches up.
// Each request is attributed by its key: a segment, a backup (its
// objects, escrow, and the manifest check on the second site), a poll (a
// cluster's journal listing), a scan (the prefix's listings), the status
// record. A day is then 2,880 segments, 17,280 polls and 3 backups a
// cluster, and 720 scans and about 3,600 status records a copier, shared
// by the clusters it copies.
func BenchmarkReplicateCost(b *testing.B) {
	clusters := testfix.BenchInt("BENCH_REPLICATE_COST_CLUSTERS", 10)
	scale := testfix.BenchInt("BENCH_REPLICATE_SCALE", 30)
	seconds := testfix.BenchInt("BENCH_REPLICATE_COST_SECONDS", 45)
	perSegment := testfix.BenchInt("BENCH_REPLICATE_SEGMENT_EVENTS", 600)
	backupMB := testfix.BenchInt("BENCH_REPLICATE_BACKUP_MB", 16)
	realMB := testfix.BenchInt("BENCH_REPLICATE_REAL_BACKUP_MB", 291)
	for range b.N {
		costRun(b, clusters, scale, time.Duration(seconds)*time.Second, perSegment, backupMB, realMB)
	}
}

func costRun(b *testing.B, clusters, scale int, length time.Duration, perSegment, backupMB, realMB int) {
	ctx := testfix.Context(b, length+10*time.Minute)
	pm, sm := testenv.SharedMinIO(b), testenv.StartMinIO(b)
	pb, sb := pm.NewBucket(b), sm.NewBucket(b)
	pl, sl := catalog.Layout{Prefix: testenv.Prefix(b)}, catalog.Layout{Prefix: "dr/" + testenv.Prefix(b)}
	pc, sc := newCounter(pb, pl), newCounter(sb, sl)
	primary := testfix.Store(b, pm, pb, func(cfg *cos.Config) { cfg.WrapTransport = pc.wrap })
	second := testfix.Store(b, sm, sb, func(cfg *cos.Config) { cfg.WrapTransport = sc.wrap })
	// The bench's own writes to the primary go through a store of their
	// own: only the copier's requests are counted.
	writer := testfix.Store(b, pm, pb)
	k := time.Duration(scale)
	segEvery := journal.DefaultSegmentInterval / k

	now := time.Now().UTC()
	ws := make([]*segmentWriter, clusters)
	var manifests []string
	for i := range ws {
		id := fmt.Sprintf("cost-%02d", i)
		m := bigBackup(b, writer, pl, id, now.Add(-8*time.Hour), backupMB)
		manifests = append(manifests, pl.Key(id, m.Name, catalog.ManifestObject))
		ws[i] = &segmentWriter{st: writer, l: pl, id: id, base: m.Name, next: 11, perSegment: perSegment, rng: rand.New(rand.NewPCG(uint64(i), 7))}
	}
	o := replicate.Options{Primary: primary, PrimaryLayout: pl, Second: second, SecondLayout: sl, Copier: "bench", Log: testfix.Logger(b),
		JournalInterval: replicate.DefaultJournalInterval / k, ScanInterval: replicate.DefaultScanInterval / k, StatusEvery: replicate.DefaultStatusEvery / k}
	rctx, stopRun := context.WithCancel(ctx)
	defer stopRun()
	runDone := make(chan error, 1)
	go func() { runDone <- replicate.Run(rctx, o) }()

	// The journals, staggered over an interval; a second backup of each
	// cluster during the run.
	wctx, stopWrites := context.WithTimeout(ctx, length)
	defer stopWrites()
	var wg sync.WaitGroup
	var mu sync.Mutex
	errs := make(chan error, 2*clusters)
	for i, w := range ws {
		wg.Add(2)
		go func() {
			defer wg.Done()
			time.Sleep(segEvery * time.Duration(i) / time.Duration(clusters))
			t := time.NewTicker(segEvery)
			defer t.Stop()
			for {
				select {
				case <-wctx.Done():
					return
				case <-t.C:
				}
				if err := w.write(ctx); err != nil {
					errs <- err
					return
				}
			}
		}()
		go func() {
			defer wg.Done()
			select {
			case <-wctx.Done():
				return
			case <-time.After(length * time.Duration(i+1) / time.Duration(clusters+1)):
			}
			m := bigBackup(b, writer, pl, w.id, time.Now().UTC(), backupMB)
			mu.Lock()
			manifests = append(manifests, pl.Key(w.id, m.Name, catalog.ManifestObject))
			mu.Unlock()
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	// Catch up: every segment and backup on the second site.
	dst := func(k string) string { return sl.RootPrefix() + k[len(pl.RootPrefix()):] }
	deadline := time.Now().Add(3 * time.Minute)
	for {
		missing := 0
		for _, w := range ws {
			if w.written > 0 && sc.stored(dst(pl.JournalSegmentKey(w.id, w.next-int64(perSegment), w.next-1))).IsZero() {
				missing++
			}
		}
		for _, m := range manifests {
			if sc.stored(dst(m)).IsZero() {
				missing++
			}
		}
		if missing == 0 {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("%d segments or backups not on the second site 3 min after the run", missing)
		}
		time.Sleep(100 * time.Millisecond)
	}
	stopRun()
	<-runDone

	segments, segBytes := 0, int64(0)
	for _, w := range ws {
		segments += w.written
		segBytes += w.bytes
	}
	backups := len(manifests)
	polls := pc.get(reqLIST, "poll").n
	pc.mu.Lock()
	scans := pc.scans
	pc.mu.Unlock()
	statuses := sc.get(reqPUT, "status").n
	fmt.Printf("BenchmarkReplicateCost: %d clusters, time compressed %dx for %s (%s of production time): %d segments (%s stored, %.0f KiB each, %d events), "+
		"%d backups of %d MiB, %d journal polls, %d scans, %d status records\n",
		clusters, scale, length, length*k, segments, mib(segBytes), float64(segBytes)/float64(max(segments, 1))/1024, perSegment, backups, backupMB, polls, scans, statuses)
	fmt.Print(pc.table("primary"), sc.table("second "))

	// Per unit: what one segment, backup, poll, scan, status record cost.
	type unit struct {
		name   string
		n      int64
		perDay float64 // units a cluster a day (per copier for scans and status)
	}
	per := func(site *counter, class, cat string, n int64) (float64, float64) {
		c := site.get(class, cat)
		return float64(c.n) / float64(max(n, 1)), float64(c.sent+c.recv) / float64(max(n, 1))
	}
	day := 24 * time.Hour
	segDay := float64(day / journal.DefaultSegmentInterval)
	pollDay := float64(day / replicate.DefaultJournalInterval)
	scanDay := float64(day / replicate.DefaultScanInterval)
	statusDay := float64(day/replicate.DefaultStatusEvery) + scanDay
	const backupDay = 3
	fmt.Println("BenchmarkReplicateCost per cluster per day (requests a unit, measured, x units a day):")
	var putA, getB, listA, bytesDay float64
	line := func(what string, n int64, unitsDay float64, shared int) {
		div := float64(max(shared, 1))
		puts, _ := per(sc, reqPUT, what, n)
		posts, _ := per(sc, reqPOST, what, n)
		sgets, sgb := per(sc, reqGET, what, n)
		pgets, pgb := per(pc, reqGET, what, n)
		plists, _ := per(pc, reqLIST, what, n)
		slists, _ := per(sc, reqLIST, what, n)
		_, spb := per(sc, reqPUT, what, n)
		u := unitsDay / div
		fmt.Printf("  %-8s %6d measured: a unit %.2f PUT+POST, %.2f GET (%.2f primary, %.2f second site's read-back), %.2f LIST; x %.1f a day%s = %.0f PUT, %.0f GET, %.0f LIST, %s\n",
			what, n, puts+posts, pgets+sgets, pgets, sgets, plists+slists, unitsDay, map[bool]string{true: fmt.Sprintf(" / %d clusters", shared), false: ""}[shared > 1],
			u*(puts+posts), u*(pgets+sgets), u*(plists+slists), mib(int64(u*(spb+sgb+pgb))))
		putA += u * (puts + posts)
		getB += u * (pgets + sgets)
		listA += u * (plists + slists)
		bytesDay += u * (spb + sgb + pgb)
	}
	for _, shared := range []int{100, 1800} {
		putA, getB, listA, bytesDay = 0, 0, 0, 0
		fmt.Printf(" one copier for %d clusters:\n", shared)
		line("segment", int64(segments), segDay, 1)
		line("poll", polls, pollDay, 1)
		line("backup", int64(backups), backupDay, 1)
		line("scan", scans, scanDay, shared)
		line("status", statuses, statusDay, shared)
		fmt.Printf("  total: %.0f PUTs, %.0f GETs, %.0f LISTs (%.0f Class A, %.0f Class B), %s a cluster a day at %d MiB backups\n",
			putA, getB, listA, putA+listA, getB, mib(int64(bytesDay)), backupMB)
	}
	// At a production backup's size: its bytes scale with it (read on the
	// primary, written and read back on the second site), and its parts
	// (5 MiB each) add PUTs. Totals for a copier of 1,800 clusters.
	bput, _ := per(sc, reqPUT, "backup", int64(backups))
	_, bb := per(sc, reqPUT, "backup", int64(backups))
	_, bg := per(sc, reqGET, "backup", int64(backups))
	_, bpg := per(pc, reqGET, "backup", int64(backups))
	parts := func(mb int) float64 { return float64((mb + 4) / 5) }
	extraPUT := backupDay * (parts(realMB) - parts(backupMB))
	extraBytes := backupDay * (bb + bg + bpg) * (float64(realMB)/float64(backupMB) - 1)
	fmt.Printf("  at %d MiB a backup: %.0f PUTs (+%.0f: %.0f parts a backup instead of %.0f, x %d), %.0f Class A in all, %s a cluster a day "+
		"(+%s: %s moved a backup x %d/%d, x %d)\n",
		realMB, putA+extraPUT, extraPUT, parts(realMB), parts(backupMB), backupDay, putA+extraPUT+listA, mib(int64(bytesDay+extraBytes)),
		mib(int64(extraBytes)), mib(int64(bb+bg+bpg)), realMB, backupMB, backupDay)
	b.ReportMetric(bput, "PUTs/backup")
}

// bigBackup is fakeBackup with a snapshot of mb MiB of random bytes
// (stored bytes: incompressible, as zstd output is).
func bigBackup(tb testing.TB, st *cos.Store, l catalog.Layout, id string, t0 time.Time, mb int) *catalog.Manifest {
	tb.Helper()
	return fakeBackupSized(tb, st, l, id, t0, mb<<20)
}
