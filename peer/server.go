// The node's side as a server: the listener, and groupcache's groups,
// whose getters answer through the cache's ServeFunc.

package peer

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/golang/groupcache"
	"golang.org/x/net/netutil"
	"google.golang.org/protobuf/encoding/protowire"
)

// groupSeq numbers the groups of the nodes of a process: groupcache
// registers groups by name, once per process.
var groupSeq atomic.Int64

// Start joins the tier with opts: the members, the groups and the
// listener. Close leaves it.
func Start(opts Options) (*Node, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", opts.Listen)
	if err != nil {
		return nil, fmt.Errorf("peer tier: %w", err)
	}
	n := &Node{
		opts: opts, ln: ln, objects: map[string]*Object{},
		reqKey: derive(opts.Secret, "ffcvfs peer request"), valueKey: derive(opts.Secret, "ffcvfs peer value"),
	}
	n.tr = &http.Transport{
		DialContext:         (&net.Dialer{Timeout: opts.Timeout}).DialContext,
		MaxIdleConnsPerHost: 64,
		IdleConnTimeout:     90 * time.Second,
		TLSClientConfig:     opts.tls,
		TLSHandshakeTimeout: opts.Timeout,
	}
	n.members = &members{
		self: opts.Self, scheme: strings.SplitN(opts.Self, "://", 2)[0], file: opts.PeersFile, dns: opts.PeersDNS,
		logger: opts.Logger, reload: make(chan struct{}, 1), set: n.placeAll, warned: &n.warned,
	}
	ctx, stop := context.WithCancel(context.Background())
	n.stop = stop
	if opts.PeersDNS != "" {
		n.members.refresh(ctx)
	}
	if n.members.count() == 0 {
		n.members.apply(opts.Peers)
	}
	go n.members.watch(ctx)
	// No memory of groupcache's: the cache's tiers keep the pages. Its
	// names are the process's; the wire names them pagesGroup and
	// rangesGroup (serveValue).
	seq := groupSeq.Add(1)
	n.pages = groupcache.NewGroup(fmt.Sprintf("%s.%d", pagesGroup, seq), 0, groupcache.GetterFunc(n.getPage))
	n.ranges = groupcache.NewGroup(fmt.Sprintf("%s.%d", rangesGroup, seq), 0, groupcache.GetterFunc(n.getRange))
	mux := http.NewServeMux()
	mux.Handle(basePath, n.authorize(n.bounded(http.HandlerFunc(n.serveValue))))
	n.srv = &http.Server{
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
	go n.srv.Serve(served)
	opts.Logger.Info("peer tier: serving", "listen", ln.Addr().String(), "self", opts.Self, "peers", n.members.count(), "tls", opts.tls != nil)
	return n, nil
}

// The groups' names on the wire: BASE/GROUP/KEY.
const (
	pagesGroup  = "pages"
	rangesGroup = "ranges"
)

// serveValue answers groupcache's request BASE/GROUP/KEY from the node's
// group, with a GetResponse message, as groupcache's HTTPPool does. The
// pool is not used: it may be made once per process, and finds groups by
// their process-wide names, so that two nodes could not run in one.
func (n *Node) serveValue(w http.ResponseWriter, r *http.Request) {
	name, key, ok := strings.Cut(strings.TrimPrefix(r.URL.Path, basePath), "/")
	g := map[string]*groupcache.Group{pagesGroup: n.pages, rangesGroup: n.ranges}[name]
	switch {
	case !ok:
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	case g == nil:
		http.Error(w, "no such group: "+name, http.StatusNotFound)
		return
	}
	g.Stats.ServerRequests.Add(1)
	var value []byte
	if err := g.Get(r.Context(), key, groupcache.AllocatingByteSliceSink(&value)); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/x-protobuf")
	w.Write(protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), value))
}

// servePages bounds what an object's node holds for its peers at once:
// the values it answers, and the pages it reads from storage for them,
// weigh servePages pages of the object (see bounded). Each value is held
// about three times over while it is answered (the buffer it is read
// into, groupcache's copy, the encoded answer), the page read for it once:
// at most about 2·servePages pages of memory beside the cache's budgets,
// whatever the number of requests; the others wait (for fillWait times
// the asker's timeout, as for a page read from storage).
const servePages = 8

// bounded admits a request to next once its object's serving budget
// (Object.serving) has room for it: its value and the page it may read.
// A request waits without holding memory beyond its connection's, and
// connections are bounded (maxConns). Requests whose key names no
// object pass: groupcache refuses them without reading anything.
func (nd *Node) bounded(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, key, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, basePath), "/")
		o, p, _, n, err := nd.parseKey(key)
		if err != nil {
			next.ServeHTTP(w, r)
			return
		}
		weight := o.weight(p, n)
		if err := o.serving.Acquire(r.Context(), weight); err != nil {
			return // the asker went away
		}
		defer o.serving.Release(weight)
		next.ServeHTTP(w, r)
	})
}

// weight is what a request for [off, off+n) of page p (n 0: the whole
// page) weighs in the serving budget: the page it may read from storage
// and its value.
func (o *Object) weight(p, n int64) int64 {
	pl := o.pageLen(p)
	if n <= 0 || n > pl {
		n = pl
	}
	return pl + n
}

// errNotServing answers a request for an object whose cache does not
// serve yet.
var errNotServing = errors.New("not serving this object yet")

// getPage fills a page's value for a peer, through the object's
// ServeFunc.
func (nd *Node) getPage(ctx context.Context, key string, dest groupcache.Sink) error {
	o, p, _, n, err := nd.parseKey(key)
	if err != nil {
		return err
	}
	if n != 0 {
		// Each range would be filled as a whole page under a key of
		// its own: a page read and kept per range asked.
		return fmt.Errorf("key %q: a range, asked in the pages group", key)
	}
	return o.fill(ctx, key, p, 0, o.pageLen(p), dest)
}

// getRange fills a range's value for a peer, through the object's
// ServeFunc, which reads the whole page once for the cluster when it must
// go to storage.
func (nd *Node) getRange(ctx context.Context, key string, dest groupcache.Sink) error {
	o, p, off, n, err := nd.parseKey(key)
	if err != nil {
		return err
	}
	if n == 0 {
		return fmt.Errorf("key %q: a page, asked in the ranges group", key)
	}
	return o.fill(ctx, key, p, off, n, dest)
}

// fill reads [off, off+n) of page p through the ServeFunc into dest,
// tagged. A whole page's tag is computed once (its bytes never change:
// the object's version is pinned, the cache's tiers check what they
// hold), so that serving a page again costs no HMAC over it; were the
// bytes served later another's, the asker would refuse them, never take
// them.
func (o *Object) fill(ctx context.Context, key string, p, off, n int64, dest groupcache.Sink) error {
	fn := o.serve.Load()
	if fn == nil {
		return errNotServing
	}
	bp := valueBufs.Get().(*[]byte)
	defer valueBufs.Put(bp)
	if int64(cap(*bp)) < n+tagLen {
		*bp = make([]byte, n+tagLen)
	}
	buf := (*bp)[:n]
	if err := (*fn)(ctx, p, off, buf); err != nil {
		return err
	}
	if off != 0 || n != o.pageLen(p) {
		return dest.SetBytes(o.node.sealed(key, buf)) // a copy
	}
	t := o.tags[p].Load()
	if t == nil {
		t = new([tagLen]byte)
		copy(t[:], o.node.tag(key, buf))
		o.tags[p].Store(t)
	}
	return dest.SetBytes(append(buf, t[:]...)) // a copy
}

// valueBufs holds the buffers values are read into for peers (*[]byte),
// which dest copies.
var valueBufs = sync.Pool{New: func() any { return new([]byte) }}
