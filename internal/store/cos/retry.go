package cos

import (
	"errors"
	"io"
	"strings"
	"syscall"

	"github.com/IBM/ibm-cos-sdk-go/aws/awserr"
	"github.com/IBM/ibm-cos-sdk-go/aws/client"
	"github.com/IBM/ibm-cos-sdk-go/aws/request"
)

// retryer is the SDK's default retryer, plus connection resets.
//
// The SDK deliberately does not retry an error whose text holds "read:
// connection reset" (aws/request/connection_reset_error.go): a reset while
// reading the answer means the request may have been applied. That is how
// "connection reset by peer" failed a v2 PUT and a multipart upload at once.
// Every request this store makes is safe to repeat: PutObject and
// UploadPart write the same bytes to the same key or part, DeleteObjects
// and AbortMultipartUpload are idempotent, reads are reads, a repeated
// CompleteMultipartUpload fails (NoSuchUpload, or 412 with If-None-Match)
// rather than writing twice, and a repeated CreateMultipartUpload's extra
// upload is aborted by Put (abortKeyUploads). So resets are retried, with
// the same limit and backoff as other transient errors. A cancelled or
// stalled call is never retried.
type retryer struct{ client.DefaultRetryer }

func (r retryer) ShouldRetry(req *request.Request) bool {
	if ctx := req.Context(); ctx != nil && ctx.Err() != nil {
		return false
	}
	if req.Retryable == nil && isReset(req.Error) {
		return true
	}
	return r.DefaultRetryer.ShouldRetry(req)
}

// isReset reports whether err is a connection reset, a broken pipe or a
// connection cut mid-message, looking through the SDK's wrapped errors
// (awserr.Error has no Unwrap).
func isReset(err error) bool {
	for depth := 0; err != nil && depth < 16; depth++ {
		if errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
			errors.Is(err, syscall.ECONNABORTED) || errors.Is(err, io.ErrUnexpectedEOF) {
			return true
		}
		msg := err.Error()
		if strings.Contains(msg, "connection reset") || strings.Contains(msg, "broken pipe") {
			return true
		}
		var aerr awserr.Error
		if errors.As(err, &aerr) && aerr.OrigErr() != nil && aerr.OrigErr() != err {
			err = aerr.OrigErr()
			continue
		}
		err = errors.Unwrap(err)
	}
	return false
}
