package drill

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"

	"github.com/armada/etcd-recovery/internal/memcg"
)

// Why the drill's etcd stopped, when it was not the backup: the node's
// causes that make a drill inconclusive rather than failed.

// memCgroup is the memory cgroup the drill's etcd ran in and its OOM-kill
// count when first seen (etcd's container's cgroup in a pod).
type memCgroup struct {
	dir   string
	kills int
}

// watchCgroup notes the memory cgroup of pid (read from /proc while it
// runs, so that one it moves into after starting is seen too).
func (p *etcdProc) watchCgroup(pid int) {
	dir, _ := memcg.Of(pid)
	if dir == "" {
		return
	}
	p.cgMu.Lock()
	defer p.cgMu.Unlock()
	if p.cg != nil && p.cg.dir == dir {
		return
	}
	p.cg = &memCgroup{dir: dir, kills: memcg.OOMKills(dir)}
}

// exited reports whether etcd has exited.
func (p *etcdProc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// untilExit is ctx, cancelled as well when etcd exits (with cause
// errEtcdExited).
func (p *etcdProc) untilExit(ctx context.Context) context.Context {
	cctx, cancel := context.WithCancelCause(ctx)
	go func() {
		select {
		case <-p.done:
			cancel(errEtcdExited)
		case <-cctx.Done():
		}
	}()
	return cctx
}

// exitCause says why etcd exited, when it was the node's fault: killed by
// the OOM killer or by a signal the drill did not send, out of memory, or
// out of disk space (its log says so). "" when etcd still runs, was
// stopped by the drill, or exited for a cause of its own (it refused the
// data: the backup's fault).
func (p *etcdProc) exitCause() string {
	select {
	case <-p.done:
	default:
		return ""
	}
	if p.stopping.Load() {
		return ""
	}
	tail := p.logTail()
	if sig := exitSignal(p.cmd.ProcessState); sig != "" {
		p.cgMu.Lock()
		cg := p.cg
		p.cgMu.Unlock()
		if cg != nil && cg.kills >= 0 {
			if n := memcg.OOMKills(cg.dir); n > cg.kills {
				limit := ""
				if l := memcg.Limit(cg.dir); l > 0 {
					limit = fmt.Sprintf(" of %d MiB", l>>20)
				}
				return fmt.Sprintf("the drill's etcd was killed by the OOM killer (OOM: its memory cgroup %s reached its limit%s)", cg.dir, limit)
			}
		}
		return fmt.Sprintf("the drill's etcd was killed by signal %s, not by the drill (the OOM killer, or a signal from outside)", sig)
	}
	return logCause(tail)
}

// logCause is a node's cause found in etcd's log (no room, no memory).
func logCause(s string) string {
	l := strings.ToLower(s)
	switch {
	case strings.Contains(l, "no space left on device") || strings.Contains(l, "disk quota exceeded"):
		return "the scratch disk is full (etcd: no space left on device)"
	case strings.Contains(l, "out of memory") || strings.Contains(l, "cannot allocate memory"):
		return "the drill's etcd ran out of memory"
	}
	return ""
}

// localCause is a node's cause of a failure of the scratch file system.
func localCause(err error) string {
	switch {
	case errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT):
		return "the scratch disk is full (no space left on device)"
	case errors.Is(err, syscall.EROFS) || errors.Is(err, os.ErrPermission):
		return "the scratch directory can't be written"
	case errors.Is(err, syscall.EIO):
		return "the scratch disk failed (I/O error)"
	}
	return logCause(err.Error())
}
