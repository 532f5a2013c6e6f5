package restore_test

// One meaning of healthy: inspect and restore verify probe members with the
// same prober (internal/probe) and judge them with the same verdict, so the
// same real cluster state is judged the same by both.

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/armada/etcd-recovery/inspect"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
	"github.com/armada/etcd-recovery/restore"
)

// judged is what inspect and restore verify each concluded.
type judged struct {
	inspectVerdict inspect.VerdictKind
	inspectBad     []string // members inspect does not call healthy
	verifyBad      []string // members restore verify does not call healthy
	verifyErrs     map[string]string
	verified       bool
	healthCheck    restore.Check
}

func judgeBoth(t *testing.T, c *testenv.EtcdCluster) judged {
	t.Helper()
	ctx := context.Background()
	cfg := testfix.EtcdConfig(c)
	var j judged
	rep, err := inspect.Run(ctx, inspect.Options{Etcd: cfg, Timeout: 2 * time.Second})
	if err != nil {
		t.Fatalf("inspect: %v", err)
	}
	j.inspectVerdict = rep.Verdict
	for _, m := range rep.Members {
		if !m.Healthy() {
			j.inspectBad = append(j.inspectBad, m.Name)
		}
		t.Logf("inspect %s: health %s alarms %v status errors %q", m.Name, m.Health, m.Alarms, m.StatusErrors)
	}
	vrep, err := restore.VerifyRebuilt(ctx, restore.VerifyOptions{Etcd: cfg, Timeout: 500 * time.Millisecond, ProbeTimeout: 2 * time.Second, ExpectedKeys: -1})
	var verr *restore.VerifyError
	if err != nil && !errors.As(err, &verr) {
		t.Fatalf("verify: %v", err)
	}
	j.verified = err == nil && vrep.Verified
	j.verifyErrs = map[string]string{}
	for _, m := range vrep.Members {
		if !m.Healthy {
			j.verifyBad = append(j.verifyBad, m.Name)
			j.verifyErrs[m.Name] = m.Error
		}
	}
	for _, ch := range vrep.Checks {
		if ch.Name == restore.CheckHealthy {
			j.healthCheck = ch
		}
	}
	slices.Sort(j.inspectBad)
	slices.Sort(j.verifyBad)
	t.Logf("inspect %s %s (bad %v); verify verified=%v bad %v check %+v", rep.Verdict, rep.Summary, j.inspectBad, j.verified, j.verifyBad, j.healthCheck)
	if !slices.Equal(j.inspectBad, j.verifyBad) {
		t.Errorf("inspect judges %v not healthy, restore verify %v: two meanings of healthy", j.inspectBad, j.verifyBad)
	}
	if (j.inspectVerdict == inspect.VerdictHealthy) != j.verified {
		t.Errorf("inspect says %s, restore verify verified=%v", j.inspectVerdict, j.verified)
	}
	return j
}

func TestVerifyJudgesAsInspect(t *testing.T) {
	t.Parallel()
	c := testenv.StartEtcd(t, testenv.EtcdOptions{Version: testenv.V35, TLS: true})
	cli := c.Client(t)
	ctx := context.Background()

	// Healthy: both pass.
	if j := judgeBoth(t, c); !j.verified || len(j.inspectBad) != 0 {
		t.Fatalf("healthy cluster: %+v", j)
	}

	// A NOSPACE alarm raised on one follower, through the maintenance API.
	leader := c.Leader(t)
	var target *testenv.EtcdMember
	for _, m := range c.Members {
		if m != leader {
			target = m
			break
		}
	}
	st, err := target.Client(t).Status(ctx, target.ClientURL)
	if err != nil {
		t.Fatal(err)
	}
	id := st.Header.MemberId
	actx, cancel := context.WithTimeout(ctx, 10*time.Second)
	_, err = pb.NewMaintenanceClient(cli.ActiveConnection()).Alarm(actx, &pb.AlarmRequest{
		Action: pb.AlarmRequest_ACTIVATE, MemberID: id, Alarm: pb.AlarmType_NOSPACE})
	cancel()
	if err != nil {
		t.Fatalf("raise NOSPACE on %s: %v", target.Name, err)
	}
	j := judgeBoth(t, c)
	if j.inspectVerdict != inspect.VerdictDegraded || j.verified {
		t.Errorf("NOSPACE: inspect %s, verified %v: an alarm must fail verification", j.inspectVerdict, j.verified)
	}
	if !slices.Equal(j.verifyBad, []string{target.Name}) || !strings.Contains(j.verifyErrs[target.Name], "NOSPACE") {
		t.Errorf("NOSPACE on %s: verify judged %v not healthy (%v)", target.Name, j.verifyBad, j.verifyErrs)
	}
	if j.healthCheck.Status != restore.CheckFailed || !strings.Contains(j.healthCheck.Detail, target.Name+": alarm NOSPACE active") {
		t.Errorf("health check %+v", j.healthCheck)
	}

	// Disarmed, then a member stopped.
	actx, cancel = context.WithTimeout(ctx, 10*time.Second)
	_, err = cli.AlarmDisarm(actx, &clientv3.AlarmMember{MemberID: id, Alarm: pb.AlarmType_NOSPACE})
	cancel()
	if err != nil {
		t.Fatalf("disarm: %v", err)
	}
	if j := judgeBoth(t, c); !j.verified {
		t.Fatalf("after disarm: %+v", j)
	}
	target.Stop()
	j = judgeBoth(t, c)
	if j.inspectVerdict != inspect.VerdictDegraded || j.verified || !slices.Equal(j.verifyBad, []string{target.Name}) {
		t.Errorf("stopped %s: inspect %s, verified %v, bad %v", target.Name, j.inspectVerdict, j.verified, j.verifyBad)
	}
}
