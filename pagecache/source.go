package pagecache

import (
	"errors"
	"io"
)

// Source is where a beton's bytes come from: ranged reads only. ReadAt
// fills all of p or returns an error (io.EOF only when off+len(p) is past
// Size); it is safe for concurrent use. Name identifies the source in
// messages and never contains credentials.
type Source interface {
	io.ReaderAt
	Size() int64
	Name() string
	Close() error
}

// Errors that Sources wrap.
var (
	// ErrChanged: the object changed since the source was opened (its ETag
	// no longer matches). Bytes of two versions are never mixed.
	ErrChanged = errors.New("object changed since it was opened")
	// ErrUnavailable: storage could not be reached or kept failing after
	// all retries within the read deadline.
	ErrUnavailable = errors.New("storage unavailable")
)
