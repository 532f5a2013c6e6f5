package replicate

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/armada/etcd-recovery/internal/catalog"
)

// Pass is what one full pass (Once) did.
type Pass struct {
	Started  time.Time `json:"started"`
	Finished time.Time `json:"finished"`
	// Copied objects (written to the second site and read back) and their
	// bytes; Already: found there with the same sha256; Superseded: drill
	// or owner records the primary replaced since their copy (the second
	// site keeps its first).
	Copied      int   `json:"copied"`
	CopiedBytes int64 `json:"copiedBytes"`
	Already     int   `json:"already"`
	Superseded  int   `json:"superseded"`
	// VerifyBytes and VerifySeconds are the read-back's cost: the bytes
	// read from the second site after each copy, and the time it took.
	VerifyBytes   int64   `json:"verifyBytes"`
	VerifySeconds float64 `json:"verifySeconds"`
	// Clusters is each cluster's part, by id.
	Clusters []ClusterPass `json:"clusters"`
	// Failures are the verification failures met (kept, never
	// overwritten; also in the status record).
	Failures []catalog.ReplicaFailure `json:"failures,omitempty"`
	// Errors name what could not be copied and why (a site failing).
	Errors []string `json:"errors,omitempty"`
}

// ClusterPass is one cluster's part of a pass.
type ClusterPass struct {
	ClusterID string `json:"clusterID"`
	// Backups: folders whose manifest reached the second site in this
	// pass; Segments and Records (gap and proof records): copied.
	Backups  int `json:"backups"`
	Segments int `json:"segments"`
	Records  int `json:"records"`
	// Already: objects found on the second site with the same bytes.
	Already  int `json:"already"`
	Failures int `json:"failures"`
	// Pending: objects complete on the primary not on the second site
	// when the pass ended.
	Pending             int    `json:"pending"`
	JournalLastRevision int64  `json:"journalLastRevision,omitempty"`
	NewestBackup        string `json:"newestBackup,omitempty"`
}

// Err is nil when everything complete on the primary at the pass's
// listings is on the second site, verified; else it names what is not.
func (p *Pass) Err() error {
	var parts []string
	if n := len(p.Failures); n > 0 {
		f := p.Failures[0]
		parts = append(parts, fmt.Sprintf("%d %s failed verification (first: %s: %s)", n, plural(n, "object", "objects"), f.Key, f.Reason))
	}
	if n := len(p.Errors); n > 0 {
		parts = append(parts, fmt.Sprintf("%d %s (first: %s)", n, plural(n, "copy failed", "copies failed"), p.Errors[0]))
	}
	if len(parts) == 0 {
		return nil
	}
	return errors.New("replicate: " + strings.Join(parts, "; "))
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// tally collects a pass's counts from parallel copies.
type tally struct {
	mu sync.Mutex
	p  Pass
	by map[string]*ClusterPass
}

func newTally(start time.Time) *tally {
	return &tally{p: Pass{Started: start}, by: map[string]*ClusterPass{}}
}

func (t *tally) cluster(id string) *ClusterPass {
	cp := t.by[id]
	if cp == nil {
		cp = &ClusterPass{ClusterID: id}
		t.by[id] = cp
	}
	return cp
}

// what a copied object is, for the counts.
type objectKind int

const (
	kindBackupObject objectKind = iota
	kindManifest
	kindSegment
	kindRecord
)

func (t *tally) add(id string, k objectKind, r copyResult) {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	cp := t.cluster(id)
	t.p.VerifyBytes += r.verifyBytes
	t.p.VerifySeconds += r.verify.Seconds()
	switch r.outcome {
	case copied:
		t.p.Copied++
		t.p.CopiedBytes += r.bytes
		switch k {
		case kindManifest:
			cp.Backups++
		case kindSegment:
			cp.Segments++
		case kindRecord:
			cp.Records++
		}
	case already:
		t.p.Already++
		cp.Already++
	case superseded:
		t.p.Superseded++
	}
}

func (t *tally) failure(id string, f catalog.ReplicaFailure) {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.p.Failures = append(t.p.Failures, f)
	t.cluster(id).Failures++
}

func (t *tally) error(err error) {
	if t == nil || err == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.p.Errors = append(t.p.Errors, err.Error())
}

// done is the pass, its clusters' progress filled from c.
func (t *tally) done(c *copier, end time.Time) Pass {
	t.mu.Lock()
	defer t.mu.Unlock()
	c.mu.Lock()
	for id, cl := range c.clusters {
		cp := t.cluster(id)
		cp.Pending = cl.journalPending + cl.backupPending
		cp.JournalLastRevision = cl.lastRev
		cp.NewestBackup = cl.newestBackup
	}
	c.mu.Unlock()
	p := t.p
	p.Finished = end
	p.Clusters = make([]ClusterPass, 0, len(t.by))
	for _, cp := range t.by {
		p.Clusters = append(p.Clusters, *cp)
	}
	slices.SortFunc(p.Clusters, func(a, b ClusterPass) int { return strings.Compare(a.ClusterID, b.ClusterID) })
	return p
}
