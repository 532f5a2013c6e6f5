package replicate_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"regexp"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/journal"
	"github.com/armada/etcd-recovery/internal/objectio"
	"github.com/armada/etcd-recovery/internal/store/cos"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
	"github.com/armada/etcd-recovery/replicate"
)

var segNameRE = regexp.MustCompile(`(\d{16})-(\d{16})\.seg$`)

// BenchmarkReplicateRPO measures the second site's RPO: from a write to
// etcd (its Put returned) to the segment holding its revision stored on
// the second site (the copier's create-only PUT answered), p50, p99 and
// max over every write and cluster, next to the same from the write to the
// segment on the primary, and the copier's own share (second − primary,
// per segment).
//
// Real servers: one etcd 3.5 member written at BENCH_REPLICATE_RATE
// (default 100) writes/s of ~1 KiB values, journaled by
// BENCH_REPLICATE_CLUSTERS (default 8) real captures (journal.Capture,
// each its own cluster id, started a segment interval apart so their
// segments do not land together) into the primary MinIO at
// BENCH_REPLICATE_INTERVAL (default 30s, journal.DefaultSegmentInterval);
// the copier (replicate.Run, its production intervals: journal polls
// every 5 s, scans every 2 min) copying to a second MinIO behind a shaped
// link (testenv.LinkProxy: BENCH_REPLICATE_RTT, default 50ms, and
// BENCH_REPLICATE_MBIT, default 100 Mbit/s each way). The writes go on
// for BENCH_REPLICATE_SECONDS (default 100, at least 3 intervals), then
// the run waits for the last write's segments on both sites.
func BenchmarkReplicateRPO(b *testing.B) {
	interval := benchDuration(b, "BENCH_REPLICATE_INTERVAL", journal.DefaultSegmentInterval)
	clusters := testfix.BenchInt("BENCH_REPLICATE_CLUSTERS", 8)
	rate := testfix.BenchInt("BENCH_REPLICATE_RATE", 100)
	length := max(time.Duration(testfix.BenchInt("BENCH_REPLICATE_SECONDS", 100))*time.Second, 3*interval)
	rtt := benchDuration(b, "BENCH_REPLICATE_RTT", 50*time.Millisecond)
	mbit := testfix.BenchInt("BENCH_REPLICATE_MBIT", 100)
	for range b.N {
		rpoRun(b, interval, clusters, rate, length, rtt, mbit)
	}
}

func rpoRun(b *testing.B, interval time.Duration, clusters, rate int, length, rtt time.Duration, mbit int) {
	ctx := testfix.Context(b, length+3*interval+5*time.Minute)
	c := testenv.StartEtcd(b, testenv.EtcdOptions{Version: testenv.V35, Members: 1})
	cli := c.Client(b)
	testenv.PutKeys(b, cli, "/registry/configmaps/kube-system/cm-", 50, 512)
	pm, sm := testenv.SharedMinIO(b), testenv.StartMinIO(b)
	pb, sb := pm.NewBucket(b), sm.NewBucket(b)
	pl, sl := catalog.Layout{Prefix: testenv.Prefix(b)}, catalog.Layout{Prefix: "dr/" + testenv.Prefix(b)}
	link := testenv.StartLinkProxy(b, sm.Endpoint[len("http://"):], rtt, int64(mbit)*1_000_000)
	pc, sc := newCounter(pb, pl), newCounter(sb, sl)
	primary := testfix.Store(b, pm, pb, func(cfg *cos.Config) { cfg.WrapTransport = pc.wrap })
	second := testfix.Store(b, sm, sb, func(cfg *cos.Config) {
		cfg.Endpoint, cfg.WrapTransport = link.URL("http"), sc.wrap
	})
	rig := &testfix.StoreRig{MinIO: pm, Bucket: pb, Store: primary, Layout: pl}
	ids := make([]string, clusters)
	for i := range ids {
		ids[i] = fmt.Sprintf("rpo-%02d", i)
	}

	// Every cluster has a backup, then the copier starts, at its
	// production intervals: its first full pass finds the clusters to
	// poll. (A cluster whose first backup lands after a scan is found by
	// the next one, up to --scan-interval later.)
	bases := make([]*catalog.Manifest, clusters)
	for i, id := range ids {
		bases[i] = rig.TakeBackup(b, c, id, catalog.KindScheduled)
	}
	rctx, stopRun := context.WithCancel(ctx)
	defer stopRun()
	runDone := make(chan error, 1)
	go func() {
		runDone <- replicate.Run(rctx, replicate.Options{Primary: primary, PrimaryLayout: pl, Second: second, SecondLayout: sl,
			Copier: "bench", Log: testfix.Logger(b)})
	}()
	for pc.get(reqLIST, "poll").n < int64(clusters) {
		time.Sleep(50 * time.Millisecond)
	}

	// The captures, one an interval/clusters after the other.
	cctx, stopCapture := context.WithCancel(ctx)
	defer stopCapture()
	var cwg sync.WaitGroup
	capErrs := make(chan error, clusters)
	for i, id := range ids {
		base := bases[i]
		cwg.Add(1)
		go func() {
			defer cwg.Done()
			err := journal.Capture(cctx, journal.CaptureOptions{Client: cli, ClusterID: id, BaseBackup: base.Name, BaseRev: base.Revision(),
				Store: primary, Layout: pl, Encoding: objectio.Encoding{Compression: objectio.CompressZstd},
				SegmentInterval: interval, Log: testfix.Logger(b)})
			if err != nil && !errors.Is(err, context.Canceled) {
				capErrs <- fmt.Errorf("capture %s: %w", id, err)
			}
		}()
		if i < clusters-1 {
			time.Sleep(interval / time.Duration(clusters))
		}
	}

	// The writes, paced; each one's revision and the time its Put returned.
	type write struct {
		rev int64
		at  time.Time
	}
	var writes []write
	// Kubernetes-like pod objects (about 1.3 KiB, random uids and ids):
	// segments of the size real ones are.
	vals := podEvents(rand.New(rand.NewPCG(1, 2)), 1, 2000)
	start := time.Now()
	tick := time.NewTicker(time.Second / time.Duration(rate))
	for i := 0; time.Since(start) < length; i++ {
		<-tick.C
		r, err := cli.Put(ctx, fmt.Sprintf("/registry/pods/default/p-%d", i%500), string(vals[i%len(vals)].Value))
		if err != nil {
			b.Fatal(err)
		}
		writes = append(writes, write{r.Header.Revision, time.Now()})
	}
	tick.Stop()
	last := writes[len(writes)-1].rev

	// Every cluster's segments on both sites, until each has the last write.
	type seg struct {
		first, last int64
		p, s        time.Time
	}
	segsOf := func(id string) ([]seg, bool) {
		keys := testfix.Keys(b, primary, pl.JournalPrefix(id))
		var out []seg
		done := false
		for _, k := range keys {
			m := segNameRE.FindStringSubmatch(k)
			if m == nil {
				continue
			}
			f, _ := strconv.ParseInt(m[1], 10, 64)
			l, _ := strconv.ParseInt(m[2], 10, 64)
			s := seg{first: f, last: l, p: pc.stored(k), s: sc.stored(sl.RootPrefix() + k[len(pl.RootPrefix()):])}
			out = append(out, s)
			if l >= last && !s.s.IsZero() {
				done = true
			}
		}
		return out, done
	}
	deadline := time.Now().Add(2*interval + 2*time.Minute)
	all := map[string][]seg{}
	for _, id := range ids {
		for {
			segs, done := segsOf(id)
			if done {
				all[id] = segs
				break
			}
			select {
			case err := <-capErrs:
				b.Fatal(err)
			default:
			}
			if time.Now().After(deadline) {
				b.Fatalf("cluster %s: the last write (revision %d) is not on the second site %s after the writes stopped", id, last, time.Since(start)-length)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	stopCapture()
	cwg.Wait()
	stopRun()
	<-runDone

	var toPrimary, toSecond, share []time.Duration
	var segments int
	for _, id := range ids {
		segs := all[id]
		for _, s := range segs {
			if !s.p.IsZero() && !s.s.IsZero() && s.last >= writes[0].rev && s.first <= last {
				share = append(share, s.s.Sub(s.p))
				segments++
			}
		}
		j := 0
		for _, w := range writes {
			for j < len(segs) && segs[j].last < w.rev {
				j++
			}
			if j == len(segs) || segs[j].first > w.rev || segs[j].p.IsZero() || segs[j].s.IsZero() {
				b.Fatalf("cluster %s: no segment on both sites holds revision %d", id, w.rev)
			}
			toPrimary = append(toPrimary, segs[j].p.Sub(w.at))
			toSecond = append(toSecond, segs[j].s.Sub(w.at))
		}
	}
	for _, v := range [][]time.Duration{toPrimary, toSecond, share} {
		slices.Sort(v)
	}
	row := func(v []time.Duration) string {
		return fmt.Sprintf("p50 %s p99 %s max %s", secs(quantile(v, 0.5)), secs(quantile(v, 0.99)), secs(v[len(v)-1]))
	}
	fmt.Printf("BenchmarkReplicateRPO: %d clusters journaled at --segment-interval %s, %d writes/s for %s (%d writes, %d samples), "+
		"copier at its defaults (journal polls every %s), the second site behind %s RTT and %d Mbit/s:\n",
		clusters, interval, rate, length.Round(time.Second), len(writes), len(toSecond), replicate.DefaultJournalInterval, rtt, mbit)
	fmt.Printf("  write -> segment on the primary:     %s\n", row(toPrimary))
	fmt.Printf("  write -> segment on the second site: %s\n", row(toSecond))
	fmt.Printf("  the copier's share (primary -> second site, %d segments): %s, mean %s\n", segments, row(share), secs(mean(share)))
	fmt.Printf("  second/primary: p50 %.2fx p99 %.2fx; the second site's p99 is %.0f%% of its 60 s target\n",
		quantile(toSecond, 0.5).Seconds()/quantile(toPrimary, 0.5).Seconds(), quantile(toSecond, 0.99).Seconds()/quantile(toPrimary, 0.99).Seconds(),
		100*quantile(toSecond, 0.99).Seconds()/60)
	var stored, nseg int64
	for _, id := range ids {
		objs, err := primary.List(ctx, pl.JournalPrefix(id))
		if err != nil {
			b.Fatal(err)
		}
		for _, o := range objs {
			stored += o.Size
			nseg++
		}
	}
	fmt.Printf("  segments: %s stored on the primary (%.0f KiB a segment); the link carried %s to the second site and %s back (the read-back)\n",
		mib(stored), float64(stored)/float64(max(nseg, 1))/1024, mib(link.Moved(testenv.ToServer)), mib(link.Moved(testenv.ToClient)))
	if interval != journal.DefaultSegmentInterval {
		// Scaled: a write waits for its segment (up to the interval, half
		// on average), then for the copier's next poll and the copy, which
		// do not scale with the interval.
		fmt.Printf("  at %s: p50 about %s/2 + the copier's p50 %s = %s; p99 about %s + the copier's p99 %s = %s\n",
			journal.DefaultSegmentInterval, journal.DefaultSegmentInterval, secs(quantile(share, 0.5)),
			secs(journal.DefaultSegmentInterval/2+quantile(share, 0.5)), journal.DefaultSegmentInterval, secs(quantile(share, 0.99)),
			secs(journal.DefaultSegmentInterval+quantile(share, 0.99)))
	}
	b.ReportMetric(quantile(toPrimary, 0.5).Seconds(), "primary-p50-s")
	b.ReportMetric(quantile(toPrimary, 0.99).Seconds(), "primary-p99-s")
	b.ReportMetric(quantile(toSecond, 0.5).Seconds(), "second-p50-s")
	b.ReportMetric(quantile(toSecond, 0.99).Seconds(), "second-p99-s")
}

func mean(v []time.Duration) time.Duration {
	if len(v) == 0 {
		return 0
	}
	var s time.Duration
	for _, d := range v {
		s += d
	}
	return s / time.Duration(len(v))
}
