package inspect

import (
	"context"
	"sync"
	"time"

	"github.com/armada/etcd-recovery/internal/etcdconn"
	"github.com/armada/etcd-recovery/internal/probe"
)

// prober runs probe.Endpoint concurrently, once per URL: the endpoints as
// given start at once, members missing from them as soon as the member
// list names them.
type prober struct {
	ctx     context.Context
	cfg     etcdconn.Config
	timeout time.Duration
	mu      sync.Mutex
	wg      sync.WaitGroup
	probes  map[string]*probe.Member
}

func (p *prober) start(u string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.probes[u]; ok {
		return
	}
	p.probes[u] = nil
	p.wg.Go(func() {
		res := probe.Endpoint(p.ctx, p.cfg, u, p.timeout)
		p.mu.Lock()
		p.probes[u] = &res
		p.mu.Unlock()
	})
}

func (p *prober) wait() map[string]*probe.Member {
	p.wg.Wait()
	return p.probes
}

func answered(p *probe.Member) bool { return p != nil && p.Answered() }

// row builds a report row from what the probe of its URL saw; m holds the
// list fields (name, id, URL, learner). A nil probe was never run.
func row(p *probe.Member, m MemberHealth) MemberHealth {
	if p == nil {
		m.Health = HealthDown
		m.Error = "not probed"
		return m
	}
	if m.ID == "" {
		m.ID = probe.HexID(p.HeaderMemberID)
	}
	m.ClusterID = probe.HexID(p.ClusterID)
	if st := p.Status; st != nil {
		m.StatusOK = true
		m.Version = st.Version
		m.Learner = m.Learner || st.IsLearner
		if st.Header != nil {
			m.Leader = st.Leader != 0 && st.Leader == st.Header.MemberId
		}
		m.LeaderID = probe.HexID(st.Leader)
		m.RaftTerm, m.RaftIndex, m.AppliedIndex = st.RaftTerm, st.RaftIndex, st.RaftAppliedIndex
		m.DBSize, m.DBSizeInUse = st.DbSize, st.DbSizeInUse
		m.StatusErrors = st.Errors
	}
	m.LinearizableRead, m.SerializableRead = p.LinearizableOK, p.SerializableOK
	m.Revision = p.Revision
	m.Health = Classify(p.Status != nil, p.LinearizableOK, p.SerializableOK, m.Learner)
	if p.Answered() {
		m.LatencyMS = float64(p.Latency().Microseconds()) / 1000
	}
	if m.Health != HealthHealthy {
		q := *p
		q.IsLearner = m.Learner
		m.Error = q.ErrorText()
	}
	return m
}
