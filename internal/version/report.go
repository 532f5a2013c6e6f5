package version

import (
	"runtime"
	"runtime/debug"

	"github.com/armada/etcd-recovery/internal/output"
)

// Modules are the libraries whose versions `etcd-recovery version`
// reports: the etcd client and etcdutl (the snapshot and restore code),
// the etcd server module (the drill's and restore's bbolt and WAL
// formats), client-go, the Prometheus client and the table writer.
var Modules = []string{
	"go.etcd.io/etcd/client/v3",
	"go.etcd.io/etcd/etcdutl/v3",
	"go.etcd.io/etcd/server/v3",
	"k8s.io/client-go",
	"github.com/prometheus/client_golang",
	"github.com/olekukonko/tablewriter",
}

// Report is `etcd-recovery version`: the tool's version, the Go version
// it was built with, the versions of Modules linked into it (from the
// binary's build information) and the etcd servers a drill would run.
type Report struct {
	Version string   `json:"version"`
	Go      string   `json:"goVersion"`
	Modules []Module `json:"modules"`
	// Servers are the drill's etcd servers (etcd-3.5, etcd-3.6): where
	// they were looked for and what each says its version is.
	Servers []Server `json:"drillServers"`
}

// Module is a linked module and its version ("(not in build info)" when
// the binary carries none, as in some test binaries).
type Module struct {
	Path    string `json:"path"`
	Version string `json:"version"`
}

// Server is one etcd server a drill runs: its name (etcd-<minor>), the
// binary found (empty: none) and the version it reports, or why not.
type Server struct {
	Name    string `json:"name"`
	Path    string `json:"path,omitempty"`
	Version string `json:"version,omitempty"`
	Error   string `json:"error,omitempty"`
}

// NotInBuildInfo is a module's version when the build information does
// not list it.
const NotInBuildInfo = "(not in build info)"

// Build is the report of this binary without its servers: the version,
// Go's and the modules', read from runtime/debug.ReadBuildInfo.
func Build() *Report {
	r := &Report{Version: Version, Go: runtime.Version(), Servers: []Server{}}
	deps := map[string]string{}
	if bi, ok := debug.ReadBuildInfo(); ok {
		r.Go = bi.GoVersion
		for _, d := range bi.Deps {
			v := d.Version
			if d.Replace != nil {
				v = d.Replace.Version + " (replacing " + d.Version + ")"
			}
			deps[d.Path] = v
		}
	}
	for _, m := range Modules {
		v, ok := deps[m]
		if !ok {
			v = NotInBuildInfo
		}
		r.Modules = append(r.Modules, Module{Path: m, Version: v})
	}
	return r
}

// Tables are the version lines, the modules and the drill servers.
func (r *Report) Tables() []output.Table {
	mods := output.Table{Title: "etcd-recovery " + r.Version + " (" + r.Go + ")\n\n", Header: []string{"MODULE", "VERSION"}}
	for _, m := range r.Modules {
		mods.Rows = append(mods.Rows, []string{m.Path, m.Version})
	}
	srv := output.Table{Title: "\nDrill servers:\n", Header: []string{"SERVER", "VERSION", "PATH", "ERROR"}, Long: []string{"ERROR"}}
	for _, s := range r.Servers {
		v, p := s.Version, s.Path
		if v == "" {
			v = "-"
		}
		if p == "" {
			p = "-"
		}
		srv.Rows = append(srv.Rows, []string{s.Name, v, p, s.Error})
	}
	return []output.Table{mods, srv}
}
