package retention

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// Escrows follow their backups (docs/object-layout.md#escrow-lifecycle):
// a cluster's escrow object (<prefix>/_escrow/<cluster>/<address>.json.age)
// is deleted when no remaining committed backup of the cluster names its
// address (Manifest.Escrow.Address). DecideEscrows is that decision, pure
// like ApplyPolicy: the caller lists the escrows, says which addresses the
// backups that stay name, and deletes what it returns.
//
// A backup writes its escrow before its manifest, so an escrow no manifest
// names yet may be a backup's in flight: it is kept while younger than the
// escrow grace (Policy.EscrowGrace, the grace an incomplete folder gets),
// and while a backup of the cluster is in flight (a folder without a
// manifest that retention keeps as young), since that backup may reuse an
// older escrow of the same address.

// Reasons an escrow is kept (EscrowDecision.Rule).
const (
	EscrowRuleNamed      = "named"       // a remaining backup names it
	EscrowRuleYoung      = "young"       // named by none, but written within the grace: a backup in flight may name it
	EscrowRuleUnreadable = "unreadable"  // a remaining backup's manifest could not be read: what it names is unknown
	EscrowRuleInFlight   = "in-flight"   // named by none, but a backup of the cluster is in flight: it may name it (a new escrow, or one it reuses)
	EscrowRuleNoTime     = "no-time"     // the listing gave no write time: its age is unknown
	EscrowRuleUnnamed    = "unnamed"     // deleted: named by no remaining backup, older than the grace
	EscrowRuleClusterEnd = "cluster-end" // deleted: every backup of the cluster is deleted (delete --all-backups, the orphan lifecycle)
)

// EscrowGrace is how long an escrow that no backup names is kept: the
// grace of a folder without a manifest (IncompleteAfter, at least
// MinIncompleteAfter), since a backup writes its escrow before its
// manifest as it writes its other objects.
func (p Policy) EscrowGrace() time.Duration { return p.IncompleteAfter }

// EscrowObject is one listed escrow of a cluster.
type EscrowObject struct {
	Address      string
	LastModified time.Time
}

// EscrowDecision is what to do with one escrow.
type EscrowDecision struct {
	Address string
	Keep    bool
	Rule    string // EscrowRule*
	Reason  string // never empty
}

// DecideEscrows decides each escrow of one cluster at now. named maps an
// address to the names of the remaining committed backups that name it
// (newest first); unreadable names the remaining committed backups whose
// manifest could not be read (then nothing is deleted: which escrow they
// name is unknown); inFlight names the cluster's backups in flight (then
// nothing is deleted either). An escrow named by none is deleted once
// older than grace. The decisions are in the order of objs.
func DecideEscrows(objs []EscrowObject, named map[string][]string, unreadable, inFlight []string, now time.Time, grace time.Duration) []EscrowDecision {
	out := make([]EscrowDecision, 0, len(objs))
	for _, o := range objs {
		d := EscrowDecision{Address: o.Address, Keep: true}
		age := now.Sub(o.LastModified)
		switch by := named[o.Address]; {
		case len(by) > 0:
			d.Rule = EscrowRuleNamed
			d.Reason = fmt.Sprintf("named by %d backup(s): %s", len(by), strings.Join(firstN(by, 3), ", "))
		case len(unreadable) > 0:
			d.Rule = EscrowRuleUnreadable
			d.Reason = fmt.Sprintf("named by no backup read, but the manifest of %s could not be read: which escrow it names is unknown",
				strings.Join(firstN(unreadable, 3), ", "))
		case len(inFlight) > 0:
			d.Rule = EscrowRuleInFlight
			d.Reason = fmt.Sprintf("named by no backup, but backup %s is in flight and may name it", strings.Join(firstN(inFlight, 3), ", "))
		case o.LastModified.IsZero():
			d.Rule, d.Reason = EscrowRuleNoTime, "named by no backup, but its write time is unknown: never deleted automatically"
		case age <= grace:
			d.Rule = EscrowRuleYoung
			d.Reason = fmt.Sprintf("named by no backup yet, written %s ago, not older than %s: a backup in flight may name it",
				FormatDuration(max(age, 0).Round(time.Second)), FormatDuration(grace))
		default:
			d.Keep, d.Rule = false, EscrowRuleUnnamed
			d.Reason = fmt.Sprintf("named by no remaining backup, written %s ago (older than %s)", FormatDuration(age.Round(time.Second)), FormatDuration(grace))
		}
		out = append(out, d)
	}
	return out
}

// firstN is the first n of s, with "and k more" when there are more.
func firstN(s []string, n int) []string {
	if len(s) <= n {
		return s
	}
	return append(slices.Clone(s[:n]), fmt.Sprintf("and %d more", len(s)-n))
}
