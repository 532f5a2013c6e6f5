package faultmatrix

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
)

// Trickle rows: the proxy forwards 8 KiB every 100 ms (about 80 KiB/s),
// so bytes move well within the stall timeout and only the
// minimum-throughput rule, here 1 MiB in any 4 s (256 KiB/s), can end the
// call. Deadline rows: backup's --timeout ends a run held by the store.
const (
	trickleBytes = 8 << 10
	trickleEvery = 100 * time.Millisecond
	minRate      = "1MiB/4s"
	minWindow    = 4 * time.Second
)

var reThroughput = regexp.MustCompile(`object store stalled \(throughput \S+ in the last 4s of transfer, below the minimum 1MiB/4s\)`)

func trickleRows() []row {
	return []row{
		// The snapshot upload trickles: stalled by throughput, the upload
		// aborted, nothing committed, no other member tried.
		{"store/trickles-during-upload", func(t *testing.T, w *world) {
			v := w.proxiedView(t)
			h := v.proxy.Hold(regexp.MustCompile(`partNumber=1&`))
			args := append(w.backupArgs(append(w.stallArgs(t, "backup"), "--cos-min-throughput", minRate)...), v.viaProxy()...)
			c := w.start(t, args...)
			waitHit(t, h, c, "the first UploadPart")
			v.proxy.SetTrickle(testenv.ToServer, trickleBytes, trickleEvery)
			h.Release()
			bound := minWindow + abortWindow + slack
			r := c.wait(bound)
			v.proxy.SetTrickle(testenv.ToServer, 0, 0)
			if !expect(t, "backup through a trickling store", r, bound, 1) {
				return
			}
			if !reThroughput.MatchString(r.stderr) || !strings.Contains(r.stderr, `failed at step "upload snapshot"`) {
				t.Errorf("the error does not name the throughput stall at the upload: %s", r)
			}
			if strings.Contains(r.stderr, "trying the next member") {
				t.Errorf("a store stall was retried on another etcd member: %s", r)
			}
			waitStoreBack(t, w.minio, v.proxy)
			if got, keys := w.checkStore(t, v); len(got) != 0 || len(keys) != 0 {
				t.Errorf("a backup stalled by throughput left %v (committed %v)", keys, got)
			}
		}},
		// A restore dry run's download trickles: stalled by throughput at
		// "verify backup", never called corrupt.
		{"store/trickles-during-download", func(t *testing.T, w *world) {
			v := w.proxiedView(t)
			name := w.copyBackup(t, v.prefix, 1, time.Now().Add(-time.Hour), catalog.KindScheduled)
			h := v.proxy.Hold(regexp.MustCompile(`GET /[^ ]*/snapshot\.db`))
			args := append([]string{"restore", "--cluster-id", clusterID, "--no-live", "--backup", name, "--dry-run",
				"--initial-cluster", "r0=https://127.0.0.1:2380", "--data-dir-root", t.TempDir(), "--cos-min-throughput", minRate},
				w.stallArgs(t, "restore")...)
			c := w.start(t, append(args, v.viaProxy()...)...)
			waitHit(t, h, c, "the snapshot download")
			v.proxy.SetTrickle(testenv.ToClient, trickleBytes, trickleEvery)
			h.Release()
			bound := minWindow + slack
			r := c.wait(bound)
			v.proxy.SetTrickle(testenv.ToClient, 0, 0)
			if !expect(t, "restore --dry-run through a trickling store", r, bound, 1) {
				return
			}
			if !reThroughput.MatchString(r.stderr) || !strings.Contains(r.stderr, "verify backup") {
				t.Errorf("the error does not name the throughput stall at verify backup: %s", r)
			}
			if strings.Contains(strings.ToLower(r.stderr), "corrupt") {
				t.Errorf("a trickling store was taken for a corrupt backup: %s", r)
			}
			w.checkStore(t, v)
		}},
		// backup --timeout passes while the store holds the snapshot
		// upload (the stall timeout is far off): exit 1 naming the
		// deadline and the step, nothing left.
		{"backup/timeout-mid-upload", func(t *testing.T, w *world) {
			v := w.proxiedView(t)
			h := v.proxy.Hold(regexp.MustCompile(`partNumber=1&`))
			const timeout = 5 * time.Second
			args := append(w.backupArgs("--timeout", timeout.String(), "--cos-stall-timeout", "5m"), v.viaProxy()...)
			c := w.start(t, args...)
			bound := timeout + abortWindow + slack
			r := c.wait(bound)
			h.Drop()
			if !expect(t, "backup past its --timeout", r, bound, 1) {
				return
			}
			select {
			case <-h.Hit():
			default:
				t.Fatalf("the snapshot upload was never held: %s", r)
			}
			if !strings.Contains(r.stderr, "the overall deadline passed (--timeout 5s)") || !strings.Contains(r.stderr, `failed at step "upload snapshot"`) {
				t.Errorf("the error does not name the deadline and the step: %s", r)
			}
			waitStoreBack(t, w.minio, v.proxy)
			if got, keys := w.checkStore(t, v); len(got) != 0 || len(keys) != 0 {
				t.Errorf("a backup stopped by its deadline left %v (committed %v)", keys, got)
			}
		}},
	}
}
