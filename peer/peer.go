// Package peer is the cluster's tier: the nodes that mount the same beton
// share its pages, so that the cluster reads each page from storage once.
//
// It is built on groupcache (github.com/golang/groupcache), which does
// what a cluster cache needs and nothing here re-implements: keys are
// sharded over the nodes by consistent hashing, each key is filled once
// across the cluster (its owner fills it, concurrent requests for it
// wait for that fill), peers talk HTTP, and hot keys are mirrored. A page
// of one object version never changes, which is the one kind of value
// groupcache keeps: keys carry the object's identity (its URL, ETag and
// size, as the disk tier's do) and the page number.
//
// A Source sits between the cache's tiers and storage. A read of a whole
// page asks the page's owner, which serves it from its groupcache memory
// or reads it from storage once. A read of part of a page (a range, as a
// random order makes) asks the owner for those bytes: its own key, hashed
// to the page's owner, whose getter takes them from the page. Every value
// carries a CRC-32C that is checked before use; a peer that is down, slow
// (Options.Timeout) or sends bytes that fail the check makes this node read
// from storage instead, without an error for the reader, and a peer that
// did not answer is not asked again for downHold.
//
// Peers prove they belong with a shared secret (a bearer token on every
// request, compared in constant time); the listener binds to the address
// it is given only.
package peer

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/golang/groupcache"

	"github.com/ffcvfs/ffcvfs/storage"
)

// Options configure a node of the peer tier.
type Options struct {
	// Listen is the host:port this node serves its peers on. The host
	// must be given: 0.0.0.0 binds every interface, and only when asked.
	Listen string
	// Peers are the base URLs of every node (http://host:port), this one
	// included; Self is this node's among them (default: http://Listen).
	Peers []string
	Self  string
	// Secret is the shared secret every node sends and checks.
	Secret string
	// CacheBytes is the memory this node keeps pages in for the
	// cluster: the pages it owns, and copies of pages often read from
	// others (groupcache's hot cache, at most a ninth of it).
	CacheBytes int64
	// Timeout bounds a request to a peer (default 5 s); past it the
	// node reads from storage.
	Timeout time.Duration
	Logger  *slog.Logger
}

// DefaultTimeout is Options.Timeout's default.
const DefaultTimeout = 5 * time.Second

// downHold is how long a peer that failed to answer is not asked: its
// pages are read from storage meanwhile, and one read then tries it
// again.
const downHold = 10 * time.Second

// maxPeers bounds the peer list.
const maxPeers = 4096

// Validate checks the options and fills in defaults.
func (o *Options) Validate() error {
	host, port, err := net.SplitHostPort(o.Listen)
	switch {
	case err != nil:
		return fmt.Errorf("peer listen address %q: want HOST:PORT (%v)", o.Listen, err)
	case host == "":
		return fmt.Errorf("peer listen address %q: give the address to bind, e.g. 10.0.0.1:%s (0.0.0.0:%s binds every interface)", o.Listen, port, port)
	case o.Secret == "":
		return errors.New("the peer tier needs a shared secret (--peer-secret-file or FFCVFS_PEER_SECRET)")
	case len(o.Secret) < 16:
		return errors.New("the peer secret is shorter than 16 bytes")
	case len(o.Peers) == 0:
		return errors.New("the peer tier needs the list of peers")
	case len(o.Peers) > maxPeers:
		return fmt.Errorf("%d peers: at most %d", len(o.Peers), maxPeers)
	case o.CacheBytes <= 0:
		return fmt.Errorf("peer cache size %d: must be positive", o.CacheBytes)
	}
	if o.Self == "" {
		o.Self = "http://" + o.Listen
	}
	self := false
	for i, p := range o.Peers {
		u, err := url.Parse(p)
		if err != nil || u.Scheme != "http" || u.Host == "" || u.Path != "" && u.Path != "/" || u.User != nil {
			return fmt.Errorf("peer %q: want http://HOST:PORT", p)
		}
		o.Peers[i] = "http://" + u.Host
		self = self || o.Peers[i] == strings.TrimSuffix(o.Self, "/")
	}
	o.Self = strings.TrimSuffix(o.Self, "/")
	if !self {
		return fmt.Errorf("this node (%s) is not among the peers", o.Self)
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

// node is the process's member of the tier: groupcache allows one pool
// of peers per process.
var node struct {
	once sync.Once
	err  error
	pool *groupcache.HTTPPool
	srv  *http.Server
	ln   net.Listener

	pages, ranges *groupcache.Group

	mu      sync.Mutex
	sources map[string]*Source // by key prefix
}

// Stats are what a node's tier did.
type Stats struct {
	Reads          uint64 `json:"reads"`           // ReadAt calls
	BytesRead      uint64 `json:"bytes_read"`      // bytes they returned
	StorageReads   uint64 `json:"storage_reads"`   // requests this node sent to storage
	StorageBytes   uint64 `json:"storage_bytes"`   // bytes they read
	Corrupt        uint64 `json:"corrupt"`         // values that failed their CRC
	PeerLoads      int64  `json:"peer_loads"`      // values a peer served
	PeerErrors     int64  `json:"peer_errors"`     // requests to peers that failed
	ServerRequests int64  `json:"server_requests"` // requests peers sent this node
	CacheBytes     int64  `json:"cache_bytes"`     // bytes kept for the cluster
}

// Source reads an object through the peer tier.
type Source struct {
	storage.Source
	id     string // the object's identity
	prefix string // the key prefix: a hash of id
	block  int64  // page size: the unit of the tier

	reads, bytesRead, storageReads, storageBytes, corrupt atomic.Uint64
}

// Wrap returns src read through the tier in pages of pageSize bytes
// (aligned at offset 0, as beton pages are), joining the tier with opts
// at the first call. src must have an identity (storage.Identifier) that
// names its version, or the tier could mix versions.
func Wrap(src storage.Source, pageSize int64, opts Options) (*Source, error) {
	id := ""
	if i, ok := src.(storage.Identifier); ok {
		id = i.Identity()
	}
	if id == "" {
		return nil, fmt.Errorf("%s: the peer tier needs an object version (ETag, or size and time) to name its pages by", src.Name())
	}
	if pageSize <= 0 || pageSize > 1<<30 {
		return nil, fmt.Errorf("%s: page size %d out of range for the peer tier", src.Name(), pageSize)
	}
	node.once.Do(func() { node.err = start(opts) })
	if node.err != nil {
		return nil, node.err
	}
	sum := sha256.Sum256([]byte(id))
	s := &Source{Source: src, id: id, prefix: hex.EncodeToString(sum[:12]), block: pageSize}
	node.mu.Lock()
	node.sources[s.prefix] = s
	node.mu.Unlock()
	return s, nil
}

// start joins the tier: the pool of peers, the groups and the listener.
func start(opts Options) error {
	if err := opts.Validate(); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", opts.Listen)
	if err != nil {
		return fmt.Errorf("peer tier: %w", err)
	}
	node.sources = map[string]*Source{}
	node.pool = groupcache.NewHTTPPoolOpts(opts.Self, &groupcache.HTTPPoolOptions{
		BasePath: "/ffcvfs-peer/",
		// Points per node on the hash ring: with groupcache's 50 the
		// nodes' shares of the pages differ by a fifth and more, and a
		// node's budget must cover its share.
		Replicas: 256,
		// A range's key hashes as its page's, so that its owner has the
		// page.
		HashFn: func(b []byte) uint32 {
			if i := strings.IndexByte(string(b), '@'); i >= 0 {
				b = b[:i]
			}
			return crc32.ChecksumIEEE(b)
		},
	})
	tr := &http.Transport{
		DialContext:         (&net.Dialer{Timeout: opts.Timeout}).DialContext,
		MaxIdleConnsPerHost: 64,
		IdleConnTimeout:     90 * time.Second,
	}
	bearer := "Bearer " + opts.Secret
	var down sync.Map // host → time.Time until which it is not asked
	node.pool.Transport = func(context.Context) http.RoundTripper {
		return roundTripper(func(r *http.Request) (*http.Response, error) {
			if until, ok := down.Load(r.URL.Host); ok && time.Now().Before(until.(time.Time)) {
				return nil, fmt.Errorf("peer %s failed lately; not asked until %s", r.URL.Host, until.(time.Time).Format(time.TimeOnly))
			}
			ctx, cancel := context.WithTimeout(r.Context(), opts.Timeout)
			r = r.Clone(ctx)
			r.Header.Set("Authorization", bearer)
			resp, err := tr.RoundTrip(r)
			if err != nil {
				cancel()
				if r.Context().Err() == nil || errors.Is(r.Context().Err(), context.DeadlineExceeded) {
					// Down or silent: its pages come from storage for a
					// while, without a wait per read.
					down.Store(r.URL.Host, time.Now().Add(downHold))
				}
				return nil, err
			}
			down.Delete(r.URL.Host)
			resp.Body = cancelOnClose{resp.Body, cancel}
			return resp, nil
		})
	}
	node.pool.Set(opts.Peers...)
	node.pages = groupcache.NewGroup("pages", opts.CacheBytes, groupcache.GetterFunc(getPage))
	node.ranges = groupcache.NewGroup("ranges", 0, groupcache.GetterFunc(getRange))
	mux := http.NewServeMux()
	mux.Handle("/ffcvfs-peer/", authorize(opts.Secret, node.pool))
	node.ln = ln
	node.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, ErrorLog: slog.NewLogLogger(opts.Logger.Handler(), slog.LevelDebug)}
	go node.srv.Serve(ln)
	opts.Logger.Info("peer tier: serving", "listen", ln.Addr().String(), "self", opts.Self, "peers", len(opts.Peers))
	return nil
}

// Addr returns the address the tier listens on, or "" before it started.
func Addr() string {
	if node.ln == nil {
		return ""
	}
	return node.ln.Addr().String()
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

type cancelOnClose struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (c cancelOnClose) Close() error { err := c.ReadCloser.Close(); c.cancel(); return err }

// authorize refuses requests without the secret.
func authorize(secret string, next http.Handler) http.Handler {
	want := []byte("Bearer " + secret)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), want) != 1 {
			http.Error(w, "not a peer", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// Keys: PREFIX/PAGE for a page, PREFIX/PAGE@OFF+LEN for LEN bytes of it
// from OFF.
func pageKey(prefix string, p int64) string { return prefix + "/" + strconv.FormatInt(p, 10) }

func rangeKey(prefix string, p, off, n int64) string {
	return pageKey(prefix, p) + "@" + strconv.FormatInt(off, 10) + "+" + strconv.FormatInt(n, 10)
}

// parseKey returns a key's source, page and range (n = 0: the page).
func parseKey(key string) (s *Source, p, off, n int64, err error) {
	prefix, rest, ok := strings.Cut(key, "/")
	if !ok {
		return nil, 0, 0, 0, fmt.Errorf("bad key %q", key)
	}
	node.mu.Lock()
	s = node.sources[prefix]
	node.mu.Unlock()
	if s == nil {
		return nil, 0, 0, 0, fmt.Errorf("key %q: no such object here", key)
	}
	page, rng, hasRange := strings.Cut(rest, "@")
	if p, err = strconv.ParseInt(page, 10, 64); err != nil || p < 0 || p >= (s.Size()+s.block-1)/s.block {
		return nil, 0, 0, 0, fmt.Errorf("key %q: no such page", key)
	}
	if hasRange {
		a, b, _ := strings.Cut(rng, "+")
		off, err1 := strconv.ParseInt(a, 10, 64)
		n, err2 := strconv.ParseInt(b, 10, 64)
		if err1 != nil || err2 != nil || off < 0 || n <= 0 || off >= s.pageLen(p) || n > s.pageLen(p)-off {
			return nil, 0, 0, 0, fmt.Errorf("key %q: no such range", key)
		}
		return s, p, off, n, nil
	}
	return s, p, 0, 0, nil
}

// Identity returns the object's identity, as the source below has it.
func (s *Source) Identity() string { return s.id }

// RequestStats returns the failed attempts of the storage below.
func (s *Source) RequestStats() storage.RequestStats {
	if rc, ok := s.Source.(storage.RequestCounter); ok {
		return rc.RequestStats()
	}
	return storage.RequestStats{}
}

// pageLen returns the bytes of page p (the last may be short).
func (s *Source) pageLen(p int64) int64 { return min(s.block, s.Size()-p*s.block) }

// sealed returns b with its CRC-32C appended.
func sealed(b []byte) []byte {
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// unseal checks a value's CRC and returns its bytes.
func unseal(v []byte) ([]byte, bool) {
	if len(v) < 4 {
		return nil, false
	}
	b := v[:len(v)-4]
	return b, crc32.Checksum(b, castagnoli) == binary.LittleEndian.Uint32(v[len(v)-4:])
}

// fromStorage reads [off, off+n) of the object from storage.
func (s *Source) fromStorage(ctx context.Context, dst []byte, off int64) error {
	s.storageReads.Add(1)
	n, err := s.Source.ReadAt(ctx, dst, off)
	s.storageBytes.Add(uint64(n))
	if err != nil && !(errors.Is(err, io.EOF) && n == len(dst)) {
		return err
	}
	return nil
}

// getPage fills a page's value from storage: this node owns it, or its
// owner could not be asked.
func getPage(ctx context.Context, key string, dest groupcache.Sink) error {
	s, p, _, _, err := parseKey(key)
	if err != nil {
		return err
	}
	buf := make([]byte, s.pageLen(p), s.pageLen(p)+4)
	if err := s.fromStorage(ctx, buf, p*s.block); err != nil {
		return err
	}
	return dest.SetBytes(sealed(buf))
}

// getRange fills a range's value: from the page where this node owns it,
// else (its owner could not be asked) from storage.
func getRange(ctx context.Context, key string, dest groupcache.Sink) error {
	s, p, off, n, err := parseKey(key)
	if err != nil {
		return err
	}
	buf := make([]byte, n, n+4)
	if _, remote := node.pool.PickPeer(pageKey(s.prefix, p)); !remote {
		var v []byte
		if err := node.pages.Get(ctx, pageKey(s.prefix, p), groupcache.AllocatingByteSliceSink(&v)); err == nil {
			if b, ok := unseal(v); ok && int64(len(b)) == s.pageLen(p) {
				copy(buf, b[off:off+n])
				return dest.SetBytes(sealed(buf))
			}
			s.corrupt.Add(1)
		}
	}
	if err := s.fromStorage(ctx, buf, p*s.block+off); err != nil {
		return err
	}
	return dest.SetBytes(sealed(buf))
}

// ReadAt reads len(b) bytes at off through the tier: page by page, whole
// pages by their keys, parts by range keys. A value that fails its check
// is read from storage.
func (s *Source) ReadAt(ctx context.Context, b []byte, off int64) (int, error) {
	s.reads.Add(1)
	size := s.Size()
	if off >= size {
		return 0, io.EOF
	}
	want := len(b)
	if int64(want) > size-off {
		b = b[:size-off]
	}
	for done := 0; done < len(b); {
		pos := off + int64(done)
		p := pos / s.block
		in := pos - p*s.block
		n := min(int64(len(b)-done), s.pageLen(p)-in)
		dst := b[done : done+int(n)]
		var key string
		group := node.pages
		if in == 0 && n == s.pageLen(p) {
			key = pageKey(s.prefix, p)
		} else {
			key, group = rangeKey(s.prefix, p, in, n), node.ranges
		}
		var v []byte
		err := group.Get(ctx, key, groupcache.AllocatingByteSliceSink(&v))
		got, ok := unseal(v)
		if err == nil && ok && len(got) == len(dst) {
			copy(dst, got)
		} else {
			if err == nil {
				s.corrupt.Add(1)
			}
			if ctx.Err() != nil {
				return done, ctx.Err()
			}
			if err := s.fromStorage(ctx, dst, pos); err != nil {
				return done, err
			}
		}
		done += int(n)
	}
	s.bytesRead.Add(uint64(len(b)))
	if len(b) < want {
		return len(b), io.EOF
	}
	return want, nil
}

// Stats returns what the tier did for this source, and the node's
// groupcache figures.
func (s *Source) Stats() Stats {
	st := Stats{
		Reads:        s.reads.Load(),
		BytesRead:    s.bytesRead.Load(),
		StorageReads: s.storageReads.Load(),
		StorageBytes: s.storageBytes.Load(),
		Corrupt:      s.corrupt.Load(),
	}
	for _, g := range []*groupcache.Group{node.pages, node.ranges} {
		st.PeerLoads += g.Stats.PeerLoads.Get()
		st.PeerErrors += g.Stats.PeerErrors.Get()
		st.ServerRequests += g.Stats.ServerRequests.Get()
	}
	st.CacheBytes = node.pages.CacheStats(groupcache.MainCache).Bytes + node.pages.CacheStats(groupcache.HotCache).Bytes
	return st
}
