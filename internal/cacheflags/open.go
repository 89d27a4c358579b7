package cacheflags

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/ffcvfs/ffcvfs/beton"
	"github.com/ffcvfs/ffcvfs/internal/bytesize"
	"github.com/ffcvfs/ffcvfs/internal/hangup"
	"github.com/ffcvfs/ffcvfs/pagecache"
	"github.com/ffcvfs/ffcvfs/peer"
	"github.com/ffcvfs/ffcvfs/storage"
)

// OpenTimeout bounds opening a beton: reaching its storage and reading
// its header, descriptors, metadata and allocation table.
const OpenTimeout = 2 * time.Minute

// Opened is a beton read through the page cache the flags describe.
type Opened struct {
	// Source is the storage the cache reads.
	Source storage.Source
	File   *beton.File
	Cache  *pagecache.Cache
	// Node is the peer tier's node; nil without one.
	Node *peer.Node
}

// Close closes the cache, the peer tier's node and the source.
func (o *Opened) Close() error {
	err := o.Cache.Close()
	if o.Node != nil {
		err = errors.Join(err, o.Node.Close())
	}
	return errors.Join(err, o.Source.Close())
}

// Open opens the beton at location and the page cache the flags say:
// --cache-size and the tiers of Flags, the peer tier of PeerFlags, and
// storage as SourceFlags say. base holds the cache options the command
// sets itself (readers, inflight bytes...). A mistake in a flag is an
// exit status of 2, anything else 1, each a sentence naming the flag or
// the location; on error nothing is left open.
func Open(c *cli.Context, location string, base pagecache.Options) (*Opened, error) {
	return OpenPart(c, location, base, 1)
}

// OpenPart is Open for one of parts betons read together (a mixture): its
// cache has 1/parts of --cache-size (and of --disk-cache-size), and the
// peer tier, which serves one beton, is refused.
func OpenPart(c *cli.Context, location string, base pagecache.Options, parts int) (*Opened, error) {
	budget, err := bytesize.Parse(c.String("cache-size"))
	if err != nil {
		return nil, usage("--cache-size: %v", err)
	}
	if parts > 1 {
		if c.String("peer-listen") != "" {
			return nil, usage("--peer-listen serves one beton; with %d sources, leave the peer tier out", parts)
		}
		budget /= int64(parts)
	}
	popts, peerBudget, peers, err := PeerOptions(c)
	if err != nil {
		return nil, usage("%v", err)
	}
	ctx, cancel := context.WithTimeout(c.Context, OpenTimeout)
	defer cancel()
	src, f, err := pagecache.OpenBeton(ctx, location, SourceOptions(c))
	if err != nil {
		return nil, cli.Exit(err.Error(), 1)
	}
	o := &Opened{Source: src, File: f}
	copts := base
	copts.Budget = budget
	if err := Apply(c, &copts, f.Size()); err != nil {
		src.Close()
		return nil, usage("%v", err)
	}
	if parts > 1 && c.String("disk-cache-size") != "" {
		copts.DiskBudget /= int64(parts)
	}
	var obj *peer.Object
	if peers && peerBudget > 0 && peerBudget < f.PageSize() {
		src.Close()
		return nil, usage("--peer-cache-size %s holds no page of %s (pages of %s): give at least %s, or 0 with --disk-cache", bytesize.Format(peerBudget), location, bytesize.Format(f.PageSize()), bytesize.Format(f.PageSize()))
	}
	if peers {
		// The peer tier is the cache's, below its tiers: the cache asks
		// owners, reads and keeps the pages this node owns, and serves
		// peers (ServePeer, below).
		info := peer.Info{Name: src.Name(), Identity: storage.IdentityOf(src), Size: f.Size(), PageSize: f.PageSize()}
		info.KeepBytes, info.KeepFlag = keeps(copts, peerBudget)
		if o.Node, err = peer.Start(popts); err != nil {
			src.Close()
			return nil, cli.Exit(err.Error(), 1)
		}
		if obj, err = o.Node.Open(info); err != nil {
			o.Node.Close()
			src.Close()
			return nil, cli.Exit(err.Error(), 1)
		}
		copts.Peers, copts.PeerBudget = obj, peerBudget
	}
	switch {
	case popts.PeersFile != "" || popts.PeersDNS != "":
		hangup.Handle(o.Node.Reload)
	case hangup.Caught(): // a mount, a feed server: SIGHUP must not end it
		hangup.Handle(func() {
			slog.Info("SIGHUP: nothing to reload (only --peers @FILE or dns:NAME:PORT is re-read on it); going on")
		})
	}
	if o.Cache, err = pagecache.New(o.Source, f, copts); err != nil {
		if o.Node != nil {
			o.Node.Close()
		}
		o.Source.Close()
		return nil, cli.Exit(fmt.Sprintf("%s: %v", o.Source.Name(), err), 1)
	}
	if obj != nil {
		obj.Serve(o.Cache.ServePeer)
	}
	return o, nil
}

// keeps returns what the cache can keep of the pages this node owns for
// its cluster, and the flag that sizes it: --peer-cache-size's RAM, else
// the disk tier, else the compressed RAM tier (counted raw).
func keeps(copts pagecache.Options, peerBudget int64) (int64, string) {
	switch {
	case peerBudget > 0:
		return peerBudget, "--peer-cache-size"
	case copts.DiskDir != "":
		return copts.DiskBudget, "--disk-cache-size"
	case copts.CompressRAM:
		return copts.Budget, "--cache-size"
	}
	return 0, ""
}

// usage is a mistake in how the command was called: exit status 2.
func usage(format string, args ...any) error {
	return cli.Exit(fmt.Sprintf(format, args...), 2)
}
