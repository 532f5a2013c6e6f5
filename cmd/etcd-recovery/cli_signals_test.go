package main

import (
	"bufio"
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/armada/etcd-recovery/internal/store"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
)

// toolRun is the real binary running, its stderr read line by line.
type toolRun struct {
	cmd   *exec.Cmd
	mu    sync.Mutex
	lines []string
	added chan struct{} // signalled (non-blocking) on every new line
	done  chan struct{} // closed when stderr is at EOF and the process was waited for
	err   error
}

func startTool(t *testing.T, args ...string) *toolRun {
	t.Helper()
	cmd := exec.Command(testfix.Tool(t), args...)
	cmd.Env = os.Environ()
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r := &toolRun{cmd: cmd, added: make(chan struct{}, 1), done: make(chan struct{})}
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			r.mu.Lock()
			r.lines = append(r.lines, sc.Text())
			r.mu.Unlock()
			select {
			case r.added <- struct{}{}:
			default:
			}
		}
		r.err = cmd.Wait()
		close(r.done)
	}()
	t.Cleanup(func() {
		select {
		case <-r.done:
		default:
			_ = cmd.Process.Kill()
			<-r.done
		}
	})
	return r
}

func (r *toolRun) output() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return strings.Join(r.lines, "\n")
}

// waitLine waits for a stderr line containing s; false when the process
// ended or the bound passed first.
func (r *toolRun) waitLine(s string, bound time.Duration) bool {
	timer := time.NewTimer(bound)
	defer timer.Stop()
	for {
		if strings.Contains(r.output(), s) {
			return true
		}
		select {
		case <-r.added:
		case <-r.done:
			return strings.Contains(r.output(), s)
		case <-timer.C:
			return false
		}
	}
}

// wait waits up to bound for the exit; its code, or -1 if still running.
func (r *toolRun) wait(bound time.Duration) int {
	select {
	case <-r.done:
	case <-time.After(bound):
		return -1
	}
	var ee *exec.ExitError
	if errors.As(r.err, &ee) {
		return ee.ExitCode()
	}
	if r.err != nil {
		return -2
	}
	return 0
}

// waitUpload polls the store until a multipart upload exists under prefix,
// while the tool runs; it returns the upload's key.
func waitUpload(t *testing.T, st store.Store, prefix string, r *toolRun, bound time.Duration) string {
	t.Helper()
	lister, ok := st.(interface {
		ListUploads(context.Context, string) ([]store.Upload, error)
	})
	if !ok {
		t.Fatal("the store cannot list uploads")
	}
	deadline := time.Now().Add(bound)
	for time.Now().Before(deadline) {
		ups, err := lister.ListUploads(context.Background(), prefix)
		if err != nil {
			t.Fatalf("list uploads: %v", err)
		}
		if len(ups) > 0 {
			return ups[0].Key
		}
		select {
		case <-r.done:
			t.Fatalf("the backup ended (%v) before any multipart upload existed:\n%s", r.err, r.output())
		case <-time.After(10 * time.Millisecond):
		}
	}
	t.Fatalf("no multipart upload under %s within %v:\n%s", prefix, bound, r.output())
	return ""
}

// A second SIGINT exits at once, while the first one's cleanup waits on a
// frozen object store (the abort of the upload is retried for up to 30 s
// plus the stall bound). The bound for the second signal is 10 s: far
// below that window, with slack for a busy machine.
func TestCLISecondSignalExitsAtOnce(t *testing.T) {
	t.Parallel()
	c := testenv.StartEtcd(t, testenv.EtcdOptions{Version: testenv.V35, Members: 1})
	testenv.PutKeys(t, c.Client(t), "/big/", 5000, 8<<10) // ~40 MiB: several parts
	m := testenv.StartMinIO(t)                            // its own: it is frozen
	bucket, prefix := m.NewBucket(t), testenv.Prefix(t)
	r := startTool(t, concatArgs([]string{"backup", "--cluster-id", "sig2", "--compress", "none"}, clusterArgs(c), cosArgs(t, m, bucket, prefix))...)
	st := testfix.Store(t, m, bucket)
	waitUpload(t, st, prefix+"/", r, 60*time.Second)
	// The backup can neither finish (etcd frozen) nor clean up (MinIO frozen).
	c.Members[0].Freeze()
	m.Freeze()
	t.Cleanup(func() { c.Members[0].Thaw(); m.Thaw() })

	if err := r.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	// The first signal is acknowledged at once; without the acknowledgement
	// the second is sent anyway (two signals at once may be delivered as
	// one, hence the wait).
	if !r.waitLine("SIGINT: cancelling and cleaning up", 10*time.Second) {
		t.Errorf("the first SIGINT was not acknowledged on stderr:\n%s", r.output())
	}
	if code := r.wait(0); code != -1 {
		t.Fatalf("the backup exited (%d) on the first signal although the store is frozen (its cleanup should be waiting):\n%s", code, r.output())
	}
	t0 := time.Now()
	if err := r.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	code := r.wait(10 * time.Second)
	if code == -1 {
		t.Fatalf("still running 10 s after the second SIGINT:\n%s", r.output())
	}
	t.Logf("exit %d %v after the second SIGINT", code, time.Since(t0).Round(time.Millisecond))
	if code != exitCanceled || !strings.Contains(r.output(), "SIGINT again: exiting now") {
		t.Fatalf("exit %d after the second SIGINT, want %d and the one-line notice:\n%s", code, exitCanceled, r.output())
	}
}

// SIGTERM (what Kubernetes sends) and SIGINT each abort a backup whose
// multipart upload exists: exit 130, and afterwards no upload and no object
// under the backup. The upload is waited for (ListUploads), then etcd is
// frozen so the backup cannot complete before the signal lands.
func TestCLISignalAbortsUpload(t *testing.T) {
	t.Parallel()
	c := testenv.StartEtcd(t, testenv.EtcdOptions{Version: testenv.V35, Members: 1, TLS: true})
	testenv.PutKeys(t, c.Client(t), "/big/", 5000, 8<<10) // ~40 MiB
	m := testenv.SharedMinIO(t)
	bucket := m.NewBucket(t)
	st := testfix.Store(t, m, bucket)
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		name := signalName(sig)
		t.Run(name, func(t *testing.T) {
			prefix := testenv.Prefix(t)
			r := startTool(t, concatArgs([]string{"--log-level", "debug", "backup", "--cluster-id", "sig", "--compress", "none"}, clusterArgs(c), cosArgs(t, m, bucket, prefix))...)
			key := waitUpload(t, st, prefix+"/", r, 60*time.Second)
			c.Members[0].Freeze()
			defer c.Members[0].Thaw()
			if err := r.cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			// Bound: the abort with a live store takes well under a second;
			// 60 s covers the 30 s abort window with slack.
			code := r.wait(60 * time.Second)
			if code != exitCanceled {
				t.Fatalf("exit %d after %s, want %d:\n%s", code, name, exitCanceled, r.output())
			}
			if !strings.Contains(r.output(), name+": cancelling") {
				t.Errorf("no acknowledgement of %s:\n%s", name, r.output())
			}
			if keys := testfix.Keys(t, st, prefix+"/"); len(keys) != 0 {
				t.Errorf("%s left objects %v", name, keys)
			}
			if ups, err := st.ListUploads(context.Background(), prefix+"/"); err != nil || len(ups) != 0 {
				t.Errorf("%s left uploads %+v (%v)", name, ups, err)
			}
			if ups, err := st.ListUploadsForKey(context.Background(), key); err != nil || len(ups) != 0 {
				t.Errorf("%s left the upload of %s: %+v (%v)", name, key, ups, err)
			}
		})
	}
}
