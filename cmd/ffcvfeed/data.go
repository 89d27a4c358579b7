package main

import (
	"context"
	"os"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/ffcvfs/ffcvfs/control"
	"github.com/ffcvfs/ffcvfs/internal/cacheflags"
	"github.com/ffcvfs/ffcvfs/pagecache"
	"github.com/ffcvfs/ffcvfs/pipeline"
	"github.com/ffcvfs/ffcvfs/pipeline/decoded"
	"github.com/ffcvfs/ffcvfs/storage"
)

// openData opens --data: a source URL or path, or an ffcvfs mount whose
// dataset.beton is read and whose announce socket is told each order; for
// a mount, source names what it serves (stats.json's source), for advice.
func openData(c *cli.Context) (d *cacheflags.Opened, announce func([]uint32) error, source string, err error) {
	data := c.String("data")
	if data == storage.StdinLocation {
		if data, err = storage.ReadLocation(os.Stdin); err != nil {
			return nil, nil, "", cli.Exit(err.Error(), 2)
		}
	}
	if control.IsMount(data) {
		mnt := data
		data = control.Path(mnt, control.DatasetFile)
		if st, err := control.ReadStats(mnt); err == nil && st.Source != "" {
			source = st.Source
		}
		announce = func(ids []uint32) error {
			ctx, cancel := context.WithTimeout(c.Context, time.Minute)
			defer cancel()
			return control.Announce(ctx, mnt, ids, false)
		}
	}
	d, err = cacheflags.Open(c, data, pagecache.Options{})
	if err != nil {
		return nil, nil, "", err
	}
	return d, announce, source, nil
}

// fed is the pipeline the flags describe, with the beton it reads.
type fed struct {
	p *pipeline.Pipeline
	*cacheflags.Opened
	decoded *decoded.Tier // or nil
}

// close releases the cache, the source and the decoded-image tier.
func (f *fed) close() {
	f.Opened.Close()
	if f.decoded != nil {
		f.decoded.Close()
	}
}

// openPipeline builds the pipeline the flags describe.
func openPipeline(c *cli.Context) (*fed, error) {
	opts, err := pipelineOptions(c)
	if err != nil {
		return nil, err
	}
	data, announce, source, err := openData(c)
	if err != nil {
		return nil, err
	}
	opts.SourceName = source
	f := &fed{Opened: data}
	do, err := decodedOptions(c)
	if err != nil {
		f.close()
		return nil, err
	}
	if do.RAM > 0 || do.Disk > 0 {
		do.Samples = data.Cache.File().NumSamples()
		if f.decoded, err = decoded.New(do); err != nil {
			f.close()
			return nil, cli.Exit(err.Error(), 2)
		}
		opts.Decoded = f.decoded
	}
	if f.p, err = pipeline.New(data.Cache, opts, announce); err != nil {
		f.close()
		return nil, err
	}
	spareProc(opts.Workers)
	return f, nil
}
