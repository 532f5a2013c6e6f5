package kube

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// One writer per cluster: the journal's replicas elect a leader on a
// coordination.k8s.io Lease (client-go's leaderelection) and only the
// leader runs. The timings are client-go's core defaults:
//
//   - a leader renews every RetryPeriod and gives up (and stops writing)
//     once it could not renew for RenewDeadline;
//   - a follower takes the Lease over once it has seen no renewal for
//     LeaseDuration (measured on its own clock from when it saw the last
//     change): at most LeaseDuration + RetryPeriod (17 s, plus client-go's
//     jitter of RetryPeriod x 1.2 at most) after a leader dies;
//   - a leader that stops cleanly releases the Lease (ReleaseOnCancel),
//     after its run returned: a follower takes over within one RetryPeriod.
//
// The fence run gets refuses once the Lease is lost or its last renewal
// started RenewDeadline ago or more: a leader cut off from the API server
// stops writing at least LeaseDuration - RenewDeadline (5 s) before any
// follower may take over.
const (
	DefaultLeaseName     = "etcd-recovery-journal"
	DefaultLeaseDuration = 15 * time.Second
	DefaultRenewDeadline = 10 * time.Second
	DefaultRetryPeriod   = 2 * time.Second
	// EnvPodName is the pod's name (the downward API), the identity's
	// first part; the hostname without it.
	EnvPodName = "POD_NAME"
)

// LeaderOptions are a leader election on one Lease of the client's
// namespace.
type LeaderOptions struct {
	Client *Client
	// LeaseName is the Lease's name (DefaultLeaseName).
	LeaseName string
	// Identity is this candidate's (LeaderIdentity()).
	Identity string
	// LeaseDuration, RenewDeadline and RetryPeriod: 0 is the default.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	Log                                       *slog.Logger
}

// LeadershipError is a leader that lost its Lease, or could not renew it
// in time, while it ran: what it was writing stopped (the fence refuses),
// and the caller exits so that it restarts as a follower.
type LeadershipError struct {
	Namespace, Lease, Identity string
	Err                        error // what run returned, if anything
}

func (e *LeadershipError) Error() string {
	s := fmt.Sprintf("leader election on Lease %s/%s: %s lost the leadership (not renewed within the renew deadline, or taken over); it stopped writing",
		e.Namespace, e.Lease, e.Identity)
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

func (e *LeadershipError) Unwrap() error { return e.Err }

// ErrNotLeader is what the fence returns once this candidate may no
// longer write.
var ErrNotLeader = errors.New("not the leader")

// LeaderIdentity is $POD_NAME (else the hostname) and a random suffix:
// a restarted container is a new candidate, never mistaken for the
// holder it replaced.
func LeaderIdentity() string {
	id := os.Getenv(EnvPodName)
	if id == "" {
		id = hostname()
	}
	if id == "" {
		id = "etcd-recovery"
	}
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return id + "_" + hex.EncodeToString(b)
}

func (o *LeaderOptions) defaults() error {
	if o.Client == nil || o.Client.Coordination == nil {
		return errors.New("leader election: no Kubernetes client")
	}
	o.LeaseName = cmp.Or(o.LeaseName, DefaultLeaseName)
	if o.Identity == "" {
		o.Identity = LeaderIdentity() // only when not given: it is random
	}
	o.LeaseDuration = cmp.Or(o.LeaseDuration, DefaultLeaseDuration)
	o.RenewDeadline = cmp.Or(o.RenewDeadline, DefaultRenewDeadline)
	o.RetryPeriod = cmp.Or(o.RetryPeriod, DefaultRetryPeriod)
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	return nil
}

// RunAsLeader campaigns for the Lease and, once this candidate holds it,
// calls run with a context that ends when ctx ends or the leadership is
// lost, and a fence to call before every write (ErrNotLeader, wrapped,
// once the Lease is lost or not renewed within RenewDeadline). The Lease
// is renewed while run runs (its final flush included) and released only
// after run returned, so a clean stop hands over within one RetryPeriod.
//
// It returns nil when ctx ends (while campaigning, or run returning nil
// after it), run's error when run fails on its own (the Lease released),
// and a *LeadershipError when the leadership was lost while run ran: the
// caller exits non-zero and restarts as a follower (it does not campaign
// again in the same process). Logs: campaigning, became leader, new
// leader observed, lost or released.
func RunAsLeader(ctx context.Context, o LeaderOptions, run func(ctx context.Context, fence func() error) error) error {
	if err := o.defaults(); err != nil {
		return err
	}
	log := o.Log.With("lease", o.Client.Namespace+"/"+o.LeaseName, "identity", o.Identity)
	lock := &fencedLock{LeaseLock: &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Name: o.LeaseName, Namespace: o.Client.Namespace},
		Client:     o.Client.Coordination,
		LockConfig: resourcelock.ResourceLockConfig{Identity: o.Identity},
	}}
	// The election outlives ctx: after a stop it keeps renewing until run
	// returned (its final flush), then releases.
	elCtx, elCancel := context.WithCancel(logr.NewContext(context.WithoutCancel(ctx), logr.FromSlogHandler(log.Handler())))
	defer elCancel()

	const (
		campaigning = iota
		leading
		closed
	)
	var (
		mu     sync.Mutex
		state  = campaigning
		done   = make(chan struct{})
		runErr error
		lost   bool
		le     *leaderelection.LeaderElector
	)
	fence := func() error {
		if err := lock.valid(o.RenewDeadline); err != nil {
			return fmt.Errorf("Lease %s/%s: %w", o.Client.Namespace, o.LeaseName, err)
		}
		if !le.IsLeader() {
			return fmt.Errorf("Lease %s/%s: %w: held by %q", o.Client.Namespace, o.LeaseName, ErrNotLeader, le.GetLeader())
		}
		return nil
	}
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:            lock,
		LeaseDuration:   o.LeaseDuration,
		RenewDeadline:   o.RenewDeadline,
		RetryPeriod:     o.RetryPeriod,
		ReleaseOnCancel: true,
		Name:            o.LeaseName,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(lctx context.Context) {
				mu.Lock()
				if state != campaigning {
					mu.Unlock()
					return
				}
				state = leading
				mu.Unlock()
				defer elCancel() // then the Lease is released
				defer close(done)
				log.Info("leader election: became leader; running")
				rctx, cancel := context.WithCancel(ctx)
				stop := context.AfterFunc(lctx, cancel)
				runErr = run(rctx, fence)
				lost = !stop() && ctx.Err() == nil
				cancel()
			},
			OnStoppedLeading: func() {
				if lock.held() {
					log.Info("leader election: stopped leading")
				}
			},
			OnNewLeader: func(id string) {
				if id != o.Identity {
					log.Info("leader election: new leader observed", "leader", id)
				}
			},
		},
	})
	if err != nil {
		return fmt.Errorf("leader election on Lease %s/%s: %w", o.Client.Namespace, o.LeaseName, err)
	}
	// A stop while campaigning ends the campaign; while leading, run sees
	// it and the election ends after run.
	stopCampaign := context.AfterFunc(ctx, func() {
		mu.Lock()
		defer mu.Unlock()
		if state == campaigning {
			elCancel()
		}
	})
	defer stopCampaign()
	log.Info("leader election: campaigning", "leaseDuration", o.LeaseDuration, "renewDeadline", o.RenewDeadline, "retryPeriod", o.RetryPeriod)
	le.Run(elCtx)
	mu.Lock()
	if state == campaigning {
		state = closed
		mu.Unlock()
		if ctx.Err() == nil {
			// Run returned without a run: the leadership went before
			// run started.
			return &LeadershipError{Namespace: o.Client.Namespace, Lease: o.LeaseName, Identity: o.Identity}
		}
		log.Info("leader election: stopped while a follower")
		return nil
	}
	mu.Unlock()
	<-done
	// The release (ReleaseOnCancel) ran in le.Run after elCancel, or the
	// renewal had failed: le.Run returned only after it.
	switch {
	case lost:
		log.Warn("leader election: lost the leadership; stopped writing", "err", runErr)
		return &LeadershipError{Namespace: o.Client.Namespace, Lease: o.LeaseName, Identity: o.Identity, Err: runErr}
	case runErr != nil:
		log.Info("leader election: run failed; Lease released", "err", runErr)
		return runErr
	}
	log.Info("leader election: stopped; Lease released")
	return nil
}

// fencedLock is the Lease lock, recording when this candidate's last
// renewal (a create or update naming it) that succeeded started, and
// whether it released the Lease.
type fencedLock struct {
	*resourcelock.LeaseLock
	mu       sync.Mutex
	renewed  time.Time // monotonic
	released bool
}

func (l *fencedLock) Create(ctx context.Context, r resourcelock.LeaderElectionRecord) error {
	start := time.Now()
	err := l.LeaseLock.Create(ctx, r)
	l.record(start, r, err)
	return err
}

func (l *fencedLock) Update(ctx context.Context, r resourcelock.LeaderElectionRecord) error {
	start := time.Now()
	err := l.LeaseLock.Update(ctx, r)
	l.record(start, r, err)
	return err
}

func (l *fencedLock) record(start time.Time, r resourcelock.LeaderElectionRecord, err error) {
	if err != nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if r.HolderIdentity == l.Identity() {
		l.renewed, l.released = start, false
	} else {
		l.released = true
	}
}

func (l *fencedLock) held() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return !l.renewed.IsZero()
}

// valid is nil while this candidate holds the Lease and its last renewal
// started less than deadline ago.
func (l *fencedLock) valid(deadline time.Duration) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.renewed.IsZero():
		return fmt.Errorf("%w: never held", ErrNotLeader)
	case l.released:
		return fmt.Errorf("%w: released", ErrNotLeader)
	case time.Since(l.renewed) >= deadline:
		return fmt.Errorf("%w: last renewed %s ago, the renew deadline is %s", ErrNotLeader, time.Since(l.renewed).Round(time.Millisecond), deadline)
	}
	return nil
}

// LeaseHolder is who holds the namespace's Lease name at now: its
// holderIdentity while its renew time is within its lease duration (plus
// RetryPeriod, client-go's slack) of now. held is false for a missing
// Lease, one released (no holder) or one expired. A journal that is not
// elected checks it before it writes (a second writer beside the
// Deployment's leader overlaps its segments).
func (c *Client) LeaseHolder(ctx context.Context, name string, now time.Time) (holder string, renewed time.Time, held bool, err error) {
	l, err := c.Coordination.Leases(c.Namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return "", time.Time{}, false, nil
	}
	if err != nil {
		return "", time.Time{}, false, fmt.Errorf("kubernetes: get lease %s/%s: %w", c.Namespace, name, err)
	}
	if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == "" {
		return "", time.Time{}, false, nil
	}
	holder = *l.Spec.HolderIdentity
	if l.Spec.RenewTime != nil {
		renewed = l.Spec.RenewTime.Time
	} else if l.Spec.AcquireTime != nil {
		renewed = l.Spec.AcquireTime.Time
	}
	d := DefaultLeaseDuration
	if l.Spec.LeaseDurationSeconds != nil && *l.Spec.LeaseDurationSeconds > 0 {
		d = time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second
	}
	return holder, renewed, !renewed.IsZero() && now.Before(renewed.Add(d+DefaultRetryPeriod)), nil
}
