package backup

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/armada/etcd-recovery/internal/etcdconn"
)

// MemberStatus is one member as seen by a probe.
type MemberStatus struct {
	Name      string
	ID        uint64
	ClientURL string
	IsLearner bool
	// Status is nil when the member did not answer.
	Status *clientv3.StatusResponse
	Err    error
}

// IDHex is the member id as etcdctl prints it.
func (m MemberStatus) IDHex() string { return fmt.Sprintf("%x", m.ID) }

// Alive reports whether the member answered its status probe.
func (m MemberStatus) Alive() bool { return m.Status != nil }

// IsLeader reports whether the member says it is the leader.
func (m MemberStatus) IsLeader() bool {
	return m.Status != nil && m.Status.Header != nil && m.Status.Leader == m.Status.Header.MemberId && m.Status.Leader != 0
}

// ListMembers asks the given endpoints for the membership, serializably so
// it answers without quorum; the first endpoint that answers wins. When
// none answers, it returns the endpoints themselves as anonymous members.
func ListMembers(ctx context.Context, cfg etcdconn.Config, timeout time.Duration) ([]MemberStatus, error) {
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
	out := make([]MemberStatus, len(cfg.Endpoints))
	for i, ep := range cfg.Endpoints {
		out[i] = MemberStatus{ClientURL: cfg.URL(ep)}
	}
	return out, errors.Join(errs...)
}

func membersFrom(ms []*pb.Member) []MemberStatus {
	out := make([]MemberStatus, 0, len(ms))
	for _, m := range ms {
		st := MemberStatus{Name: m.Name, ID: m.ID, IsLearner: m.IsLearner}
		if len(m.ClientURLs) > 0 {
			st.ClientURL = m.ClientURLs[0]
		}
		out = append(out, st)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// ProbeMembers asks every member for its status concurrently, each bounded
// by timeout, so a frozen member costs one timeout, not a sum.
func ProbeMembers(ctx context.Context, cfg etcdconn.Config, members []MemberStatus, timeout time.Duration) []MemberStatus {
	out := make([]MemberStatus, len(members))
	copy(out, members)
	var wg sync.WaitGroup
	for i := range out {
		m := &out[i]
		if m.ClientURL == "" {
			m.Err = errors.New("member has no client URL (not started yet)")
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			pctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			cli, err := cfg.Client(pctx, m.ClientURL)
			if err != nil {
				m.Err = err
				return
			}
			defer cli.Close()
			st, err := cli.Status(pctx, m.ClientURL)
			if err != nil {
				m.Err = explain(ctx, cfg, m.ClientURL, err, timeout)
				return
			}
			m.Status = st
			if m.ID == 0 && st.Header != nil {
				m.ID = st.Header.MemberId
			}
		}()
	}
	wg.Wait()
	return out
}

// HasQuorum reports whether the cluster serves a linearizable read within
// timeout.
func HasQuorum(ctx context.Context, cfg etcdconn.Config, endpoints []string, timeout time.Duration) bool {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cli, err := cfg.Client(ctx, endpoints...)
	if err != nil {
		return false
	}
	defer cli.Close()
	_, err = cli.Get(ctx, "health-check-etcd-recovery", clientv3.WithCountOnly())
	return err == nil
}

// SnapshotCandidates orders the members to snapshot, best first. With quorum
// it prefers healthy followers (sparing the leader), most up to date first,
// then the leader. Without quorum any member that answers will do, the one
// with the highest raft index first: the seed runbook backs up the one pod
// that is left.
func SnapshotCandidates(members []MemberStatus, quorum bool) []MemberStatus {
	var alive []MemberStatus
	for _, m := range members {
		if m.Alive() && !m.IsLearner {
			alive = append(alive, m)
		}
	}
	rank := func(m MemberStatus) int {
		switch {
		case !quorum:
			return 0
		case len(m.Status.Errors) > 0:
			return 3 // alarms or errors: last resort
		case m.IsLeader():
			return 2
		default:
			return 1
		}
	}
	sort.SliceStable(alive, func(i, j int) bool {
		ri, rj := rank(alive[i]), rank(alive[j])
		if ri != rj {
			return ri < rj
		}
		return alive[i].Status.RaftIndex > alive[j].Status.RaftIndex
	})
	return alive
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
