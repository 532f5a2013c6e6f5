package runbooks

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/armada/etcd-recovery/backup"
	"github.com/armada/etcd-recovery/inspect"
	"github.com/armada/etcd-recovery/internal/journal"
	"github.com/armada/etcd-recovery/internal/testing/mdblocks"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
)

func init() {
	scenarios = append(scenarios, scenario{"every-member-lost", everyMemberLost})
}

// lossInterval is the journal's --segment-interval in everyMemberLost;
// lossBound is the loss a journal promises: one interval plus one upload
// (taken as 2 s on loopback MinIO).
const (
	lossInterval = 2 * time.Second
	lossBound    = lossInterval + 2*time.Second
)

// ackedPut is one put the writer saw acknowledged.
type ackedPut struct {
	key, value string
	rev        int64
	at         time.Time
}

// everyMemberLost: a 3-member TLS etcd 3.5 with a full backup, the
// journal capturing it (2 s segments) while a writer puts keys and records
// each acknowledgement, then every member SIGKILLed and its data dir
// deleted at time L. The journal writes what it holds within one interval
// with etcd gone: every put acknowledged before L - (interval + 2 s) is in
// a stored segment by L + interval + 2 s (slack: 3 s), before the journal
// is stopped. The runbook section then runs: inspect (UNREACHABLE, NEXT
// STEP naming the section), restore --to-latest (its dry run names the
// journal's last revision), the members started, restore verify, inspect
// HEALTHY and a backup. The restored cluster holds exactly the puts at or
// below the journal's last revision, each with its value (every one
// acknowledged before L - (interval + 2 s) among them), the earlier keys,
// and a bumped revision. The loss window (the oldest lost put's age at L)
// is logged.
func everyMemberLost(t *testing.T, rb mdblocks.Set) {
	c := testenv.StartEtcd(t, testenv.EtcdOptions{Version: testenv.V35, TLS: true})
	cli := c.Client(t)
	keys := testenv.PutKeys(t, cli, "/registry/configmaps/", 200, 200)
	f := mdblocks.NewFixture(t, c.PKI, c.Endpoints())
	ctx := testfix.Context(t, 4*time.Minute)
	base := f.Backup(t, ctx, c, backup.Options{V2: backup.V2Off})

	// The journal, as the journal command runs it.
	cp := startCapture(t, ctx, f, c.Client(t), base, lossInterval, nil)

	// The writer: one put after the other, each acknowledgement recorded.
	var (
		mu    sync.Mutex
		acked []ackedPut
	)
	wctx, stopWriter := context.WithCancel(ctx)
	wdone := make(chan struct{})
	go func() {
		defer close(wdone)
		for i := 0; wctx.Err() == nil; i++ {
			k, v := fmt.Sprintf("/registry/pods/w%06d", i), fmt.Sprintf("v%d-%d", i, time.Now().UnixNano())
			pctx, cancel := context.WithTimeout(wctx, time.Second)
			resp, err := cli.Put(pctx, k, v)
			cancel()
			if err != nil {
				continue // the cluster going down: not acknowledged
			}
			mu.Lock()
			acked = append(acked, ackedPut{key: k, value: v, rev: resp.Header.Revision, at: time.Now()})
			mu.Unlock()
		}
	}()
	time.Sleep(3*lossInterval + time.Second) // several segments' worth

	// Every member lost: SIGKILL, data dirs deleted.
	for _, m := range c.Members {
		m.Kill()
	}
	loss := time.Now()
	for _, m := range c.Members {
		if err := os.RemoveAll(m.DataDir); err != nil {
			t.Fatal(err)
		}
	}
	stopWriter()
	<-wdone
	mu.Lock()
	puts := append([]ackedPut(nil), acked...)
	mu.Unlock()
	if len(puts) < 20 {
		t.Fatalf("the writer got %d puts acknowledged before the loss", len(puts))
	}

	// The journal writes what it holds within one interval, etcd gone.
	stored := func() int64 {
		segs, err := journal.ListSegments(ctx, f.Store, f.Layout, f.ID, 0)
		if err != nil {
			t.Fatal(err)
		}
		var last int64
		for _, s := range segs.All {
			last = max(last, s.LastRev)
		}
		return last
	}
	lastAcked := puts[len(puts)-1].rev
	var lastStored int64
	for deadline := loss.Add(lossBound + 3*time.Second); ; time.Sleep(200 * time.Millisecond) {
		if lastStored = stored(); lastStored >= lastAcked || time.Now().After(deadline) {
			break
		}
	}
	flushed := time.Since(loss)
	var mustHave int
	for _, p := range puts {
		if p.at.Before(loss.Add(-lossBound)) {
			mustHave++
			if p.rev > lastStored {
				t.Errorf("put %s (revision %d) acknowledged %v before the loss is in no segment %v after it (the journal's segments end at %d)",
					p.key, p.rev, loss.Sub(p.at).Round(time.Millisecond), flushed.Round(time.Millisecond), lastStored)
			}
		}
	}
	cp.stop(t)
	lastJournaled := stored()
	t.Logf("journal: the last acknowledged put at revision %d; the segments end at %d %v after the loss (before the journal stopped), at %d after",
		lastAcked, lastStored, flushed.Round(time.Millisecond), lastJournaled)

	s := newScenario(t, rb, f.Vars)
	eps := newMembers(t, s, 3, f.ID+"-from-journal", "restored")
	verifyLine := regexp.MustCompile(`--min-revision (\d+) --expect-keys (\d+) --expect-members`)
	s.After = func(r mdblocks.Result) {
		if m := verifyLine.FindStringSubmatch(r.Output); m != nil {
			s.Vars["min-revision"], s.Vars["expect-keys"] = m[1], m[2]
		}
	}
	rs := s.Run(inspect.RunbookJournalRestore)
	insp := mdblocks.One(t, rs, "etcd-recovery inspect", 0)
	mdblocks.MustContain(t, insp, "UNREACHABLE")
	// The wrapped line may break the anchor at a hyphen.
	if ns := strings.ReplaceAll(nextStep(t, insp), "- ", "-"); !strings.Contains(ns, inspect.RunbookJournalRestore) || !strings.Contains(ns, "--to-latest") {
		t.Errorf("inspect's NEXT STEP does not point to %s: %s", inspect.RunbookJournalRestore, ns)
	}
	restored := mdblocks.One(t, rs, "--to-latest", 0)
	mdblocks.MustContain(t, restored, fmt.Sprintf("Latest (--to-latest): revision %d (received ", lastJournaled), base.Name)
	mdblocks.MustContain(t, mdblocks.One(t, rs, "restore verify", 0), "live keys, as in the snapshot")
	mdblocks.MustContain(t, mdblocks.One(t, rs, "etcd-recovery inspect", -1), "HEALTHY")

	// Exactly the puts the journal holds, each with its value.
	ncli := mdblocks.ClusterAt(c.PKI, eps).Client(t)
	mdblocks.CheckKeys(t, ncli, keys)
	got, err := ncli.Get(ctx, "/registry/pods/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]string{}
	for _, kv := range got.Kvs {
		have[string(kv.Key)] = string(kv.Value)
		if kv.ModRevision > lastJournaled {
			t.Errorf("%s at revision %d: past the journal's last revision %d", kv.Key, kv.ModRevision, lastJournaled)
		}
	}
	var lost []ackedPut
	for _, p := range puts {
		v, ok := have[p.key]
		switch {
		case p.rev <= lastJournaled && v != p.value:
			t.Errorf("put %s at revision %d (acknowledged %v before the loss): restored %q (present %t), want %q",
				p.key, p.rev, loss.Sub(p.at).Round(time.Millisecond), v, ok, p.value)
		case p.rev > lastJournaled:
			if ok {
				t.Errorf("put %s at revision %d is restored, past the journal's last revision %d", p.key, p.rev, lastJournaled)
			}
			lost = append(lost, p)
		}
	}
	if got.Header.Revision < lastJournaled+1_000_000_000 {
		t.Errorf("restored revision %d: not the journal's %d bumped by 1,000,000,000", got.Header.Revision, lastJournaled)
	}
	window := "none: every acknowledged put is restored"
	if len(lost) > 0 {
		window = fmt.Sprintf("%d puts lost, the oldest acknowledged %v before the loss, the newest %v", len(lost),
			loss.Sub(lost[0].at).Round(time.Millisecond), loss.Sub(lost[len(lost)-1].at).Round(time.Millisecond))
	}
	t.Logf("loss window (segment interval %v): %d puts acknowledged, %d of them before L-%v (all restored); %s; restored to revision %d",
		lossInterval, len(puts), mustHave, lossBound, window, lastJournaled)
	if n, _ := strconv.Atoi(s.Vars["expect-keys"]); n != len(keys)+len(have) {
		t.Errorf("restore's expected keys %s, want %d", s.Vars["expect-keys"], len(keys)+len(have))
	}
}
