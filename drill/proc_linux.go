package drill

import (
	"os"
	"syscall"
)

// drillSysProcAttr puts the drill's etcd in its own process group and has
// the kernel kill it when the tool dies (Pdeathsig: when the thread that
// started it exits, which for Go's runtime threads is the process).
func drillSysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// signalGroup sends SIGTERM (or SIGKILL) to the process's group.
func signalGroup(p *os.Process, kill bool) {
	sig := syscall.SIGTERM
	if kill {
		sig = syscall.SIGKILL
	}
	if err := syscall.Kill(-p.Pid, sig); err != nil {
		_ = p.Signal(sig)
	}
}

// exitSignal is the signal that ended the process ("" when it exited on
// its own).
func exitSignal(ps *os.ProcessState) string {
	if ps == nil {
		return ""
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return ws.Signal().String()
	}
	return ""
}
