package peer

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/golang/groupcache/consistenthash"
)

// testMembers returns members of self following file, whose groupcache
// Sets are recorded in sets.
func testMembers(self, file string, sets *[][]string) *members {
	t := time.Unix(1e9, 0)
	return &members{self: self, scheme: "http", file: file, logger: slog.New(slog.DiscardHandler),
		set: func(r *ring) int64 { *sets = append(*sets, r.nodes); return 0 }, reload: make(chan struct{}, 1),
		// A minute passes at every look at the clock: no change is held.
		now: func() time.Time { t = t.Add(time.Minute); return t }}
}

// TestMembersFollowFile: the members follow the peers file; a file that
// is wrong (another scheme, too many peers, too large, a FIFO, gone) is
// refused and the members stay; this node is always among them.
func TestMembersFollowFile(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "peers")
	write := func(s string) {
		t.Helper()
		if err := os.WriteFile(file+".new", []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(file+".new", file); err != nil {
			t.Fatal(err)
		}
	}
	var sets [][]string
	m := testMembers("http://a:1", file, &sets)
	write("http://a:1\nhttp://b:1\n")
	m.refresh(context.Background())
	want := []string{"http://a:1", "http://b:1"}
	if len(sets) != 1 || !slices.Equal(sets[0], want) || m.changes.Load() != 0 {
		t.Fatalf("first list: sets %v, changes %d", sets, m.changes.Load())
	}
	write("http://c:1, http://b:1 http://a:1/\n")
	m.refresh(context.Background())
	want = []string{"http://a:1", "http://b:1", "http://c:1"}
	if len(sets) != 2 || !slices.Equal(sets[1], want) || m.changes.Load() != 1 {
		t.Fatalf("a node joined: sets %v, changes %d", sets, m.changes.Load())
	}
	m.refresh(context.Background()) // unchanged: no Set
	var many strings.Builder
	for i := range maxPeers + 1 {
		fmt.Fprintf(&many, "http://n%d:1\n", i)
	}
	for name, bad := range map[string]func(){
		"another scheme":   func() { write("http://a:1\nftp://b:1\n") },
		"a path":           func() { write("http://a:1/x\n") },
		"no peer":          func() { write("\n\n") },
		"too many peers":   func() { write(many.String()) },
		"larger than 1MiB": func() { write(strings.Repeat("#", maxPeersFile+1)) },
		"gone":             func() { os.Remove(file) },
		"a FIFO": func() {
			os.Remove(file)
			if err := syscall.Mkfifo(file, 0o600); err != nil {
				t.Fatal(err)
			}
		},
	} {
		bad()
		m.refresh(context.Background())
		if len(sets) != 2 || m.count() != 3 {
			t.Errorf("%s: sets %v, %d members; want the 3 members kept", name, sets, m.count())
		}
		os.Remove(file)
	}
	write("http://b:1\n") // without this node: it stays in
	m.refresh(context.Background())
	if got := sets[len(sets)-1]; !slices.Equal(got, []string{"http://a:1", "http://b:1"}) {
		t.Errorf("a list without this node: Set %v", got)
	}
}

// TestSuccessorAgrees: with a node down, every node picks the same new
// owner for its keys, never the node down; the keys of the others keep
// their owners.
func TestSuccessorAgrees(t *testing.T) {
	nodes := []string{"http://a:1", "http://b:1", "http://c:1", "http://d:1"}
	var sets [][]string
	ms := make([]*members, len(nodes))
	for i, n := range nodes {
		ms[i] = testMembers(n, "", &sets)
		ms[i].apply(nodes)
	}
	ring := consistenthash.New(replicas, ringHash)
	ring.Add(nodes...)
	down := []string{"http://c:1"}
	moved := 0
	for k := range 2000 {
		key := fmt.Sprintf("p/%d", k)
		if k%3 == 0 {
			key += "@10+20" // a range goes where its page goes
		}
		isDown := func(n string) bool { return slices.Contains(down, n) }
		got := ms[0].successor(key, isDown)
		for _, m := range ms[1:] {
			if s := m.successor(key, isDown); s != got {
				t.Fatalf("%s: %s and %s disagree on the successor (%s, %s)", key, ms[0].self, m.self, got, s)
			}
		}
		owner := ring.Get(key)
		if got == "http://c:1" || owner != "http://c:1" && got != owner {
			t.Fatalf("%s: owner %s, successor %s", key, owner, got)
		}
		if owner == "http://c:1" {
			moved++
		}
	}
	if moved < 300 || moved > 700 {
		t.Errorf("%d of 2000 keys owned by one node of 4", moved)
	}
}

func TestParseDNS(t *testing.T) {
	for _, bad := range []string{"", "name", ":7480", "name:0", "name:65536", "name:x", "name:-1"} {
		if _, _, err := parseDNS(bad); err == nil {
			t.Errorf("dns:%s accepted", bad)
		}
	}
	if n, p, err := parseDNS("peers.ns.svc:7480"); err != nil || n != "peers.ns.svc" || p != "7480" {
		t.Errorf("dns:peers.ns.svc:7480: %q %q %v", n, p, err)
	}
}

// TestMembersFollowDNS: dns:localhost:PORT makes the members every
// address localhost resolves to; a name that does not resolve keeps them.
func TestMembersFollowDNS(t *testing.T) {
	var sets [][]string
	m := testMembers("http://127.0.0.1:7480", "", &sets)
	m.dns = "localhost:7480"
	m.refresh(context.Background())
	if len(sets) != 1 || !slices.Contains(sets[0], "http://127.0.0.1:7480") {
		t.Fatalf("dns:localhost:7480: sets %v", sets)
	}
	m.dns = "no-such-name.invalid:7480"
	m.refresh(context.Background())
	if len(sets) != 1 {
		t.Errorf("a name that does not resolve: sets %v", sets)
	}
}

// TestMembersFileMessage: a peers file that turns into binary while the
// node runs is logged in one short line, and the members stay.
func TestMembersFileMessage(t *testing.T) {
	file := filepath.Join(t.TempDir(), "peers")
	if err := os.WriteFile(file, []byte("http://a:1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var log strings.Builder
	var sets [][]string
	m := testMembers("http://a:1", file, &sets)
	m.logger = slog.New(slog.NewTextHandler(&log, nil))
	m.refresh(context.Background())
	binary := make([]byte, 4096)
	for i := range binary {
		binary[i] = byte(0x80 + (i*7+i/3)%128) // no separator: one token
	}
	if err := os.WriteFile(file, binary, 0o600); err != nil {
		t.Fatal(err)
	}
	m.refresh(context.Background())
	if got := log.String(); strings.Count(got, "\n") != 1 || len(got) > 500 || !strings.Contains(got, "(4096 bytes, not text)") {
		t.Errorf("logged %d bytes:\n%s", len(got), got)
	}
	if m.count() != 1 {
		t.Errorf("%d members", m.count())
	}
}

// TestRingAgrees: the ring names the owner groupcache's consistenthash
// (the pool's) names, collisions of points included, and its successor
// with nodes down is the owner on a ring of the others alone.
func TestRingAgrees(t *testing.T) {
	for _, n := range []int{1, 2, 5, 300} {
		var nodes []string
		for i := range n {
			nodes = append(nodes, fmt.Sprintf("http://10.0.%d.%d:7480", i/250, i%250))
		}
		slices.Sort(nodes)
		ref := consistenthash.New(replicas, ringHash)
		ref.Add(nodes...)
		r := newRing(nodes)
		down := map[string]bool{}
		var up []string
		for i, node := range nodes {
			if i%3 == 1 {
				down[node] = true
			} else {
				up = append(up, node)
			}
		}
		alt := consistenthash.New(replicas, ringHash)
		alt.Add(up...)
		for k := range 3000 {
			key := fmt.Sprintf("%x/%d", n, k)
			if got, want := r.owner(key), ref.Get(key); got != want {
				t.Fatalf("%d nodes, %s: owner %s, consistenthash %s", n, key, got, want)
			}
			if got, want := r.successor(key, func(s string) bool { return down[s] }), alt.Get(key); got != want {
				t.Fatalf("%d nodes, %s: successor %s, a ring of the others %s", n, key, got, want)
			}
		}
	}
	// Two points at one hash: the node added later owns it.
	h := func(b []byte) uint32 { return 7 }
	ref := consistenthash.New(1, h)
	ref.Add("a", "b")
	if ref.Get("x") != "b" {
		t.Fatalf("consistenthash gives %s", ref.Get("x"))
	}
}

// deadMembers is http://self:1 and n others, dead0 to deadN-1, sorted.
func deadMembers(n int) []string {
	nodes := []string{"http://self:1"}
	for i := range n {
		nodes = append(nodes, fmt.Sprintf("http://dead%d:1", i))
	}
	slices.Sort(nodes)
	return nodes
}

// TestSuccessorDeadMembers: 4,095 dead members of a peers file found down
// one by one, as reads meet them, and a file flipping between 2 and 4,096
// members, build a ring per member set, not one per read or per change:
// the ring of 256×N points was rebuilt at every change of the nodes down
// (200 reads took 89 s).
func TestSuccessorDeadMembers(t *testing.T) {
	var sets [][]string
	m := testMembers("http://self:1", "", &sets)
	many := deadMembers(4095)
	m.apply(many)
	down := map[string]bool{}
	for i := range 200 {
		key := fmt.Sprintf("p/%d", i)
		if o := m.owner(key); o != m.self {
			down[o] = true
		}
		if s := m.successor(key, func(n string) bool { return down[n] }); s == "" || down[s] {
			t.Fatalf("%s: successor %q is down", key, s)
		}
	}
	few := []string{"http://dead0:1", "http://self:1"}
	for range 5 {
		m.apply(few)
		m.apply(many)
	}
	if n := m.built.Load(); n != 2 {
		t.Errorf("%d rings built for 2 member sets", n)
	}
}

// TestMembersChangeAtMostEvery: a peers file flipping between two lists
// changes the members at most every minChangeEvery; a list held is taken
// at the first poll after. It burnt 24 s of CPU in 30 s between 2 and
// 4,096 members.
func TestMembersChangeAtMostEvery(t *testing.T) {
	file := filepath.Join(t.TempDir(), "peers")
	write := func(s string) {
		t.Helper()
		if err := os.WriteFile(file, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	var sets [][]string
	m := testMembers("http://a:1", file, &sets)
	now := time.Unix(1e9, 0)
	m.now = func() time.Time { return now }
	var log strings.Builder
	m.logger = slog.New(slog.NewTextHandler(&log, nil))
	write("http://a:1\n")
	m.refresh(context.Background())
	write("http://a:1\nhttp://b:1\n") // the first change: at once
	m.refresh(context.Background())
	for range 2 { // flipping every 2 s: held
		now = now.Add(2 * time.Second)
		write("http://a:1\n")
		m.refresh(context.Background())
		now = now.Add(2 * time.Second)
		write("http://a:1\nhttp://b:1\n")
		m.refresh(context.Background())
	}
	if len(sets) != 2 || m.changes.Load() != 1 {
		t.Fatalf("sets %v, changes %d; want the first list and one change", sets, m.changes.Load())
	}
	now = now.Add(4 * time.Second)
	write("http://a:1\n")
	m.refresh(context.Background())
	if len(sets) != 3 || !slices.Equal(sets[2], []string{"http://a:1"}) {
		t.Errorf("sets %v; want the list taken once the last change is %v old", sets, minChangeEvery)
	}
	if n := strings.Count(log.String(), "changed again"); n == 0 || n > 9 {
		t.Errorf("%d lines of held changes:\n%s", n, log.String())
	}
}
