// Package cacheflags holds the command-line flags that ffcvfs and ffcvfeed
// share for reading a beton: the page cache's tiers, turned into
// pagecache.Options, and how to reach storage, turned into
// storage.Options.
package cacheflags

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/urfave/cli/v2"

	"github.com/ffcvfs/ffcvfs/internal/bytesize"
	"github.com/ffcvfs/ffcvfs/internal/readfile"
	"github.com/ffcvfs/ffcvfs/pagecache"
	"github.com/ffcvfs/ffcvfs/pagecache/tier"
	"github.com/ffcvfs/ffcvfs/peer"
	"github.com/ffcvfs/ffcvfs/storage"
)

// S3Flags are the flags that say where S3 is: its endpoint, region and
// addressing; ffcvfs write's for an s3:// output.
func S3Flags(category string) []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "s3-endpoint", Usage: "S3 endpoint `URL`, for a server other than AWS (default: $AWS_ENDPOINT_URL, else AWS)", Category: category},
		&cli.StringFlag{Name: "s3-region", Usage: "S3 region (default: $AWS_REGION, else the AWS config)", Category: category},
		&cli.BoolFlag{Name: "s3-path-style", Usage: "address S3 buckets by path (endpoint/bucket/key), as most servers other than AWS want; an endpoint given by IP address or as localhost is addressed so anyway", Category: category},
	}
}

// SourceFlags are the flags that say how to reach a source: S3Flags, and
// the timeouts of S3 and HTTP.
func SourceFlags(category string) []cli.Flag {
	return append(S3Flags(category),
		&cli.DurationFlag{Name: "attempt-timeout", Value: storage.DefaultAttemptTimeout, Usage: "S3, HTTP: cancel and retry a request that receives nothing for this long", Category: category},
		&cli.DurationFlag{Name: "read-deadline", Value: storage.DefaultReadDeadline, Usage: "S3, HTTP: give up a read of the storage, retries included, after this long (a mount answers EIO to that read alone)", Category: category},
	)
}

// UploadFlags are the flags of an s3:// output: S3Flags, and the bounds of
// an upload's requests.
func UploadFlags(category string) []cli.Flag {
	return append(S3Flags(category),
		&cli.DurationFlag{Name: "attempt-timeout", Value: storage.DefaultAttemptTimeout, Usage: "cancel and retry an upload request that sends or receives nothing for this long", Category: category},
		&cli.DurationFlag{Name: "upload-deadline", Value: storage.DefaultUploadDeadline, Usage: "give up an upload request (a part, the completion), retries included, after this long, and a second more for every 8 MiB of a part;\n\tthe write then fails and the upload is aborted", Category: category},
	)
}

// SourceOptions turns the flags of SourceFlags, UploadFlags or S3Flags
// into storage.Options.
func SourceOptions(c *cli.Context) storage.Options {
	o := storage.Options{
		Logger:   slog.Default(),
		Endpoint: c.String("s3-endpoint"), Region: c.String("s3-region"), PathStyle: c.Bool("s3-path-style"),
		AttemptTimeout: c.Duration("attempt-timeout"), ReadDeadline: c.Duration("read-deadline"),
		UploadDeadline: c.Duration("upload-deadline"),
	}
	if r := c.Int("readers"); r > 0 {
		o.Concurrent = r + 16 // the prefetches, and demand reads
	}
	return o
}

// Flags are --disk-cache, --disk-cache-size and --compress-ram.
func Flags(category string) []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "disk-cache", Usage: "keep pages read from storage in `DIR` on a local disk too, so that later epochs and later mounts of the same object read them from there (checksummed; keyed by the object's ETag or size and modification time); 'ffcvfs cache ls DIR' lists what it holds", Category: category},
		&cli.StringFlag{Name: "disk-cache-size", Usage: "the most bytes --disk-cache takes (default: the beton's size, or 90% of the disk's free space if that is less)", Category: category},
		&cli.BoolFlag{Name: "compress-ram", Usage: "keep most of --cache-size as compressed pages, so that it holds more of a beton whose pages compress (raw pixels: about twice as many; JPEG pages do not compress and gain nothing); costs decoding on every read", Category: category},
	}
}

// Apply sets o's tier options from the flags, for a beton of size bytes.
func Apply(c *cli.Context, o *pagecache.Options, size int64) error {
	o.CompressRAM = c.Bool("compress-ram")
	o.DiskDir = c.String("disk-cache")
	v := c.String("disk-cache-size")
	if o.DiskDir == "" {
		if v != "" {
			return fmt.Errorf("--disk-cache-size needs --disk-cache DIR")
		}
		return nil
	}
	if v != "" {
		n, err := bytesize.Parse(v)
		if err != nil || n <= 0 {
			return fmt.Errorf("--disk-cache-size: want a positive size such as 50GiB, got %q", v)
		}
		o.DiskBudget = n
		return nil
	}
	o.DiskBudget = size
	if room, ok := diskRoom(o.DiskDir); ok && room < size {
		o.DiskBudget = room
		slog.Warn("--disk-cache: the disk has room for part of the beton only", "dir", o.DiskDir, "disk_cache_size", bytesize.Format(room), "beton", bytesize.Format(size))
	}
	return nil
}

// diskRoom returns the bytes a disk cache in dir may use: 90 % of the
// disk's free space, plus what the cache's own entries in dir take
// already (entries of this beton are its to keep, those of others its to
// replace), so that a cache that filled the disk is not refused on its
// next start, or by a second mount of the same beton.
func diskRoom(dir string) (int64, bool) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(existing(dir), &st); err != nil {
		return 0, false
	}
	room := int64(st.Bavail) * st.Bsize * 9 / 10
	if folders, err := tier.List(dir); err == nil {
		for _, f := range folders {
			room += f.Bytes
		}
	}
	return room, true
}

// existing returns dir or its nearest parent that exists, whose
// filesystem dir will be on.
func existing(dir string) string {
	for dir = filepath.Clean(dir); ; dir = filepath.Dir(dir) {
		if _, err := os.Stat(dir); err == nil || dir == filepath.Dir(dir) {
			return dir
		}
	}
}

// PeerFlags are the flags of the peer tier (package peer).
func PeerFlags(category string) []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "peer-listen", Usage: "join the cluster's peer tier, serving peers on `HOST:PORT` (this node's address on the cluster's network, e.g. 10.0.0.1:7480; 0.0.0.0:PORT binds every interface)", Category: category},
		&cli.StringFlag{Name: "peers", Usage: "every node of the peer tier, this one included: `URLS` http://HOST:PORT (https:// with --peer-tls-*) separated by commas; or @FILE with one per line, re-read when it changes and on SIGHUP; or dns:NAME:PORT, every address NAME resolves to, every 2 s (a headless service) (default: $FFCVFS_PEERS)", Category: category},
		&cli.StringFlag{Name: "peer-self", Usage: "this node's `URL` among --peers (default: http://, or https:// with --peer-tls-*, and --peer-listen)", Category: category},
		&cli.StringFlag{Name: "peer-secret-file", Usage: "`FILE` holding the secret every node of the peer tier shares, at least 16 bytes (default: $FFCVFS_PEER_SECRET)", Category: category},
		&cli.StringFlag{Name: "peer-cache-size", Usage: "the `SIZE` of RAM this node keeps the pages it owns in for the cluster, beyond --cache-size: 1.15/N of the beton and 2 pages holds a node's share (at most ⌈1.1·P/N⌉ of its P pages; the log says when it does not). 0: keep them in the cache's tiers alone, before all other pages (--disk-cache: size --disk-cache-size so; --compress-ram: within --cache-size) (default: 1GiB; 0 with --disk-cache)", Category: category},
		&cli.DurationFlag{Name: "peer-timeout", Value: peer.DefaultTimeout, Usage: "read from storage when a peer has not begun its answer within this `DURATION` (at most 10m), or, once it said it works on it (reading the page from storage), not finished it within 12 times as long", Category: category},
		&cli.StringFlag{Name: "peer-tls-cert", Usage: "mutual TLS between peers, with --peer-tls-key and --peer-tls-ca: this node's certificate, a PEM `FILE` naming its address (IP or DNS name), for server and client use", Category: category},
		&cli.StringFlag{Name: "peer-tls-key", Usage: "the PEM `FILE` of --peer-tls-cert's key, readable by its owner alone", Category: category},
		&cli.StringFlag{Name: "peer-tls-ca", Usage: "the PEM `FILE` of the CA that signs every node's certificate; a peer without one is refused", Category: category},
	}
}

// PeerOptions turns the flags of PeerFlags into peer.Options and the RAM
// the cache keeps the pages this node owns in (--peer-cache-size); ok is
// false without --peer-listen.
func PeerOptions(c *cli.Context) (o peer.Options, keep int64, ok bool, err error) {
	o.Listen = c.String("peer-listen")
	if o.Listen == "" {
		for _, f := range []string{"peers", "peer-self", "peer-secret-file", "peer-tls-cert", "peer-tls-key", "peer-tls-ca"} {
			if c.IsSet(f) {
				return o, 0, false, fmt.Errorf("--%s needs --peer-listen", f)
			}
		}
		return o, 0, false, nil
	}
	list := c.String("peers")
	if list == "" {
		list = os.Getenv("FFCVFS_PEERS")
	}
	if rest, isDNS := strings.CutPrefix(list, "dns:"); isDNS {
		list, o.PeersDNS = "", rest
	} else if rest, isFile := strings.CutPrefix(list, "@"); isFile {
		// A file lists URLs; dns: is for the flag alone.
		b, err := readfile.Bounded(rest, 1<<20)
		if err != nil {
			return o, 0, false, fmt.Errorf("--peers: %w", err)
		}
		list, o.PeersFile = string(b), rest
	}
	o.Peers = peer.SplitPeers(list)
	o.Self = c.String("peer-self")
	o.Secret = os.Getenv("FFCVFS_PEER_SECRET")
	if p := c.String("peer-secret-file"); p != "" {
		b, err := readfile.Bounded(p, 4096)
		if err != nil {
			return o, 0, false, fmt.Errorf("--peer-secret-file: %w", err)
		}
		if st, err := os.Stat(p); err == nil && st.Mode().Perm()&0o077 != 0 {
			return o, 0, false, fmt.Errorf("--peer-secret-file %s: readable by others (mode %v); chmod 600 it", p, st.Mode().Perm())
		}
		o.Secret = strings.TrimSpace(string(b))
	}
	size, tiers := c.String("peer-cache-size"), c.String("disk-cache") != "" || c.Bool("compress-ram")
	if size == "" {
		size = "1GiB"
		if c.String("disk-cache") != "" {
			size = "0" // the disk tier keeps them
		}
	}
	keep, err = bytesize.Parse(size)
	switch {
	case err != nil || keep < 0:
		return o, 0, false, fmt.Errorf("--peer-cache-size: want a size such as 4GiB, got %q", size)
	case keep == 0 && !tiers:
		return o, 0, false, errors.New("--peer-cache-size 0 keeps the pages this node owns in the cache's tiers alone, and there are none: give --disk-cache DIR (or --compress-ram), or a size")
	}
	if o.Timeout = c.Duration("peer-timeout"); o.Timeout <= 0 || o.Timeout > peer.MaxTimeout {
		return o, 0, false, fmt.Errorf("--peer-timeout %v: want more than 0 and at most %v", o.Timeout, peer.MaxTimeout)
	}
	o.TLSCert, o.TLSKey, o.TLSCA = c.String("peer-tls-cert"), c.String("peer-tls-key"), c.String("peer-tls-ca")
	o.Logger = slog.Default()
	if err := o.Validate(); err != nil {
		return o, 0, false, err
	}
	return o, keep, true, nil
}
