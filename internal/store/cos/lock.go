package cos

import (
	"context"
	"crypto/md5"
	"encoding/base64"
	"errors"
	"io"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/IBM/ibm-cos-sdk-go/aws"
	"github.com/IBM/ibm-cos-sdk-go/aws/awserr"
	"github.com/IBM/ibm-cos-sdk-go/aws/request"
	"github.com/IBM/ibm-cos-sdk-go/service/s3"

	"github.com/armada/etcd-recovery/internal/fanout"
	"github.com/armada/etcd-recovery/internal/store"
)

// Object lock and versions (store.Locker, store.Versioner) on the S3 API:
// GetObjectLockConfiguration, object-lock headers on PutObject and
// CreateMultipartUpload, Put/GetObjectRetention, GetBucketVersioning,
// ListObjectVersions, GetObject and DeleteObjects with version ids.
//
// A delete refused by a lock comes back from S3 as AccessDenied, the same
// code a policy denial has. A refused version's retention is then read
// (GetObjectRetention); when it still holds, or the service's message
// names the lock (MinIO: "WORM protected"), the error is a
// *store.LockedError, with the retain-until time when it could be read.

// setContentMD5Handler sets Content-MD5 on a PutObject or UploadPart whose
// body is seekable (the uploader buffers every part: s3manager reads a
// part into a pooled buffer before it sends it), without the SDK's extra
// sha256 pass. A body that is not seekable is left alone (the uploader
// never sends one).
var setContentMD5Handler = request.NamedHandler{Name: "etcd-recovery.ContentMD5", Fn: setContentMD5}

func setContentMD5(r *request.Request) {
	if r.Error != nil || r.HTTPRequest.Header.Get("Content-Md5") != "" || !aws.IsReaderSeekable(r.Body) {
		return
	}
	h := md5.New()
	if _, err := aws.CopySeekableBody(h, r.Body); err != nil {
		r.Error = awserr.New("BodyHashError", "failed to compute the body's MD5", err)
		return
	}
	r.HTTPRequest.Header.Set("Content-Md5", base64.StdEncoding.EncodeToString(h.Sum(nil)))
}

// LockConfig implements store.Locker (GetObjectLockConfiguration; a bucket
// without one is LockInfo{}).
func (s *Store) LockConfig(ctx context.Context) (store.LockInfo, error) {
	const op = "get lock config"
	ctx, wd, stop := s.watch(ctx, op, s.cfg.Bucket)
	defer stop()
	out, err := s.s3.GetObjectLockConfigurationWithContext(ctx, &s3.GetObjectLockConfigurationInput{Bucket: aws.String(s.cfg.Bucket)})
	if err = judgedStalled(wd, err); err != nil {
		if wd.stalled() == nil && errCode(err) == "ObjectLockConfigurationNotFoundError" {
			return store.LockInfo{}, nil
		}
		return store.LockInfo{}, s.fail(wd, op, s.cfg.Bucket, err)
	}
	var info store.LockInfo
	c := out.ObjectLockConfiguration
	if c == nil {
		return info, nil
	}
	info.Enabled = aws.StringValue(c.ObjectLockEnabled) == s3.ObjectLockEnabledEnabled
	if c.Rule != nil && c.Rule.DefaultRetention != nil {
		d := c.Rule.DefaultRetention
		info.DefaultMode = store.LockMode(aws.StringValue(d.Mode))
		info.DefaultPeriod = time.Duration(aws.Int64Value(d.Days))*24*time.Hour + time.Duration(aws.Int64Value(d.Years))*365*24*time.Hour
	}
	return info, nil
}

func optVersion(id string) *string {
	if id == "" {
		return nil
	}
	return aws.String(id)
}

// SetRetention implements store.Locker (PutObjectRetention).
func (s *Store) SetRetention(ctx context.Context, key, versionID string, r store.Retention) error {
	const op = "put retention"
	if err := r.Check(); err != nil {
		return &Error{Backend: backend, Op: op, Key: key, Err: err}
	}
	wctx, wd, stop := s.watch(ctx, op, key)
	defer stop()
	_, err := s.s3.PutObjectRetentionWithContext(wctx, &s3.PutObjectRetentionInput{
		Bucket:    aws.String(s.cfg.Bucket),
		Key:       aws.String(key),
		VersionId: optVersion(versionID),
		Retention: &s3.ObjectLockRetention{Mode: aws.String(string(r.Mode)), RetainUntilDate: aws.Time(r.Until.UTC())},
	})
	if err = judgedStalled(wd, err); err != nil {
		if le := s.lockedError(ctx, wd, key, versionID, err); le != nil {
			return &Error{Backend: backend, Op: op, Key: key, Err: le}
		}
		return s.fail(wd, op, key, err)
	}
	return nil
}

// Retention implements store.Locker (GetObjectRetention; a version without
// one is Retention{}).
func (s *Store) Retention(ctx context.Context, key, versionID string) (store.Retention, error) {
	const op = "get retention"
	ctx, wd, stop := s.watch(ctx, op, key)
	defer stop()
	out, err := s.s3.GetObjectRetentionWithContext(ctx, &s3.GetObjectRetentionInput{
		Bucket:    aws.String(s.cfg.Bucket),
		Key:       aws.String(key),
		VersionId: optVersion(versionID),
	})
	if err = judgedStalled(wd, err); err != nil {
		if wd.stalled() == nil && noRetention(err) {
			return store.Retention{}, nil
		}
		return store.Retention{}, s.fail(wd, op, key, err)
	}
	if out.Retention == nil {
		return store.Retention{}, nil
	}
	return store.Retention{Mode: store.LockMode(aws.StringValue(out.Retention.Mode)), Until: aws.TimeValue(out.Retention.RetainUntilDate)}, nil
}

// noRetention: the version has no retention (S3 and MinIO:
// NoSuchObjectLockConfiguration), or the bucket no object lock.
func noRetention(err error) bool {
	switch errCode(err) {
	case "NoSuchObjectLockConfiguration", "ObjectLockConfigurationNotFoundError":
		return true
	}
	return false
}

// lockedError judges a refused call on a version: a *store.LockedError
// when the version's retention still holds or the service's answer names
// the lock, else nil.
func (s *Store) lockedError(ctx context.Context, wd *watchdog, key, versionID string, err error) error {
	if wd.stalled() != nil || err == nil {
		return nil
	}
	code, status := errCode(err), statusCode(err)
	if code != "AccessDenied" && code != "InvalidRequest" && status != http.StatusForbidden {
		return nil
	}
	cause := s.cause(err, false)
	cause.transient = false
	msg := strings.ToLower(describe(err))
	named := strings.Contains(msg, "worm") || strings.Contains(msg, "object lock") || strings.Contains(msg, "retention")
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	ret, rerr := s.Retention(rctx, key, versionID)
	switch {
	case rerr == nil && ret.Locked(time.Now()):
		return &store.LockedError{VersionID: versionID, Retention: ret, Cause: cause}
	case named:
		le := &store.LockedError{VersionID: versionID, Cause: cause}
		if rerr == nil {
			le.Retention = ret
		}
		return le
	}
	return nil
}

// Versioning implements store.Versioner (GetBucketVersioning: Enabled).
func (s *Store) Versioning(ctx context.Context) (bool, error) {
	const op = "get versioning"
	ctx, wd, stop := s.watch(ctx, op, s.cfg.Bucket)
	defer stop()
	out, err := s.s3.GetBucketVersioningWithContext(ctx, &s3.GetBucketVersioningInput{Bucket: aws.String(s.cfg.Bucket)})
	if err = judgedStalled(wd, err); err != nil {
		return false, s.fail(wd, op, s.cfg.Bucket, err)
	}
	return aws.StringValue(out.Status) == s3.BucketVersioningStatusEnabled, nil
}

// ListVersions implements store.Versioner (ListObjectVersions, every
// page): by key, the latest first, then newest first.
func (s *Store) ListVersions(ctx context.Context, prefix string) ([]store.Version, error) {
	const op = "list versions"
	ctx, wd, stop := s.watch(ctx, op, prefix)
	defer stop()
	var objs, markers []store.Version
	err := s.s3.ListObjectVersionsPagesWithContext(ctx, &s3.ListObjectVersionsInput{
		Bucket:  aws.String(s.cfg.Bucket),
		Prefix:  aws.String(prefix),
		MaxKeys: aws.Int64(1000),
	}, func(page *s3.ListObjectVersionsOutput, _ bool) bool {
		for _, v := range page.Versions {
			objs = append(objs, store.Version{Key: aws.StringValue(v.Key), VersionID: aws.StringValue(v.VersionId), Size: aws.Int64Value(v.Size),
				LastModified: aws.TimeValue(v.LastModified), IsLatest: aws.BoolValue(v.IsLatest)})
		}
		for _, m := range page.DeleteMarkers {
			markers = append(markers, store.Version{Key: aws.StringValue(m.Key), VersionID: aws.StringValue(m.VersionId),
				LastModified: aws.TimeValue(m.LastModified), IsLatest: aws.BoolValue(m.IsLatest), DeleteMarker: true})
		}
		return true
	})
	if err = judgedStalled(wd, err); err != nil {
		return nil, s.fail(wd, op, prefix, err)
	}
	return mergeVersions(objs, markers), nil
}

// mergeVersions orders a listing's object versions and delete markers by
// key, the latest first, then newest first. The object versions of a key
// keep the order the service listed them in (newest first, by when each
// version was created): their LastModified is not that order (a multipart
// upload's is when it was started, which whoever uploads chooses), and
// which version is a key's earliest is what readers of the journal and
// of overwritten backups rely on. Delete markers are merged in by time.
func mergeVersions(objs, markers []store.Version) []store.Version {
	byKey := func(vs []store.Version) map[string][]store.Version {
		m := map[string][]store.Version{}
		for _, v := range vs {
			m[v.Key] = append(m[v.Key], v)
		}
		return m
	}
	om, mm := byKey(objs), byKey(markers)
	keys := make([]string, 0, len(om)+len(mm))
	for k := range om {
		keys = append(keys, k)
	}
	for k := range mm {
		if _, ok := om[k]; !ok {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	out := make([]store.Version, 0, len(objs)+len(markers))
	for _, k := range keys {
		o, m := om[k], mm[k]
		sort.SliceStable(m, func(i, j int) bool { return m[i].LastModified.After(m[j].LastModified) })
		var merged []store.Version
		for len(o) > 0 || len(m) > 0 {
			switch {
			case len(m) == 0:
				merged, o = append(merged, o[0]), o[1:]
			case len(o) == 0:
				merged, m = append(merged, m[0]), m[1:]
			case m[0].IsLatest || (!o[0].IsLatest && m[0].LastModified.After(o[0].LastModified)):
				merged, m = append(merged, m[0]), m[1:]
			default:
				merged, o = append(merged, o[0]), o[1:]
			}
		}
		out = append(out, merged...)
	}
	return out
}

// GetVersion implements store.Versioner (GetObject with a versionId; a
// delete marker's 405 is store.ErrNotFound). Its body is watched as Get's.
func (s *Store) GetVersion(ctx context.Context, key, versionID string) (io.ReadCloser, error) {
	const op = "get version"
	if versionID == "" {
		return nil, &Error{Backend: backend, Op: op, Key: key, Err: store.Permanent(errors.New("no version id"))}
	}
	wctx, wd, stop := s.watch(ctx, op, key)
	out, err := s.s3.GetObjectWithContext(wctx, &s3.GetObjectInput{
		Bucket:    aws.String(s.cfg.Bucket),
		Key:       aws.String(key),
		VersionId: aws.String(versionID),
	})
	if err = judgedStalled(wd, err); err != nil {
		stop()
		return nil, s.fail(wd, op, key, err)
	}
	return &getBody{ReadCloser: out.Body, key: key, op: op, s: s, wd: wd, stop: stop}, nil
}

// DeleteVersions implements store.Versioner (DeleteObjects with version
// ids, 1,000 per request, x-amz-bypass-governance-retention when asked).
func (s *Store) DeleteVersions(ctx context.Context, versions []store.VersionRef, opts store.DeleteOptions) error {
	const op = "delete version"
	var (
		mu     sync.Mutex
		failed = map[string]error{}
	)
	batchOf := func(b int) []store.VersionRef {
		return versions[b*deleteBatch : min((b+1)*deleteBatch, len(versions))]
	}
	nBatches := (len(versions) + deleteBatch - 1) / deleteBatch
	notStarted := fanout.ForEach(ctx, nBatches, 4, func(ctx context.Context, b int) {
		batch := batchOf(b)
		ids := make([]*s3.ObjectIdentifier, len(batch))
		for i, v := range batch {
			ids[i] = &s3.ObjectIdentifier{Key: aws.String(v.Key), VersionId: optVersion(v.VersionID)}
		}
		bctx, wd, stop := s.watch(ctx, op, batch[0].Key)
		defer stop()
		in := &s3.DeleteObjectsInput{
			Bucket: aws.String(s.cfg.Bucket),
			Delete: &s3.Delete{Objects: ids, Quiet: aws.Bool(true)},
		}
		if opts.BypassGovernance {
			in.BypassGovernanceRetention = aws.Bool(true)
		}
		out, err := s.s3.DeleteObjectsWithContext(bctx, in)
		err = judgedStalled(wd, err)
		if err != nil {
			mu.Lock()
			defer mu.Unlock()
			for _, v := range batch {
				failed[v.Key] = s.fail(wd, op, v.Key, err)
			}
			return
		}
		for _, e := range out.Errors {
			k, id := aws.StringValue(e.Key), aws.StringValue(e.VersionId)
			var aerr error = awserr.New(aws.StringValue(e.Code), aws.StringValue(e.Message), nil)
			if aws.StringValue(e.Code) == "AccessDenied" {
				// The per-key answer has no status; AccessDenied is a 403.
				aerr = awserr.NewRequestFailure(aerr.(awserr.Error), http.StatusForbidden, "")
			}
			var ferr error
			if le := s.lockedError(ctx, nil, k, id, aerr); le != nil {
				ferr = &Error{Backend: backend, Op: op, Key: k, Err: le}
			} else {
				ferr = s.fail(nil, op, k, aerr)
			}
			mu.Lock()
			failed[k] = ferr
			mu.Unlock()
		}
	})
	for _, b := range notStarted {
		for _, v := range batchOf(b) {
			failed[v.Key] = s.fail(nil, op, v.Key, ctx.Err())
		}
	}
	if len(failed) > 0 {
		return &store.DeleteError{Failed: failed}
	}
	return nil
}
