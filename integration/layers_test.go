package integration

import (
	"bytes"
	"encoding/json"
	"io"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// layoutRowRE is a row of README's Layout table: | FLOOR | `pkg`, ... | what |.
var layoutRowRE = regexp.MustCompile(`^\|\s*(\d+)\s*\|([^|]*)\|`)

// readmeFloors reads the floors of README's Layout table: package (its path
// in the module) to floor.
func readmeFloors(t *testing.T) map[string]int {
	t.Helper()
	floors := map[string]int{}
	for _, l := range readREADME(t).prose {
		if !under(l.heads, "Layout") {
			continue
		}
		m := layoutRowRE.FindStringSubmatch(strings.TrimSpace(l.text))
		if m == nil {
			continue
		}
		floor, _ := strconv.Atoi(m[1])
		for _, p := range regexp.MustCompile("`([^`]+)`").FindAllStringSubmatch(m[2], -1) {
			if f, ok := floors[p[1]]; ok {
				t.Errorf("README's Layout places %s on floors %d and %d", p[1], f, floor)
			}
			floors[p[1]] = floor
		}
	}
	if len(floors) == 0 {
		t.Fatal("README's Layout has no table of floors (| FLOOR | `package`, ... | ... |)")
	}
	return floors
}

// goPackage is what TestLayers reads of `go list -json`.
type goPackage struct {
	ImportPath string
	Module     *struct{ Path string }
	Imports    []string
}

// modulePackages lists the module's packages and their imports (not those
// of their tests) with `go list -deps -json ./...`, keyed by their paths in
// the module.
func modulePackages(t *testing.T) map[string][]string {
	t.Helper()
	cmd := exec.Command("go", "list", "-deps", "-json", "./...")
	cmd.Dir = ".."
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	const module = "github.com/ffcvfs/ffcvfs"
	rel := func(p string) string {
		if p == module {
			return "."
		}
		return strings.TrimPrefix(p, module+"/")
	}
	pkgs := map[string][]string{}
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p goPackage
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("go list: %v", err)
		}
		if p.Module == nil || p.Module.Path != module {
			continue
		}
		var imports []string
		for _, i := range p.Imports {
			if i == module || strings.HasPrefix(i, module+"/") {
				imports = append(imports, rel(i))
			}
		}
		pkgs[rel(p.ImportPath)] = imports
	}
	return pkgs
}

// TestLayers: every package of the module stands on a floor of README's
// Layout, and imports only packages of lower floors.
func TestLayers(t *testing.T) {
	floors := readmeFloors(t)
	pkgs := modulePackages(t)
	if len(pkgs) < 20 {
		t.Fatalf("go list found %d packages of the module", len(pkgs))
	}
	var names []string
	for p := range pkgs {
		names = append(names, p)
	}
	slices.Sort(names)
	for _, p := range names {
		f, ok := floors[p]
		if !ok {
			t.Errorf("%s is not in README's Layout: give it a floor", p)
			continue
		}
		for _, i := range pkgs[p] {
			if g, ok := floors[i]; ok && g >= f {
				t.Errorf("%s (floor %d) imports %s, which README's Layout places on floor %d", p, f, i, g)
			}
		}
	}
	for p := range floors {
		if _, ok := pkgs[p]; !ok {
			t.Errorf("README's Layout names %s, which is not a package of the module", p)
		}
	}
}

// TestPeerIsATier: the peer tier is one of the cache's tiers, and data
// flows one way, down: package peer (transport, members, placement, a
// client and a server) reaches neither the cache nor storage, and the
// cache reaches the peer package only as a tier (pagecache.PeerTier, given
// in Options.Peers), never by importing it; README's diagram draws no
// arrow from peer into the cache.
func TestPeerIsATier(t *testing.T) {
	pkgs := modulePackages(t)
	var reach func(p string, seen map[string]bool)
	reach = func(p string, seen map[string]bool) {
		for _, i := range pkgs[p] {
			if !seen[i] {
				seen[i] = true
				reach(i, seen)
			}
		}
	}
	if _, ok := pkgs["peer"]; !ok {
		t.Fatal("no package peer")
	}
	fromPeer := map[string]bool{}
	reach("peer", fromPeer)
	for p := range fromPeer {
		if p == "pagecache" || strings.HasPrefix(p, "pagecache/") || p == "storage" {
			t.Errorf("peer reaches %s: the peer tier is transport, members and placement; the cache reads storage and keeps pages", p)
		}
	}
	for p := range pkgs {
		if p != "pagecache" && !strings.HasPrefix(p, "pagecache/") {
			continue
		}
		fromCache := map[string]bool{}
		reach(p, fromCache)
		if fromCache["peer"] {
			t.Errorf("%s reaches package peer: the cache knows the peer tier only as pagecache.PeerTier", p)
		}
	}
	var diagram strings.Builder
	for _, b := range readREADME(t).blocks {
		if under(b.heads, "Layout") {
			diagram.WriteString(b.text + "\n")
		}
	}
	if !strings.Contains(diagram.String(), "pagecache") {
		t.Fatal("README's Layout has no diagram with pagecache")
	}
	for _, arrow := range []string{"peer ─►", "peer ─┐", "peer ─┘"} {
		if strings.Contains(diagram.String(), arrow) {
			t.Errorf("README's Layout draws %q: the peer tier is below the cache's tiers, not a source above the cache", arrow)
		}
	}
}
