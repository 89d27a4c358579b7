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
// to the page's owner, whose getter takes them from the page. A peer that
// is down, slow (Options.Timeout, for the whole answer) or sends a value
// that fails its check makes this node read from storage instead, without
// an error for the reader, and is not asked again for downHold.
//
// # Trust
//
// Peers share a secret, which never crosses the network. From it two keys
// are derived (HMAC-SHA256 of fixed labels): one signs requests, one tags
// values.
//
//   - A request carries X-Ffcvfs-Peer: UNIXTIME.MAC, the MAC over the
//     method, the path and the time; a server refuses a wrong MAC or a time
//     more than maxSkew from its own (a captured request can be replayed
//     only for that page, whose bytes the listener saw anyway).
//   - A value is its bytes and a 16-byte tag, HMAC-SHA256 over its key and
//     its bytes: a value sent for another page, or by a node without the
//     secret, fails. The answer of a peer is read whole, at most a page and
//     its framing, within Options.Timeout, and its tag checked, before
//     groupcache keeps it or anything reads it; values fill no tier of the
//     node (RAM, disk) unchecked.
//
// The listener binds to the address it is given only, serves at most
// maxConns connections at once (others wait in the kernel's backlog), and
// drops a connection that sends no request, or sends it too slowly, within
// the server's timeouts.
package peer

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
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
	"golang.org/x/net/netutil"
	"google.golang.org/protobuf/encoding/protowire"

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

// basePath is where the tier's requests go: basePath + group + "/" + key.
const basePath = "/ffcvfs-peer/"

// Bounds of the listener: connections served at once, and how long a
// connection may take to send a request, stay idle between requests, and
// take to have its answer written (a page the owner may first read from
// storage, within its read deadline).
const (
	maxConns          = 1024
	readHeaderTimeout = 10 * time.Second
	idleTimeout       = time.Minute
	writeTimeout      = 5 * time.Minute
)

// maxSkew is how far a request's time may be from the server's clock.
const maxSkew = 5 * time.Minute

// authHeader carries a request's time and MAC.
const authHeader = "X-Ffcvfs-Peer"

// tagLen is the length of a value's tag.
const tagLen = 16

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

	// reqKey signs requests, valueKey tags values; both derive from the
	// secret.
	reqKey, valueKey []byte

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
	node.reqKey = derive(opts.Secret, "ffcvfs peer request")
	node.valueKey = derive(opts.Secret, "ffcvfs peer value")
	node.pool = groupcache.NewHTTPPoolOpts(opts.Self, &groupcache.HTTPPoolOptions{
		BasePath: basePath,
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
	var down sync.Map // host → time.Time until which it is not asked
	node.pool.Transport = func(context.Context) http.RoundTripper {
		return roundTripper(func(r *http.Request) (*http.Response, error) {
			if until, ok := down.Load(r.URL.Host); ok && time.Now().Before(until.(time.Time)) {
				return nil, fmt.Errorf("peer %s failed lately; not asked until %s", r.URL.Host, until.(time.Time).Format(time.TimeOnly))
			}
			ctx, cancel := context.WithTimeout(r.Context(), opts.Timeout)
			defer cancel()
			resp, err := fetch(ctx, tr, r)
			if err != nil {
				if r.Context().Err() == nil {
					// Down, silent, slow, or sending what fails its
					// check: its pages come from storage for a while,
					// without a wait per read.
					down.Store(r.URL.Host, time.Now().Add(downHold))
					opts.Logger.Debug("peer tier: a peer failed", "peer", r.URL.Host, "err", err)
				}
				return nil, err
			}
			down.Delete(r.URL.Host)
			return resp, nil
		})
	}
	node.pool.Set(opts.Peers...)
	node.pages = groupcache.NewGroup("pages", opts.CacheBytes, groupcache.GetterFunc(getPage))
	node.ranges = groupcache.NewGroup("ranges", 0, groupcache.GetterFunc(getRange))
	mux := http.NewServeMux()
	mux.Handle(basePath, authorize(node.pool))
	node.ln = ln
	node.srv = &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: readHeaderTimeout,
		ReadTimeout:       readHeaderTimeout,
		WriteTimeout:      writeTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    16 << 10,
		ErrorLog:          slog.NewLogLogger(opts.Logger.Handler(), slog.LevelDebug),
	}
	go node.srv.Serve(netutil.LimitListener(ln, maxConns))
	opts.Logger.Info("peer tier: serving", "listen", ln.Addr().String(), "self", opts.Self, "peers", len(opts.Peers))
	return nil
}

// derive returns a key of the secret for one use.
func derive(secret, label string) []byte {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(label))
	return m.Sum(nil)
}

// signRequest returns the authHeader value of a request for path at t.
func signRequest(method, path string, t time.Time) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	m := hmac.New(sha256.New, node.reqKey)
	m.Write([]byte(method + "\n" + path + "\n" + ts))
	return ts + "." + hex.EncodeToString(m.Sum(nil))
}

// fetch sends r, signed, and reads its answer whole within ctx: at most
// the largest value of its key's object and the framing, its tag checked.
// The response handed back holds the checked body.
func fetch(ctx context.Context, tr http.RoundTripper, r *http.Request) (*http.Response, error) {
	group, key, ok := strings.Cut(strings.TrimPrefix(r.URL.Path, basePath), "/")
	s, _, _, _, err := parseKey(key)
	if !ok || err != nil {
		return nil, fmt.Errorf("peer tier: asking for %q: %v", r.URL.Path, err)
	}
	r = r.Clone(ctx)
	r.Header.Set(authHeader, signRequest(r.Method, r.URL.Path, time.Now()))
	resp, err := tr.RoundTrip(r)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		// groupcache looks at the status only.
		return &http.Response{StatusCode: resp.StatusCode, Status: resp.Status, Body: http.NoBody, Header: http.Header{}}, nil
	}
	limit := s.block + tagLen + 32 // the value, its tag, GetResponse's framing
	body, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return nil, fmt.Errorf("peer tier: reading the answer for %s/%s: %w", group, key, err)
	}
	if int64(len(body)) > limit {
		return nil, fmt.Errorf("peer tier: the answer for %s/%s is longer than a page and its framing (%d bytes)", group, key, limit)
	}
	value, err := responseValue(body)
	if err != nil {
		return nil, fmt.Errorf("peer tier: the answer for %s/%s: %w", group, key, err)
	}
	if _, ok := open(key, value); !ok {
		s.corrupt.Add(1)
		return nil, fmt.Errorf("peer tier: the value for %s/%s fails its check", group, key)
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	resp.ContentLength = int64(len(body))
	return resp, nil
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

// responseValue returns the value of groupcache's GetResponse message:
// field 1, bytes (field 2, a float64, and unknown fields are skipped).
func responseValue(b []byte) ([]byte, error) {
	var value []byte
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil, protowire.ParseError(n)
		}
		b = b[n:]
		if num == 1 && typ == protowire.BytesType {
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return nil, protowire.ParseError(n)
			}
			value, b = v, b[n:]
			continue
		}
		n = protowire.ConsumeFieldValue(num, typ, b)
		if n < 0 {
			return nil, protowire.ParseError(n)
		}
		b = b[n:]
	}
	return value, nil
}

// authorize refuses requests whose MAC is wrong or whose time is more than
// maxSkew from the server's.
func authorize(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ts, mac, _ := strings.Cut(r.Header.Get(authHeader), ".")
		sec, err := strconv.ParseInt(ts, 10, 64)
		if err != nil || time.Since(time.Unix(sec, 0)).Abs() > maxSkew {
			http.Error(w, "not a peer", http.StatusUnauthorized)
			return
		}
		got, err := hex.DecodeString(mac)
		want := signRequest(r.Method, r.URL.Path, time.Unix(sec, 0))
		wantMAC, _ := hex.DecodeString(want[strings.IndexByte(want, '.')+1:])
		if err != nil || !hmac.Equal(got, wantMAC) {
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
	// One key per value: numbers as FormatInt writes them (no sign, no
	// leading zeros), and no range that is the whole page, so that no
	// page can be filled from storage under several keys.
	page, rng, hasRange := strings.Cut(rest, "@")
	if p, err = strconv.ParseInt(page, 10, 64); err != nil || p < 0 || p >= (s.Size()+s.block-1)/s.block || strconv.FormatInt(p, 10) != page {
		return nil, 0, 0, 0, fmt.Errorf("key %q: no such page", key)
	}
	if hasRange {
		a, b, _ := strings.Cut(rng, "+")
		off, err1 := strconv.ParseInt(a, 10, 64)
		n, err2 := strconv.ParseInt(b, 10, 64)
		if err1 != nil || err2 != nil || off < 0 || n <= 0 || off >= s.pageLen(p) || n > s.pageLen(p)-off ||
			off == 0 && n == s.pageLen(p) || rangeKey(prefix, p, off, n) != key {
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

// sealed returns b, the value of key, with its tag appended.
func sealed(key string, b []byte) []byte {
	return append(b, tag(key, b)...)
}

// tag is a value's tag: HMAC-SHA256 over its key and its bytes, cut to
// tagLen bytes.
func tag(key string, b []byte) []byte {
	m := hmac.New(sha256.New, node.valueKey)
	m.Write([]byte(key))
	m.Write([]byte{0})
	m.Write(b)
	return m.Sum(nil)[:tagLen]
}

// open checks the tag of v, the value of key, and returns its bytes.
func open(key string, v []byte) ([]byte, bool) {
	if len(v) < tagLen {
		return nil, false
	}
	b := v[:len(v)-tagLen]
	return b, hmac.Equal(v[len(v)-tagLen:], tag(key, b))
}

// strip returns the bytes of a value groupcache holds: one this node made,
// or one whose tag was checked as it arrived (fetch).
func strip(v []byte) ([]byte, bool) {
	if len(v) < tagLen {
		return nil, false
	}
	return v[:len(v)-tagLen], true
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
	buf := make([]byte, s.pageLen(p), s.pageLen(p)+tagLen)
	if err := s.fromStorage(ctx, buf, p*s.block); err != nil {
		return err
	}
	return dest.SetBytes(sealed(key, buf))
}

// getRange fills a range's value: from the page where this node owns it,
// else (its owner could not be asked) from storage.
func getRange(ctx context.Context, key string, dest groupcache.Sink) error {
	s, p, off, n, err := parseKey(key)
	if err != nil {
		return err
	}
	buf := make([]byte, n, n+tagLen)
	if _, remote := node.pool.PickPeer(pageKey(s.prefix, p)); !remote {
		var v []byte
		if err := node.pages.Get(ctx, pageKey(s.prefix, p), groupcache.AllocatingByteSliceSink(&v)); err == nil {
			if b, ok := strip(v); ok && int64(len(b)) == s.pageLen(p) {
				copy(buf, b[off:off+n])
				return dest.SetBytes(sealed(key, buf))
			}
			s.corrupt.Add(1)
		}
	}
	if err := s.fromStorage(ctx, buf, p*s.block+off); err != nil {
		return err
	}
	return dest.SetBytes(sealed(key, buf))
}

// ReadAt reads len(b) bytes at off through the tier: page by page, whole
// pages by their keys, parts by range keys. A value a peer sent is checked
// as it arrives (fetch); one that failed, or a peer that could not be
// asked, is read from storage.
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
		got, ok := strip(v)
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
