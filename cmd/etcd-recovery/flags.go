package main

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/armada/etcd-recovery/backup"
	"github.com/armada/etcd-recovery/fleet"
	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/etcdconn"
	"github.com/armada/etcd-recovery/internal/retention"
	"github.com/armada/etcd-recovery/internal/seal"
	"github.com/armada/etcd-recovery/internal/store"
	"github.com/armada/etcd-recovery/restore"
)

// Flags bind to options structs: each group below holds the values of its
// flags (their Destination), and a command's Action reads its options
// struct, never a flag by name. A group's flags() is called once per
// command (flags hold state: a new app builds new ones).

// globalOpts are the app's flags, given before the command.
type globalOpts struct {
	logLevel, logFormat, cpuProfile string
}

const (
	logLevelUsage  = "debug, info, warn or error (before or after the command)"
	logFormatUsage = "text (key=value) or json (before or after the command)"
	globalCategory = "GLOBAL (before or after the command)"
)

func (g *globalOpts) flags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "log-level", Value: "info", EnvVars: []string{"ETCD_RECOVERY_LOG_LEVEL"}, Usage: logLevelUsage, Destination: &g.logLevel},
		&cli.StringFlag{Name: "log-format", Value: "text", EnvVars: []string{"ETCD_RECOVERY_LOG_FORMAT"}, Usage: logFormatUsage, Destination: &g.logFormat},
		&cli.StringFlag{Name: "cpu-profile", Hidden: true, Usage: "write a CPU profile to this file (benchmarks)", TakesFile: true, Destination: &g.cpuProfile},
	}
}

// commandFlags are the global flags as every command takes them after
// its name (`backup --log-format json`, as a Job's args are easily
// written): without a Destination (the app's flag keeps its value and
// environment variable), applied by applyGlobals when given.
func (g *globalOpts) commandFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "log-level", Value: "info", Usage: logLevelUsage, Category: globalCategory},
		&cli.StringFlag{Name: "log-format", Value: "text", Usage: logFormatUsage, Category: globalCategory},
	}
}

// applyGlobals sets the global options from the global flags given after
// a command (the innermost wins: `etcd-recovery --log-level info backup
// --log-level debug` logs at debug).
func applyGlobals(g *globalOpts, action cli.ActionFunc) cli.ActionFunc {
	return func(c *cli.Context) error {
		lineage := c.Lineage()
		for i := len(lineage) - 1; i >= 0; i-- {
			lc := lineage[i]
			if lc.Command == nil {
				continue
			}
			for _, n := range lc.LocalFlagNames() {
				switch n {
				case "log-level":
					g.logLevel = lc.String(n)
				case "log-format":
					g.logFormat = lc.String(n)
				}
			}
		}
		return action(c)
	}
}

// logger builds the structured key=value logger on stderr.
func (g *globalOpts) logger(c *cli.Context) (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(g.logLevel)); err != nil {
		return nil, usagef("--log-level: %v", err)
	}
	hopts := &slog.HandlerOptions{Level: level}
	w := c.App.ErrWriter
	switch g.logFormat {
	case "text":
		return slog.New(slog.NewTextHandler(w, hopts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, hopts)), nil
	}
	return nil, usagef("--log-format %q: want text or json", g.logFormat)
}

// etcdOpts are etcdctl's connection flags, with etcdctl's environment
// variables.
type etcdOpts struct {
	endpoints         cli.StringSlice
	cacert, cert, key string
	dialTimeout       time.Duration
}

// flags are the connection flags; without defaultEndpoint, --endpoints
// has no default (restore: no --endpoints means no survivor snapshot).
func (o *etcdOpts) flags(defaultEndpoint bool) []cli.Flag {
	var def *cli.StringSlice
	if defaultEndpoint {
		def = cli.NewStringSlice("127.0.0.1:2379")
	}
	return []cli.Flag{
		&cli.StringSliceFlag{Name: "endpoints", EnvVars: []string{"ETCDCTL_ENDPOINTS"}, Value: def, Destination: &o.endpoints, Usage: "etcd client endpoints (comma-separated) of the cluster acted on (restore: the old cluster's, no default: a member that answers is snapshotted first)"},
		&cli.StringFlag{Name: "cacert", EnvVars: []string{"ETCDCTL_CACERT"}, Usage: "CA bundle to verify etcd's server certificates", TakesFile: true, Destination: &o.cacert},
		&cli.StringFlag{Name: "cert", EnvVars: []string{"ETCDCTL_CERT"}, Usage: "client certificate for mutual TLS", TakesFile: true, Destination: &o.cert},
		&cli.StringFlag{Name: "key", EnvVars: []string{"ETCDCTL_KEY"}, Usage: "client key for mutual TLS", TakesFile: true, Destination: &o.key},
		o.dialTimeoutFlag(),
	}
}

func (o *etcdOpts) dialTimeoutFlag() cli.Flag {
	return &cli.DurationFlag{Name: "dial-timeout", EnvVars: []string{"ETCDCTL_DIAL_TIMEOUT"}, Value: 5 * time.Second, Usage: "dial timeout per endpoint", Destination: &o.dialTimeout}
}

// config is the connection to --endpoints, validated (usage errors).
func (o *etcdOpts) config() (etcdconn.Config, error) {
	cfg := o.configFor(o.endpoints.Value())
	if err := cfg.Validate(); err != nil {
		return cfg, asUsage(err)
	}
	return cfg, nil
}

// configFor is the etcd connection for the given endpoints with the
// command's TLS flags; the package that uses it validates it.
func (o *etcdOpts) configFor(endpoints []string) etcdconn.Config {
	return etcdconn.Config{
		Endpoints:   endpoints,
		CACert:      o.cacert,
		Cert:        o.cert,
		Key:         o.key,
		DialTimeout: o.dialTimeout,
	}
}

// positive is a duration flag's value, for requirePositive.
type positive struct {
	flag  string
	value time.Duration
}

// requirePositive refuses a zero or negative value of each duration flag:
// on the command line they have non-zero defaults, while in the packages'
// options zero means "the default", so a 0 typed by hand is a mistake the
// packages cannot see.
func requirePositive(command string, flags ...positive) error {
	for _, f := range flags {
		if f.value <= 0 {
			return usagef("%s: --%s must be positive", command, f.flag)
		}
	}
	return nil
}

// storeOpts configure the object store (env.openStore). Where the store
// is comes either from --store (a store URL: the backend by its scheme,
// store.ParseURL) or from the COS flags (--bucket, --prefix,
// --cos-endpoint, --cos-region, --cos-ca-file), which are written as the
// same URL: one path opens every store. Secrets have no flags: they come
// from the environment or a mounted directory, never argv (and never the
// URL).
type storeOpts struct {
	url                                                               string
	endpoint, region, bucket, prefix, credsDir, caFile, minThroughput string
	maxRetries                                                        int
	stallTimeout                                                      time.Duration
}

// secondStoreOpts configure the second site (docs/second-site.md): an
// independent bucket, as a store URL (--second-store, store.ParseURL), and
// its own credential, which no primary component holds: a mounted secret
// (--second-credentials-dir) or the SECOND_-prefixed variables
// (SECOND_COS_ACCESS_KEY_ID and SECOND_COS_SECRET_ACCESS_KEY, or
// SECOND_COS_API_KEY). The primary's COS_* variables and secret are never
// used for it, nor its variables for the primary.
type secondStoreOpts struct {
	url, credsDir string
}

// Environment variables of the second site.
const (
	envSecondStore    = "ETCD_RECOVERY_SECOND_STORE"
	envSecondCredsDir = "SECOND_COS_CREDENTIALS_DIR"
	// secondEnvPrefix prefixes the backend's credential variables for the
	// second site: COS_ACCESS_KEY_ID is read as SECOND_COS_ACCESS_KEY_ID.
	secondEnvPrefix = "SECOND_"
)

func (o *secondStoreOpts) flags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "second-store", EnvVars: []string{envSecondStore}, Destination: &o.url,
			Usage: "the second site as a store URL, SCHEME://BUCKET[/PREFIX][?endpoint=URL&region=R&ca-file=PATH]: an independent bucket in another region; never with credentials in it"},
		&cli.StringFlag{Name: "second-credentials-dir", EnvVars: []string{envSecondCredsDir}, TakesFile: true, Destination: &o.credsDir,
			Usage: "the second site's mounted credentials secret (else SECOND_COS_ACCESS_KEY_ID/SECOND_COS_SECRET_ACCESS_KEY or SECOND_COS_API_KEY)"},
	}
}

// configured reports whether a second site is given.
func (o *secondStoreOpts) configured() bool { return o.url != "" }

// secondGetenv reads the second site's credential variables: key with
// secondEnvPrefix.
func secondGetenv(key string) string { return os.Getenv(secondEnvPrefix + key) }

// envStore is --store's environment variable.
const envStore = "ETCD_RECOVERY_STORE"

func (o *storeOpts) flags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "store", EnvVars: []string{envStore}, Destination: &o.url,
			Usage: "the object store as a URL, SCHEME://BUCKET[/PREFIX][?endpoint=URL&region=R&ca-file=PATH] (cos:// or s3://): " +
				"instead of --bucket, --prefix, --cos-endpoint, --cos-region and --cos-ca-file; never with credentials in it"},
		&cli.StringFlag{Name: "cos-endpoint", EnvVars: []string{"COS_ENDPOINT"}, Usage: "COS (S3) endpoint URL", Destination: &o.endpoint},
		&cli.StringFlag{Name: "cos-region", EnvVars: []string{"COS_REGION"}, Value: "us-standard", Usage: "COS region / location constraint", Destination: &o.region},
		&cli.StringFlag{Name: "bucket", EnvVars: []string{"COS_BUCKET"}, Usage: "bucket holding the backups", Destination: &o.bucket},
		&cli.StringFlag{Name: "prefix", EnvVars: []string{"COS_PREFIX"}, Usage: "key prefix inside the bucket", Destination: &o.prefix},
		&cli.StringFlag{Name: "cos-credentials-dir", EnvVars: []string{"COS_CREDENTIALS_DIR"}, Usage: "mounted cos-credentials secret (else COS_ACCESS_KEY_ID/COS_SECRET_ACCESS_KEY or COS_API_KEY)", TakesFile: true, Destination: &o.credsDir},
		&cli.StringFlag{Name: "cos-ca-file", EnvVars: []string{"COS_CA_FILE"}, Usage: "extra CA bundle for the COS endpoint", TakesFile: true, Destination: &o.caFile},
		&cli.IntFlag{Name: "cos-max-retries", EnvVars: []string{"COS_MAX_RETRIES"}, Value: 5, Usage: "retries per request on transient errors (5xx, resets, timeouts)", Destination: &o.maxRetries},
		&cli.DurationFlag{Name: "cos-stall-timeout", EnvVars: []string{"COS_STALL_TIMEOUT"}, Value: store.DefaultStallTimeout, Usage: "abort a store call (or an upload or download) that makes no progress for this long: \"object store stalled\"", Destination: &o.stallTimeout},
		&cli.StringFlag{Name: "cos-min-throughput", EnvVars: []string{"COS_MIN_THROUGHPUT"}, Value: store.DefaultMinThroughput, Destination: &o.minThroughput,
			Usage: "abort a store call that moves fewer bytes than SIZE in any WINDOW of its transfers (SIZE/WINDOW, e.g. 64KiB/60s; off: no minimum): " +
				"a store that trickles is \"object store stalled (throughput ... below ...)\""},
	}
}

// locationFlags are the flags --store replaces: each one is a part of the
// store URL (storeOpts.location).
var locationFlags = []struct{ flag, env string }{
	{"bucket", "COS_BUCKET"}, {"prefix", "COS_PREFIX"}, {"cos-endpoint", "COS_ENDPOINT"}, {"cos-region", "COS_REGION"}, {"cos-ca-file", "COS_CA_FILE"},
}

// cosKind is the backend the COS flags configure: the scheme of the URL
// they are written as.
const cosKind = "cos"

// configured reports whether a store is given (--store, or --bucket):
// inspect and serve run without one.
func (o *storeOpts) configured() bool { return o.url != "" || o.bucket != "" }

// location is the store's location, checked (usage errors: exit 4): the
// URL of --store, or the COS flags written as a URL, parsed by
// store.ParseURL either way. --store with any flag it replaces is a usage
// error naming both: which one was meant cannot be told.
func (o *storeOpts) location(c *cli.Context) (string, store.Config, error) {
	raw, flag := o.url, "--store"
	if raw != "" {
		for _, f := range locationFlags {
			// An empty variable is no value (a manifest's COS_PREFIX: "").
			if c.IsSet(f.flag) && c.String(f.flag) != "" {
				return "", store.Config{}, usagef("--store (%s) and --%s (%s): --store names the bucket, prefix, endpoint, region and CA file; "+
					"give the store one way or the other", envStore, f.flag, f.env)
			}
		}
	} else {
		if strings.ContainsAny(o.bucket, "/:?#@%") {
			// It would move into the URL's prefix, port or query: refused
			// rather than read back as another location.
			return "", store.Config{}, usagef("--bucket %q: not a bucket name (no \"/\", \":\", \"?\", \"#\", \"@\" or \"%%\")", o.bucket)
		}
		raw, flag = store.Config{Kind: cosKind, Bucket: o.bucket, Prefix: o.prefix, Endpoint: o.endpoint, Region: o.region, CAFile: o.caFile}.URL(), ""
	}
	cfg, err := store.ParseURL(raw)
	switch {
	case err != nil && flag != "":
		return "", store.Config{}, usagef("%s: %v", flag, err)
	case err != nil:
		// The flags' own values: name them, not a URL the user never
		// wrote.
		return "", store.Config{}, usagef("--bucket %q, --prefix %q: %v", o.bucket, o.prefix, err)
	}
	// A prefix that writes keys the store cannot list back, or an endpoint
	// that is not a URL, is a usage error naming the flag and the value.
	prefixFlag, endpointFlag := "--prefix", "--cos-endpoint"
	if flag != "" {
		prefixFlag, endpointFlag = "--store's prefix", "--store's endpoint="
	}
	if _, err := catalog.ValidatePrefix(cfg.Prefix); err != nil {
		return "", store.Config{}, usagef("%s: %v", prefixFlag, err)
	}
	if err := validateEndpoint(endpointFlag, cfg.Endpoint); err != nil {
		return "", store.Config{}, asUsage(err)
	}
	return raw, cfg, nil
}

// given is the store's bucket and endpoint as given, before openStore
// checks the rest (restore --via etcd-operator tells the operator both):
// --store's (its errors returned), else the flags' as they are.
func (o *storeOpts) given(c *cli.Context) (store.Config, error) {
	if o.url == "" {
		return store.Config{Bucket: o.bucket, Endpoint: o.endpoint}, nil
	}
	_, cfg, err := o.location(c)
	return cfg, err
}

// where is "bucket/prefix" as inspect shows it, once openStore has
// opened the store (its location checked).
func (o *storeOpts) where(c *cli.Context, layout catalog.Layout) string {
	_, cfg, _ := o.location(c)
	return strings.TrimRight(cfg.Bucket+"/"+strings.Trim(layout.Prefix, "/"), "/")
}

// validateEndpoint accepts http(s)://host[:port] (an optional trailing
// slash) or a bare host[:port], which the store reaches over https.
// Anything else (another scheme, a path, user info, spaces) is refused with
// the value named, after flag (--cos-endpoint, or --store's endpoint=).
// The empty endpoint is left to the store's own check, which names the
// flag and the variable.
func validateEndpoint(flag, ep string) error {
	if ep == "" {
		return nil
	}
	bad := func(why string) error {
		return fmt.Errorf("%s %q: %s: want https://host[:port] (http:// only for local test servers)", flag, etcdconn.RedactUserInfo(ep), why)
	}
	raw := ep
	if scheme, _, ok := strings.Cut(ep, "://"); ok {
		if scheme != "http" && scheme != "https" {
			return bad(fmt.Sprintf("unknown scheme %q", scheme))
		}
	} else {
		raw = "https://" + ep
	}
	if strings.ContainsAny(ep, " \t\r\n") {
		return bad("contains white space")
	}
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		return bad("not a URL")
	case u.Host == "" || u.Hostname() == "":
		return bad("no host")
	case u.User != nil:
		return bad("user info is not allowed (credentials come from --cos-credentials-dir or the environment)")
	case u.Path != "" && u.Path != "/":
		return bad("a path is not allowed (the bucket and the key prefix are the store's: --bucket and --prefix, or --store)")
	case u.RawQuery != "" || u.Fragment != "" || strings.ContainsAny(ep, "?#"):
		return bad("a query or fragment is not allowed")
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return bad(fmt.Sprintf("invalid port %q", p))
		}
	}
	return nil
}

func clusterIDFlag(dest *string) cli.Flag {
	return &cli.StringFlag{Name: "cluster-id", EnvVars: []string{"ETCD_RECOVERY_CLUSTER_ID"}, Usage: "cluster id: the folder of its backups in the bucket", Destination: dest}
}

func outputFlag(dest *string) cli.Flag {
	return &cli.StringFlag{Name: "output", Aliases: []string{"o"}, Value: "table", Usage: "table (fits 120 columns; explanations below it), wide (every column), json (all the data) or yaml (the same data as json)", Destination: dest}
}

func concat(groups ...[]cli.Flag) []cli.Flag {
	var out []cli.Flag
	for _, g := range groups {
		out = append(out, g...)
	}
	return out
}

// kubeOpts select the Kubernetes API server and namespace of the
// EtcdClusters (backup --all / --cluster, ...): env.kube.
type kubeOpts struct {
	kubeconfig, namespace string
}

func (o *kubeOpts) flags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "kubeconfig", Usage: "kubeconfig file (default $KUBECONFIG, a list as kubectl reads it, else ~/.kube/config; in a pod, its service account)", TakesFile: true, Destination: &o.kubeconfig},
		&cli.StringFlag{Name: "namespace", Aliases: []string{"n"}, EnvVars: []string{"POD_NAMESPACE"}, Usage: "namespace of the EtcdClusters (default: the kubeconfig context's, in a pod its own)", Destination: &o.namespace},
	}
}

// Flags that appear on several commands are built here, once: a flag name
// means one thing, with one usage text and one default, on every command
// (TestFlagMeanings walks them all).

// defaultTimeout is the overall deadline of list, prune, delete and a
// restore dry run: long enough for a listing of thousands of backups and
// a dry run's download of an 8 GiB snapshot on a slow link; a store that
// stops answering fails sooner, at --cos-stall-timeout.
const defaultTimeout = 10 * time.Minute

const timeoutUsage = "overall deadline of the run: when it passes, the run stops and says at which step " +
	"(restore: a dry run only; backup: default 3h30m, every step, the drill and prune included)"

func timeoutFlag(dest *time.Duration) cli.Flag {
	return &cli.DurationFlag{Name: "timeout", Value: defaultTimeout, Usage: timeoutUsage, Destination: dest}
}

// defaultBackupTimeout is backup's overall deadline: a namespace's
// backups (about 100 clusters, 4 at a time: well under 1 h) and a third
// of them drilled (about 75 min for 1 GiB databases) fit with room, and
// the run still ends, its uploads aborted and its Events recorded, before
// the CronJob's activeDeadlineSeconds (4 h) kills the pod.
const defaultBackupTimeout = 3*time.Hour + 30*time.Minute

func backupTimeoutFlag(dest *time.Duration) cli.Flag {
	return &cli.DurationFlag{Name: "timeout", Value: defaultBackupTimeout, Usage: timeoutUsage, Destination: dest}
}

func probeTimeoutFlag(dest *time.Duration) cli.Flag {
	return &cli.DurationFlag{Name: "probe-timeout", Value: defaultProbeTimeout, Destination: dest,
		Usage: "bound on each probe of a member (inspect: the whole run takes at most twice this)"}
}

func verifyTimeoutFlag(dest *time.Duration) cli.Flag {
	return &cli.DurationFlag{Name: "verify-timeout", Value: defaultVerifyTimeout, Destination: dest,
		Usage: "how long to wait for the restored members to be healthy before they are verified"}
}

// parallelFlag is how many EtcdClusters a command handles at once: def
// is its default (backup, inspect and serve: defaultParallel; drill:
// defaultDrillParallel), which the help prints after the one usage text.
func parallelFlag(dest *int, def int) cli.Flag {
	return &cli.IntFlag{Name: "parallel", Value: def, Destination: dest,
		Usage: "with --all/--cluster: EtcdClusters handled at once (backup, inspect: each backup holds about 30 MiB of stream " +
			"buffers, so the default fits the CronJob's memory limit with room; drill: each drill runs an etcd and needs " +
			"twice the database's size in --temp-dir)"}
}

// defaultParallel is --parallel of backup, inspect and serve;
// defaultDrillParallel is drill's.
const (
	defaultParallel      = fleet.DefaultParallel
	defaultDrillParallel = 1
)

func tempDirFlag(dest *string) cli.Flag {
	return &cli.StringFlag{Name: "temp-dir", TakesFile: true, Destination: dest,
		Usage: "where a downloaded snapshot is staged while it is verified; it needs room for the whole database, checked " +
			"before the download (default $TMPDIR, else /tmp; a manual restore: next to the data dirs)"}
}

func dryRunFlag(dest *bool) cli.Flag {
	return &cli.BoolFlag{Name: "dry-run", Usage: "print the plan and run every check that changes nothing; change nothing", Destination: dest}
}

const backupFlagUsage = "a backup, by the name list prints (restore, restore v2: instead of the one restore would choose; " +
	"restore verify: the one restored from; delete: repeatable)"

func backupFlag(dest *string) cli.Flag {
	return &cli.StringFlag{Name: "backup", Usage: backupFlagUsage, Destination: dest}
}

const clusterFlagUsage = "an EtcdCluster of the namespace, by name (found through Kubernetes; also its cluster id in COS; backup, restore-all: repeatable)"

func clusterFlag(dest *string) cli.Flag {
	return &cli.StringFlag{Name: "cluster", Usage: clusterFlagUsage, Destination: dest}
}

const allFlagUsage = "every EtcdCluster of the namespace, one row each"

func allFlag(dest *bool) cli.Flag {
	return &cli.BoolFlag{Name: "all", Usage: allFlagUsage, Destination: dest}
}

// allClusterIDsUsage is --all-cluster-ids: every cluster id in the store,
// no Kubernetes (--all is always the namespace's EtcdClusters).
const allClusterIDsUsage = "every cluster id under --prefix, instead of --cluster-id: found by listing the store, no Kubernetes " +
	"(with a prefix shared by several namespaces, all of them; where a command has --all, that is every EtcdCluster of the namespace)"

func allClusterIDsFlag(dest *bool) cli.Flag {
	return &cli.BoolFlag{Name: "all-cluster-ids", Usage: allClusterIDsUsage, Destination: dest}
}

// noRecordFlag is "don't record" on every command that records a result
// (drill: drill.json; journal prove: its proof): one name.
func noRecordFlag(dest *bool) cli.Flag {
	return &cli.BoolFlag{Name: "no-record", Destination: dest,
		Usage: "run, and print the result, but do not record it (drill: drill.json next to the backup; journal prove: the proof under _journal/<cluster>/proofs/)"}
}

// allWithoutNamespace is the old meaning of drill --all and journal
// prove --all given without --namespace or --kubeconfig (every cluster id
// under --prefix), kept working as --all-cluster-ids with a deprecation
// note: --all means every EtcdCluster of the namespace on every command.
func allWithoutNamespace(c *cli.Context, command string, all, allClusterIDs *bool) error {
	if *all && *allClusterIDs {
		return usagef("%s: --all (every EtcdCluster of the namespace) and --all-cluster-ids (every cluster id under --prefix): give one", command)
	}
	if *all && !c.IsSet("namespace") && !c.IsSet("kubeconfig") {
		fmt.Fprintf(c.App.ErrWriter, "etcd-recovery: %s: --all without --namespace or --kubeconfig is deprecated, use --all-cluster-ids "+
			"(same meaning here: every cluster id under --prefix; --all means every EtcdCluster of the namespace)\n", command)
		*all, *allClusterIDs = false, true
	}
	return nil
}

func bumpRevisionFlag(dest *uint64) cli.Flag {
	return &cli.Uint64Flag{Name: "bump-revision", Value: restore.DefaultBumpRevision, Destination: dest,
		Usage: "the revision bump (etcdutl's --bump-revision): restore adds it, restore verify expects it " +
			"(restore: 0 with --mark-compacted=false to skip)"}
}

// deprecated is an old flag spelling kept working, hidden, for scripts:
// it sets the new flag and says so on stderr.
type deprecated struct {
	cmd, old, new string
	kind          string // duration, int or bool
}

var deprecatedFlags = []deprecated{
	{"inspect", "timeout", "probe-timeout", "duration"},
	{"restore verify", "timeout", "verify-timeout", "duration"},
	{"restore", "parallel", "parallel-data-dirs", "int"},
	{"delete", "force", "allow-newest", "bool"},
	{"prune", "all", "all-cluster-ids", "bool"},
	{"journal prove", "dry-run", "no-record", "bool"},
}

// flag is the hidden old flag (a new one per app: flags hold state).
func (d deprecated) flag() cli.Flag {
	usage := "deprecated: use --" + d.new
	switch d.kind {
	case "duration":
		return &cli.DurationFlag{Name: d.old, Hidden: true, Usage: usage}
	case "int":
		return &cli.IntFlag{Name: d.old, Hidden: true, Usage: usage}
	}
	return &cli.BoolFlag{Name: d.old, Hidden: true, Usage: usage}
}

func deprecatedFlagsOf(cmd string) []cli.Flag {
	var out []cli.Flag
	for _, d := range deprecatedFlags {
		if d.cmd == cmd {
			out = append(out, d.flag())
		}
	}
	return out
}

// applyDeprecated moves the value of an old spelling to the new flag.
func applyDeprecated(name string, action cli.ActionFunc) cli.ActionFunc {
	return func(c *cli.Context) error {
		for _, d := range deprecatedFlags {
			if d.cmd != name || !c.IsSet(d.old) {
				continue
			}
			if c.IsSet(d.new) {
				return usagef("%s: --%s and --%s: --%s is the old spelling of --%s; pass only --%s", name, d.old, d.new, d.old, d.new, d.new)
			}
			if d.old == "all" && (os.Getenv("POD_NAMESPACE") != "" || c.IsSet("namespace")) {
				// Elsewhere --all is the namespace's EtcdClusters: in a
				// namespace, the old bucket-wide spelling is not guessed.
				return usagef("%s: --all is the old spelling of --%s (every cluster id under --prefix, whatever namespace it belongs to), "+
					"not the namespace's EtcdClusters: pass --%s if that is what you mean", name, d.new, d.new)
			}
			if err := c.Set(d.new, fmt.Sprint(c.Value(d.old))); err != nil {
				return usagef("%s: --%s: %v", name, d.old, err)
			}
			fmt.Fprintf(c.App.ErrWriter, "etcd-recovery: %s: --%s is deprecated, use --%s (same meaning)\n", name, d.old, d.new)
		}
		return action(c)
	}
}

// Encryption (age). Backup jobs hold recipients (public keys) only;
// the identity (private key) is loaded only by the commands that decrypt:
// restore, restore v2, restore verify --backup and drill, and by list,
// which opens each encrypted backup's age header with it.

// encryptionOpts are backup's (and restore's, for the survivor snapshot):
// the recipients and --require-encryption.
type encryptionOpts struct {
	encryptTo         cli.StringSlice
	recipientsFile    string
	requireEncryption bool
}

func (o *encryptionOpts) flags() []cli.Flag {
	return []cli.Flag{
		&cli.StringSliceFlag{Name: "encrypt-to", EnvVars: []string{seal.EnvEncryptTo}, Destination: &o.encryptTo,
			Usage: "encrypt the backup's objects (age) to this X25519 recipient, age1… (repeatable; the variable may hold several, comma- or space-separated); the manifest stays plaintext"},
		&cli.StringFlag{Name: "recipients-file", EnvVars: []string{seal.EnvRecipientsFile}, TakesFile: true, Destination: &o.recipientsFile,
			Usage: "file of age recipients, one age1… per line, '#' comments allowed (added to --encrypt-to)"},
		&cli.BoolFlag{Name: "require-encryption", EnvVars: []string{seal.EnvRequireEncryption}, Destination: &o.requireEncryption,
			Usage: "refuse (exit 4) to write a backup without any recipient: a misconfigured job fails instead of writing plaintext"},
	}
}

// escrowRecipientFlag is --escrow-recipient (backup, and the journal's
// gap backups): the break-glass recipients of the escrow.
func escrowRecipientFlag(dest *cli.StringSlice) cli.Flag {
	return &cli.StringSliceFlag{Name: "escrow-recipient", EnvVars: []string{backup.EnvEscrowRecipient}, Destination: dest,
		Usage: "seal the escrow (the EtcdCluster, its TLS secrets and Services, kept with the backups) to this age recipient (age1…) or recipients file instead of the backup's recipients (break-glass; repeatable or comma-separated); without it and without --encrypt-to there is no escrow"}
}

// recipients loads --encrypt-to and --recipients-file. A bad value or
// file is a usage error (exit 4) naming the file and line.
func (o *encryptionOpts) recipients(c *cli.Context) (seal.Recipients, error) {
	var files []string
	if o.recipientsFile != "" {
		files = append(files, o.recipientsFile)
	}
	rs, err := seal.LoadRecipients(o.encryptTo.Value(), files)
	if err != nil {
		return seal.Recipients{}, usagef("%s: %v", c.Command.Name, err)
	}
	return rs, nil
}

// identityFileFlag is the age identity file of the commands that decrypt
// (restore, restore v2, restore verify --backup, drill) and of list (the
// header check): one name, one meaning on every command.
func identityFileFlag(dest *string) cli.Flag {
	return &cli.StringFlag{Name: "identity-file", EnvVars: []string{seal.EnvIdentityFile}, TakesFile: true, Destination: dest,
		Usage: "age identity file (AGE-SECRET-KEY-1… lines, as age-keygen writes it; not readable by others) to decrypt encrypted backups; " +
			"only the toolkit pod mounts it, never the backup CronJob"}
}

// loadIdentity loads --identity-file (path): nil without one. A bad file
// is a usage error (exit 4) naming the file and line, never its content.
func loadIdentity(c *cli.Context, path string) (*seal.Identities, error) {
	if path == "" {
		return nil, nil
	}
	if path == os.Getenv(seal.EnvIdentityFile) {
		// From the environment: the toolkit names the optional secret's
		// mount, which is empty until the namespace has a key. No file
		// there is no identity (an encrypted backup then fails naming
		// its recipients); a file that is there but bad is an error.
		if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
	}
	ids, err := seal.ReadIdentityFile(path)
	if err != nil {
		return nil, usagef("%s: --identity-file: %v", c.Command.Name, err)
	}
	return ids, nil
}

// identityOf loads --identity-file (nil without one) and logs the
// warning a group-readable file gets.
func (e *env) identityOf(path string) (*seal.Identities, error) {
	ids, err := loadIdentity(e.c, path)
	if err != nil {
		return nil, err
	}
	if ids != nil && ids.Warning != "" {
		e.log.Warn("identity file accepted with a remark", "command", e.c.Command.FullName(), "identity_file", path, "warning", ids.Warning)
	}
	return ids, nil
}

// identityAndRecipients are --identity-file's identities (identityOf) and
// the recipients of enc, which what the command writes (restore's survivor
// snapshot) is encrypted to, in that order.
func (e *env) identityAndRecipients(identityFile string, enc *encryptionOpts) (*seal.Identities, seal.Recipients, error) {
	ids, err := e.identityOf(identityFile)
	if err != nil {
		return nil, seal.Recipients{}, err
	}
	rs, err := enc.recipients(e.c)
	if err != nil {
		return nil, seal.Recipients{}, err
	}
	return ids, rs, nil
}

// lockOpts are the object-lock flags of backup (and prune's re-lock):
// how backups are locked on a bucket with object lock
// (internal/catalog/lock.go, docs/immutable.md).
type lockOpts struct {
	mode           string
	period, margin time.Duration
}

func (o *lockOpts) flags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "lock-mode", EnvVars: []string{"ETCD_RECOVERY_LOCK_MODE"}, Destination: &o.mode,
			Usage: "object lock of the backups: off (default), governance or compliance (each object with a retention derived from the retention policy; needs s3:PutObjectRetention), or bucket-default (the bucket's default retention); a bucket without object lock is refused"},
		&cli.DurationFlag{Name: "lock-period", EnvVars: []string{"ETCD_RECOVERY_LOCK_PERIOD"}, Value: retention.DefaultLockPeriod, Destination: &o.period,
			Usage: "with --lock-mode: the time between two scheduled backups (the CronJob's period); a scheduled backup is locked for --keep-recent of them, less --lock-margin"},
		&cli.DurationFlag{Name: "lock-margin", EnvVars: []string{"ETCD_RECOVERY_LOCK_MARGIN"}, Value: retention.DefaultLockMargin, Destination: &o.margin,
			Usage: "with --lock-mode: taken off every lock's end (clock skew, a scheduled run's late start), so that no backup retention deletes is still locked"},
	}
}

// policy is the flags' retention.LockPolicy (usage errors: exit 4).
func (o *lockOpts) policy(command string) (retention.LockPolicy, error) {
	mode, err := catalog.ParseLockMode(o.mode)
	if err != nil {
		return retention.LockPolicy{}, usagef("%s: --lock-mode: %v", command, err)
	}
	if o.period <= 0 || o.margin < 0 || o.margin >= o.period {
		return retention.LockPolicy{}, usagef("%s: --lock-period %s and --lock-margin %s: want a positive period longer than the margin", command, o.period, o.margin)
	}
	return retention.LockPolicy{Mode: mode, Period: o.period, Margin: o.margin}, nil
}
