package pagecache

import (
	"context"
	"sync/atomic"

	"github.com/ffcvfs/ffcvfs/beton"
	"github.com/ffcvfs/ffcvfs/storage"
)

// OpenBeton opens the source at location (as storage.Open) and the beton it
// holds. The caller closes the source; on error nothing is left open.
func OpenBeton(ctx context.Context, location string, opts storage.Options) (storage.Source, *beton.File, error) {
	src, err := storage.Open(ctx, location, opts)
	if err != nil {
		return nil, nil, err
	}
	// ctx bounds the open; the File keeps its reader for later reads, which
	// must not fail when ctx ends.
	r := &openReader{src: src}
	r.ctx.Store(&ctx)
	f, err := beton.Open(r, src.Size(), src.Name())
	if err != nil {
		src.Close()
		return nil, nil, err
	}
	after := context.WithoutCancel(ctx)
	r.ctx.Store(&after)
	return src, f, nil
}

// openReader reads src with a context that OpenBeton replaces once the
// file is open.
type openReader struct {
	src storage.Source
	ctx atomic.Pointer[context.Context]
}

func (r *openReader) ReadAt(p []byte, off int64) (int, error) {
	return r.src.ReadAt(*r.ctx.Load(), p, off)
}
