package restore

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	bolt "go.etcd.io/bbolt"
	"go.etcd.io/etcd/client/pkg/v3/types"
	"go.etcd.io/etcd/etcdutl/v3/snapshot"
	"go.uber.org/zap"

	"github.com/armada/etcd-recovery/internal/etcdconn"
	"github.com/armada/etcd-recovery/internal/etcdinternals"
)

// NamePlaceholder in a data dir template is replaced by the member's name.
const NamePlaceholder = "{name}"

// Member is one member of the new cluster and its data dir.
type Member struct {
	Name     string   `json:"name"`
	PeerURLs []string `json:"peerURLs"`
	DataDir  string   `json:"dataDir"`
	// State is the data dir as found before anything was written: absent,
	// empty, or non-empty.
	State string `json:"state"`
	// MovedTo is where a non-empty data dir was (or, in a dry run, would
	// be) moved aside with --force.
	MovedTo string `json:"movedTo,omitempty"`
	// Restored is set once the data dir was written.
	Restored bool `json:"restored"`
	// Problem is why the data dir cannot be written (nothing is).
	Problem string `json:"problem,omitempty"`
}

// Data dir states.
const (
	DirAbsent   = "absent"
	DirEmpty    = "empty"
	DirNonEmpty = "non-empty"
)

// Targets says which members to rebuild and where (etcdutl's flags).
type Targets struct {
	// InitialCluster is etcd's --initial-cluster: name=peerURL[,...]. Every
	// member of the new cluster, restored here or elsewhere.
	InitialCluster string
	// Name, when set, restores only that member (etcdutl's --name).
	Name string
	// InitialAdvertisePeerURLs are the peer URLs of Name; by default its
	// URLs in InitialCluster, which they must match.
	InitialAdvertisePeerURLs []string
	// DataDir is a member's data dir. It may contain {name}; without it,
	// only one member may be restored. Default: {name}.etcd, as etcdutl.
	DataDir string
	// DataDirRoot puts every member's data dir at <root>/<name>.etcd.
	DataDirRoot string
}

// parsedCluster is --initial-cluster in order, with URLs per name.
type parsedCluster struct {
	names []string
	urls  map[string][]string
}

// initialClusterForm is what --initial-cluster takes, for its errors.
const initialClusterForm = "want name=https://host:2380[,name=https://host:2380...], as etcd's --initial-cluster"

// redactPeer hides whatever stands between "://" and the last "@" of an
// --initial-cluster entry or peer URL: a peer URL holds no user info, so
// anything there is a credential, even one with "/", "?" or "#" in it
// (which etcdconn.RedactUserInfo, reading a well-formed URL, would take
// for the path).
func redactPeer(v string) string {
	scheme, rest, ok := strings.Cut(v, "://")
	if !ok {
		return etcdconn.RedactUserInfo(v)
	}
	if at := strings.LastIndex(rest, "@"); at >= 0 {
		return scheme + "://REDACTED" + rest[at:]
	}
	return v
}

// checkInitialClusterEntries checks each comma-separated entry of
// --initial-cluster, so that a mistake is named by its entry and what is
// wrong with it, not by the URL parser's raw error: name=URL, the URL
// http(s)://host:port with nothing after the port.
func checkInitialClusterEntries(s string) error {
	for i, raw := range strings.Split(s, ",") {
		entry := redactPeer(strings.TrimSpace(raw))
		bad := func(why string) error {
			return fmt.Errorf("--initial-cluster: entry %d %q: %s; %s", i+1, entry, why, initialClusterForm)
		}
		name, peer, ok := strings.Cut(strings.TrimSpace(raw), "=")
		switch {
		case entry == "":
			return bad("empty (a stray comma?)")
		case !ok:
			return bad("no \"=\" between the member's name and its peer URL")
		case strings.TrimSpace(name) == "":
			return bad("no member name before \"=\"")
		case peer == "":
			return bad("no peer URL after \"=\"")
		}
		shown := redactPeer(peer)
		scheme, rest, ok := strings.Cut(peer, "://")
		if !ok {
			return bad(fmt.Sprintf("peer URL %q has no scheme (https:// or http://)", shown))
		}
		if scheme != "http" && scheme != "https" {
			return bad(fmt.Sprintf("peer URL %q: scheme %q (want https or http)", shown, scheme))
		}
		u, err := url.Parse(peer)
		if err != nil || strings.ContainsAny(peer, " \t") {
			return bad(fmt.Sprintf("peer URL %q is not a URL", shown))
		}
		switch {
		case u.User != nil:
			return bad("the peer URL holds user info")
		case u.Hostname() == "":
			return bad(fmt.Sprintf("peer URL %q has no host", shown))
		case u.Port() == "":
			return bad(fmt.Sprintf("peer URL %q has no port (etcd's peer port is 2380)", shown))
		case strings.TrimPrefix(rest, u.Host) != "":
			return bad(fmt.Sprintf("peer URL %q has something after the port (a path, even \"/\", a query or another URL?)", shown))
		}
		if n, err := strconv.Atoi(u.Port()); err != nil || n < 1 || n > 65535 {
			return bad(fmt.Sprintf("peer URL %q: port %q is not a port (1-65535)", shown, u.Port()))
		}
	}
	return nil
}

func parseInitialCluster(s string) (*parsedCluster, error) {
	if strings.TrimSpace(s) == "" {
		return nil, errors.New("--initial-cluster is required (name=peerURL,...)")
	}
	if err := checkInitialClusterEntries(s); err != nil {
		return nil, err
	}
	um, err := types.NewURLsMap(s)
	if err != nil {
		return nil, fmt.Errorf("--initial-cluster %q: %w (%s)", s, err, initialClusterForm)
	}
	pc := &parsedCluster{urls: map[string][]string{}}
	for _, part := range strings.Split(s, ",") {
		name, _, _ := strings.Cut(strings.TrimSpace(part), "=")
		if name == "" {
			return nil, fmt.Errorf("--initial-cluster %q: a member has no name", s)
		}
		if err := ValidateMemberName(name); err != nil {
			return nil, fmt.Errorf("--initial-cluster: %w", err)
		}
		if !slices.Contains(pc.names, name) {
			pc.names = append(pc.names, name)
		}
	}
	for name, urls := range um {
		pc.urls[name] = urls.StringSlice()
	}
	for name, urls := range pc.urls {
		for other, ourls := range pc.urls {
			if other <= name {
				continue
			}
			for _, u := range urls {
				if slices.Contains(ourls, u) {
					return nil, fmt.Errorf("--initial-cluster: members %s and %s share the peer URL %s", name, other, u)
				}
			}
		}
	}
	return pc, nil
}

// resolve validates the targets and returns the members to restore, with
// absolute data dirs. It does not look at the file system.
func (t Targets) resolve() ([]Member, *parsedCluster, error) {
	pc, err := parseInitialCluster(t.InitialCluster)
	if err != nil {
		return nil, nil, err
	}
	names := pc.names
	if t.Name != "" {
		if err := ValidateMemberName(t.Name); err != nil {
			return nil, nil, fmt.Errorf("--name: %w", err)
		}
		if _, ok := pc.urls[t.Name]; !ok {
			return nil, nil, fmt.Errorf("--name %q is not a member of --initial-cluster (%s)", t.Name, strings.Join(pc.names, ", "))
		}
		names = []string{t.Name}
		if len(t.InitialAdvertisePeerURLs) > 0 {
			want := slices.Clone(pc.urls[t.Name])
			got, err := types.NewURLs(t.InitialAdvertisePeerURLs)
			if err != nil {
				return nil, nil, fmt.Errorf("--initial-advertise-peer-urls: %w", err)
			}
			slices.Sort(want)
			if !slices.Equal(want, got.StringSlice()) {
				return nil, nil, fmt.Errorf("--initial-advertise-peer-urls %s do not match %s's URLs in --initial-cluster (%s)",
					strings.Join(got.StringSlice(), ","), t.Name, strings.Join(want, ","))
			}
		}
	} else if len(t.InitialAdvertisePeerURLs) > 0 && len(names) > 1 {
		return nil, nil, errors.New("--initial-advertise-peer-urls needs --name: every member's peer URLs come from --initial-cluster")
	}
	if t.DataDir != "" && t.DataDirRoot != "" {
		return nil, nil, errors.New("--data-dir and --data-dir-root are exclusive")
	}
	tmpl := t.DataDir
	switch {
	case t.DataDirRoot != "":
		tmpl = filepath.Join(t.DataDirRoot, NamePlaceholder+".etcd")
	case tmpl == "":
		tmpl = NamePlaceholder + ".etcd"
	}
	if len(names) > 1 && !strings.Contains(tmpl, NamePlaceholder) {
		return nil, nil, fmt.Errorf("--data-dir %q would hold %d members: use %s in it, --data-dir-root, or --name", t.DataDir, len(names), NamePlaceholder)
	}
	var root string
	if t.DataDirRoot != "" {
		if root, err = filepath.Abs(t.DataDirRoot); err != nil {
			return nil, nil, err
		}
	}
	var out []Member
	seen := map[string]string{}
	for _, name := range names {
		dir, err := filepath.Abs(strings.ReplaceAll(tmpl, NamePlaceholder, name))
		if err != nil {
			return nil, nil, err
		}
		if root != "" && (dir == root || !within(root, dir)) {
			// Names are validated; this holds whatever they become.
			return nil, nil, fmt.Errorf("member %s: data dir %s is not inside --data-dir-root %s", name, dir, root)
		}
		if other, dup := seen[dir]; dup {
			return nil, nil, fmt.Errorf("members %s and %s would share the data dir %s", other, name, dir)
		}
		seen[dir] = name
		out = append(out, Member{Name: name, PeerURLs: pc.urls[name], DataDir: dir})
	}
	return out, pc, nil
}

// ValidateTargets checks the targets without touching the file system and
// returns the number of members in the new cluster.
func ValidateTargets(t Targets) (int, error) {
	_, pc, err := t.resolve()
	if err != nil {
		return 0, err
	}
	return len(pc.names), nil
}

// inspectDir says whether a data dir is absent, empty or not.
func inspectDir(dir string) (string, error) {
	st, err := os.Stat(dir)
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
		// ENOTDIR: an ancestor is a file; checkTarget names it.
		return DirAbsent, nil
	}
	if err != nil {
		return "", err
	}
	if !st.IsDir() {
		return "", fmt.Errorf("data dir %s is not a directory", dir)
	}
	f, err := os.Open(dir)
	if err != nil {
		return "", err
	}
	defer f.Close()
	names, err := f.Readdirnames(1)
	if len(names) > 0 {
		return DirNonEmpty, nil
	}
	if err != nil && !errors.Is(err, io.EOF) {
		return "", err
	}
	return DirEmpty, nil
}

// movedName is where a non-empty data dir is moved aside: next to it, with
// the UTC time, never replacing anything.
func movedName(dir string, now time.Time) string {
	base := dir + ".moved-" + now.UTC().Format("20060102T150405Z")
	name := base
	for i := 2; ; i++ {
		if _, err := os.Lstat(name); errors.Is(err, fs.ErrNotExist) {
			return name
		}
		name = fmt.Sprintf("%s-%d", base, i)
	}
}

// moveAside renames a non-empty data dir out of the way. It never deletes.
func moveAside(dir, to string) error {
	if _, err := os.Lstat(to); err == nil {
		return fmt.Errorf("move %s aside: %s already exists", dir, to)
	}
	if err := os.Rename(dir, to); err != nil {
		return fmt.Errorf("move %s aside to %s: %w (a mount point cannot be renamed: move its contents yourself)", dir, to, err)
	}
	return nil
}

// restoreConfig is what every member's restore shares. The snapshot has
// been through stageSnapshot: it carries the revision bump already, or,
// on the public path, bump and markCompacted are etcdutl's to apply.
type restoreConfig struct {
	snapshotPath   string
	initialCluster string
	token          string
	bump           uint64
	markCompacted  bool
	// takeOver moves the staged snapshot into the data dir instead of
	// copying it (takeOverMember), for the last member written: the run
	// owns the staged file and has no use for it after the write (a
	// drill's, a restore's).
	takeOver bool
}

// takesOver reports whether a member restored with rc takes the staged
// file over: asked to, and nothing left for etcdutl's restore to apply in
// the copy (on the public path, the bump and the compaction mark are).
func (rc restoreConfig) takesOver() bool { return rc.takeOver && rc.bump == 0 && !rc.markCompacted }

// restoreMember writes one member's data dir with etcdutl's restore code.
// It returns the parent dirs it created (deepest first), for a rollback to
// remove. On failure it removes what it wrote: the dir was absent or empty
// before.
func restoreMember(rc restoreConfig, m Member) (created []string, err error) {
	if rc.takesOver() {
		return takeOverMember(rc, m)
	}
	// Whatever is there now was not there when the dir was checked:
	// not ours to write into, nor to remove.
	if st, err := inspectDir(m.DataDir); err != nil || st != m.State {
		if err == nil {
			err = fmt.Errorf("it is %s now", st)
		}
		return nil, fmt.Errorf("data dir %s changed since it was checked (it was %s): %w; left as it is", m.DataDir, m.State, err)
	}
	missing, _, err := missingDirs(m.DataDir)
	if err != nil {
		return nil, err
	}
	if len(missing) > 0 && missing[0] == filepath.Clean(m.DataDir) {
		missing = missing[1:] // the data dir itself is removed by its state
	}
	defer func() {
		if err == nil {
			return
		}
		rollbackDataDir(m)
		removeEmptyDirs(missing)
	}()
	if err := os.MkdirAll(filepath.Dir(m.DataDir), 0o700); err != nil {
		return missing, err
	}
	return missing, snapshot.NewV3(zap.NewNop()).Restore(snapshot.RestoreConfig{
		SnapshotPath:        rc.snapshotPath,
		Name:                m.Name,
		OutputDataDir:       m.DataDir,
		PeerURLs:            m.PeerURLs,
		InitialCluster:      rc.initialCluster,
		InitialClusterToken: rc.token,
		// The file was hashed, against etcd's trailer and the manifest,
		// while it was written, and stageSnapshot has since dropped the
		// trailer and applied the revision bump (or, on the public
		// path, left both to etcdutl).
		SkipHashCheck: true,
		RevisionBump:  rc.bump,
		MarkCompacted: rc.markCompacted,
	})
}

// Buckets etcdutl's restore empties in the database it writes
// (membership.TrimMembershipFromBackend) before it adds the new members.
var trimmedBuckets = []string{"members", "members_removed"}

// takeOverMember writes a member's data dir from the staged snapshot
// without a copy of the database: a drill needs the database once in its
// scratch, not twice, and a restore of three members writes it three
// times, not four. etcdutl's restore copies the snapshot into <data
// dir>/member/snap/db, then writes the WAL and the raft snapshot, empties
// the membership buckets and adds the new members, and sets the
// consistent index and term in the meta bucket. Here it runs on a seed:
// an empty database with the staged one's buckets (a few KiB). What it
// wrote into the seed's buckets is then applied to the staged database
// the same way (the membership buckets replaced, every other key put), and
// the staged file replaces the seed: the data dir is what etcdutl writes
// from the staged file itself (TestTakeOverMatchesCopy compares the two).
//
// The work happens in a hidden dir inside the data dir, and the data dir
// gets its member/ dir by one rename at the end: until then it holds no
// member an etcd could start (a kill on the way leaves no data dir that
// looks restored with the seed's empty keyspace). The staged file moves
// into that hidden dir first, before anything is changed: when it cannot
// (another file system, or another mount of the same one: EXDEV), the
// data dir is written by etcdutl's copy instead. The staged file is the
// run's own (a drill's download, or the plaintext copy a backup hands its
// drill, or a restore's staged download); its trailer is dropped here if
// stageSnapshot left it.
func takeOverMember(rc restoreConfig, m Member) (created []string, err error) {
	// Whatever is there now was not there when the dir was checked: not
	// ours to write into, nor to remove.
	if st, err := inspectDir(m.DataDir); err != nil || st != m.State {
		if err == nil {
			err = fmt.Errorf("it is %s now", st)
		}
		return nil, fmt.Errorf("data dir %s changed since it was checked (it was %s): %w; left as it is", m.DataDir, m.State, err)
	}
	// etcd's sha256 trailer, still there on the public path, goes as
	// etcdutl's copy drops it (a database is whole pages; the trailer
	// leaves 32 bytes over a multiple of 512).
	if err := etcdinternals.DropTrailer(rc.snapshotPath); err != nil {
		return nil, err
	}
	names, err := bucketNames(rc.snapshotPath)
	if err != nil {
		return nil, fmt.Errorf("read the buckets of %s: %w", rc.snapshotPath, err)
	}
	missing, _, err := missingDirs(m.DataDir)
	if err != nil {
		return nil, err
	}
	if len(missing) > 0 && missing[0] == filepath.Clean(m.DataDir) {
		missing = missing[1:] // the data dir itself is removed by its state
	}
	if err := os.MkdirAll(m.DataDir, 0o700); err != nil {
		return missing, err
	}
	work, err := os.MkdirTemp(m.DataDir, ".etcd-recovery-take-over-")
	if err != nil {
		rollbackDataDir(m)
		return missing, err
	}
	defer func() {
		os.RemoveAll(work)
		if err != nil {
			rollbackDataDir(m)
		}
	}()
	staged := filepath.Join(work, "staged.db")
	if err := os.Rename(rc.snapshotPath, staged); err != nil {
		if errors.Is(err, syscall.EXDEV) {
			// Not here without a copy: etcdutl's, as for the others.
			os.RemoveAll(work)
			rollbackDataDir(m)
			copyRC := rc
			copyRC.takeOver = false
			return restoreMember(copyRC, m)
		}
		return missing, fmt.Errorf("member %s: move the staged database into %s: %w", m.Name, work, err)
	}
	seed := filepath.Join(work, "seed.db")
	if err := writeSeed(seed, names); err != nil {
		return missing, fmt.Errorf("seed database for the data dir of member %s: %w", m.Name, err)
	}
	seedRC := rc
	seedRC.snapshotPath, seedRC.takeOver = seed, false
	wm := m
	wm.DataDir, wm.State = filepath.Join(work, "data"), DirAbsent
	if _, err := restoreMember(seedRC, wm); err != nil {
		return missing, err
	}
	dbPath := filepath.Join(wm.DataDir, "member", "snap", "db")
	if err := applySeed(dbPath, staged); err != nil {
		return missing, fmt.Errorf("member %s: apply the restore's membership and consistent index to the staged database: %w", m.Name, err)
	}
	if err := os.Rename(staged, dbPath); err != nil {
		return missing, fmt.Errorf("member %s: move the staged database into its data dir: %w", m.Name, err)
	}
	syncDir(filepath.Dir(dbPath))
	// The data dir's member/ appears whole, or not at all.
	if err := os.Rename(filepath.Join(wm.DataDir, "member"), filepath.Join(m.DataDir, "member")); err != nil {
		return missing, fmt.Errorf("member %s: move the written member dir into %s: %w", m.Name, m.DataDir, err)
	}
	syncDir(m.DataDir)
	return missing, nil
}

// syncDir fsyncs a directory, so that a rename into it is durable.
func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
}

// rollbackDataDir removes what a failed restore wrote into m's data dir,
// which was absent or empty before.
func rollbackDataDir(m Member) {
	switch m.State {
	case DirAbsent:
		_ = os.RemoveAll(m.DataDir)
	case DirEmpty:
		entries, _ := os.ReadDir(m.DataDir)
		for _, e := range entries {
			_ = os.RemoveAll(filepath.Join(m.DataDir, e.Name()))
		}
	}
}

func openBolt(path string, readOnly bool) (*bolt.DB, error) {
	o := etcdinternals.RestoreBoltOptions()
	o.Timeout = 10 * time.Second
	o.ReadOnly = readOnly
	return bolt.Open(path, 0o600, &o)
}

// bucketNames are the top-level buckets of a database.
func bucketNames(path string) ([][]byte, error) {
	db, err := openBolt(path, true)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	var names [][]byte
	err = db.View(func(tx *bolt.Tx) error {
		return tx.ForEach(func(name []byte, _ *bolt.Bucket) error {
			names = append(names, slices.Clone(name))
			return nil
		})
	})
	return names, err
}

// writeSeed creates an empty database with the buckets names.
func writeSeed(path string, names [][]byte) error {
	_ = os.Remove(path)
	db, err := openBolt(path, false)
	if err != nil {
		return err
	}
	err = db.Update(func(tx *bolt.Tx) error {
		for _, n := range names {
			if _, err := tx.CreateBucketIfNotExists(n); err != nil {
				return err
			}
		}
		return nil
	})
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	return err
}

// applySeed applies to the database at dst what etcdutl's restore wrote
// into the seed at seed: the trimmed buckets replaced, every other key put.
func applySeed(seed, dst string) error {
	type kv struct{ k, v []byte }
	wrote := map[string][]kv{}
	var order []string
	sdb, err := openBolt(seed, true)
	if err != nil {
		return err
	}
	err = sdb.View(func(tx *bolt.Tx) error {
		return tx.ForEach(func(name []byte, b *bolt.Bucket) error {
			order = append(order, string(name))
			return b.ForEach(func(k, v []byte) error {
				if v == nil {
					return fmt.Errorf("bucket %s: nested bucket %q (etcd's buckets are flat)", name, k)
				}
				wrote[string(name)] = append(wrote[string(name)], kv{slices.Clone(k), slices.Clone(v)})
				return nil
			})
		})
	})
	sdb.Close()
	if err != nil {
		return err
	}
	db, err := openBolt(dst, false)
	if err != nil {
		return err
	}
	err = db.Update(func(tx *bolt.Tx) error {
		for _, name := range trimmedBuckets {
			if tx.Bucket([]byte(name)) == nil {
				continue
			}
			if err := tx.DeleteBucket([]byte(name)); err != nil {
				return err
			}
		}
		for _, name := range order {
			b, err := tx.CreateBucketIfNotExists([]byte(name))
			if err != nil {
				return err
			}
			for _, e := range wrote[name] {
				if err := b.Put(e.k, e.v); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	return err
}
