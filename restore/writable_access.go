//go:build linux || darwin

package restore

import "syscall"

// canWrite asks the kernel whether this process may create entries in
// dir: it sees read-only mounts and permissions, without writing.
func canWrite(dir string) error {
	const wOK, xOK = 0x2, 0x1
	return syscall.Access(dir, wOK|xOK)
}
