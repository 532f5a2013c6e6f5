package inspect

import (
	"context"
	"errors"
	"fmt"
	"net"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/armada/etcd-recovery/internal/etcdconn"
)

// healthKey is read (count only) by the health probes, as HasQuorum does.
const healthKey = "health-check-etcd-recovery"

// probe is what one endpoint answered. Every call runs concurrently on one
// client, bounded by the same deadline, so a member costs one timeout at
// most whatever it does.
type probe struct {
	url     string
	timeout time.Duration

	status        *clientv3.StatusResponse
	statusErr     error
	statusLatency time.Duration

	linearOK      bool
	linearErr     error
	linearLatency time.Duration

	serialOK      bool
	serialErr     error
	serialLatency time.Duration

	alarms    []*pb.AlarmMember
	alarmsErr error

	// memberID and clusterID from any response header.
	memberID, clusterID uint64

	// diagErr is the dial/TLS diagnosis when the calls failed; clientErr a
	// client that could not even be built (bad TLS files).
	diagErr   error
	clientErr error
}

// answered reports whether the endpoint answered any call.
func (p *probe) answered() bool { return p.status != nil || p.linearOK || p.serialOK }

// probeEndpoint runs the status call, a linearizable and a serializable
// read and the alarm list against one endpoint, all at once, and in
// parallel dials it itself so a refused connection or a TLS failure is
// known (and ends the probe) at once rather than at the deadline.
func probeEndpoint(ctx context.Context, cfg etcdconn.Config, ep string, timeout time.Duration) *probe {
	p := &probe{url: ep, timeout: timeout}
	pctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cli, err := cfg.Client(pctx, ep)
	if err != nil {
		p.clientErr = err
		return p
	}
	defer cli.Close()

	diag := make(chan error, 1)
	go func() { diag <- cfg.Diagnose(pctx, ep) }()

	var mu sync.Mutex
	header := func(h *pb.ResponseHeader) {
		if h == nil {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if p.memberID == 0 {
			p.memberID = h.MemberId
		}
		if p.clusterID == 0 {
			p.clusterID = h.ClusterId
		}
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		t0 := time.Now()
		st, err := cli.Status(pctx, ep)
		p.statusLatency = time.Since(t0)
		p.status, p.statusErr = st, err
		if err == nil {
			header(st.Header)
		}
	})
	wg.Go(func() {
		t0 := time.Now()
		r, err := cli.Get(pctx, healthKey, clientv3.WithCountOnly())
		p.linearLatency = time.Since(t0)
		p.linearOK, p.linearErr = err == nil, err
		if err == nil {
			header(r.Header)
		}
	})
	wg.Go(func() {
		t0 := time.Now()
		r, err := cli.Get(pctx, healthKey, clientv3.WithCountOnly(), clientv3.WithSerializable())
		p.serialLatency = time.Since(t0)
		p.serialOK, p.serialErr = err == nil, err
		if err == nil {
			header(r.Header)
		}
	})
	wg.Go(func() {
		// The Alarm API goes through raft: without quorum it fails, and the
		// alarms are then read from the member's status.
		r, err := cli.AlarmList(pctx)
		p.alarmsErr = err
		if err == nil {
			p.alarms = r.Alarms
			header(r.Header)
		}
	})
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()

	select {
	case <-done:
		if !p.answered() {
			p.diagErr = <-diag // bounded by pctx
		}
	case derr := <-diag:
		if derr != nil && pctx.Err() == nil {
			// Refused, unresolvable, or TLS rejected: the calls cannot
			// succeed, don't wait for their deadline.
			cancel()
		}
		<-done
		p.diagErr = derr
	}
	return p
}

// errorText explains why a member is not healthy, for the report.
func (p *probe) errorText() string {
	if p.clientErr != nil {
		return p.clientErr.Error()
	}
	if !p.answered() {
		cause := p.statusErr
		if cause == nil {
			cause = p.linearErr
		}
		timedOut := errors.Is(cause, context.DeadlineExceeded) || isTimeout(cause) ||
			(p.diagErr != nil && (errors.Is(p.diagErr, context.DeadlineExceeded) || isTimeout(p.diagErr)))
		switch {
		case p.diagErr != nil && !timedOut:
			return p.diagErr.Error()
		case timedOut && (p.diagErr == nil || strings.Contains(p.diagErr.Error(), "TLS handshake")):
			return fmt.Sprintf("no answer within %v: the port accepts connections but the server does not respond (frozen or overloaded?)", p.timeout)
		case timedOut && p.diagErr != nil:
			return fmt.Sprintf("no answer within %v: %v", p.timeout, p.diagErr)
		case cause != nil:
			return cause.Error()
		}
		return "no answer"
	}
	switch {
	case !p.linearOK && p.serialOK:
		return "linearizable read failed: " + readErr(p.linearErr, p.timeout)
	case !p.linearOK && !p.serialOK:
		return "reads fail: " + readErr(p.serialErr, p.timeout)
	}
	return ""
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

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// alarmRe parses an alarm in a status's errors ("memberID:123 alarm:NOSPACE ").
var alarmRe = regexp.MustCompile(`memberID:(\d+)\s+alarm:([A-Z_]+)`)

type alarmKey struct {
	member uint64
	alarm  string
}

// alarmsOf returns the alarms the endpoint reported: from the Alarm API
// when it answered, else parsed from its status.
func (p *probe) alarmsOf() []alarmKey {
	var out []alarmKey
	if p.alarmsErr == nil && p.alarms != nil {
		for _, a := range p.alarms {
			if a.Alarm != pb.AlarmType_NONE {
				out = append(out, alarmKey{a.MemberID, a.Alarm.String()})
			}
		}
		return out
	}
	if p.status == nil {
		return nil
	}
	for _, e := range p.status.Errors {
		for _, m := range alarmRe.FindAllStringSubmatch(e, -1) {
			id, err := strconv.ParseUint(m[1], 10, 64)
			if err == nil && m[2] != "NONE" {
				out = append(out, alarmKey{id, m[2]})
			}
		}
	}
	return out
}

func hexID(id uint64) string {
	if id == 0 {
		return ""
	}
	return strconv.FormatUint(id, 16)
}

// fill copies a probe's answers into a member.
func (p *probe) fill(m *MemberHealth) {
	if p == nil {
		m.Health = HealthDown
		m.Error = "not probed"
		return
	}
	if m.ID == "" {
		m.ID = hexID(p.memberID)
	}
	m.ClusterID = hexID(p.clusterID)
	if st := p.status; st != nil {
		m.StatusOK = true
		m.Version = st.Version
		m.Learner = m.Learner || st.IsLearner
		if st.Header != nil {
			m.Leader = st.Leader != 0 && st.Leader == st.Header.MemberId
		}
		m.LeaderID = hexID(st.Leader)
		m.RaftTerm, m.RaftIndex, m.AppliedIndex = st.RaftTerm, st.RaftIndex, st.RaftAppliedIndex
		m.DBSize, m.DBSizeInUse = st.DbSize, st.DbSizeInUse
		m.StatusErrors = st.Errors
	}
	m.LinearizableRead, m.SerializableRead = p.linearOK, p.serialOK
	m.Health = Classify(p.status != nil, p.linearOK, p.serialOK, m.Learner)
	lat := p.statusLatency
	switch {
	case p.linearOK:
		lat = p.linearLatency
	case p.serialOK:
		lat = p.serialLatency
	}
	if p.answered() {
		m.LatencyMS = float64(lat.Microseconds()) / 1000
	}
	if m.Health != HealthHealthy {
		m.Error = p.errorText()
	}
}
