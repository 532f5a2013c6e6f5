// Package probe asks etcd members how they are. It is the one place the
// tool probes members: backup's choice of the member to snapshot, inspect's
// report and restore's verification of a rebuilt cluster all use it, so
// "healthy" means one thing everywhere.
//
// The pieces:
//
//   - Member is a member as listed (name, id, client URL, learner) plus what
//     its probe saw.
//   - List reads the member list, serializably, from the first endpoint
//     that answers.
//   - Endpoint probes one client URL: its Status, a linearizable and a
//     serializable read and the alarm list, all at once under one deadline,
//     with a dial and TLS diagnosis alongside so a refused port or a
//     rejected certificate ends the probe at once and is named in Err.
//   - Members probes listed members concurrently; Quorum says whether any
//     voting member served a linearizable read.
//   - Versions reads a member's /version.
//
// # Healthy
//
// A member's Health is derived from its probe alone (Classify):
//
//   - Healthy: it serves a linearizable read through itself alone, as
//     `etcdctl endpoint health` does (a learner, which never serves them:
//     a serializable read). A linearizable read proves the member knows a
//     leader that has a quorum.
//   - NoQuorum: it serves serializable reads but linearizable ones fail.
//   - Unhealthy: it answers its Status but serves no read.
//   - Down: it answers nothing within the timeout.
//
// A member is healthy (Member.Healthy) when its Health is Healthy and no
// alarm (NOSPACE, CORRUPT, ...) is raised against it. An alarm does not
// stop a member from serving reads, so it is kept apart from Health: inspect
// counts such a member as up for quorum and flags the alarm; restore
// verification and backup's member choice treat it as not healthy.
//
// The package depends on plumbing only (internal/etcdconn and the etcd
// client), never on a feature package.
package probe

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/armada/etcd-recovery/internal/etcdconn"
)

// HealthKey is read (count only) by the read probes.
const HealthKey = "health-check-etcd-recovery"

// Health is one member's state as its probe saw it (see the package doc).
type Health string

const (
	// Healthy: the member serves linearizable reads (for a learner,
	// which never serves them: serializable reads).
	Healthy Health = "healthy"
	// NoQuorum: alive, serves serializable reads, but linearizable reads
	// fail: it cannot reach a quorum.
	NoQuorum Health = "no-quorum"
	// Unhealthy: answers its status but serves no read at all.
	Unhealthy Health = "unhealthy"
	// Down: answers nothing within the timeout.
	Down Health = "down"
)

// Classify derives a member's health from its three probes.
func Classify(statusOK, linearizableOK, serializableOK, learner bool) Health {
	switch {
	case linearizableOK:
		return Healthy
	case serializableOK && learner:
		return Healthy
	case serializableOK:
		return NoQuorum
	case statusOK:
		return Unhealthy
	}
	return Down
}

// Member is one member: as the member list names it, and what its probe
// saw. The probe fields are zero until Endpoint or Members filled them.
type Member struct {
	// From the member list (only ClientURL when the list was unavailable).
	Name      string
	ID        uint64
	ClientURL string
	IsLearner bool

	// Probed: Endpoint ran against ClientURL.
	Probed  bool
	Timeout time.Duration

	// Status is nil when the member did not answer its Status call.
	Status        *clientv3.StatusResponse
	StatusErr     error
	StatusLatency time.Duration

	LinearizableOK      bool
	LinearizableErr     error
	LinearizableLatency time.Duration
	// Revision is the revision of the linearizable read (0 when it failed).
	Revision int64

	SerializableOK      bool
	SerializableErr     error
	SerializableLatency time.Duration

	// AlarmList is the cluster's alarm list as this member returned it
	// (the Alarm API goes through raft: without quorum it fails, and
	// Alarms falls back to the member's status).
	AlarmList []*pb.AlarmMember
	AlarmErr  error

	// HeaderMemberID and ClusterID come from any response header.
	HeaderMemberID, ClusterID uint64

	// DiagErr is the dial/TLS diagnosis when the calls failed; ClientErr a
	// client that could not even be built (bad TLS files); NotProbed why
	// a member was not probed (no client URL).
	DiagErr   error
	ClientErr error
	NotProbed string
}

// IDHex is the member id as etcdctl prints it ("" when unknown).
func (m Member) IDHex() string { return HexID(m.ID) }

// HexID formats a member or cluster id as etcdctl does; "" for 0.
func HexID(id uint64) string {
	if id == 0 {
		return ""
	}
	return strconv.FormatUint(id, 16)
}

// Answered reports whether the member answered any call.
func (m Member) Answered() bool { return m.Status != nil || m.LinearizableOK || m.SerializableOK }

// Alive reports whether the member answered its Status call.
func (m Member) Alive() bool { return m.Status != nil }

// IsLeader reports whether the member says it is the leader.
func (m Member) IsLeader() bool {
	return m.Status != nil && m.Status.Header != nil && m.Status.Leader == m.Status.Header.MemberId && m.Status.Leader != 0
}

// Learner reports whether the member is a learner, by the list or its status.
func (m Member) Learner() bool { return m.IsLearner || (m.Status != nil && m.Status.IsLearner) }

// Health classifies the member from its probe (see the package doc).
func (m Member) Health() Health {
	return Classify(m.Status != nil, m.LinearizableOK, m.SerializableOK, m.Learner())
}

// Healthy is the one definition of a healthy member: it serves a
// linearizable read through itself alone (a learner: a serializable read)
// and no alarm is raised against it (see the package doc).
func (m Member) Healthy() bool {
	if m.Health() != Healthy {
		return false
	}
	id := m.ID
	if id == 0 {
		id = m.HeaderMemberID
	}
	for _, a := range m.Alarms() {
		if a.Member == id {
			return false
		}
	}
	return true
}

// Alarm is one active alarm.
type Alarm struct {
	Member uint64
	Alarm  string // NOSPACE, CORRUPT, ...
}

// alarmRe parses an alarm in a status's errors ("memberID:123 alarm:NOSPACE ").
var alarmRe = regexp.MustCompile(`memberID:(\d+)\s+alarm:([A-Z_]+)`)

// Alarms returns the active alarms the member reported, of any member:
// from the Alarm API when it answered, else parsed from its status.
func (m Member) Alarms() []Alarm {
	var out []Alarm
	if m.AlarmErr == nil && m.AlarmList != nil {
		for _, a := range m.AlarmList {
			if a.Alarm != pb.AlarmType_NONE {
				out = append(out, Alarm{a.MemberID, a.Alarm.String()})
			}
		}
		return out
	}
	if m.Status == nil {
		return nil
	}
	for _, e := range m.Status.Errors {
		for _, s := range alarmRe.FindAllStringSubmatch(e, -1) {
			id, err := strconv.ParseUint(s[1], 10, 64)
			if err == nil && s[2] != "NONE" {
				out = append(out, Alarm{id, s[2]})
			}
		}
	}
	return out
}

// Latency is that of the read that decided the member's health, else of
// its Status call; 0 when it answered nothing.
func (m Member) Latency() time.Duration {
	switch {
	case m.LinearizableOK:
		return m.LinearizableLatency
	case m.SerializableOK:
		return m.SerializableLatency
	case m.Status != nil:
		return m.StatusLatency
	}
	return 0
}

// Err explains why the member does not serve linearizable reads (or, for
// a learner, serializable ones): nil when it does. Timeouts are explained
// (a port that accepts connections but does not answer is "frozen or
// overloaded"), and dial and TLS failures are named.
func (m Member) Err() error {
	if s := m.ErrorText(); s != "" {
		return errors.New(s)
	}
	return nil
}

// ErrorText is Err as text ("" when the member serves reads).
func (m Member) ErrorText() string {
	if m.NotProbed != "" {
		return m.NotProbed
	}
	if !m.Probed {
		return "not probed"
	}
	if m.ClientErr != nil {
		return m.ClientErr.Error()
	}
	if !m.Answered() {
		cause := m.StatusErr
		if cause == nil {
			cause = m.LinearizableErr
		}
		timedOut := errors.Is(cause, context.DeadlineExceeded) || etcdconn.IsTimeout(cause) ||
			(m.DiagErr != nil && (errors.Is(m.DiagErr, context.DeadlineExceeded) || etcdconn.IsTimeout(m.DiagErr)))
		switch {
		case m.DiagErr != nil && !timedOut:
			return m.DiagErr.Error()
		case timedOut && (m.DiagErr == nil || strings.Contains(m.DiagErr.Error(), "TLS handshake")):
			return fmt.Sprintf("no answer within %v: the port accepts connections but the server does not respond (frozen or overloaded?)", m.Timeout)
		case timedOut && m.DiagErr != nil:
			return fmt.Sprintf("no answer within %v: %v", m.Timeout, m.DiagErr)
		case cause != nil:
			return cause.Error()
		}
		return "no answer"
	}
	switch {
	case m.Health() == Healthy:
		return ""
	case !m.LinearizableOK && m.SerializableOK:
		return "linearizable read failed: " + readErr(m.LinearizableErr, m.Timeout)
	default:
		return "reads fail: " + readErr(m.SerializableErr, m.Timeout)
	}
}

func readErr(err error, timeout time.Duration) string {
	if err == nil {
		return "unknown error"
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Sprintf("no answer within %v (no leader or no quorum)", timeout)
	}
	return err.Error()
}

// List asks the given endpoints for the membership, serializably so it
// answers without quorum; the first endpoint that answers wins, and the
// members come sorted by name. When none answers, it returns the endpoints
// themselves as anonymous members, with every endpoint's error.
func List(ctx context.Context, cfg etcdconn.Config, timeout time.Duration) ([]Member, error) {
	type answer struct {
		members []*pb.Member
		err     error
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	ch := make(chan answer, len(cfg.Endpoints))
	for _, ep := range cfg.Endpoints {
		go func() {
			cli, err := cfg.Client(ctx, ep)
			if err != nil {
				ch <- answer{err: err}
				return
			}
			defer cli.Close()
			resp, err := pb.NewClusterClient(cli.ActiveConnection()).MemberList(ctx, &pb.MemberListRequest{Linearizable: false})
			if err != nil {
				ch <- answer{err: fmt.Errorf("%s: %w", etcdconn.Host(ep), explain(context.WithoutCancel(ctx), cfg, ep, err, timeout))}
				return
			}
			ch <- answer{members: resp.Members}
		}()
	}
	var errs []error
	for range cfg.Endpoints {
		a := <-ch
		if a.err == nil {
			cancel()
			return membersFrom(a.members), nil
		}
		errs = append(errs, a.err)
	}
	// Nobody answered: fall back to the endpoints as given.
	out := make([]Member, len(cfg.Endpoints))
	for i, ep := range cfg.Endpoints {
		out[i] = Member{ClientURL: cfg.URL(ep)}
	}
	return out, errors.Join(errs...)
}

func membersFrom(ms []*pb.Member) []Member {
	out := make([]Member, 0, len(ms))
	for _, m := range ms {
		st := Member{Name: m.Name, ID: m.ID, IsLearner: m.IsLearner}
		if len(m.ClientURLs) > 0 {
			st.ClientURL = m.ClientURLs[0]
		}
		out = append(out, st)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// explain replaces gRPC's "deadline exceeded" with the cause a dial and a
// TLS handshake find (refused, unknown CA, rejected client certificate).
func explain(ctx context.Context, cfg etcdconn.Config, ep string, err error, timeout time.Duration) error {
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), min(timeout, 2*time.Second))
	defer cancel()
	if derr := cfg.Diagnose(dctx, ep); derr != nil {
		return derr
	}
	return err
}

// Members probes every member at its client URL concurrently, each
// bounded by timeout, so a frozen member costs one timeout, not a sum. A
// member without a client URL (added but never started) is not probed.
func Members(ctx context.Context, cfg etcdconn.Config, members []Member, timeout time.Duration) []Member {
	out := make([]Member, len(members))
	copy(out, members)
	var wg sync.WaitGroup
	for i := range out {
		if out[i].ClientURL == "" {
			out[i].NotProbed = "member has no client URL: added to the cluster but never started"
			continue
		}
		wg.Go(func() {
			p := Endpoint(ctx, cfg, out[i].ClientURL, timeout)
			p.Name, p.ID, p.IsLearner = out[i].Name, out[i].ID, out[i].IsLearner
			if p.ID == 0 {
				p.ID = p.HeaderMemberID
			}
			out[i] = p
		})
	}
	wg.Wait()
	return out
}

// Quorum reports whether some voting member served a linearizable read:
// the cluster then committed a ReadIndex with a quorum, even if the probe
// cannot see all of it.
func Quorum(members []Member) bool {
	for _, m := range members {
		if m.LinearizableOK && !m.Learner() {
			return true
		}
	}
	return false
}

// Endpoint probes one client URL: the Status call, a linearizable and a
// serializable read and the alarm list, all at once on one client bounded
// by timeout, so a member costs one timeout at most whatever it does. In
// parallel it dials the URL itself, so a refused connection or a TLS
// failure is known (and ends the probe) at once rather than at the
// deadline. The returned member has only ClientURL of the list fields.
func Endpoint(ctx context.Context, cfg etcdconn.Config, url string, timeout time.Duration) Member {
	p := Member{ClientURL: url, Timeout: timeout, Probed: true}
	pctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cli, err := cfg.Client(pctx, url)
	if err != nil {
		p.ClientErr = err
		return p
	}
	defer cli.Close()

	diag := make(chan error, 1)
	go func() { diag <- cfg.Diagnose(pctx, url) }()

	done := p.callAll(pctx, cli, url)

	select {
	case <-done:
		if !p.Answered() {
			p.DiagErr = <-diag // bounded by pctx
		}
	case derr := <-diag:
		if derr != nil && pctx.Err() == nil {
			// Refused, unresolvable, or TLS rejected: the calls cannot
			// succeed, don't wait for their deadline.
			cancel()
		}
		<-done
		p.DiagErr = derr
	}
	return p
}

// callAll starts the probe's four calls on cli at once (Status, a
// linearizable and a serializable read of HealthKey, the alarm list),
// each recording what it saw in p, the first response header naming the
// member and cluster; the returned channel closes when all have returned.
func (p *Member) callAll(ctx context.Context, cli *clientv3.Client, url string) <-chan struct{} {
	var mu sync.Mutex
	header := func(h *pb.ResponseHeader) {
		if h == nil {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if p.HeaderMemberID == 0 {
			p.HeaderMemberID = h.MemberId
		}
		if p.ClusterID == 0 {
			p.ClusterID = h.ClusterId
		}
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		t0 := time.Now()
		st, err := cli.Status(ctx, url)
		p.StatusLatency = time.Since(t0)
		p.Status, p.StatusErr = st, err
		if err == nil {
			header(st.Header)
		}
	})
	wg.Go(func() {
		t0 := time.Now()
		r, err := cli.Get(ctx, HealthKey, clientv3.WithCountOnly())
		p.LinearizableLatency = time.Since(t0)
		p.LinearizableOK, p.LinearizableErr = err == nil, err
		if err == nil {
			p.Revision = r.Header.Revision
			header(r.Header)
		}
	})
	wg.Go(func() {
		t0 := time.Now()
		r, err := cli.Get(ctx, HealthKey, clientv3.WithCountOnly(), clientv3.WithSerializable())
		p.SerializableLatency = time.Since(t0)
		p.SerializableOK, p.SerializableErr = err == nil, err
		if err == nil {
			header(r.Header)
		}
	})
	wg.Go(func() {
		r, err := cli.AlarmList(ctx)
		p.AlarmErr = err
		if err == nil {
			p.AlarmList = r.Alarms
			header(r.Header)
		}
	})
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	return done
}

// Versions reads a member's /version: the server and the cluster version.
func Versions(ctx context.Context, hc *http.Client, clientURL string) (server, cluster string, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(clientURL, "/")+"/version", nil)
	if err != nil {
		return "", "", err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return "", "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return "", "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", "", fmt.Errorf("GET /version: %s", resp.Status)
	}
	var v struct {
		Server  string `json:"etcdserver"`
		Cluster string `json:"etcdcluster"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return "", "", fmt.Errorf("GET /version: %w", err)
	}
	return v.Server, v.Cluster, nil
}
