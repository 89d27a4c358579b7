// Package peer is the cluster's tier: the nodes that mount the same beton
// share its pages, so that the cluster reads each page from storage once.
//
// It is built on groupcache (github.com/golang/groupcache), which does
// what a cluster cache needs and nothing here re-implements: keys are
// sharded over the nodes by consistent hashing, each key is filled once
// across the cluster (its owner fills it, concurrent requests for it
// wait for that fill), and peers talk HTTP. A page
// of one object version never changes, which is the one kind of value
// groupcache keeps: keys carry the object's identity (its URL, ETag and
// size, as the disk tier's do) and the page number.
//
// A Source sits between the cache's tiers and storage. A read of a whole
// page asks the page's owner, which serves it from its groupcache memory
// (Options.CacheBytes, which may be 0) or from its page cache's slots and
// tiers (HoldIn), or reads it from storage once and keeps it in those
// tiers, the pages it owns before any other: a page is held once on a
// node, and a node with a disk tier owns as much as its disk holds. A read
// of part of a page (a range, as a random order makes) asks the owner for
// those bytes: its own key, hashed to the page's owner, whose getter takes
// them from the page. A node asks owners directly (the pool's peer for the
// key), not through the group's Get, whose hot cache would keep one in ten
// values of other nodes and push out pages this node owns: each node keeps
// the pages it owns (in Options.CacheBytes or its cache's tiers) and no
// others. A peer that is down, slow (Options.Timeout to begin its answer,
// fillWait times as long to finish it, as it may read the page from
// storage) or sends a value that fails its check is not asked again for
// downHold; its pages are asked of the node next on the hash ring without
// it (members.go), the same node for every node, which fills each from
// storage once, and failing that this node reads from storage, without an
// error for the reader. Every read from storage is counted with its reason
// (Stats.StorageReasons): the node owns the page, or its owner timed out,
// was gone, answered an error or sent a value that failed its check.
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
// With Options.TLSCert, TLSKey and TLSCA the peers speak mutual TLS
// (crypto/tls, 1.2 at least): a node accepts only connections whose client
// certificate its CA signed, and talks only to servers whose certificate
// it signed and names the peer's address; the secret is still required,
// so that a certificate alone opens nothing. Without them the traffic is
// plain HTTP, for a private network.
//
// The listener binds to the address it is given only, serves at most
// maxConns connections at once (others wait in the kernel's backlog), and
// drops a connection that sends no request, or sends it too slowly, within
// the server's timeouts.
package peer

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/golang/groupcache"
	"github.com/golang/groupcache/groupcachepb"
	"golang.org/x/net/netutil"

	"github.com/ffcvfs/ffcvfs/storage"
)

// node is the process's member of the tier: groupcache allows one pool
// of peers per process.
var node struct {
	once sync.Once
	err  error
	pool *groupcache.HTTPPool
	srv  *http.Server
	ln   net.Listener

	pages, ranges *groupcache.Group
	members       *members
	// down holds the nodes (base URLs) that failed lately, with the time
	// until which they are not asked.
	down sync.Map

	// reqKey signs requests, valueKey tags values; both derive from the
	// secret.
	reqKey, valueKey []byte

	mu      sync.Mutex
	sources map[string]*Source // by key prefix
}

// errCorruptValue marks an answer whose value failed its check.
var errCorruptValue = errors.New("fails its check")

// Source reads an object through the peer tier.
type Source struct {
	storage.Source
	id     string // the object's identity
	prefix string // the key prefix: a hash of id
	block  int64  // page size: the unit of the tier

	reads, bytesRead, storageReads, storageBytes, corrupt, held atomic.Uint64
	peerLoads, peerErrors                                       atomic.Int64 // asked of owners directly (ReadAt)
	why                                                         [len(reasons)]atomic.Uint64

	holder atomic.Pointer[Holder] // HoldIn
}

// Holder is where a node keeps pages besides the tier's memory: its page
// cache's slots and tiers (pagecache.Cache). Page numbers are absolute
// (offset / page size).
type Holder interface {
	// ReadHeld copies bytes [off, off+len(b)) of page p to b if the node
	// holds the page, without reading storage, and reports whether it
	// did.
	ReadHeld(p, off int64, b []byte) bool
	// Keep offers page p, which this node read whole from storage, to
	// keep; the caller gives b up.
	Keep(ctx context.Context, p int64, b []byte)
	// KeepFirst names the pages to give up last: those this node owns.
	KeepFirst(keep func(p int64) bool)
}

// HoldIn makes the node serve its pages from h, and keep there the pages
// it reads from storage for the cluster, the pages it owns before others:
// a page is held once on the node, and with a disk tier a node owns as
// many pages as its disk holds, beyond Options.CacheBytes.
func (s *Source) HoldIn(h Holder) {
	h.KeepFirst(s.Owns)
	s.holder.Store(&h)
}

// Owns reports whether this node owns page p now.
func (s *Source) Owns(p int64) bool {
	_, remote := node.pool.PickPeer(pageKey(s.prefix, p))
	return !remote
}

// holds returns what HoldIn gave, or nil.
func (s *Source) holds() Holder {
	if h := s.holder.Load(); h != nil {
		return *h
	}
	return nil
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
		Replicas: replicas,
		HashFn:   ringHash,
	})
	tr := &http.Transport{
		DialContext:         (&net.Dialer{Timeout: opts.Timeout}).DialContext,
		MaxIdleConnsPerHost: 64,
		IdleConnTimeout:     90 * time.Second,
		TLSClientConfig:     opts.tls,
		TLSHandshakeTimeout: opts.Timeout,
	}
	// ask sends r to its node, unless that node failed lately, and notes
	// why it failed in r's trail.
	ask := func(r *http.Request) (*http.Response, error) {
		base := r.URL.Scheme + "://" + r.URL.Host
		if until, ok := node.down.Load(base); ok && time.Now().Before(until.(time.Time)) {
			noteFailure(r.Context(), ownerGone)
			return nil, fmt.Errorf("peer %s failed lately; not asked until %s", r.URL.Host, until.(time.Time).Format(time.TimeOnly))
		}
		// The owner says at once that it works on the answer (102
		// Processing, written by authorize); from then on it may be
		// reading the page from storage, and is given fillWait times
		// as long: an asker that gave up sooner would read the page
		// from storage too.
		ctx, cancel := context.WithCancel(r.Context())
		defer cancel()
		timer := time.AfterFunc(opts.Timeout, cancel)
		defer timer.Stop()
		var working bool // the first 102 sets the deadline; others do not move it
		ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
			Got1xxResponse: func(code int, _ textproto.MIMEHeader) error {
				if code == http.StatusProcessing && !working {
					working = true
					timer.Reset(fillWait * opts.Timeout)
				}
				return nil
			},
		})
		resp, err := fetch(ctx, tr, r)
		if err == nil && resp.StatusCode != http.StatusOK {
			noteFailure(r.Context(), ownerError)
		}
		if err != nil {
			switch {
			case errors.Is(err, errCorruptValue):
				noteFailure(r.Context(), corruptValue)
			case ctx.Err() != nil && r.Context().Err() == nil:
				noteFailure(r.Context(), ownerTimeout)
			default:
				noteFailure(r.Context(), ownerGone)
			}
			if r.Context().Err() == nil {
				// Down, silent, slow, or sending what fails its
				// check: its pages go elsewhere for a while,
				// without a wait per read.
				node.down.Store(base, time.Now().Add(downHold))
				opts.Logger.Warn("peer tier: a peer failed; its pages are asked of the next node, or read from storage, for a while", "peer", r.URL.Host, "for", downHold, "err", err)
			}
			return nil, err
		}
		node.down.Delete(base)
		return resp, nil
	}
	node.pool.Transport = func(context.Context) http.RoundTripper {
		return roundTripper(func(r *http.Request) (*http.Response, error) {
			resp, err := ask(r)
			if err == nil || r.Context().Err() != nil {
				return resp, err
			}
			// The owner failed: the key's owner without the nodes down,
			// the same on every node, fills it from storage once for the
			// cluster. When that is this node, groupcache's local load
			// does.
			_, key, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, basePath), "/")
			alt := node.members.successor(key, isDown)
			if alt == opts.Self || alt == r.URL.Scheme+"://"+r.URL.Host {
				return nil, err
			}
			u, perr := url.Parse(alt)
			if perr != nil {
				return nil, err
			}
			r2 := r.Clone(r.Context())
			r2.URL.Scheme, r2.URL.Host, r2.Host = u.Scheme, u.Host, ""
			return ask(r2)
		})
	}
	node.members = &members{
		self: opts.Self, scheme: strings.SplitN(opts.Self, "://", 2)[0], file: opts.PeersFile, dns: opts.PeersDNS,
		logger: opts.Logger, set: func(nodes []string) { node.pool.Set(nodes...) }, reload: make(chan struct{}, 1), moved: movedPages,
	}
	if opts.PeersDNS != "" {
		node.members.refresh(context.Background())
	}
	if node.members.count() == 0 {
		node.members.apply(opts.Peers)
	}
	go node.members.watch(context.Background())
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
	served := netutil.LimitListener(ln, maxConns)
	if opts.tls != nil {
		// The handshake runs within the server's read timeouts.
		served = tls.NewListener(served, opts.tls)
	}
	go node.srv.Serve(served)
	opts.Logger.Info("peer tier: serving", "listen", ln.Addr().String(), "self", opts.Self, "peers", node.members.count(), "tls", opts.tls != nil)
	return nil
}

// isDown reports whether a node (its base URL) failed lately.
func isDown(base string) bool {
	until, ok := node.down.Load(base)
	return ok && time.Now().Before(until.(time.Time))
}

// movedPages returns how many pages of the sources read through the tier
// have another owner on ring b than on ring a.
func movedPages(a, b *ring) int64 {
	node.mu.Lock()
	srcs := make([]*Source, 0, len(node.sources))
	for _, s := range node.sources {
		srcs = append(srcs, s)
	}
	node.mu.Unlock()
	var n int64
	for _, s := range srcs {
		for p := range (s.Size() + s.block - 1) / s.block {
			if k := pageKey(s.prefix, p); a.owner(k) != b.owner(k) {
				n++
			}
		}
	}
	return n
}

// Reload re-reads the peers file (Options.PeersFile) or resolves the
// peers' name (Options.PeersDNS) now, as on SIGHUP; the tier's members
// follow them. It does nothing before the tier started or without either.
func Reload() {
	if node.members == nil {
		return
	}
	select {
	case node.members.reload <- struct{}{}:
	default:
	}
}

// Addr returns the address the tier listens on, or "" before it started.
func Addr() string {
	if node.ln == nil {
		return ""
	}
	return node.ln.Addr().String()
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

// fromStorage reads [off, off+n) of the object from storage, for why.
func (s *Source) fromStorage(ctx context.Context, dst []byte, off int64, why reason) error {
	s.storageReads.Add(1)
	s.why[why].Add(1)
	n, err := s.Source.ReadAt(ctx, dst, off)
	s.storageBytes.Add(uint64(n))
	if err != nil && !(errors.Is(err, io.EOF) && n == len(dst)) {
		return err
	}
	return nil
}

// fillReason returns why this node fills key from storage: it owns the
// key, or the owner's failure its context's trail holds.
func fillReason(ctx context.Context, key string) reason {
	t, _ := ctx.Value(trailKey{}).(*trail)
	if r, failed := t.failure(); failed {
		return r
	}
	if _, remote := node.pool.PickPeer(key); remote {
		return ownerGone // asked of no one: a failure without a trail
	}
	return owned
}

// getPage fills a page's value from storage: this node owns it, or its
// owner could not be asked.
func getPage(ctx context.Context, key string, dest groupcache.Sink) error {
	s, p, _, n, err := parseKey(key)
	if err != nil {
		return err
	}
	if n != 0 {
		// Each range would be filled as a whole page under a key of
		// its own: a page read and kept per range asked.
		return fmt.Errorf("key %q: a range, asked in the pages group", key)
	}
	buf := make([]byte, s.pageLen(p), s.pageLen(p)+tagLen)
	h := s.holds()
	if h != nil && h.ReadHeld(p, 0, buf) {
		s.held.Add(1)
		return dest.SetBytes(sealed(key, buf))
	}
	if err := s.fromStorage(ctx, buf, p*s.block, fillReason(ctx, key)); err != nil {
		return err
	}
	v := sealed(key, buf) // the tag after buf's bytes, which Keep reads
	if h != nil {
		h.Keep(ctx, p, buf[:len(buf):len(buf)])
	}
	return dest.SetBytes(v) // a copy
}

// getRange fills a range's value from its page: this node owns the page,
// or its owner failed and this node (or the one next on the ring without
// the nodes down, through the page's Get) fills it for the cluster, so that
// the page, not each range, is read from storage once. Failing that, the
// range comes from storage.
func getRange(ctx context.Context, key string, dest groupcache.Sink) error {
	s, p, off, n, err := parseKey(key)
	if err != nil {
		return err
	}
	if n == 0 {
		return fmt.Errorf("key %q: a page, asked in the ranges group", key)
	}
	buf := make([]byte, n, n+tagLen)
	if h := s.holds(); h != nil && h.ReadHeld(p, off, buf) {
		s.held.Add(1)
		return dest.SetBytes(sealed(key, buf))
	}
	why := fillReason(ctx, key)
	var v []byte
	if err := node.pages.Get(ctx, pageKey(s.prefix, p), groupcache.AllocatingByteSliceSink(&v)); err == nil {
		if b, ok := strip(v); ok && int64(len(b)) == s.pageLen(p) {
			copy(buf, b[off:off+n])
			return dest.SetBytes(sealed(key, buf))
		}
		s.corrupt.Add(1)
		why = corruptValue
	}
	if err := s.fromStorage(ctx, buf, p*s.block+off, why); err != nil {
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
		gctx, tr := withTrail(ctx)
		var err error
		if owner, remote := node.pool.PickPeer(key); remote {
			// Asked of its owner directly, not through the group's Get,
			// which would keep one in ten such values in its hot cache
			// and, to make room, push out pages this node owns: a node
			// keeps the pages it owns and no others. When the owner (and
			// the node next on the ring) fail, the group's Get fills it.
			if v, err = askPeer(gctx, owner, group.Name(), key); err == nil {
				s.peerLoads.Add(1)
			} else if ctx.Err() == nil {
				s.peerErrors.Add(1)
				err = group.Get(gctx, key, groupcache.AllocatingByteSliceSink(&v))
			}
		} else {
			err = group.Get(gctx, key, groupcache.AllocatingByteSliceSink(&v))
		}
		got, ok := strip(v)
		if err == nil && ok && len(got) == len(dst) {
			copy(dst, got)
		} else {
			why, failed := tr.failure()
			if err == nil {
				s.corrupt.Add(1)
				why = corruptValue
			} else if !failed {
				why = ownerError // the fill itself failed
			}
			if ctx.Err() != nil {
				return done, ctx.Err()
			}
			if err := s.fromStorage(ctx, dst, pos, why); err != nil {
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

// askPeer asks a peer for the value of key in group; its transport (fetch)
// has checked the value's tag.
func askPeer(ctx context.Context, peer groupcache.ProtoGetter, group, key string) ([]byte, error) {
	res := &groupcachepb.GetResponse{}
	if err := peer.Get(ctx, &groupcachepb.GetRequest{Group: &group, Key: &key}, res); err != nil {
		return nil, err
	}
	return res.Value, nil
}

// Stats returns what the tier did for this source, and the node's
// groupcache figures.
func (s *Source) Stats() Stats {
	st := Stats{
		Reads:          s.reads.Load(),
		BytesRead:      s.bytesRead.Load(),
		StorageReads:   s.storageReads.Load(),
		StorageBytes:   s.storageBytes.Load(),
		Corrupt:        s.corrupt.Load(),
		HeldReads:      s.held.Load(),
		StorageReasons: make(map[string]uint64, len(reasons)),
	}
	for i, name := range reasons {
		st.StorageReasons[name] = s.why[i].Load()
	}
	st.Members = node.members.count()
	st.MemberChanges = node.members.changes.Load()
	st.PagesMoved = node.members.lastMoved.Load()
	st.PagesOwned = node.members.owned(s)
	st.PeerLoads, st.PeerErrors = s.peerLoads.Load(), s.peerErrors.Load()
	for _, g := range []*groupcache.Group{node.pages, node.ranges} {
		st.PeerLoads += g.Stats.PeerLoads.Get()
		st.PeerErrors += g.Stats.PeerErrors.Get()
		st.ServerRequests += g.Stats.ServerRequests.Get()
	}
	st.CacheBytes = node.pages.CacheStats(groupcache.MainCache).Bytes + node.pages.CacheStats(groupcache.HotCache).Bytes
	return st
}
