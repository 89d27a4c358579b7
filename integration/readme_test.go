package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"syscall"
	"testing"

	"github.com/ffcvfs/ffcvfs/internal/testenv"
)

// The README and the pages of docs/ it leads to are tested as their
// reader uses them: the flags they name exist, the reference tables list
// every flag, their Python snippets compile and import, and Install's
// build commands and every shell block of Quickstart run, in order, in one
// shell, in a home of their own (the S3 part against the test's S3
// server).

// readmeBlock is a fenced code block of the README or a page of docs/.
type readmeBlock struct {
	lang    string
	text    string
	file    string   // the document, as the repository names it
	line    int      // of the opening fence
	heads   []string // the headings it lies under, outermost first
	runMark bool     // preceded by <!-- readme-test: run -->
}

// where is the block's place, FILE:LINE.
func (b readmeBlock) where() string { return fmt.Sprintf("%s:%d", b.file, b.line) }

// readme is the README and its pages, parsed.
type readme struct {
	blocks []readmeBlock
	prose  []readmeLine // lines outside code blocks, with their headings
}

type readmeLine struct {
	text  string
	file  string
	line  int
	heads []string
}

func (l readmeLine) where() string { return fmt.Sprintf("%s:%d", l.file, l.line) }

// docPages are the pages of docs/ that the README leads to: the sections
// that once were its own, each page's title a section of the README's
// (a heading of level 2 as the tests see it) and its headings one level
// below.
var docPages = []string{"../docs/training.md", "../docs/operating.md", "../docs/troubleshooting.md",
	"../docs/reference.md", "../docs/how-it-works.md", "../docs/layout.md"}

// readREADME parses the README and docPages as one document, the pages'
// headings one level down, as they stood in the README.
func readREADME(t *testing.T) readme {
	t.Helper()
	r := readMarkdown(t, "../README.md")
	for _, p := range docPages {
		d := readMarkdownAt(t, p, 1)
		r.blocks = append(r.blocks, d.blocks...)
		r.prose = append(r.prose, d.prose...)
	}
	return r
}

// readMarkdown parses the Markdown file at path into code blocks and prose.
func readMarkdown(t *testing.T, path string) readme {
	t.Helper()
	return readMarkdownAt(t, path, 0)
}

// readMarkdownAt is readMarkdown with every heading shift levels deeper.
func readMarkdownAt(t *testing.T, path string, shift int) readme {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	file := strings.TrimPrefix(filepath.ToSlash(path), "../")
	var r readme
	heads := []string{}
	var cur *readmeBlock
	var body strings.Builder
	mark := false
	for i, line := range strings.Split(string(data), "\n") {
		n := i + 1
		trimmed := strings.TrimSpace(line)
		if cur != nil {
			if strings.HasPrefix(trimmed, "```") {
				cur.text = body.String()
				r.blocks = append(r.blocks, *cur)
				cur = nil
				continue
			}
			body.WriteString(strings.TrimPrefix(line, "  ") + "\n")
			continue
		}
		if strings.HasPrefix(trimmed, "```") {
			cur = &readmeBlock{lang: strings.TrimPrefix(trimmed, "```"), file: file, line: n, heads: append([]string(nil), heads...), runMark: mark}
			body.Reset()
			mark = false
			continue
		}
		if trimmed == "<!-- readme-test: run -->" {
			mark = true
			continue
		}
		if trimmed != "" {
			mark = false
		}
		if strings.HasPrefix(line, "#") {
			level := len(line) - len(strings.TrimLeft(line, "#"))
			title := strings.TrimSpace(line[level:])
			level += shift
			if level-1 < len(heads) {
				heads = heads[:level-1]
			}
			for len(heads) < level-1 {
				heads = append(heads, "")
			}
			heads = append(heads, title)
			continue
		}
		r.prose = append(r.prose, readmeLine{text: line, file: file, line: n, heads: append([]string(nil), heads...)})
	}
	if cur != nil {
		t.Fatalf("%s:%d: a code block is not closed", path, cur.line)
	}
	return r
}

// under reports whether heads lies under the heading path want (a prefix).
func under(heads []string, want ...string) bool {
	if len(heads) < len(want)+1 {
		return false
	}
	for i, w := range want {
		if heads[i+1] != w {
			return false
		}
	}
	return true
}

// readmeCommands are the commands whose flags the README documents, as
// typed, with the arguments that print their help.
var readmeCommands = map[string][]string{
	"ffcvfs":                {"ffcvfs", "--help"},
	"ffcvfs write":          {"ffcvfs", "write", "--help"},
	"ffcvfs info":           {"ffcvfs", "info", "--help"},
	"ffcvfs verify":         {"ffcvfs", "verify", "--help"},
	"ffcvfs mount":          {"ffcvfs", "mount", "--help"},
	"ffcvfs umount":         {"ffcvfs", "umount", "--help"},
	"ffcvfs stats":          {"ffcvfs", "stats", "--help"},
	"ffcvfs cache ls":       {"ffcvfs", "cache", "ls", "--help"},
	"ffcvfs cache rm":       {"ffcvfs", "cache", "rm", "--help"},
	"ffcvfeed serve":        {"ffcvfeed", "serve", "--help"},
	"ffcvfeed bench":        {"ffcvfeed", "bench", "--help"},
	"ffcvfeed decode-bench": {"ffcvfeed", "decode-bench", "--help"},
}

var helpFlagRE = regexp.MustCompile(`^\s{2,}(--[a-z0-9][a-z0-9-]*)(?:, (-[a-z]))?\b`)

// helpOf returns the --help text of each command of readmeCommands.
func helpOf(t *testing.T) map[string]string {
	t.Helper()
	bins := map[string]string{"ffcvfs": binary(t, "ffcvfs"), "ffcvfeed": binary(t, "ffcvfeed")}
	out := map[string]string{}
	for name, args := range readmeCommands {
		stdout, _ := run(t, 0, bins[args[0]], args[1:]...)
		out[name] = stdout
	}
	return out
}

// helpFlags returns the flags that a --help text lists (not --help).
func helpFlags(help string) map[string]bool {
	flags := map[string]bool{}
	inOptions := false
	for _, line := range strings.Split(help, "\n") {
		if strings.HasSuffix(strings.TrimSpace(line), "OPTIONS:") {
			inOptions = true
			continue
		}
		if !inOptions {
			continue
		}
		if m := helpFlagRE.FindStringSubmatch(line); m != nil && m[1] != "--help" {
			flags[m[1]] = true
		}
	}
	return flags
}

var (
	codeSpanRE = regexp.MustCompile("`([^`]+)`")
	flagRE     = regexp.MustCompile(`(?:^|[\s(\[,"'=` + "`" + `])(--[a-z][a-z0-9-]*)`)
	// invocationRE finds a command of ours in a line or a code span:
	// ffcvfs or ffcvfeed (bin/ and -cuda allowed) and its subcommand.
	invocationRE = regexp.MustCompile(`(?:^|[\s/(])(ffcvfs|ffcvfeed)(?:-cuda)?((?:\s+[a-z][a-z-]*)*)`)
)

// commandOf returns the command of readmeCommands invoked in s, and the
// text after it, or "" when s invokes none of ours.
func commandOf(s string) (cmd, rest string) {
	loc := invocationRE.FindStringSubmatchIndex(s)
	if loc == nil {
		return "", ""
	}
	prog := s[loc[2]:loc[3]]
	words := strings.Fields(s[loc[4]:loc[5]])
	// The longest known command made of the program and its next words.
	for n := min(len(words), 2); n >= 0; n-- {
		name := strings.Join(append([]string{prog}, words[:n]...), " ")
		if _, ok := readmeCommands[name]; ok {
			return name, s[loc[1]:]
		}
	}
	return "", ""
}

// TestReadmeFlags: every flag the README names, in prose or in a shell
// block, is a flag of the command it is given to (of some command of ours
// when it stands alone), and the tables of Reference list every flag that
// --help lists, under a heading naming the command.
func TestReadmeFlags(t *testing.T) {
	r := readREADME(t)
	help := helpOf(t)
	flags := map[string]map[string]bool{}
	all := map[string]bool{"--help": true}
	for name, h := range help {
		flags[name] = helpFlags(h)
		if len(flags[name]) == 0 {
			t.Errorf("%s --help lists no flags: the parser of --help is out of date", name)
		}
		for f := range flags[name] {
			all[f] = true
		}
	}

	check := func(where, s string) {
		cmd, rest := commandOf(s)
		if cmd == "" {
			rest = s
		}
		for _, m := range flagRE.FindAllStringSubmatch(rest, -1) {
			f := m[1]
			switch {
			case cmd != "" && !flags[cmd][f]:
				t.Errorf("%s: %s is not a flag of %s (its --help)", where, f, cmd)
			case cmd == "" && !all[f]:
				t.Errorf("%s: %s is a flag of no command of ours", where, f)
			}
		}
	}
	for _, l := range r.prose {
		for _, m := range codeSpanRE.FindAllStringSubmatch(l.text, -1) {
			span := m[1]
			if strings.HasPrefix(span, "--") {
				check(fmt.Sprintf("%s `%s`", l.where(), span), span)
			} else if cmd, _ := commandOf(span); cmd != "" {
				check(fmt.Sprintf("%s `%s`", l.where(), span), span)
			}
		}
	}
	for _, b := range r.blocks {
		if b.lang != "sh" {
			continue
		}
		lines := strings.Split(b.text, "\n")
		for i := 0; i < len(lines); i++ {
			line, n := lines[i], b.line+1+i
			for strings.HasSuffix(line, `\`) && i+1 < len(lines) {
				i++
				line = strings.TrimSuffix(line, `\`) + " " + lines[i]
			}
			if c := strings.Index(line, " #"); c >= 0 {
				line = line[:c]
			}
			if cmd, _ := commandOf(line); cmd != "" {
				check(fmt.Sprintf("%s:%d", b.file, n), line)
			}
		}
	}

	// Reference: the flags of each table, by the commands its heading names.
	tables := map[string]map[string]bool{}
	sawRef := map[string]bool{}
	refText := ""
	for _, l := range r.prose {
		if !under(l.heads, "Reference") {
			continue
		}
		refText += l.text + "\n"
		if len(l.heads) < 3 {
			continue
		}
		var cmds []string
		for _, m := range codeSpanRE.FindAllStringSubmatch(l.heads[2], -1) {
			if c, _ := commandOf(m[1]); c != "" {
				cmds = append(cmds, c)
			}
		}
		if !strings.HasPrefix(l.text, "| `--") {
			continue
		}
		cell := strings.SplitN(strings.TrimPrefix(l.text, "|"), " | ", 2)[0]
		for _, m := range flagRE.FindAllStringSubmatch(cell, -1) {
			f := m[1]
			known := false
			for _, c := range cmds {
				if tables[c] == nil {
					tables[c] = map[string]bool{}
				}
				tables[c][f] = true
				sawRef[c] = true
				known = known || flags[c][f]
			}
			if !known {
				t.Errorf("%s: the table under %q lists %s, a flag of none of %v", l.where(), l.heads[2], f, cmds)
			}
		}
	}
	names := make([]string, 0, len(flags))
	for name := range flags {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		for f := range flags[name] {
			if name == "ffcvfs" {
				if !strings.Contains(refText, "`ffcvfs "+f+"`") {
					t.Errorf("Reference does not explain the global flag ffcvfs %s", f)
				}
				continue
			}
			if !tables[name][f] {
				t.Errorf("Reference: no table row for %s %s (it is in --help)", name, f)
			}
		}
		if name != "ffcvfs" && !sawRef[name] {
			t.Errorf("Reference: no table under a heading that names `%s`", name)
		}
	}
}

// staleNames are names of files and modules that no longer exist as such
// and must not be pointed at.
var staleNames = []string{"python/ffcvfs_sampler.py", "python/ffcvfeed.py", "scripts/mkbenchdata", "scripts/mkimagefolder", "scripts/readall", "scripts/storagebench", "pipeline/resize", "imagefolder/area",
	"beton/jpeg.go", "pipeline/decode/huff.c", "pipeline/decode/idct.c", "pipeline/decode/restart", "fs/server.go", "fs/announce.go", "fs/leases.go", "storage.OpenBeton", "order.Layout", "cudafeed.Layout"}

// repoPathRE finds paths into the repository in prose.
var repoPathRE = regexp.MustCompile(`\b(?:beton|cmd|control|cudafeed|docs|feed|fields|fs|integration|internal|jpeg|order|pagecache|peer|pipeline|python|resize|scripts|storage|testdata|tools)/[A-Za-z0-9_./-]*[A-Za-z0-9_]`)

// TestReadmeNamesCurrentFiles: the README, the Python package's README and
// every command's --help name only files and folders that exist, and no
// stale module.
func TestReadmeNamesCurrentFiles(t *testing.T) {
	texts := map[string]string{}
	for _, p := range append([]string{"../README.md", "../python/README.md", "../docs/measurements.md"}, docPages...) {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		texts[p] = string(b)
	}
	for name, h := range helpOf(t) {
		texts[name+" --help"] = h
	}
	// The package docs: each Go file's comment above its package clause.
	err := filepath.WalkDir("..", func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") && p != ".." || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if i := strings.Index(string(b), "\npackage "); i >= 0 {
			texts[p] = string(b[:i])
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for where, text := range texts {
		for _, s := range staleNames {
			if strings.Contains(text, s) {
				t.Errorf("%s names %s, which is gone", where, s)
			}
		}
		for _, loc := range repoPathRE.FindAllStringIndex(text, -1) {
			if loc[0] > 0 && text[loc[0]-1] == '/' {
				continue // part of a longer path, such as a module's
			}
			p := strings.TrimRight(text[loc[0]:loc[1]], ".")
			if strings.Contains(p, "...") || strings.HasPrefix(p, "storage/s3") {
				continue
			}
			// A package doc may name a file of its own folder's.
			_, local := os.Stat(filepath.Join(filepath.Dir(where), p))
			if _, err := os.Stat(filepath.Join("..", p)); err != nil && (local != nil || !strings.HasSuffix(where, ".go")) {
				t.Errorf("%s names %s, which does not exist", where, p)
			}
		}
	}
}

// readmePythonCheck compiles each block it is given and runs its imports.
const readmePythonCheck = `
import ast, json, sys
ok = True
for b in json.load(sys.stdin):
    name = b["where"]
    try:
        tree = ast.parse(b["text"], name)
        compile(tree, name, "exec")
        imports = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
        exec(compile(ast.Module(body=imports, type_ignores=[]), name, "exec"), {})
    except Exception as e:
        ok = False
        print("%s: %s: %s" % (name, type(e).__name__, e))
sys.exit(0 if ok else 1)
`

// TestReadmePython: every Python block of the README compiles, and its
// imports succeed with Debian's Python and the package in python/.
func TestReadmePython(t *testing.T) {
	py := debianPython(t, "torchvision", "numpy")
	r := readREADME(t)
	type block struct {
		Where string `json:"where"`
		Text  string `json:"text"`
	}
	var blocks []block
	for _, b := range r.blocks {
		if b.lang == "python" {
			blocks = append(blocks, block{b.where(), b.text})
		}
	}
	if len(blocks) < 5 {
		t.Fatalf("found %d Python blocks in the README, want at least 5", len(blocks))
	}
	in, err := json.Marshal(blocks)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(py, "-c", readmePythonCheck)
	cmd.Env = append(os.Environ(), "PYTHONPATH="+absPath(t, "../python"))
	cmd.Stdin = strings.NewReader(string(in))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("Python blocks: %v\n%s", err, out)
	}
}

func absPath(t *testing.T, p string) string {
	t.Helper()
	a, err := filepath.Abs(p)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// TestReadmeQuickstart runs Install's marked blocks (the build and the
// Python package) and every shell block of Quickstart, in one bash with
// set -e, as a new user would type them: in a home of its own with the
// fixture ImageFolder tree at ~/data/train. "From S3" starts the S3 server
// the README describes (versitygw, installed with go install from the
// module cache) and uploads with curl, as the README says.
func TestReadmeQuickstart(t *testing.T) {
	needFUSE(t)
	debianPython(t, "torchvision", "numpy", "venv", "ensurepip")
	bash := testenv.LookPath(t, "bash")
	testenv.LookPath(t, "curl")

	r := readREADME(t)
	var install, local, fromS3 []readmeBlock
	for _, b := range r.blocks {
		switch {
		case under(b.heads, "Install") && b.runMark:
			install = append(install, b)
		case under(b.heads, "Quickstart", "A local file") && b.lang == "sh":
			local = append(local, b)
		case under(b.heads, "Quickstart", "From S3") && b.lang == "sh":
			fromS3 = append(fromS3, b)
		case under(b.heads, "Quickstart") && b.lang == "sh":
			t.Fatalf("%s: a shell block of Quickstart outside its two parts", b.where())
		}
	}
	if len(install) < 2 || len(local) < 2 || len(fromS3) < 2 {
		t.Fatalf("found %d run-marked Install blocks, %d local and %d S3 Quickstart blocks", len(install), len(local), len(fromS3))
	}
	var installText string
	for _, b := range install {
		installText += b.text
	}
	if !strings.Contains(installText, "./cmd/ffcvfs") || !strings.Contains(installText, "./cmd/ffcvfeed") || !strings.Contains(installText, "./python") {
		t.Errorf("the blocks of Install that run do not build both commands and the Python package:\n%s", installText)
	}
	if !strings.Contains(installText, "/usr/bin/python3 -m venv") {
		t.Errorf("Install makes its venv with another python than Debian's /usr/bin/python3:\n%s", installText)
	}

	home := t.TempDir()
	copyTree(t, testenv.Fixture(t, "imagefolder-small"), filepath.Join(home, "data", "train"))
	mnt := filepath.Join(home, "mnt", "train")
	t.Cleanup(func() { forceUnmount(mnt) })

	script := "set -euo pipefail\n"
	section := func(name string, blocks []readmeBlock) {
		for _, b := range blocks {
			script += fmt.Sprintf("echo '### %s: %s'\n%s\n", name, b.where(), b.text)
		}
	}
	section("Install", install)
	section("Quickstart, a local file", local)
	section("Quickstart, from S3", fromS3)
	script += "echo '### done'\n"

	out, err := runReadmeScript(t, bash, script, home, nil)
	if err != nil {
		t.Fatalf("Install + Quickstart failed: %v\n%s", err, out)
	}

	// What the reader should have seen.
	t.Logf("Install + Quickstart printed:\n%s", out)
	for _, want := range []string{
		"ffcvfs " + readmeRelease(t) + " (commit ",
		"200 images, 10 classes; first:",
		"epoch 1 (",
		"160, 160, 3) uint8",
		"### done",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the output lacks %q\n%s", want, out)
		}
	}
	// Two epochs from S3 through a cache that holds the beton's one
	// page: the page is fetched once.
	if m := regexp.MustCompile(`fetched from S3: ([0-9.]+) bytes per byte`).FindStringSubmatch(out); m == nil {
		t.Errorf("the S3 part printed no bytes fetched per byte\n%s", out)
	} else if m[1] != "1.0" {
		t.Errorf("the S3 part fetched %s bytes per byte of data over 2 epochs, want 1.0 (its one page once)", m[1])
	}
	if isMountpoint(t, mnt) {
		t.Errorf("%s is still mounted after Quickstart's ffcvfs umount", mnt)
	}
}

// readmeRelease is the release that the programs report.
func readmeRelease(t *testing.T) string {
	t.Helper()
	out, _ := run(t, 0, binary(t, "ffcvfs"), "--version")
	f := strings.Fields(out)
	if len(f) < 2 {
		t.Fatalf("ffcvfs --version printed %q", out)
	}
	return f[1]
}

// runReadmeScript runs script with bash in the repository's folder, as a
// user with the given home: PATH holds Go and the system's folders, Go's
// caches are this process's (so nothing is downloaded again), and extra
// variables are added. Its output goes through a pipe, which must end when
// the script does: a process of the script that outlives it holding the
// pipe (a server, a mount) fails the test, as it would hang
// "script | tail". It returns the output and bash's error.
func runReadmeScript(t *testing.T, bash, script, home string, extra []string) (string, error) {
	t.Helper()
	env := []string{"HOME=" + home, "PATH=" + filepath.Dir(testenv.LookPath(t, "go")) + ":/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C.UTF-8", "TMPDIR=" + t.TempDir()}
	for _, v := range []string{"GOCACHE", "GOMODCACHE", "GOPATH", "GOPROXY", "GOFLAGS", "GOTOOLCHAIN", "GONOSUMDB", "GOSUMDB"} {
		out, err := exec.Command("go", "env", v).Output()
		if err != nil {
			t.Fatalf("go env %s: %v", v, err)
		}
		if s := strings.TrimSpace(string(out)); s != "" {
			env = append(env, v+"="+s)
		}
	}
	env = append(env, extra...)

	ctx, cancel := context.WithTimeout(context.Background(), 3*testenv.Patience)
	defer cancel()
	cmd := exec.CommandContext(ctx, bash, "-c", script)
	cmd.Dir = ".."
	cmd.Env = env
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = w, w
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	t.Cleanup(func() { syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
	out := &testenv.OutputBuffer{}
	read := make(chan struct{})
	go func() { io.Copy(out, r); close(read) }()
	runErr := cmd.Wait() // ctx bounds it
	select {
	case <-read:
	case <-ctx.Done():
		t.Fatalf("the script ended, but its output pipe did not: a process it started holds it\n%s", out.String())
	}
	r.Close()
	return out.String(), runErr
}

// copyTree copies the regular files of src into dst.
func copyTree(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		if d.Type().IsRegular() {
			copyFile(t, p, target, 0o644)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestReadmePackages: the Debian packages Install names are those the
// scripts install (scripts/lib.sh, which CI installs from), but for
// ca-certificates, which fetching Go needs.
func TestReadmePackages(t *testing.T) {
	lib, err := os.ReadFile("../scripts/lib.sh")
	if err != nil {
		t.Fatal(err)
	}
	groups := regexp.MustCompile(`(?s)\nFFCVFS_APT_[A-Z]+=\((.*?)\)`).FindAllSubmatch(lib, -1)
	if len(groups) == 0 {
		t.Fatal("scripts/lib.sh sets no FFCVFS_APT_* package lists")
	}
	known := map[string]bool{"ca-certificates": true}
	for _, m := range groups {
		for _, p := range strings.Fields(string(m[1])) {
			if !strings.HasPrefix(p, `"$`) {
				known[p] = true
			}
		}
	}
	r := readREADME(t)
	named := 0
	for _, b := range r.blocks {
		if !under(b.heads, "Install") || !strings.Contains(b.text, "apt-get install") {
			continue
		}
		words := strings.Fields(strings.ReplaceAll(b.text[strings.Index(b.text, "apt-get install"):], "\\\n", " "))
		for _, w := range words[2:] {
			if strings.HasPrefix(w, "-") || w == "\\" {
				continue
			}
			named++
			if !known[w] {
				t.Errorf("Install names the package %s, which scripts/lib.sh does not install", w)
			}
		}
	}
	if named < 5 {
		t.Errorf("Install names %d Debian packages, want the build's and the examples'", named)
	}
}

// markdownDocs are the documents whose links TestReadmeLinks checks.
var markdownDocs = append([]string{"../README.md", "../docs/measurements.md", "../python/README.md", "../testdata/NOTICE.md"}, docPages...)

// TestReadmeLinks: every link of the README and the documents beside it to
// a place in a document lands on a heading (by GitHub's rule for anchors)
// or an <a id> of that document, and every link to a file of the
// repository names one that exists.
func TestReadmeLinks(t *testing.T) {
	anchors := map[string]map[string]bool{} // by cleaned path
	for _, doc := range markdownDocs {
		anchors[filepath.Clean(doc)] = markdownAnchors(t, doc)
	}
	linkRE := regexp.MustCompile(`\]\(([^)\s]+)\)`)
	internal := 0
	for _, doc := range markdownDocs {
		data, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range linkRE.FindAllStringSubmatch(string(data), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			file, frag, _ := strings.Cut(target, "#")
			path := filepath.Clean(doc)
			if file != "" {
				path = filepath.Clean(filepath.Join(filepath.Dir(doc), file))
				if _, err := os.Stat(path); err != nil {
					t.Errorf("%s links to %s, which does not exist", doc, target)
					continue
				}
			}
			if frag == "" {
				continue
			}
			internal++
			a, ok := anchors[path]
			if !ok {
				t.Errorf("%s links to %s: an anchor in a document this test does not read", doc, target)
			} else if !a[frag] {
				t.Errorf("%s links to %s, which is no heading or anchor there", doc, target)
			}
		}
	}
	if internal < 30 {
		t.Fatalf("found %d links to places in the documents, want their cross-references", internal)
	}
}

// markdownAnchors returns the anchors of a Markdown file: its headings'
// (GitHub's rule) and its <a id>s.
func markdownAnchors(t *testing.T, path string) map[string]bool {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	r := readMarkdown(t, path)
	anchors := map[string]bool{}
	slug := regexp.MustCompile(`[^\p{L}\p{N} _-]`)
	seen := map[string]bool{}
	for _, l := range r.prose {
		for _, h := range l.heads {
			if h == "" || seen[h] {
				continue
			}
			seen[h] = true
			anchors[strings.ReplaceAll(slug.ReplaceAllString(strings.ToLower(h), ""), " ", "-")] = true
		}
	}
	for _, m := range regexp.MustCompile(`<a id="([^"]+)"></a>`).FindAllStringSubmatch(string(data), -1) {
		if anchors[m[1]] {
			t.Errorf("%s: the anchor %q is defined twice", path, m[1])
		}
		anchors[m[1]] = true
	}
	return anchors
}

// TestReadmeDetection runs the README's detection example as written: its
// writer block (marked to run) over annotations of the fixture's photos,
// then its reader block, in a folder of their own. The writer named a
// list it never defined, and the reader asked for a field the writer did
// not write.
func TestReadmeDetection(t *testing.T) {
	py := installedPython(t, "numpy", "PIL")
	var write, read string
	for _, b := range readREADME(t).blocks {
		if b.lang != "python" || !b.runMark {
			continue
		}
		switch {
		case strings.Contains(b.text, "DatasetWriter(\"det_train.beton\""):
			write = b.text
		case strings.Contains(b.text, "Loader(\"det_train.beton\""):
			read = b.text
		}
	}
	if write == "" || read == "" {
		t.Fatalf("the README's detection blocks, marked to run, not found (writer %t, reader %t)", write != "", read != "")
	}
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "images"), 0o755); err != nil {
		t.Fatal(err)
	}
	type record struct {
		File   string       `json:"file"`
		Boxes  [][4]float64 `json:"boxes"`
		Labels []int        `json:"labels"`
	}
	var records []record
	for i, p := range testenv.Photos(t, 6) {
		name := fmt.Sprintf("images/%04d.jpg", i)
		if err := os.WriteFile(filepath.Join(dir, name), p.Data, 0o644); err != nil {
			t.Fatal(err)
		}
		r := record{File: name}
		for k := 0; k < i%3+1; k++ {
			r.Boxes = append(r.Boxes, [4]float64{float64(k), 1, float64(k + 10), 20})
			r.Labels = append(r.Labels, k)
		}
		records = append(records, r)
	}
	b, _ := json.Marshal(records)
	if err := os.WriteFile(filepath.Join(dir, "annotations.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, block := range []string{write, read} {
		cmd := exec.Command(py, "-c", block)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("a README block failed: %v\n%s\n--- the block:\n%s", err, out, block)
		}
		if block == read {
			// Three batches of 2, in the Loader's order: each sample's
			// count of boxes is its file's (image i has i%3+1).
			lines := regexp.MustCompile(`\(2, 160, 160, 3\) \[(\d), (\d)\] \(2, 32, 4\) images/000(\d)\.jpg`).FindAllStringSubmatch(string(out), -1)
			seen := 0
			for _, m := range lines {
				if i := int(m[3][0] - '0'); int(m[1][0]-'0') != i%3+1 {
					t.Errorf("image %d has count %s", i, m[1])
				}
				seen += int(m[1][0]-'0') + int(m[2][0]-'0')
			}
			if len(lines) != 3 || seen != 12 {
				t.Errorf("the reader block printed:\n%s\nwant 3 batches of 2 whose counts sum to 12", out)
			}
		}
	}
}

// TestReadmeTrainCPU runs the README's train.py as written, on the CPU,
// with two ranks as its one-machine command starts them, over a mount of
// the fixture's photos, one epoch (EPOCHS): it trains, and each rank's
// peak memory stays within what the README says a rank takes. With
// ResNet-50 at batches of 256 each rank took about 12 GB, and the kernel
// killed one on a 24 GB machine.
func TestReadmeTrainCPU(t *testing.T) {
	py := installedPython(t, "torch", "torchvision", "numpy")
	var train string
	for _, b := range readREADME(t).blocks {
		if b.lang == "python" && b.runMark && strings.HasPrefix(b.text, "# train.py") {
			train = b.text
		}
	}
	if train == "" {
		t.Fatal("the README's train.py, marked to run, not found")
	}
	dir := t.TempDir()
	beton := filepath.Join(dir, "train.beton")
	// Pages of 2 MiB: the ranks are dealt pages, two or more each.
	run(t, 0, binary(t, "ffcvfs"), "write", "--page-size", "2MiB", testenv.Fixture(t, "imagefolder-small"), beton)
	mnt := mountBeton(t, beton)
	if err := os.WriteFile(filepath.Join(dir, "train.py"), []byte(train), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(py, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", "--redirects", "2", "--tee", "2", "train.py")
	cmd.Dir = dir
	// TMPDIR: the launcher's folders (torchelastic_*) go where the test's do.
	cmd.Env = append(os.Environ(), "DATA="+mnt, "EPOCHS=1", "CUDA_VISIBLE_DEVICES=", "TMPDIR="+t.TempDir())
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "epoch 0 step 0 loss") {
		t.Fatalf("train.py on the CPU: %v\n%s", err, out)
	}
	peak := cmd.ProcessState.SysUsage().(*syscall.Rusage).Maxrss << 10 // the largest of the launcher and its ranks
	t.Logf("peak resident memory of a rank: %d MiB", peak>>20)
	if peak > 3<<30 {
		t.Errorf("a rank took %d MiB; the README says about 1.2 GB", peak>>20)
	}
	// NCHW batches (layout="nchw"), as the model takes them: DDP has no
	// gradient of another layout to warn of.
	if strings.Contains(string(out), "Grad strides do not match") {
		t.Errorf("DDP warned of the gradients' strides:\n%s", out)
	}
}

// TestReadmeShort: the README is what a newcomer reads, in at most 300
// lines (it was 1,384, its quickstart lost among them); the reference lives
// in docs/, and every page of it, and every section of each page, is a link
// of the README's.
func TestReadmeShort(t *testing.T) {
	data, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(data), "\n"); n > 300 {
		t.Errorf("README.md has %d lines, more than 300: move reference into a page of docs/", n)
	}
	for _, p := range docPages {
		page := strings.TrimPrefix(p, "../")
		if !strings.Contains(string(data), "]("+page+")") {
			t.Errorf("the README does not link to %s", page)
		}
		d := readMarkdown(t, p)
		seen := map[string]bool{}
		slug := regexp.MustCompile(`[^\p{L}\p{N} _-]`)
		for _, l := range d.prose {
			if len(l.heads) < 2 || l.heads[1] == "" || seen[l.heads[1]] {
				continue
			}
			seen[l.heads[1]] = true
			anchor := strings.ReplaceAll(slug.ReplaceAllString(strings.ToLower(l.heads[1]), ""), " ", "-")
			if !strings.Contains(string(data), "]("+page+"#"+anchor+")") {
				t.Errorf("the README does not link to %s's section %q (%s#%s)", page, l.heads[1], page, anchor)
			}
		}
	}
}
