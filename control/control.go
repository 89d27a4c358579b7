// Package control names the files of an ffcvfs mount's control folder,
// MOUNTPOINT/.ffcvfs, holds the schema of its stats.json, and speaks to
// it from Go: ReadStats, Announce. The mount (package fs) serves what this
// package names; the commands, tools and tests read through it. The
// Python package (python/ffcvfs) keeps a client of its own.
//
// # What it must never do
//
// Read a mount from inside the process that serves it: a FUSE server that
// reads its own mount waits for itself (see package fs).
package control

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"

	"github.com/ffcvfs/ffcvfs/internal/peerstats"
	"github.com/ffcvfs/ffcvfs/internal/sockpath"
	"github.com/ffcvfs/ffcvfs/pagecache"
)

// The control folder and its files.
const (
	// Dir is the control folder at the mount's root, found by path but
	// never listed.
	Dir = ".ffcvfs"
	// DatasetFile is the whole beton, byte for byte, from the cache.
	DatasetFile = "dataset.beton"
	// StatsFile is Stats as JSON, made at every lookup.
	StatsFile = "stats.json"
	// AnnounceFile is a symlink to the mount's announce socket.
	AnnounceFile = "announce"
	// OrdersDir holds the order files: OrdersDir/KIND/SEED[/R-of-W]/EPOCH.
	OrdersDir = "orders"
)

// Path returns the path of elem in the control folder of the mount at
// mountpoint.
func Path(mountpoint string, elem ...string) string {
	return filepath.Join(append([]string{mountpoint, Dir}, elem...)...)
}

// IsMount reports whether path is the root of an ffcvfs mount: whether
// it has a control folder.
func IsMount(path string) bool {
	st, err := os.Stat(Path(path))
	return err == nil && st.IsDir()
}

// ReadStats reads the stats.json of the mount at mountpoint.
func ReadStats(mountpoint string) (Stats, error) {
	var s Stats
	b, err := os.ReadFile(Path(mountpoint, StatsFile))
	if err != nil {
		return s, err
	}
	if err := json.Unmarshal(b, &s); err != nil {
		return s, fmt.Errorf("%s: %w", Path(mountpoint, StatsFile), err)
	}
	return s, nil
}

// Stats is what stats.json holds.
type Stats struct {
	Cache pagecache.Stats `json:"cache"`
	Reads struct {
		// Images counts the sample files read from their start: each
		// read of a file through the mount once. Reads the kernel serves
		// from its page cache (--kernel-cache) never reach the mount.
		Images uint64 `json:"images"`
		// JPGImages counts the JPEG sample files of Images, and
		// JPGRestarts those of them whose JPEG has restart markers a
		// crop can be decoded from (ffcvfs write gives every JPEG them;
		// FFCV's writer does not: ffcvfs write --from-beton adds them).
		JPGImages   uint64 `json:"jpg_images"`
		JPGRestarts uint64 `json:"jpg_images_with_restarts"`
		JPG         uint64 `json:"jpg"`
		JPGBytes    uint64 `json:"jpg_bytes"`
		PPM         uint64 `json:"ppm"`
		PPMBytes    uint64 `json:"ppm_bytes"`
		Beton       uint64 `json:"dataset_beton"`
		BetonBytes  uint64 `json:"dataset_beton_bytes"`
		// Errors counts lookups and reads answered with an error, EIO
		// mostly; not those interrupted, which the kernel restarts.
		Errors uint64 `json:"errors"`
	} `json:"reads"`
	// FUSE describes the kernel side: the requests it sent, by opcode
	// (the mount's round trips), what it was offered, and what of the
	// mount's files it may hold in its page cache.
	FUSE struct {
		Requests map[string]uint64 `json:"requests"`
		// KernelProtocol is the kernel's FUSE version (7.N).
		KernelProtocol string `json:"kernel_protocol"`
		// NoOpen: zero-message opens (no OPEN, RELEASE); NoFlush: no
		// FLUSH at close.
		NoOpen  bool `json:"no_open"`
		NoFlush bool `json:"no_flush"`
		// KernelCacheBytes bounds what the kernel's page cache holds of
		// the files read: the sizes of the files, and the dataset.beton
		// pages, given to it since their page was loaded, or -1 where
		// unbounded (--kernel-cache). Invalidations counts the files and
		// ranges dropped from it because their page was evicted.
		KernelCacheBytes int64  `json:"kernel_cache_bytes"`
		Invalidations    uint64 `json:"invalidations"`
		// GOMAXPROCS is how many cores the mount's Go code may run on
		// now: it follows the load (see ffcvfs mount --help).
		GOMAXPROCS int `json:"gomaxprocs"`
	} `json:"fuse"`
	// Source is the beton the mount serves, as it was given (a path, or
	// an s3:// or http(s):// URL; never credentials).
	Source   string `json:"source"`
	Samples  int    `json:"samples"`
	Classes  int    `json:"classes"`
	Pages    int    `json:"pages"`
	PageSize int64  `json:"page_size"`
	// DataBytes is the size of the data pages, the dataset's share of
	// what is read from storage.
	DataBytes int64 `json:"data_bytes"`
	// Announced counts the orders announced through .ffcvfs/announce (the
	// announce socket).
	// A plan leaves cache.plans once every sample of it has been read, so
	// this is how a finished announcement shows.
	Announced uint64 `json:"announced"`
	// PlanOwners gives the pid of the process that announced each live
	// plan (cache.plans); a plan is withdrawn when that process exits.
	PlanOwners map[string]uint32 `json:"plan_owners"`
	// Peers is what the cluster's peer tier did (--peer-listen), or nil.
	// StorageBytes there is what this node read from storage for the
	// tier; cache.bytes_read counts what the cache read through it.
	// Its fields: what the cache read through the tier (its reads, its
	// storage reads by reason) and what the tier did (values peers
	// served, requests, members, pages owned).
	Peers *peerstats.Stats `json:"peers,omitempty"`
}

// Announce announces an order to the ffcvfs mount at mountpoint through
// its announce socket: sample ids, or ImageFolder indices if imagefolder
// is set. The order is the calling process's plan until it exits or
// announces another. The error is the mount's sentence when it refused.
func Announce(ctx context.Context, mountpoint string, ids []uint32, imagefolder bool) error {
	path := Path(mountpoint, AnnounceFile)
	if !sockpath.Fits(path) {
		// The link's target, the socket itself, is short wherever the
		// mount is (the mount places it so).
		if target, err := os.Readlink(path); err == nil && filepath.IsAbs(target) {
			path = target
		}
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return fmt.Errorf("announcing an order to %s: %w", mountpoint, err)
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		c.SetDeadline(dl)
	}
	w := bufio.NewWriterSize(c, 64<<10)
	if imagefolder {
		w.WriteString("imagefolder\n")
	}
	var num [24]byte
	for _, s := range ids {
		w.Write(strconv.AppendUint(num[:0], uint64(s), 10))
		w.WriteByte('\n')
	}
	// A mount that refuses a line answers and closes at once, so a write
	// may fail (EPIPE) before the answer is read: the answer says why.
	werr := w.Flush()
	if werr == nil {
		c.(*net.UnixConn).CloseWrite()
	}
	reply, err := io.ReadAll(io.LimitReader(c, 4096))
	if len(reply) == 0 && werr != nil {
		return fmt.Errorf("announcing an order to %s: %w", mountpoint, werr)
	}
	if len(reply) == 0 && err != nil {
		return fmt.Errorf("announcing an order to %s: no answer: %w", mountpoint, err)
	}
	msg := string(bytes.TrimSpace(reply))
	if rest, ok := bytes.CutPrefix(reply, []byte("ok ")); ok && len(bytes.TrimSpace(rest)) > 0 {
		return nil
	}
	if rest, ok := bytes.CutPrefix(reply, []byte("error: ")); ok {
		msg = string(bytes.TrimSpace(rest))
	}
	if msg == "" {
		msg = "the mount closed the connection without an answer"
	}
	return fmt.Errorf("announcing an order to %s: %s", mountpoint, msg)
}
