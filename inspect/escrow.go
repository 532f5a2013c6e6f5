package inspect

import (
	"fmt"
	"strings"
	"time"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/output"
	"github.com/armada/etcd-recovery/internal/prune"
)

// The escrow check: the newest backup's escrow (what a restore needs
// besides the data, catalog's escrow.go) must be usable, and no escrowed
// certificate may expire within prune.CertExpiryWarning (30 days): when
// the namespace is gone, the rebuild uses it as it is.

// RunbookNamespaceGone is the runbook section of a rebuild from the store
// alone, which needs the escrow. It is not in Runbooks (no NEXT STEP
// points to it): the escrow flags name it.
const RunbookNamespaceGone = "runbooks/namespace-gone.md#the-namespace-is-gone"

// Flags of the escrow check.
const (
	FlagEscrowUnusable FlagKind = "escrow-unusable" // the newest backup's escrow is not usable (missing, mismatch, none, or no escrow recorded)
	FlagCertExpiring   FlagKind = "cert-expiring"   // an escrowed certificate expires within 30 days (or has expired)
)

// EscrowStatus is the newest committed backup's escrow, as inspect shows
// it.
type EscrowStatus struct {
	Backup string `json:"backup"`
	// State is present, mismatch, missing or none; "" for a backup written
	// before escrow existed.
	State    catalog.EscrowState `json:"state"`
	Usable   bool                `json:"usable"`
	Address  string              `json:"address,omitempty"`
	Problems []string            `json:"problems,omitempty"`
	// Nearest is the escrowed certificate that expires first; ExpiresIn
	// how long it had left when the store was read.
	Nearest   *catalog.EscrowCert `json:"nearest,omitempty"`
	ExpiresIn time.Duration       `json:"-"`
	// ExpiresInText/ExpiresInSeconds are ExpiresIn for JSON readers.
	ExpiresInText    string `json:"expiresIn,omitempty"`
	ExpiresInSeconds int64  `json:"expiresInSeconds,omitempty"`
}

// escrowStatus is the escrow of backup name, whose manifest says ref, at
// now.
func escrowStatus(name string, ref *catalog.EscrowRef, now time.Time) *EscrowStatus {
	s := &EscrowStatus{Backup: name}
	if ref == nil {
		return s
	}
	s.State, s.Usable, s.Address, s.Problems = ref.State, ref.Usable(), ref.Address, ref.Problems
	for i, c := range ref.Certs {
		if s.Nearest == nil || c.NotAfter.Before(s.Nearest.NotAfter) {
			s.Nearest = &ref.Certs[i]
		}
	}
	if s.Nearest != nil {
		s.ExpiresIn = s.Nearest.NotAfter.Sub(now)
	}
	return s
}

// escrowFlags judges a copy of e and returns it with its flags.
func escrowFlags(e EscrowStatus, loc string) (*EscrowStatus, []Flag) {
	var fs []Flag
	if !e.Usable {
		why := "no escrow recorded (the backup was written before escrow existed)"
		if e.State != "" {
			why = "escrow " + string(e.State)
			if len(e.Problems) > 0 {
				why += ": " + strings.Join(e.Problems, "; ")
			}
		}
		fs = append(fs, Flag{Kind: FlagEscrowUnusable, Severity: SeverityWarning, Runbook: RunbookNamespaceGone,
			Message: fmt.Sprintf("the newest backup %s of %s has no usable escrow (%s): if the namespace is lost, its secrets, Services and EtcdCluster cannot be rebuilt from the store",
				e.Backup, loc, why)})
	}
	if c := e.Nearest; c != nil {
		e.ExpiresInText, e.ExpiresInSeconds = output.Age(max(e.ExpiresIn, 0)), int64(e.ExpiresIn.Seconds())
		switch {
		case e.ExpiresIn <= 0:
			fs = append(fs, Flag{Kind: FlagCertExpiring, Severity: SeverityCritical, Runbook: RunbookNamespaceGone,
				Message: fmt.Sprintf("escrowed certificate %s (%s) of %s EXPIRED at %s: clients of the cluster fail; re-issue it and take a backup",
					c.Secret, c.Subject, loc, c.NotAfter.UTC().Format(time.RFC3339))})
		case e.ExpiresIn <= prune.CertExpiryWarning:
			fs = append(fs, Flag{Kind: FlagCertExpiring, Severity: SeverityWarning, Runbook: RunbookNamespaceGone,
				Message: fmt.Sprintf("escrowed certificate %s (%s) of %s expires in %s (%s): re-issue it before then and take a backup",
					c.Secret, c.Subject, loc, e.ExpiresInText, c.NotAfter.UTC().Format(time.RFC3339))})
		}
	}
	return &e, fs
}

// escrowLine is the ESCROW line: the newest backup's escrow state and its
// nearest certificate expiry; empty when it was not checked.
func (r *Report) escrowLine() string {
	if r.Backup == nil || r.Backup.Escrow == nil {
		return ""
	}
	e := r.Backup.Escrow
	state := strings.ToUpper(string(e.State))
	if e.State == "" {
		state = "NONE RECORDED"
	}
	l := fmt.Sprintf("%s (newest backup %s", state, e.Backup)
	if e.Address != "" {
		l += ", escrow " + e.Address[:min(len(e.Address), 12)]
	}
	l += ")"
	if c := e.Nearest; c != nil {
		left := "in " + e.ExpiresInText
		if e.ExpiresIn <= 0 {
			left = "EXPIRED"
		}
		l += fmt.Sprintf("; nearest certificate expiry %s (%s, %s)", c.NotAfter.UTC().Format(time.RFC3339), c.Secret, left)
	}
	return l
}
