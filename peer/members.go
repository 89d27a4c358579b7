package peer

import (
	"context"
	"fmt"
	"log/slog"
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

	"github.com/ffcvfs/ffcvfs/internal/readfile"
)

// Membership: the nodes the pages are sharded over. Each object's pages
// are placed on them with bounded loads (placement.go); members keeps a
// hash ring of them (ring.go, groupcache's) to say who fills a page when
// its owner is down: the next node on the page's ring path that is not,
// the same for every node, so that the cluster reads such a page from
// storage once. The members come from Options.Peers and, when given,
// follow Options.PeersFile (re-read every pollEvery and on Reload) or
// Options.PeersDNS (resolved every pollEvery); each new list places the
// pages anew, moving only those whose owner changed.

// replicas is the number of points per node on the hash ring: the more,
// the fewer pages a node's bounded share pushes on along the ring
// (placement.go), and the more evenly a node that is down spreads its pages
// over the others.
const replicas = 256

// pollEvery is how often a peers file is re-read and a DNS name resolved.
const pollEvery = 2 * time.Second

// maxPeersFile bounds a peers file.
const maxPeersFile = 1 << 20

type members struct {
	self, scheme string
	file, dns    string
	logger       *slog.Logger
	// set places the objects' pages on the ring of the new members
	// (called with mu held), and returns how many changed owner.
	set    func(r *ring) (moved int64)
	reload chan struct{}
	// warned holds the causes logged once (its node's; nil: a fresh set).
	warned *onceSet

	mu    sync.Mutex
	nodes []string // sorted
	ring  *ring
	// rings keeps the rings of the last member sets, by their nodes, so
	// that a list flipping between sets builds each once.
	rings []*ring
	built atomic.Int64 // rings built

	changes    atomic.Uint64
	lastMoved  atomic.Int64
	lastChange atomic.Int64     // when the members last changed, in Unix ns; 0 before
	now        func() time.Time // nil: time.Now
	lastSource string           // the file's or the answer's text last applied
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
			if u != nil && u.User != nil {
				hint = " (without credentials: the tier's secret is its authentication)"
			}
			return nil, fmt.Errorf("peer %s: want %s://HOST:PORT%s", short(redact(p)), scheme, hint)
		}
		if u.Scheme != scheme {
			if scheme == "https" {
				return nil, fmt.Errorf("peer %s: with --peer-tls-cert, --peer-tls-key and --peer-tls-ca every peer is https://HOST:PORT", short(redact(p)))
			}
			return nil, fmt.Errorf("peer %s: https:// needs --peer-tls-cert, --peer-tls-key and --peer-tls-ca", short(redact(p)))
		}
		out = append(out, scheme+"://"+u.Host)
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// redact returns a peer's URL without what may be credentials: anything
// between its scheme and an @.
func redact(p string) string {
	i := strings.Index(p, "://")
	if j := strings.LastIndexByte(p, '@'); i >= 0 && j > i {
		return p[:i+3] + "***" + p[j:]
	}
	if j := strings.LastIndexByte(p, '@'); i < 0 && j >= 0 {
		return "***" + p[j:]
	}
	return p
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
	nodes = m.withSelf(nodes)
	m.mu.Lock()
	if slices.Equal(nodes, m.nodes) {
		m.mu.Unlock()
		return false
	}
	old, ring := m.ring, m.ringOf(nodes)
	added, removed := diff(m.nodes, nodes)
	m.nodes, m.ring = nodes, ring
	moved := m.set(ring)
	m.mu.Unlock()
	if old != nil {
		m.lastChange.Store(m.clock().UnixNano())
		m.changes.Add(1)
		m.lastMoved.Store(moved)
		m.logger.Info("peer tier: the members changed", "nodes", len(nodes), "joined", len(added), "left", len(removed),
			"joined_first", firstOf(added), "left_first", firstOf(removed), "pages_moved", moved)
	}
	return true
}

// keptRings is how many rings of past member sets members keeps.
const keptRings = 4

// ringOf returns the ring of nodes: one kept, or a new one, kept. Called
// with m.mu held.
func (m *members) ringOf(nodes []string) *ring {
	for i, r := range m.rings {
		if slices.Equal(r.nodes, nodes) {
			m.rings = append(slices.Delete(m.rings, i, i+1), r)
			return r
		}
	}
	r := newRing(nodes)
	m.built.Add(1)
	if len(m.rings) == keptRings {
		m.rings = slices.Delete(m.rings, 0, 1)
	}
	m.rings = append(m.rings, r)
	return r
}

// diff returns the nodes of new not in old, and of old not in new; both
// are sorted.
func diff(old, new []string) (added, removed []string) {
	i, j := 0, 0
	for i < len(old) || j < len(new) {
		switch {
		case j == len(new) || i < len(old) && old[i] < new[j]:
			removed = append(removed, old[i])
			i++
		case i == len(old) || new[j] < old[i]:
			added = append(added, new[j])
			j++
		default:
			i, j = i+1, j+1
		}
	}
	return added, removed
}

// firstOf returns the first few of nodes, for a log line of any size of
// cluster.
func firstOf(nodes []string) []string {
	return nodes[:min(len(nodes), 4)]
}

// count returns the number of members.
func (m *members) count() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.nodes)
}

// owner returns the node that owns key.
func (m *members) owner(key string) string {
	m.mu.Lock()
	r := m.ring
	m.mu.Unlock()
	return r.owner(key)
}

// successor returns the node that owns key once the nodes down are left
// out: the same on every node that sees them down; this node when every
// other is down.
func (m *members) successor(key string, down func(node string) bool) string {
	m.mu.Lock()
	r := m.ring
	m.mu.Unlock()
	if s := r.successor(key, down); s != "" {
		return s
	}
	return m.self
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
	if now := m.clock(); m.lastChange.Load() != 0 && now.Before(time.Unix(0, m.lastChange.Load()).Add(minChangeEvery)) && !m.same(nodes) {
		// Held: the list is read again at the next poll.
		m.logOnce("held:"+text, slog.LevelInfo, "peer tier: the list of peers changed again; the members follow it once the last change is "+minChangeEvery.String()+" old",
			"file", m.file, "dns", m.dns, "nodes", len(nodes))
		return
	}
	m.lastSource = text
	m.apply(nodes)
}

// withSelf returns nodes (sorted) with this node among them.
func (m *members) withSelf(nodes []string) []string {
	if i := slices.IndexFunc(nodes, func(n string) bool { return n != m.self && sameNode(n, m.self) }); i >= 0 {
		// This node under another name (localhost for 127.0.0.1): it
		// would own pages under that name and ask itself for them.
		if m.warned.first("alias " + nodes[i]) {
			m.logger.Warn("peer tier: a peer listed is this node under another name; it counts once, as "+m.self, "peer", nodes[i])
		}
		nodes = slices.DeleteFunc(slices.Clone(nodes), func(n string) bool { return n != m.self && sameNode(n, m.self) })
	}
	if slices.Contains(nodes, m.self) {
		return nodes
	}
	nodes = append(slices.Clone(nodes), m.self)
	slices.Sort(nodes)
	return nodes
}

// sameNode reports whether base URLs a and b name one node without asking
// DNS: the same scheme and port, and hosts that are the same address
// (localhost is 127.0.0.1 and ::1).
func sameNode(a, b string) bool {
	ua, err1 := url.Parse(a)
	ub, err2 := url.Parse(b)
	if err1 != nil || err2 != nil || ua.Scheme != ub.Scheme || ua.Port() != ub.Port() {
		return false
	}
	for _, x := range hostIPs(ua.Hostname()) {
		for _, y := range hostIPs(ub.Hostname()) {
			if x.Equal(y) {
				return true
			}
		}
	}
	return false
}

// hostIPs returns a host's addresses: itself, or 127.0.0.1 and ::1 for
// localhost; none for other names.
func hostIPs(h string) []net.IP {
	if strings.EqualFold(h, "localhost") {
		return []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}
	}
	if ip := net.ParseIP(h); ip != nil {
		return []net.IP{ip}
	}
	return nil
}

// same reports whether nodes are the members now, this node among them.
func (m *members) same(nodes []string) bool {
	nodes = m.withSelf(nodes)
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Equal(nodes, m.nodes)
}

// minChangeEvery is the least time between two changes of the members: a
// list that changes faster (a flapping file or DNS answer) is followed at
// this pace, as each change costs a new ring (a quarter of a second of CPU
// at 4,096 members), places every object's pages anew and moves some.
const minChangeEvery = 10 * time.Second

// clock returns the time now.
func (m *members) clock() time.Time {
	if m.now != nil {
		return m.now()
	}
	return time.Now()
}

// warnOnce logs a warning once per distinct key in a row.
func (m *members) warnOnce(key, msg string, args ...any) {
	m.logOnce(key, slog.LevelWarn, msg, args...)
}

// logOnce logs msg at level once per distinct key in a row.
func (m *members) logOnce(key string, level slog.Level, msg string, args ...any) {
	if key == m.lastSource {
		return
	}
	m.lastSource = key
	m.logger.Log(context.Background(), level, msg, args...)
}
