package peer

import (
	"context"
	"fmt"
	"hash/crc32"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/golang/groupcache/consistenthash"

	"github.com/ffcvfs/ffcvfs/internal/readfile"
)

// Membership: the nodes the pages are sharded over. groupcache's pool
// holds the ring that routes requests; members keeps the same ring (the
// same nodes, replicas and hash) to answer what the pool does not: who
// owns a page when its owner is down (the next node on the ring, the same
// for every node, so that the cluster reads such a page from storage once),
// and how many pages changed owner when the members change. The members
// come from Options.Peers and, when given, follow Options.PeersFile (re-read
// every pollEvery and on Reload) or Options.PeersDNS (resolved every
// pollEvery); groupcache's Set takes each new list.

// replicas is the number of points per node on the hash ring: with
// groupcache's default of 50 the nodes' shares of the pages differ by a
// fifth and more, and a node's budget must cover its share.
const replicas = 256

// pollEvery is how often a peers file is re-read and a DNS name resolved.
const pollEvery = 2 * time.Second

// maxPeersFile bounds a peers file.
const maxPeersFile = 1 << 20

// ringHash hashes a key for the ring: a range's key (PAGE@OFF+LEN) as its
// page's, so that its owner has the page.
func ringHash(b []byte) uint32 {
	if i := strings.IndexByte(string(b), '@'); i >= 0 {
		b = b[:i]
	}
	return crc32.ChecksumIEEE(b)
}

func newRing(nodes []string) *consistenthash.Map {
	m := consistenthash.New(replicas, ringHash)
	m.Add(nodes...)
	return m
}

type members struct {
	self, scheme string
	file, dns    string
	logger       interface {
		Info(string, ...any)
		Warn(string, ...any)
	}
	set    func(nodes []string) // groupcache's Set
	reload chan struct{}

	mu    sync.Mutex
	nodes []string // sorted
	ring  *consistenthash.Map
	// alt caches the ring without the nodes that are down, by their names.
	altDown string
	alt     *consistenthash.Map
	// ownedOf caches owned's counts for the ring.
	ownedOf map[*Source]int64
	moved   func(old, new *consistenthash.Map) int64 // pages whose owner changed

	changes    atomic.Uint64
	lastMoved  atomic.Int64
	lastSource string // the file's or the answer's text last applied
}

// normalizePeers checks a list of peer URLs and returns them as
// SCHEME://HOST:PORT, sorted, without repeats.
func normalizePeers(list []string, scheme string) ([]string, error) {
	if len(list) > maxPeers {
		return nil, fmt.Errorf("%d peers: at most %d", len(list), maxPeers)
	}
	out := make([]string, 0, len(list))
	for _, p := range list {
		u, err := url.Parse(p)
		if err != nil || u.Scheme != "http" && u.Scheme != "https" || u.Host == "" || u.Path != "" && u.Path != "/" || u.User != nil || u.RawQuery != "" {
			hint := ""
			if strings.HasPrefix(p, "dns:") {
				hint = " (dns:NAME:PORT is given to --peers itself, not listed in a file)"
			}
			return nil, fmt.Errorf("peer %s: want %s://HOST:PORT%s", short(p), scheme, hint)
		}
		if u.Scheme != scheme {
			if scheme == "https" {
				return nil, fmt.Errorf("peer %s: with --peer-tls-cert, --peer-tls-key and --peer-tls-ca every peer is https://HOST:PORT", short(p))
			}
			return nil, fmt.Errorf("peer %s: https:// needs --peer-tls-cert, --peer-tls-key and --peer-tls-ca", short(p))
		}
		out = append(out, scheme+"://"+u.Host)
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// SplitPeers splits a list of peers separated by commas, white space or
// lines (--peers, a peers file).
func SplitPeers(list string) []string {
	return strings.FieldsFunc(list, func(r rune) bool { return r == ',' || r == '\n' || r == ' ' || r == '\t' || r == '\r' })
}

// parseDNS splits dns:NAME:PORT.
func parseDNS(s string) (name, port string, err error) {
	name, port, err = net.SplitHostPort(s)
	if err != nil || name == "" {
		return "", "", fmt.Errorf("--peers %s: want dns:NAME:PORT", short("dns:"+s))
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return "", "", fmt.Errorf("--peers %s: port %s out of range", short("dns:"+s), short(port))
	}
	return name, port, nil
}

// short quotes what a peers list or file gave, cut to 64 bytes, for a
// message of one line: such text may hold line breaks, or be anything.
func short(s string) string {
	const most = 64
	if !utf8.ValidString(s) || strings.IndexFunc(s, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0 {
		return fmt.Sprintf("(%d bytes, not text)", len(s))
	}
	if len(s) <= most {
		return strconv.Quote(s)
	}
	return strconv.Quote(strings.ToValidUTF8(s[:most], "")) + fmt.Sprintf("… (%d bytes)", len(s))
}

// apply makes nodes (normalized) the members, this node always among
// them, and reports whether they changed.
func (m *members) apply(nodes []string) bool {
	if !slices.Contains(nodes, m.self) {
		nodes = append(slices.Clone(nodes), m.self)
		slices.Sort(nodes)
	}
	m.mu.Lock()
	if slices.Equal(nodes, m.nodes) {
		m.mu.Unlock()
		return false
	}
	old, ring := m.ring, newRing(nodes)
	added, removed := diff(m.nodes, nodes)
	m.nodes, m.ring, m.alt, m.altDown, m.ownedOf = nodes, ring, nil, "", nil
	m.set(nodes)
	m.mu.Unlock()
	if old != nil {
		m.changes.Add(1)
		moved := int64(0)
		if m.moved != nil {
			moved = m.moved(old, ring)
		}
		m.lastMoved.Store(moved)
		m.logger.Info("peer tier: the members changed", "nodes", len(nodes), "joined", added, "left", removed, "pages_moved", moved)
	}
	return true
}

func diff(old, new []string) (added, removed []string) {
	for _, n := range new {
		if !slices.Contains(old, n) {
			added = append(added, n)
		}
	}
	for _, n := range old {
		if !slices.Contains(new, n) {
			removed = append(removed, n)
		}
	}
	return added, removed
}

// count returns the number of members.
func (m *members) count() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.nodes)
}

// owned returns how many pages of s this node owns, counted once per
// ring (stats.json is read and metrics scraped often; ImageNet has some
// 17,000 pages).
func (m *members) owned(s *Source) int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	if n, ok := m.ownedOf[s]; ok {
		return n
	}
	var n int64
	for p := range (s.Size() + s.block - 1) / s.block {
		if m.ring.Get(pageKey(s.prefix, p)) == m.self {
			n++
		}
	}
	if m.ownedOf == nil {
		m.ownedOf = map[*Source]int64{}
	}
	m.ownedOf[s] = n
	return n
}

// successor returns the node that owns key once the nodes down (by base
// URL) are left out: the same on every node that sees them down.
func (m *members) successor(key string, down []string) string {
	slices.Sort(down)
	name := strings.Join(down, " ")
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.alt == nil || m.altDown != name {
		var up []string
		for _, n := range m.nodes {
			if !slices.Contains(down, n) {
				up = append(up, n)
			}
		}
		m.alt, m.altDown = newRing(up), name
	}
	if m.alt.IsEmpty() {
		return m.self
	}
	return m.alt.Get(key)
}

// watch follows the peers file or the DNS name until ctx ends.
func (m *members) watch(ctx context.Context) {
	if m.file == "" && m.dns == "" {
		return
	}
	t := time.NewTicker(pollEvery)
	defer t.Stop()
	for {
		m.refresh(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-m.reload:
		}
	}
}

// refresh reads the peers file, or resolves the name, and applies what it
// finds; a file or an answer that is wrong is logged and the members kept.
func (m *members) refresh(ctx context.Context) {
	var list []string
	var text string
	switch {
	case m.file != "":
		b, err := readfile.Bounded(m.file, maxPeersFile)
		if err != nil {
			m.warnOnce("file:"+err.Error(), "peer tier: reading the peers file; the members stay", "file", m.file, "err", err)
			return
		}
		text = string(b)
		list = SplitPeers(text)
	case m.dns != "":
		name, port, _ := parseDNS(m.dns)
		rctx, cancel := context.WithTimeout(ctx, pollEvery)
		addrs, err := net.DefaultResolver.LookupHost(rctx, name)
		cancel()
		if err != nil || len(addrs) == 0 {
			m.warnOnce("dns:"+fmt.Sprint(err), "peer tier: resolving the peers' name; the members stay", "name", name, "err", err)
			return
		}
		if len(addrs) > maxPeers {
			addrs = addrs[:maxPeers]
		}
		for _, a := range addrs {
			list = append(list, m.scheme+"://"+net.JoinHostPort(a, port))
		}
		slices.Sort(list)
		text = strings.Join(list, "\n")
	}
	if text == m.lastSource {
		return
	}
	nodes, err := normalizePeers(list, m.scheme)
	if err == nil && len(nodes) == 0 {
		err = fmt.Errorf("no peer in it")
	}
	if err != nil {
		m.warnOnce("list:"+text, "peer tier: the new list of peers is wrong; the members stay", "file", m.file, "dns", m.dns, "err", err)
		return
	}
	m.lastSource = text
	m.apply(nodes)
}

// warnOnce logs a warning once per distinct key in a row.
func (m *members) warnOnce(key, msg string, args ...any) {
	if key == m.lastSource {
		return
	}
	m.lastSource = key
	m.logger.Warn(msg, args...)
}
