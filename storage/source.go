// Package storage reads a beton's bytes from where it lies: a local or NFS
// file, S3, or HTTP(S). Reads are ranged, take a context (a cancelled read
// stops its requests), and for network storage are split into parts,
// retried with backoff, watched for stalls, and bounded by a deadline; the
// object is pinned by ETag at open, so a changed object is an error, never
// mixed bytes. Names never carry credentials.
//
// Each network backend is a file that registers its URL scheme from its
// init function (Register; s3.go, http.go): Open, IsNetwork and the
// programs' help (Locations) then know it, so a new backend is one file
// and its test.
//
// The retry policy is written here rather than taken from the AWS SDK
// because it must be one policy for S3 and plain HTTP, with a stall
// watchdog per attempt and a deadline per read. S3's ranged GETs are plain
// HTTP requests signed by the SDK (see S3Source): the SDK's per-call
// machinery costs more CPU than the request on small ranges.
package storage

import (
	"context"
	"errors"
	"io"
)

// Source is where a beton's bytes come from: ranged reads only. ReadAt
// fills all of p or returns an error (io.EOF only when off+len(p) is past
// Size); when ctx ends, the read stops and returns an error that wraps
// ctx's cause. It is safe for concurrent use. Name identifies the source
// in messages and never contains credentials.
type Source interface {
	ReadAt(ctx context.Context, p []byte, off int64) (int, error)
	Size() int64
	Name() string
	Close() error
}

// Identifier is a Source that can say which version of its object it
// reads: a string that changes whenever the bytes may have (URL with
// ETag, path with size and modification time). Caches that outlive the
// process key their entries by it.
type Identifier interface {
	Identity() string
}

// IdentityOf returns src's Identity, or "" when it cannot say one.
func IdentityOf(src Source) string {
	if i, ok := src.(Identifier); ok {
		return i.Identity()
	}
	return ""
}

// ReaderAt returns src as an io.ReaderAt whose reads use ctx, for code
// that takes one (beton.Open).
func ReaderAt(ctx context.Context, src Source) io.ReaderAt { return readerAt{ctx, src} }

type readerAt struct {
	ctx context.Context
	src Source
}

func (r readerAt) ReadAt(p []byte, off int64) (int, error) { return r.src.ReadAt(r.ctx, p, off) }

// Errors that Sources wrap.
var (
	// ErrChanged: the object changed since the source was opened (its ETag
	// no longer matches). Bytes of two versions are never mixed.
	ErrChanged = errors.New("object changed since it was opened")
	// ErrUnavailable: storage could not be reached or kept failing after
	// all retries within the read deadline.
	ErrUnavailable = errors.New("storage unavailable")
)
