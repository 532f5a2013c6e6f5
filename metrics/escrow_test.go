package metrics_test

import (
	"bytes"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
	"github.com/armada/etcd-recovery/metrics"
)

// TestExporterEscrow takes the exporter's real scrape of a MinIO bucket
// (store only: every cluster id with backups is a cluster) whose backups'
// manifests name escrows: the newest backup's escrow state, usability and
// each escrowed secret's earliest NotAfter are exported, an older backup's
// never; `promtool test rules` on the scrape against deploy/40-alerts.yaml,
// evaluated 10 h on (EtcdRecoveryEscrowUnusable waits 9 h): a certificate
// expiring in 10 days fires EtcdRecoveryCertificateExpiringSoon, one in 3
// days EtcdRecoveryCertificateExpiryImminent, 60 days nothing; a missing,
// mismatched, absent (none) or unrecorded escrow fires
// EtcdRecoveryEscrowUnusable; each cluster fires nothing else. The
// fleet dashboard's queries run on the same scrape.
func TestExporterEscrow(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t, 3*time.Minute)
	m := testenv.SharedMinIO(t)
	st := testfix.Store(t, m, m.NewBucket(t))
	layout := catalog.Layout{Prefix: testenv.Prefix(t)}
	now := time.Now().UTC()
	in := func(d time.Duration) time.Time { return now.Add(d).Truncate(time.Second) }
	const day = 24 * time.Hour
	present := func(seed string, certs ...catalog.EscrowCert) *catalog.EscrowRef {
		return testfix.StoredEscrow(catalog.EscrowPresent, testfix.EscrowAddress(seed), certs...)
	}
	world := []struct {
		cluster string
		older   *catalog.EscrowRef // an older backup's escrow
		newest  *catalog.EscrowRef
		state   string
		usable  float64
	}{
		{"esc-late", nil, present("late", testfix.EscrowCert("esc-late-server-tls", in(60*day))), "present", 1},
		{"esc-soon", nil, present("soon", testfix.EscrowCert("esc-soon-server-tls", in(60*day)), testfix.EscrowCert("esc-soon-client-tls", in(10*day)),
			testfix.EscrowCert("esc-soon-client-tls", in(40*day))), "present", 1},
		{"esc-imminent", nil, present("imminent", testfix.EscrowCert("esc-imminent-peer-tls", in(3*day))), "present", 1},
		{"esc-missing", present("missing-older", testfix.EscrowCert("esc-missing-server-tls", in(2*day))),
			&catalog.EscrowRef{State: catalog.EscrowMissing, Problems: []string{"secret esc-missing-peer-tls not found"}}, "missing", 0},
		{"esc-mismatch", nil, testfix.StoredEscrow(catalog.EscrowMismatch, testfix.EscrowAddress("mismatch"), testfix.EscrowCert("esc-mismatch-server-tls", in(90*day))),
			"mismatch", 0},
		// The server secret rotated to a 1-year certificate, the members
		// not restarted: they still serve one expiring in 5 days, which
		// the backup's check records (Served, "served by <member>").
		{"esc-rotated", nil, testfix.StoredEscrow(catalog.EscrowMismatch, testfix.EscrowAddress("rotated"), testfix.EscrowCert("esc-rotated-server-tls", in(365*day)),
			catalog.EscrowCert{Secret: "esc-rotated-server-tls", Key: "served by https://10.0.0.1:2379", Subject: "CN=etcd", Issuer: "CN=ca", NotAfter: in(5 * day),
				SHA256: strings.Repeat("ab", 32), Served: true}), "mismatch", 0},
		{"esc-none", nil, &catalog.EscrowRef{State: catalog.EscrowNone, Problems: []string{"no recipient"}}, "none", 0},
		{"esc-old", nil, nil, metrics.EscrowStateUnrecorded, 0},
	}
	for _, w := range world {
		if w.older != nil {
			testfix.PutEscrowBackup(t, st, layout, w.cluster, now.Add(-2*time.Hour), w.older)
		}
		testfix.PutEscrowBackup(t, st, layout, w.cluster, now.Add(-time.Hour), w.newest)
	}
	exp := refreshed(t, ctx, metrics.Options{Store: st, Layout: layout, Interval: time.Hour, Deadline: 30 * time.Second,
		Now: func() time.Time { return now }})
	mfs, body := scrape(t, exp)

	t.Run("Series", func(t *testing.T) {
		for _, w := range world {
			for _, s := range metrics.EscrowStates {
				want := 0.0
				if s == w.state {
					want = 1
				}
				if v, ok := value(mfs, metrics.NameEscrowState, "cluster", w.cluster, "state", s); !ok || v != want {
					t.Errorf("%s{cluster=%q,state=%q} = %v (present %v), want %v", metrics.NameEscrowState, w.cluster, s, v, ok, want)
				}
			}
			if v, ok := value(mfs, metrics.NameEscrowUsable, "cluster", w.cluster); !ok || v != w.usable {
				t.Errorf("%s{cluster=%q} = %v (present %v), want %v", metrics.NameEscrowUsable, w.cluster, v, ok, w.usable)
			}
		}
		// Each escrowed secret's earliest NotAfter, of the newest backup
		// only (esc-missing's older escrow, 2 days out, is not exported).
		for _, c := range []struct {
			cluster, secret string
			at              time.Time
		}{
			{"esc-soon", "esc-soon-client-tls", in(10 * day)}, {"esc-soon", "esc-soon-server-tls", in(60 * day)},
			{"esc-imminent", "esc-imminent-peer-tls", in(3 * day)}, {"esc-late", "esc-late-server-tls", in(60 * day)},
			{"esc-rotated", "esc-rotated-server-tls", in(5 * day)},
		} {
			if v, ok := value(mfs, metrics.NameCertificateNotAfter, "cluster", c.cluster, "secret", c.secret); !ok || v != float64(c.at.Unix()) {
				t.Errorf("%s{cluster=%q,secret=%q} = %v (present %v), want %v", metrics.NameCertificateNotAfter, c.cluster, c.secret, v, ok, c.at.Unix())
			}
		}
		for _, cl := range []string{"esc-missing", "esc-none", "esc-old"} {
			if n := series(mfs, metrics.NameCertificateNotAfter, cl); n != 0 {
				t.Errorf("%d %s series of %s, whose newest backup escrows no certificate", n, metrics.NameCertificateNotAfter, cl)
			}
		}
		cmd := exec.CommandContext(ctx, testenv.Promtool(t), "check", "metrics")
		cmd.Stdin = bytes.NewReader(body)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("promtool check metrics: %v\n%s\nscrape:\n%s", err, out, body)
		}
	})

	t.Run("PromtoolTestRules", func(t *testing.T) {
		var all []string
		for _, w := range world {
			all = append(all, w.cluster)
		}
		promtoolScrapeAt(t, body, nil, now, 10*time.Hour, map[string][]string{
			"EtcdRecoveryEscrowUnusable":            {"esc-mismatch", "esc-missing", "esc-none", "esc-old", "esc-rotated"},
			"EtcdRecoveryCertificateExpiringSoon":   {"esc-soon"},
			"EtcdRecoveryCertificateExpiryImminent": {"esc-imminent", "esc-rotated"},
		}, all)
	})

	t.Run("DashboardQueries", func(t *testing.T) {
		dashboardOnScrape(t, body, now, map[string]string{
			"Clusters without any backup/A": "every cluster has a backup",
		}, 10)
	})
}
