// Command typecheck type-checks the toolkit's binary, with its whole import
// graph, for other platforms: what `make cross` proves by building, in a
// fraction of the time when the build cache is cold (it parses and
// type-checks from source; nothing is compiled or linked).
//
//	go run ./internal/testing/cmd/typecheck [-pkg ./cmd/etcd-recovery] darwin/arm64 windows/amd64
//
// It catches every identifier that does not exist on a platform: a Linux-only
// syscall, constant or function used outside a _linux.go file or a build
// tag, in this module or in a dependency, and a file set that leaves a
// function undefined on a platform (an _other.go twin missing). It does not
// catch what only the compiler's back end or the linker sees (assembly, a
// go:linkname target missing on a platform; the module has neither), nor
// anything in test files (the tests run on Linux only). `make cross` builds
// the binary for all five release platforms.
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"golang.org/x/tools/go/packages"
)

func main() {
	pkg := flag.String("pkg", "./cmd/etcd-recovery", "the package whose import graph is checked")
	dir := flag.String("C", ".", "the module directory")
	flag.Parse()
	if flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: typecheck [-pkg PATTERN] [-C DIR] GOOS/GOARCH...")
		os.Exit(2)
	}
	failed := false
	for _, p := range flag.Args() {
		goos, goarch, ok := strings.Cut(p, "/")
		if !ok || goos == "" || goarch == "" {
			fmt.Fprintf(os.Stderr, "typecheck: %q: want GOOS/GOARCH\n", p)
			os.Exit(2)
		}
		start := time.Now()
		n, err := check(*dir, *pkg, goos, goarch)
		switch {
		case err != nil:
			fmt.Fprintf(os.Stderr, "typecheck %s: %v\n", p, err)
			failed = true
		case n > 0:
			fmt.Fprintf(os.Stderr, "typecheck %s: %d errors in %s's import graph (above)\n", p, n, *pkg)
			failed = true
		default:
			fmt.Printf("typecheck %s: %s and its import graph type-check (%.1fs)\n", p, *pkg, time.Since(start).Seconds())
		}
	}
	if failed {
		os.Exit(1)
	}
}

// check loads pattern and everything it imports from source for
// goos/goarch, without cgo (the release binaries are static), and prints
// every error; it returns how many there were.
func check(dir, pattern, goos, goarch string) (int, error) {
	cfg := &packages.Config{
		Mode: packages.LoadAllSyntax,
		Dir:  dir,
		Env:  append(os.Environ(), "GOOS="+goos, "GOARCH="+goarch, "CGO_ENABLED=0", "GOFLAGS=-mod=readonly"),
	}
	pkgs, err := packages.Load(cfg, pattern)
	if err != nil {
		return 0, err
	}
	if len(pkgs) == 0 {
		return 0, fmt.Errorf("%s matched no package", pattern)
	}
	return packages.PrintErrors(pkgs), nil
}
