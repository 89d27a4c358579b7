package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/ffcvfs/ffcvfs/control"
	"github.com/ffcvfs/ffcvfs/internal/cacheflags"
	"github.com/ffcvfs/ffcvfs/order"
	"github.com/ffcvfs/ffcvfs/pagecache"
	"github.com/ffcvfs/ffcvfs/pipeline"
	"github.com/ffcvfs/ffcvfs/pipeline/decoded"
	"github.com/ffcvfs/ffcvfs/storage"
)

// MaxSources bounds --data given several times: each source opens a
// cache of its own.
const MaxSources = order.MaxMixSources

// source is one --data opened: its cache, the announce of the mount it is
// read through (nil: none), and what it is called in advice.
type source struct {
	*cacheflags.Opened
	announce func([]uint32) error
	name     string
}

// openData opens each --data, whose --weights are shares (nil: none): a
// source URL or path, or an ffcvfs mount whose dataset.beton is read and
// whose announce socket is told each order; a mount's name is what it
// serves (stats.json's source), for advice. On error nothing is left open.
func openData(c *cli.Context, shares []order.Share) ([]source, error) {
	locs := c.StringSlice("data")
	switch {
	case len(locs) > MaxSources:
		return nil, cli.Exit(fmt.Sprintf("--data given %d times: at most %d sources", len(locs), MaxSources), 2)
	case len(locs) > 1 && shares != nil && len(shares) != len(locs):
		return nil, cli.Exit(fmt.Sprintf("--weights %s: %d weights for %d --data sources: give one per source, in the order of --data", c.String("weights"), len(shares), len(locs)), 2)
	case len(locs) == 1 && shares != nil:
		return nil, cli.Exit("--weights mixes several sources: give --data once per source", 2)
	}
	var srcs []source
	closeAll := func() {
		for _, s := range srcs {
			s.Close()
		}
	}
	stdin := false
	for i, data := range locs {
		if data == storage.StdinLocation {
			if stdin {
				closeAll()
				return nil, cli.Exit("--data -: standard input holds one location; give the others on the command line", 2)
			}
			stdin = true
			var err error
			if data, err = storage.ReadLocation(os.Stdin); err != nil {
				closeAll()
				return nil, cli.Exit(err.Error(), 2)
			}
		}
		s := source{name: data}
		if control.IsMount(data) {
			mnt := data
			data = control.Path(mnt, control.DatasetFile)
			if st, err := control.ReadStats(mnt); err == nil && st.Source != "" {
				s.name = st.Source
			}
			s.announce = func(ids []uint32) error {
				ctx, cancel := context.WithTimeout(c.Context, time.Minute)
				defer cancel()
				return control.Announce(ctx, mnt, ids, false)
			}
		}
		var err error
		if s.Opened, err = cacheflags.OpenPart(c, data, pagecache.Options{}, len(locs)); err != nil {
			closeAll()
			if len(locs) > 1 {
				var ex cli.ExitCoder
				if errors.As(err, &ex) {
					return nil, cli.Exit(fmt.Sprintf("--data %d of %d: %v", i+1, len(locs), err), ex.ExitCode())
				}
			}
			return nil, err
		}
		if len(locs) == 1 && !control.IsMount(locs[0]) {
			s.name = "" // the file's own name
		}
		for j, o := range srcs {
			if identity(o.Source) == identity(s.Source) {
				s.Close()
				closeAll()
				return nil, cli.Exit(fmt.Sprintf("--data %d (%s) is --data %d again: give each beton once, with its weight (x2 reads it twice an epoch)", i+1, s.Source.Name(), j+1), 2)
			}
		}
		srcs = append(srcs, s)
	}
	return srcs, nil
}

// identity names a source's object and version (storage.IdentityOf), or
// its location.
func identity(src storage.Source) string {
	return cmp.Or(storage.IdentityOf(src), src.Name())
}

// fed is the pipeline the flags describe, with the betons it reads: the
// first embedded (its cache's metrics).
type fed struct {
	p *pipeline.Pipeline
	*cacheflags.Opened
	sources []source
	decoded *decoded.Tier // or nil
}

// close releases the caches, the sources and the decoded-image tier.
func (f *fed) close() {
	for _, s := range f.sources {
		s.Close()
	}
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
	shares, err := sharesFlag(c)
	if err != nil {
		return nil, err
	}
	srcs, err := openData(c, shares)
	if err != nil {
		return nil, err
	}
	f := &fed{Opened: srcs[0].Opened, sources: srcs}
	opts.SourceName = srcs[0].name
	do, err := decodedOptions(c)
	if err != nil {
		f.close()
		return nil, err
	}
	if do.RAM > 0 || do.Disk > 0 {
		for _, s := range srcs {
			do.Samples += s.Cache.File().NumSamples()
		}
		if f.decoded, err = decoded.New(do); err != nil {
			f.close()
			return nil, cli.Exit(err.Error(), 2)
		}
		opts.Decoded = f.decoded
	}
	if len(srcs) == 1 {
		f.p, err = pipeline.New(srcs[0].Cache, opts, srcs[0].announce)
	} else {
		f.p, err = mixPipeline(c, srcs, shares, opts)
	}
	if err != nil {
		f.close()
		return nil, err
	}
	spareProc(opts.Workers)
	return f, nil
}

// sharesFlag reads --weights; nil when it is not given.
func sharesFlag(c *cli.Context) ([]order.Share, error) {
	if !c.IsSet("weights") {
		if c.IsSet("epoch-size") {
			return nil, cli.Exit("--epoch-size sizes an epoch of proportions: give --weights too", 2)
		}
		return nil, nil
	}
	shares, err := order.ParseShares(c.String("weights"))
	if err != nil {
		return nil, cli.Exit("--weights: "+err.Error(), 2)
	}
	return shares, nil
}

// mixPipeline is the pipeline of several sources by their shares (each
// source once an epoch when --weights is not given), saying how the
// weights are taken.
func mixPipeline(c *cli.Context, srcs []source, shares []order.Share, opts pipeline.Options) (*pipeline.Pipeline, error) {
	if shares == nil {
		shares = make([]order.Share, len(srcs))
		for i := range shares {
			shares[i] = order.Share{Kind: order.Repeat, Value: 1}
		}
	}
	size := c.Int("epoch-size")
	if size < 0 {
		return nil, cli.Exit(fmt.Sprintf("--epoch-size %d: want a positive number of samples (0: the sources' samples in all)", size), 2)
	}
	ps := make([]pipeline.Source, len(srcs))
	names := make([]string, len(srcs))
	for i, s := range srcs {
		ps[i] = pipeline.Source{Cache: s.Cache, Announce: s.announce, Share: shares[i], Name: s.name}
		names[i] = identity(s.Source)
	}
	p, err := pipeline.NewSources(ps, opts, pipeline.MixOptions{EpochSize: size, Names: names})
	if err != nil {
		return nil, cli.Exit(err.Error(), 2)
	}
	var taken []string
	counts := p.Counts()
	total := 0
	for _, n := range counts {
		total += n
	}
	for i, n := range counts {
		taken = append(taken, fmt.Sprintf("%s: %d (%.4g of the epoch, %.3g× its %d samples)", ps[i].Cache.File().Name(), n, float64(n)/float64(total), float64(n)/float64(srcs[i].Cache.File().NumSamples()), srcs[i].Cache.File().NumSamples()))
	}
	how := "weights " + c.String("weights")
	if !c.IsSet("weights") {
		how = "no --weights: each source once"
	}
	slog.Info("mixing "+fmt.Sprint(len(srcs))+" sources, "+how+"; an epoch of "+fmt.Sprint(total)+" samples takes "+strings.Join(taken, "; "), "fingerprint", p.Fingerprint())
	return p, nil
}
