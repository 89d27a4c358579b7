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
