package main

import (
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/armada/etcd-recovery/fleet"
	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/etcdconn"
	"github.com/armada/etcd-recovery/internal/seal"
	"github.com/armada/etcd-recovery/internal/store"
	"github.com/armada/etcd-recovery/internal/store/cos"
	"github.com/armada/etcd-recovery/kube"
	"github.com/armada/etcd-recovery/restore"
)

// etcdFlags are etcdctl's connection flags, with etcdctl's environment
// variables.
func etcdFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringSliceFlag{Name: "endpoints", EnvVars: []string{"ETCDCTL_ENDPOINTS"}, Value: cli.NewStringSlice("127.0.0.1:2379"), Usage: "etcd client endpoints (comma-separated) of the cluster acted on (restore: the old cluster's, no default: a member that answers is snapshotted first)"},
		&cli.StringFlag{Name: "cacert", EnvVars: []string{"ETCDCTL_CACERT"}, Usage: "CA bundle to verify etcd's server certificates", TakesFile: true},
		&cli.StringFlag{Name: "cert", EnvVars: []string{"ETCDCTL_CERT"}, Usage: "client certificate for mutual TLS", TakesFile: true},
		&cli.StringFlag{Name: "key", EnvVars: []string{"ETCDCTL_KEY"}, Usage: "client key for mutual TLS", TakesFile: true},
		&cli.DurationFlag{Name: "dial-timeout", EnvVars: []string{"ETCDCTL_DIAL_TIMEOUT"}, Value: 5 * time.Second, Usage: "dial timeout per endpoint"},
	}
}

func etcdConfig(c *cli.Context) (etcdconn.Config, error) {
	cfg := etcdconn.Config{
		Endpoints:   c.StringSlice("endpoints"),
		CACert:      c.String("cacert"),
		Cert:        c.String("cert"),
		Key:         c.String("key"),
		DialTimeout: c.Duration("dial-timeout"),
	}
	if err := cfg.Validate(); err != nil {
		return cfg, asUsage(err)
	}
	return cfg, nil
}

// requirePositive refuses a zero or negative value of each named duration
// flag: on the command line they have non-zero defaults, while in the
// packages' options zero means "the default", so a 0 typed by hand is a
// mistake the packages cannot see.
func requirePositive(c *cli.Context, command string, flags ...string) error {
	for _, f := range flags {
		if c.Duration(f) <= 0 {
			return usagef("%s: --%s must be positive", command, f)
		}
	}
	return nil
}

// cosFlags configure the object store. Secrets have no flags: they come
// from the environment or a mounted directory, never argv.
func cosFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "cos-endpoint", EnvVars: []string{"COS_ENDPOINT"}, Usage: "COS (S3) endpoint URL"},
		&cli.StringFlag{Name: "cos-region", EnvVars: []string{"COS_REGION"}, Value: "us-standard", Usage: "COS region / location constraint"},
		&cli.StringFlag{Name: "bucket", EnvVars: []string{"COS_BUCKET"}, Usage: "bucket holding the backups"},
		&cli.StringFlag{Name: "prefix", EnvVars: []string{"COS_PREFIX"}, Usage: "key prefix inside the bucket"},
		&cli.StringFlag{Name: "cos-credentials-dir", EnvVars: []string{"COS_CREDENTIALS_DIR"}, Usage: "mounted cos-credentials secret (else COS_ACCESS_KEY_ID/COS_SECRET_ACCESS_KEY or COS_API_KEY)", TakesFile: true},
		&cli.StringFlag{Name: "cos-ca-file", EnvVars: []string{"COS_CA_FILE"}, Usage: "extra CA bundle for the COS endpoint", TakesFile: true},
		&cli.IntFlag{Name: "cos-max-retries", EnvVars: []string{"COS_MAX_RETRIES"}, Value: 5, Usage: "retries per request on transient errors (5xx, resets, timeouts)"},
		&cli.DurationFlag{Name: "cos-stall-timeout", EnvVars: []string{"COS_STALL_TIMEOUT"}, Value: cos.DefaultStallTimeout, Usage: "abort a store call (or an upload or download) that makes no progress for this long: \"object store stalled\""},
		&cli.StringFlag{Name: "cos-min-throughput", EnvVars: []string{"COS_MIN_THROUGHPUT"}, Value: cos.DefaultMinThroughput.String(),
			Usage: "abort a store call that moves fewer bytes than SIZE in any WINDOW of its transfers (SIZE/WINDOW, e.g. 64KiB/60s; off: no minimum): " +
				"a store that trickles is \"object store stalled (throughput ... below ...)\""},
	}
}

// cosStore builds the object store and the layout from the flags. It is
// the one place the CLI names the COS backend (with cosStoreWith and
// cosStoreKube); everything else sees the store seam (store.Store).
func cosStore(c *cli.Context) (store.Store, catalog.Layout, error) {
	creds, err := cos.LoadCredentials(c.String("cos-credentials-dir"), os.Getenv)
	if err != nil {
		return nil, catalog.Layout{}, asUsage(err)
	}
	return cosStoreWith(c, creds)
}

// cosStoreWith builds the object store from the flags and the given
// credentials (e.g. read from a Kubernetes secret).
func cosStoreWith(c *cli.Context, creds cos.Credentials) (store.Store, catalog.Layout, error) {
	// Input is validated before anything happens: a prefix that writes
	// keys the store cannot list back, or an endpoint that is not a URL,
	// is a usage error naming the flag and the value.
	prefix, err := catalog.ValidatePrefix(c.String("prefix"))
	if err != nil {
		return nil, catalog.Layout{}, usagef("--prefix: %v", err)
	}
	if err := validateCOSEndpoint(c.String("cos-endpoint")); err != nil {
		return nil, catalog.Layout{}, asUsage(err)
	}
	retries := c.Int("cos-max-retries")
	if retries < 0 {
		return nil, catalog.Layout{}, usagef("--cos-max-retries %d: want 0 or more", retries)
	}
	if retries == 0 {
		retries = -1 // cos.Config: 0 means default
	}
	stall := c.Duration("cos-stall-timeout")
	if stall <= 0 {
		return nil, catalog.Layout{}, usagef("--cos-stall-timeout %v: must be positive", stall)
	}
	minRate, err := cos.ParseThroughput(c.String("cos-min-throughput"))
	if err != nil {
		return nil, catalog.Layout{}, usagef("--cos-min-throughput: %v", err)
	}
	st, err := cos.New(cos.Config{
		Endpoint:      c.String("cos-endpoint"),
		Region:        c.String("cos-region"),
		Bucket:        c.String("bucket"),
		Creds:         creds,
		CAFile:        c.String("cos-ca-file"),
		MaxRetries:    retries,
		StallTimeout:  stall,
		MinThroughput: minRate,
	})
	if err != nil {
		return nil, catalog.Layout{}, asUsage(err)
	}
	return st, catalog.Layout{Prefix: prefix}, nil
}

// validateCOSEndpoint accepts http(s)://host[:port] (an optional trailing
// slash) or a bare host[:port], which the store reaches over https.
// Anything else (another scheme, a path, user info, spaces) is refused with
// the value named. The empty endpoint is left to the store's own check,
// which names the flag and the variable.
func validateCOSEndpoint(ep string) error {
	if ep == "" {
		return nil
	}
	bad := func(why string) error {
		return fmt.Errorf("--cos-endpoint %q: %s: want https://host[:port] (http:// only for local test servers)", etcdconn.RedactUserInfo(ep), why)
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
		return bad("a path is not allowed (the bucket is --bucket, the key prefix --prefix)")
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

func clusterIDFlag() cli.Flag {
	return &cli.StringFlag{Name: "cluster-id", EnvVars: []string{"ETCD_RECOVERY_CLUSTER_ID"}, Usage: "cluster id: the folder of its backups in the bucket"}
}

func outputFlag() cli.Flag {
	return &cli.StringFlag{Name: "output", Aliases: []string{"o"}, Value: "table", Usage: "table (fits 120 columns; explanations below it), wide (every column) or json (all the data)"}
}

func concat(groups ...[]cli.Flag) []cli.Flag {
	var out []cli.Flag
	for _, g := range groups {
		out = append(out, g...)
	}
	return out
}

// kubeFlags select the Kubernetes API server and namespace of the
// EtcdClusters (backup --all / --cluster).
func kubeFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "kubeconfig", Usage: "kubeconfig file (default $KUBECONFIG, a list as kubectl reads it, else ~/.kube/config; in a pod, its service account)", TakesFile: true},
		&cli.StringFlag{Name: "namespace", Aliases: []string{"n"}, EnvVars: []string{"POD_NAMESPACE"}, Usage: "namespace of the EtcdClusters (default: the kubeconfig context's, in a pod its own)"},
	}
}

func kubeClient(c *cli.Context) (*kube.Client, error) {
	k, err := kube.New(kube.Config{Kubeconfig: c.String("kubeconfig"), Namespace: c.String("namespace")})
	if err != nil {
		return nil, asUsage(err)
	}
	return k, nil
}

// cosStoreKube is cosStore, with the namespace's cos-credentials secret
// (read through the API) when no credentials are mounted or in the
// environment.
func cosStoreKube(c *cli.Context, k *kube.Client) (store.Store, catalog.Layout, error) {
	if c.String("cos-credentials-dir") != "" || os.Getenv(cos.EnvAccessKeyID) != "" || os.Getenv(cos.EnvAPIKey) != "" {
		return cosStore(c)
	}
	creds, err := cosCredentialsFromSecret(c.Context, k, os.Getenv)
	if err != nil {
		return nil, catalog.Layout{}, err
	}
	return cosStoreWith(c, creds)
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

func timeoutFlag() cli.Flag {
	return &cli.DurationFlag{Name: "timeout", Value: defaultTimeout, Usage: timeoutUsage}
}

// defaultBackupTimeout is backup's overall deadline: a namespace's
// backups (about 100 clusters, 4 at a time: well under 1 h) and a third
// of them drilled (about 75 min for 1 GiB databases) fit with room, and
// the run still ends, its uploads aborted and its Events recorded, before
// the CronJob's activeDeadlineSeconds (4 h) kills the pod.
const defaultBackupTimeout = 3*time.Hour + 30*time.Minute

func backupTimeoutFlag() cli.Flag {
	return &cli.DurationFlag{Name: "timeout", Value: defaultBackupTimeout, Usage: timeoutUsage}
}

func probeTimeoutFlag() cli.Flag {
	return &cli.DurationFlag{Name: "probe-timeout", Value: defaultProbeTimeout,
		Usage: "bound on each probe of a member (inspect: the whole run takes at most twice this)"}
}

func verifyTimeoutFlag() cli.Flag {
	return &cli.DurationFlag{Name: "verify-timeout", Value: defaultVerifyTimeout,
		Usage: "how long to wait for the restored members to be healthy before they are verified"}
}

// parallelFlag is how many EtcdClusters backup and inspect handle at once.
func parallelFlag() cli.Flag {
	return &cli.IntFlag{Name: "parallel", Value: fleet.DefaultParallel,
		Usage: "with --all/--cluster: EtcdClusters handled at once (4: each backup holds about 30 MiB of stream buffers, " +
			"so 4 fit the CronJob's memory limit with room; inspect uses the same bound)"}
}

func tempDirFlag() cli.Flag {
	return &cli.StringFlag{Name: "temp-dir", TakesFile: true,
		Usage: "where a downloaded snapshot is staged while it is verified; it needs room for the whole database, checked " +
			"before the download (default $TMPDIR, else /tmp; a manual restore: next to the data dirs)"}
}

func dryRunFlag() cli.Flag {
	return &cli.BoolFlag{Name: "dry-run", Usage: "print the plan and run every check that changes nothing; change nothing"}
}

const backupFlagUsage = "a backup, by the name list prints (restore, restore v2: instead of the one restore would choose; " +
	"restore verify: the one restored from; delete: repeatable)"

func backupFlag() cli.Flag { return &cli.StringFlag{Name: "backup", Usage: backupFlagUsage} }

const clusterFlagUsage = "an EtcdCluster of the namespace, by name (found through Kubernetes; also its cluster id in COS; backup: repeatable)"

func clusterFlag() cli.Flag { return &cli.StringFlag{Name: "cluster", Usage: clusterFlagUsage} }

const allFlagUsage = "every EtcdCluster of the namespace, one row each"

func allFlag() cli.Flag { return &cli.BoolFlag{Name: "all", Usage: allFlagUsage} }

func bumpRevisionFlag() cli.Flag {
	return &cli.Uint64Flag{Name: "bump-revision", Value: restore.DefaultBumpRevision,
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

// encryptionFlags are backup's: the recipients and --require-encryption.
func encryptionFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringSliceFlag{Name: "encrypt-to", EnvVars: []string{seal.EnvEncryptTo},
			Usage: "encrypt the backup's objects (age) to this X25519 recipient, age1… (repeatable; the variable may hold several, comma- or space-separated); the manifest stays plaintext"},
		&cli.StringFlag{Name: "recipients-file", EnvVars: []string{seal.EnvRecipientsFile}, TakesFile: true,
			Usage: "file of age recipients, one age1… per line, '#' comments allowed (added to --encrypt-to)"},
		&cli.BoolFlag{Name: "require-encryption", EnvVars: []string{seal.EnvRequireEncryption},
			Usage: "refuse (exit 4) to write a backup without any recipient: a misconfigured job fails instead of writing plaintext"},
	}
}

// recipientsFromFlags loads --encrypt-to and --recipients-file. A bad
// value or file is a usage error (exit 4) naming the file and line.
func recipientsFromFlags(c *cli.Context) (seal.Recipients, error) {
	var files []string
	if f := c.String("recipients-file"); f != "" {
		files = append(files, f)
	}
	rs, err := seal.LoadRecipients(c.StringSlice("encrypt-to"), files)
	if err != nil {
		return seal.Recipients{}, usagef("%s: %v", c.Command.Name, err)
	}
	return rs, nil
}

// identityFileFlag is the age identity file of the commands that decrypt
// (restore, restore v2, restore verify --backup, drill) and of list (the
// header check): one name, one meaning on every command.
func identityFileFlag() cli.Flag {
	return &cli.StringFlag{Name: "identity-file", EnvVars: []string{seal.EnvIdentityFile}, TakesFile: true,
		Usage: "age identity file (AGE-SECRET-KEY-1… lines, as age-keygen writes it; not readable by others) to decrypt encrypted backups; " +
			"only the toolkit pod mounts it, never the backup CronJob"}
}

// identityFromFlags loads --identity-file: nil without one. A bad file is
// a usage error (exit 4) naming the file and line, never its content.
func identityFromFlags(c *cli.Context) (*seal.Identities, error) {
	path := c.String("identity-file")
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
