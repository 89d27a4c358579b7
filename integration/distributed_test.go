package integration

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ffcvfs/ffcvfs/internal/testenv"
)

// TestReadmeDistributed runs the README's train.py for ffcvfeed the way the
// README starts it on one machine, two ranks under python3 -m
// torch.distributed.run, over a mount of the fixture beton, with a smaller
// model, batches and images (the README's are for GPUs). Each rank's Loader
// starts a server of its own. Once both ranks train, one is killed: the
// launcher ends the other and exits, its output pipe ends with it, and no
// server process, socket, folder or shared memory of either rank is left.
func TestReadmeDistributed(t *testing.T) {
	needFUSE(t)
	py := installedPython(t, "numpy", "torch", "torchvision")
	r := readREADME(t)
	var train, launch string
	for _, b := range r.blocks {
		if !under(b.heads, "Training", "Distributed training (torchrun)") {
			continue
		}
		switch {
		case b.lang == "python" && strings.HasPrefix(b.text, "# train.py"):
			train = b.text
		case b.lang == "sh" && strings.Contains(b.text, "--standalone"):
			launch = strings.TrimSpace(b.text)
		}
	}
	if train == "" || launch == "" {
		t.Fatalf("the README's distributed section has no train.py block (%d bytes) or one-machine launch line (%q)", len(train), launch)
	}
	if !strings.HasPrefix(launch, "python3 -m torch.distributed.run ") || !strings.HasSuffix(launch, " train.py") {
		t.Fatalf("the one-machine launch line is %q", launch)
	}
	mnt := mountBeton(t, testenv.Fixture(t, "beton", "imagefolder-jpg.beton"))
	// The README's CPU sizes, smaller still, keep two ranks on two busy
	// cores quick. Each must be in the README, or the test would run
	// something else than it says.
	for _, sub := range [][2]string{{`"/mnt/train"`, fmt.Sprintf("%q", mnt)}, {`("resnet18", 32)`, `("resnet18", 8)`},
		{"resolution=176", "resolution=64"}, {"step % 100 == 0", "step % 2 == 0"}} {
		if !strings.Contains(train, sub[0]) {
			t.Fatalf("the README's train.py holds no %s to replace with %s", sub[0], sub[1])
		}
		train = strings.ReplaceAll(train, sub[0], sub[1])
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "train.py"), []byte(train), 0o644); err != nil {
		t.Fatal(err)
	}
	tmp := testenv.SocketDir(t) // the Loaders' folders go here: a TMPDIR where their sockets' paths fit
	var markBytes [8]byte
	rand.Read(markBytes[:])
	mark := "FFCVFS_TEST_RUN=" + hex.EncodeToString(markBytes[:])

	cmd := exec.Command("bash", "-c", launch)
	cmd.Dir = dir
	cmd.Env = []string{"PATH=" + filepath.Dir(py) + ":/usr/bin:/bin", "HOME=" + dir, "LANG=C.UTF-8", "TMPDIR=" + tmp, mark}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	rp, wp, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = wp, wp
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	wp.Close()
	t.Cleanup(func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		for _, p := range markedProcesses(mark) {
			syscall.Kill(p.pid, syscall.SIGKILL)
		}
	})
	out := &testenv.OutputBuffer{}
	training := make(chan struct{})
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		sc := bufio.NewScanner(rp)
		seen := false
		for sc.Scan() {
			out.Write(append(sc.Bytes(), '\n'))
			if !seen && strings.Contains(sc.Text(), "epoch 0 step 2 loss") {
				seen = true
				close(training)
			}
		}
	}()
	select {
	case <-training:
	case <-ended:
		t.Fatalf("train.py ended before it trained:\n%s", out)
	case <-time.After(3 * testenv.Patience):
		t.Fatalf("train.py did not reach step 2 of epoch 0:\n%s", out)
	}

	// Both ranks train, each with a server of its own.
	procs := markedProcesses(mark)
	var rank1 int
	var servers []markedProcess
	for _, p := range procs {
		if p.comm == "ffcvfeed" {
			servers = append(servers, p)
		} else if p.env["LOCAL_RANK"] == "1" {
			rank1 = p.pid
		}
	}
	if len(servers) != 2 || rank1 == 0 {
		t.Fatalf("want two ffcvfeed servers and rank 1 running, found %v\n%s", procs, out)
	}
	seenRanks := map[string]bool{}
	for _, s := range servers {
		seenRanks[strings.Join(s.args, " ")] = true
		if s.env["FFCVFEED_OWNED_FOLDER"] == "" || !strings.HasPrefix(s.env["FFCVFEED_OWNED_FOLDER"], tmp) {
			t.Errorf("server %d: its folder %q is not a Loader's folder under TMPDIR", s.pid, s.env["FFCVFEED_OWNED_FOLDER"])
		}
		if !strings.Contains(strings.Join(s.args, " "), "--world-size 2") {
			t.Errorf("server %d runs %v, without the world size", s.pid, s.args)
		}
	}

	// Kill rank 1 in the middle of the epoch.
	killed := time.Now()
	if err := syscall.Kill(rank1, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case err := <-exited:
		if err == nil {
			t.Errorf("the launcher exited 0 although rank 1 was killed")
		}
	case <-time.After(testenv.Patience):
		t.Fatalf("the launcher did not end after rank 1 was killed:\n%s", out)
	}
	select {
	case <-ended:
	case <-time.After(testenv.Patience):
		t.Fatalf("the launcher ended, but its output pipe did not: a process of the job holds it:\n%s\n%v", out, markedProcesses(mark))
	}
	// Nothing of the job is left: no process at all, so no server. The
	// launcher has ended, so no process of the job starts any more.
	for _, p := range markedProcesses(mark) {
		if fd, err := unix.PidfdOpen(p.pid, 0); err == nil && !waitPidfd(fd) {
			t.Fatalf("a process of the job is left after rank 1 was killed: %v", p)
		}
	}
	t.Logf("rank 1 killed: the launcher, the other rank and both servers were gone %.1f s later", time.Since(killed).Seconds())
	for _, s := range servers {
		folder := s.env["FFCVFEED_OWNED_FOLDER"]
		if _, err := os.Lstat(folder); err == nil {
			ents, _ := os.ReadDir(folder)
			t.Errorf("server %d left its folder %s (%d entries)", s.pid, folder, len(ents))
		}
		if shm, _ := filepath.Glob(fmt.Sprintf("/dev/shm/ffcvfeed-%d-*", s.pid)); len(shm) > 0 {
			t.Errorf("server %d left its shared memory %v", s.pid, shm)
		}
	}
	if left, _ := filepath.Glob(filepath.Join(tmp, "ffcvfeed-*")); len(left) > 0 {
		t.Errorf("Loader folders left in TMPDIR: %v", left)
	}
}

// markedProcess is a process whose environment holds a test's mark.
type markedProcess struct {
	pid  int
	comm string
	args []string
	env  map[string]string
}

func (p markedProcess) String() string { return fmt.Sprintf("%d %s %v", p.pid, p.comm, p.args) }

// markedProcesses lists the running processes whose environment holds
// mark (NAME=value), which they inherited from the one a test started.
func markedProcesses(mark string) []markedProcess {
	ents, _ := os.ReadDir("/proc")
	var out []markedProcess
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
		if err != nil || !bytes.Contains(env, []byte("\x00"+mark+"\x00")) && !bytes.HasPrefix(env, []byte(mark+"\x00")) {
			continue
		}
		if st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil {
			// A zombie has been reaped by nobody yet, but runs no more.
			if i := bytes.LastIndexByte(st, ')'); i > 0 && i+2 < len(st) && st[i+2] == 'Z' {
				continue
			}
		}
		p := markedProcess{pid: pid, env: map[string]string{}}
		comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		p.comm = strings.TrimSpace(string(comm))
		cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		p.args = strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00")
		for _, kv := range bytes.Split(env, []byte{0}) {
			if k, v, ok := strings.Cut(string(kv), "="); ok {
				p.env[k] = v
			}
		}
		out = append(out, p)
	}
	return out
}
