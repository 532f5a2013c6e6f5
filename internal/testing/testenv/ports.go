package testenv

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
)

// Port allocation.
//
// Ports are picked at random BELOW the kernel's ephemeral range
// (net.ipv4.ip_local_port_range): a port obtained by listening on :0 comes
// from that range and, once closed, can be taken by the source port of any
// outgoing connection (etcd peers dial each other constantly) before the
// server binds it. Each candidate must be bindable on 127.0.0.1 and on the
// requested IP, is remembered in a process-wide set, and is also locked
// (one byte per port, fcntl) in a file shared by all test binaries of this
// machine, so `go test ./...` running packages in parallel never hands out
// the same port twice. The locks are released when the test binary exits.

const (
	portRangeLow  = 15000
	portLockFile  = "etcd-recovery-testenv-ports.lock"
	portMaxTrials = 2000
)

var (
	portMu     sync.Mutex
	portsTaken = map[int]bool{}
	portLockF  *os.File // kept open for the life of the process; never closed
	portLockOK bool
	portHigh   int // exclusive upper bound of the range we pick from
)

func initPorts() {
	if portHigh != 0 {
		return
	}
	portHigh = 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if lo, err := strconv.Atoi(f[0]); err == nil && lo > portRangeLow+2000 {
				portHigh = lo
			}
		}
	}
	f, err := os.OpenFile(filepath.Join(os.TempDir(), portLockFile), os.O_CREATE|os.O_RDWR, 0o666)
	if err == nil {
		portLockF, portLockOK = f, true
	}
}

// lockPortAcrossProcesses takes an exclusive, non-blocking fcntl lock on byte
// `port` of the shared lock file. fcntl locks belong to the process and are
// released when it exits.
func lockPortAcrossProcesses(port int) bool {
	if !portLockOK {
		return true
	}
	lk := syscall.Flock_t{Type: syscall.F_WRLCK, Whence: 0, Start: int64(port), Len: 1}
	return syscall.FcntlFlock(portLockF.Fd(), syscall.F_SETLK, &lk) == nil
}

func unlockPortAcrossProcesses(port int) {
	if !portLockOK {
		return
	}
	lk := syscall.Flock_t{Type: syscall.F_UNLCK, Whence: 0, Start: int64(port), Len: 1}
	_ = syscall.FcntlFlock(portLockF.Fd(), syscall.F_SETLK, &lk)
}

func canBind(ip string, port int) bool {
	l, err := net.Listen("tcp", net.JoinHostPort(ip, strconv.Itoa(port)))
	if err != nil {
		return false
	}
	l.Close()
	return true
}

func freePortOn(ip string) (int, error) {
	portMu.Lock()
	defer portMu.Unlock()
	initPorts()
	for range portMaxTrials {
		p := portRangeLow + rand.IntN(portHigh-portRangeLow)
		if portsTaken[p] {
			continue
		}
		if !lockPortAcrossProcesses(p) {
			continue
		}
		if canBind("127.0.0.1", p) && (ip == "127.0.0.1" || canBind(ip, p)) {
			portsTaken[p] = true
			return p, nil
		}
		unlockPortAcrossProcesses(p)
	}
	return 0, fmt.Errorf("no free port on %s in [%d, %d) after %d trials", ip, portRangeLow, portHigh, portMaxTrials)
}

// FreePort returns a TCP port that is free on 127.0.0.1 and that no other
// caller in this test binary (nor, through a shared lock file, in any other
// test binary using this package) has been or will be given.
func FreePort(tb testing.TB) int {
	tb.Helper()
	return freePort(tb, "127.0.0.1")
}

func freePort(tb testing.TB, ip string) int {
	tb.Helper()
	p, err := freePortOn(ip)
	if err != nil {
		tb.Fatalf("testenv: %v", err)
	}
	return p
}
