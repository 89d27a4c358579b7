// Package peer is the cluster's tier: the nodes that mount the same beton
// share its pages, so that the cluster reads each page from storage once.
//
// The tier is one of the page cache's tiers (package pagecache), below its
// RAM slots, compressed RAM and disk and above storage, and this package
// is what the cache needs of it, and no more: it imports no cache, and
// never calls back into one to read. It holds
//
//   - the members (members.go) and who owns each page (placement.go):
//     every node computes the same owners from the members, consistent
//     hashing with bounded loads, so that no node owns more than
//     ⌈1.1·P/N⌉ of an object's P pages;
//   - a client (Object.Read): a node asks a page's owner for the page, or
//     for the bytes of it a read needs, directly; an owner that is down,
//     slow (Options.Timeout to begin its answer, fillWait times as long
//     to finish it, as it may read the page from storage) or sends a
//     value that fails its check is not asked again for downHold, and its
//     pages are asked of the node next on the hash ring without it (ring.go),
//     the same node for every node, which fills them for the cluster;
//     failing that, Read says why, and the cache reads storage, without an
//     error for the reader;
//   - a server: the listener answers peers through the function the cache
//     gives it (Object.Serve), which reads the page from the cache's slots
//     and tiers, or from storage for the cluster, keeping the pages this
//     node owns first;
//   - the transport (transport.go): signed requests and tagged values.
//
// The pages are values of groupcache (github.com/golang/groupcache),
// which serves them: a key asked by several peers at once is filled once
// (its singleflight), and the wire is its protocol. groupcache's memory is
// not used (the cache's tiers keep the pages), nor its routing, which
// knows only a plain hash ring: owners are placed with bounded loads, and
// a node asks each owner itself. Nor is its HTTPPool, which a process may
// make once and which finds groups by process-wide names: a node answers
// the protocol's one request itself (serveValue) from groups of its own,
// so that a node is a value (Start), and two run in one process. Keys
// carry the object's identity (its URL, ETag and size, as the disk tier's
// do) and the page number.
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
//     anything reads it; values fill no tier of the node (RAM, disk)
//     unchecked.
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
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"

	"github.com/golang/groupcache"
	"golang.org/x/sync/semaphore"

	"github.com/ffcvfs/ffcvfs/internal/peerstats"
)

// Node is a member of the tier: its listener, its view of the members,
// and the objects read through it. It is a value: a process may run
// several (a test runs two), each with its own groups and listener.
type Node struct {
	opts Options
	srv  *http.Server
	ln   net.Listener
	tr   http.RoundTripper
	stop context.CancelFunc // ends the members' watch

	pages, ranges *groupcache.Group
	members       *members
	// down holds the nodes (base URLs) that failed lately, with the time
	// until which they are not asked.
	down sync.Map
	// fails counts each node's failures in a row (*atomic.Int32), which
	// lengthen its hold (holdFor).
	fails sync.Map
	// warns limits the warnings of failed peers (failedWarnings a minute);
	// warned holds the causes logged once.
	warns  warnLimit
	warned onceSet

	// reqKey signs requests, valueKey tags values; both derive from the
	// secret.
	reqKey, valueKey []byte

	mu      sync.Mutex
	objects map[string]*Object // by key prefix
}

// errCorruptValue marks an answer whose value failed its check.
var errCorruptValue = errors.New("fails its check")

// maxPages bounds an object's pages, which size its placement and tags:
// 32 TiB in pages of 2 MiB.
const maxPages = 1 << 24

// ServeFunc reads bytes [off, off+len(b)) of page p (absolute: offset /
// page size) for a peer that asked: from where the node holds the page,
// or from storage for the cluster.
type ServeFunc func(ctx context.Context, p, off int64, b []byte) error

// Info describes an object read through the tier.
type Info struct {
	// Name is the object's location, for messages.
	Name string
	// Identity names its version (storage.Identifier: URL and ETag, or
	// path, size and time); without one the tier could mix versions.
	Identity string
	Size     int64
	// PageSize is the unit of the tier: pages are aligned at offset 0,
	// as beton pages are.
	PageSize int64
	// KeepBytes is what the node can keep of the pages it owns, and
	// KeepFlag the flag that sizes it (--peer-cache-size,
	// --disk-cache-size): a node whose share is larger says so in its log,
	// at the start and at each change of the members, with the size that
	// would hold it. 0: not checked.
	KeepBytes int64
	KeepFlag  string
}

// Object is one object (a beton) read through the tier.
type Object struct {
	node   *Node
	info   Info
	prefix string // the key prefix: a hash of the identity
	pages  int64

	place atomic.Pointer[placement]
	serve atomic.Pointer[ServeFunc]
	// warned is the placement whose share was last found too large for
	// KeepBytes, so that each is logged once.
	warned atomic.Pointer[placement]

	// tags holds each whole page's tag once computed (server.go).
	tags []atomic.Pointer[[tagLen]byte]
	// serving bounds the bytes held for peers' requests (bounded).
	serving *semaphore.Weighted

	corrupt, peerLoads, peerErrors atomic.Uint64
}

// Open returns the object info describes, read through the node: its
// pages are placed on the members from now on. The node serves peers that
// ask for its pages once Serve is called.
func (n *Node) Open(info Info) (*Object, error) {
	if info.Identity == "" {
		return nil, fmt.Errorf("%s: the peer tier needs an object version (ETag, or size and time) to name its pages by", info.Name)
	}
	if info.PageSize <= 0 || info.PageSize > 1<<30 || info.Size < 0 {
		return nil, fmt.Errorf("%s: page size %d out of range for the peer tier", info.Name, info.PageSize)
	}
	if pages := (info.Size + info.PageSize - 1) / info.PageSize; pages > maxPages {
		return nil, fmt.Errorf("%s: %d pages of %d bytes, more than the peer tier places (%d)", info.Name, pages, info.PageSize, maxPages)
	}
	o := &Object{node: n, info: info, prefix: prefixOf(info.Identity), pages: (info.Size + info.PageSize - 1) / info.PageSize}
	o.tags = make([]atomic.Pointer[[tagLen]byte], o.pages)
	o.serving = semaphore.NewWeighted(servePages * info.PageSize)
	n.members.mu.Lock()
	o.replace(n.members.ring)
	n.mu.Lock()
	n.objects[o.prefix] = o
	n.mu.Unlock()
	n.members.mu.Unlock()
	return o, nil
}

// prefixOf returns the key prefix of an object's identity: a hash of it.
func prefixOf(identity string) string {
	sum := sha256.Sum256([]byte(identity))
	return hex.EncodeToString(sum[:12])
}

// replace places the object's pages on r, and logs once when this node's
// share is more than it can keep. Called with the members' lock held.
func (o *Object) replace(r *ring) (moved int64) {
	pl := place(r, o.prefix, o.pages)
	if old := o.place.Swap(pl); old != nil {
		moved = movedPages(old, pl)
	}
	o.checkShare(pl)
	return moved
}

// Keeps returns how many pages this node keeps of those it owns
// (Info.KeepBytes in pages) and whether that is all of them now; -1 and
// true where Info.KeepBytes is not given. A node that cannot keep them all
// reads a range asked of a page it owns from storage as a range, not the
// whole page it could not keep until the page's next range (see package
// pagecache).
func (o *Object) Keeps() (pages int64, all bool) {
	if o.info.KeepBytes <= 0 {
		return -1, true
	}
	return o.info.KeepBytes / o.info.PageSize, o.place.Load().count(o.node.opts.Self)*o.info.PageSize <= o.info.KeepBytes
}

// checkShare logs, once per placement, a share larger than Info.KeepBytes.
func (o *Object) checkShare(pl *placement) {
	if o.info.KeepBytes <= 0 || o.info.KeepFlag == "" {
		return
	}
	owned := pl.count(o.node.opts.Self)
	need := owned * o.info.PageSize
	if need <= o.info.KeepBytes || o.warned.Swap(pl) == pl {
		return
	}
	hold := (need + 2*o.info.PageSize + 1<<20 - 1) >> 20 // its pages and two more, in MiB
	o.node.opts.Logger.Warn(fmt.Sprintf("peer tier: this node owns %s of %s (%d MiB) among %s, more than %s %d MiB keeps: "+
		"the rest is read from storage again each epoch, by this node for the cluster; %s %dMiB would hold them",
		plural(owned, "page"), o.info.Name, need>>20, plural(int64(len(pl.nodes)), "node"), o.info.KeepFlag, o.info.KeepBytes>>20, o.info.KeepFlag, hold))
}

// plural returns n and noun, in the plural unless n is 1.
func plural(n int64, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// Serve makes the node answer peers' requests for the object's pages
// with fn.
func (o *Object) Serve(fn ServeFunc) { o.serve.Store(&fn) }

// Owns reports whether this node owns page p (absolute) now.
func (o *Object) Owns(p int64) bool {
	owner, ok := o.owner(p)
	return ok && owner == o.node.opts.Self
}

// Owner returns the base URL of the node that owns page p (absolute)
// now; "" for a page the object does not have.
func (o *Object) Owner(p int64) string {
	owner, _ := o.owner(p)
	return owner
}

// owner returns the node that owns page p (absolute), if p is a page of
// the object.
func (o *Object) owner(p int64) (string, bool) {
	pl := o.place.Load()
	if p < 0 || p >= int64(len(pl.owner)) {
		return "", false
	}
	return pl.ownerOf(p), true
}

// pageLen returns the bytes of page p (the last may be short).
func (o *Object) pageLen(p int64) int64 {
	return min(o.info.PageSize, o.info.Size-p*o.info.PageSize)
}

// placeAll places every object's pages on r and returns how many pages
// changed owner. Called with the members' lock held.
func (n *Node) placeAll(r *ring) int64 {
	n.mu.Lock()
	objs := make([]*Object, 0, len(n.objects))
	for _, o := range n.objects {
		objs = append(objs, o)
	}
	n.mu.Unlock()
	var moved int64
	for _, o := range objs {
		moved += o.replace(r)
	}
	return moved
}

// Reload re-reads the peers file (Options.PeersFile) or resolves the
// peers' name (Options.PeersDNS) now, as on SIGHUP; the tier's members
// follow them. It does nothing without either.
func (n *Node) Reload() {
	select {
	case n.members.reload <- struct{}{}:
	default:
	}
}

// Addr returns the address the node listens on.
func (n *Node) Addr() string { return n.ln.Addr().String() }

// Close stops serving peers and watching the members. The node's objects
// are not read through it afterwards.
func (n *Node) Close() error {
	n.stop()
	return n.srv.Close()
}

// Stats returns what the tier did for this object, and the node's
// figures; the page cache reading through it adds its reads.
func (o *Object) Stats() peerstats.Stats {
	pl := o.place.Load()
	st := peerstats.Stats{
		Corrupt:       o.corrupt.Load(),
		PeerLoads:     int64(o.peerLoads.Load()),
		PeerErrors:    int64(o.peerErrors.Load()),
		Members:       len(pl.nodes),
		MemberChanges: o.node.members.changes.Load(),
		PagesMoved:    o.node.members.lastMoved.Load(),
		PagesOwned:    pl.count(o.node.opts.Self),
		PagesLimit:    pl.limit,
	}
	for _, g := range []*groupcache.Group{o.node.pages, o.node.ranges} {
		st.ServerRequests += g.Stats.ServerRequests.Get()
	}
	return st
}
