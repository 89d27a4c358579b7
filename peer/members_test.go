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

	"github.com/golang/groupcache/consistenthash"
)

// testMembers returns members of self following file, whose groupcache
// Sets are recorded in sets.
func testMembers(self, file string, sets *[][]string) *members {
	return &members{self: self, scheme: "http", file: file, logger: slog.New(slog.DiscardHandler),
		set: func(n []string) { *sets = append(*sets, n) }, reload: make(chan struct{}, 1)}
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
		got := ms[0].successor(key, down)
		for _, m := range ms[1:] {
			if s := m.successor(key, slices.Clone(down)); s != got {
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
