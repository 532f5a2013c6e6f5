//go:build !linux

package drill

import (
	"os"
	"syscall"
)

func drillSysProcAttr() *syscall.SysProcAttr { return nil }

func signalGroup(p *os.Process, kill bool) {
	if kill {
		_ = p.Kill()
		return
	}
	_ = p.Signal(os.Interrupt)
}

func exitSignal(*os.ProcessState) string { return "" }
