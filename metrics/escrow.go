package metrics

import (
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/armada/etcd-recovery/internal/catalog"
)

// The escrow metrics (catalog's escrow.go): from the manifest of each
// cluster's newest committed backup that checks out and is not
// future-dated, as the refresh already reads it (no extra GET).
const (
	NameEscrowState          = "etcd_recovery_escrow_state"
	NameEscrowUsable         = "etcd_recovery_escrow_usable"
	NameCertificateNotAfter  = "etcd_recovery_certificate_not_after_timestamp_seconds"
	EscrowStateUnrecorded    = "unrecorded"
	escrowStateHelpStateList = "present, mismatch, missing, none, unrecorded"
)

// EscrowStates are the state label values of etcd_recovery_escrow_state:
// catalog.EscrowStates, and unrecorded for a backup written before escrow
// existed.
var EscrowStates = []string{string(catalog.EscrowPresent), string(catalog.EscrowMismatch), string(catalog.EscrowMissing),
	string(catalog.EscrowNone), EscrowStateUnrecorded}

var (
	descEscrowState = prometheus.NewDesc(NameEscrowState,
		"1 for the escrow state of the cluster's newest committed backup that checks out ("+escrowStateHelpStateList+": written before escrow existed), 0 for the others; absent when the cluster has no such backup.",
		[]string{"cluster", "state"}, nil)
	descEscrowUsable = prometheus.NewDesc(NameEscrowUsable,
		"1 when the escrow of the cluster's newest committed backup that checks out is usable (state present: stored, and every check at backup time passed), 0 when it is not; absent when the cluster has no such backup.",
		cl, nil)
	descCertificateNotAfter = prometheus.NewDesc(NameCertificateNotAfter,
		"Earliest NotAfter (unix seconds) of the certificates of each escrowed TLS secret, as the newest committed backup's escrow records them; absent when it records none.",
		[]string{"cluster", "secret"}, nil)
)

// EscrowState is the escrow of a cluster's newest committed backup.
type EscrowState struct {
	Backup string `json:"backup"`
	// State is the label value (EscrowStates).
	State  string `json:"state"`
	Usable bool   `json:"usable"`
	// NotAfter is the earliest NotAfter of each escrowed secret's
	// certificates.
	NotAfter map[string]time.Time `json:"notAfter,omitempty"`
}

// escrowState is the escrow of backup name whose manifest is m.
func escrowState(name string, m *catalog.Manifest) *EscrowState {
	s := &EscrowState{Backup: name, State: EscrowStateUnrecorded}
	r := m.Escrow
	if r == nil {
		return s
	}
	s.State, s.Usable = string(r.State), r.Usable()
	for _, c := range r.Certs {
		if s.NotAfter == nil {
			s.NotAfter = map[string]time.Time{}
		}
		if t, ok := s.NotAfter[c.Secret]; !ok || c.NotAfter.Before(t) {
			s.NotAfter[c.Secret] = c.NotAfter
		}
	}
	return s
}

// collectEscrow sends a cluster's escrow metrics.
func collectEscrow(gauge func(*prometheus.Desc, float64, ...string), c ClusterState) {
	e := c.Escrow
	if e == nil {
		return
	}
	for _, s := range EscrowStates {
		gauge(descEscrowState, b2f(s == e.State), c.Cluster, s)
	}
	gauge(descEscrowUsable, b2f(e.Usable), c.Cluster)
	secrets := make([]string, 0, len(e.NotAfter))
	for s := range e.NotAfter {
		secrets = append(secrets, s)
	}
	slices.Sort(secrets)
	for _, s := range secrets {
		gauge(descCertificateNotAfter, unixSeconds(e.NotAfter[s]), c.Cluster, s)
	}
}
