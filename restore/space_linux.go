package restore

import (
	"io/fs"
	"syscall"
)

// fsStat returns the file system's device and the bytes an unprivileged
// writer may still use (f_bavail: root's reserve is not counted).
func fsStat(dir string) (dev uint64, free int64, ok bool) {
	var st syscall.Stat_t
	if err := syscall.Stat(dir, &st); err != nil {
		return 0, 0, false
	}
	var fs syscall.Statfs_t
	if err := syscall.Statfs(dir, &fs); err != nil {
		return 0, 0, false
	}
	return uint64(st.Dev), int64(fs.Bavail) * int64(fs.Bsize), true
}

// allocated is what a file takes on disk: its allocated blocks.
func allocated(info fs.FileInfo) int64 {
	if st, ok := info.Sys().(*syscall.Stat_t); ok {
		return st.Blocks * 512
	}
	return info.Size()
}
