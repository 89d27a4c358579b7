package orders

import (
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ffcvfs/ffcvfs/internal/testenv"
	"github.com/ffcvfs/ffcvfs/pagecache/policy"
)

// planCache is a Cache that keeps the plans announced, as pagecache's
// does.
type planCache struct {
	mu    sync.Mutex
	plans map[string][]uint32
	// announced holds every order announced, withdrawn or not.
	announced [][]uint32
}

func (c *planCache) Announce(id string, order []uint32) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.plans == nil {
		c.plans = map[string][]uint32{}
	}
	c.plans[id] = order
	c.announced = append(c.announced, order)
	return nil
}

// Announced returns the orders announced so far, withdrawn or not: a
// plan goes when its announcer's process exits, which a test cannot
// wait before.
func (c *planCache) Announced() [][]uint32 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.announced)
}

func (c *planCache) Withdraw(id string) {
	c.mu.Lock()
	delete(c.plans, id)
	c.mu.Unlock()
}

func (c *planCache) WithdrawIdle(time.Duration) []string { return nil }

func (c *planCache) Plans() []policy.PlanStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []policy.PlanStats
	for id, o := range c.plans {
		out = append(out, policy.PlanStats{ID: id, Len: len(o)})
	}
	return out
}

// startTestAnnouncer serves an announce socket for a beton of 100 samples
// (ImageFolder index i is sample 99-i), with the logger given; both stop
// when the test ends.
func startTestAnnouncer(t *testing.T, logger *slog.Logger) (*Announcer, *planCache) {
	t.Helper()
	c := &planCache{}
	l := NewLeases(c, Options{Owner: uint32(os.Getuid()), Lease: time.Hour, Samples: 100, Logger: logger})
	t.Cleanup(l.Close)
	ifIndex := make([]uint32, 100)
	for i := range ifIndex {
		ifIndex[i] = uint32(99 - i)
	}
	a, err := StartAnnouncer(testenv.SocketDir(t), l, Samples{N: 100, ImageFolder: ifIndex})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Close)
	return a, c
}

// TestRemoveStale: the announce folders of mounts that were killed (a
// socket bound over a minute ago that refuses connections, alone in an
// ffcvfs-* folder of the user's, 0700) are removed; a live socket's, a
// young one's, a folder with anything else in it, other names and other
// modes stay.
func TestRemoveStale(t *testing.T) {
	parent := testenv.SocketDir(t)
	old := time.Now().Add(-2 * staleAge)
	mk := func(name string, mode os.FileMode, listen bool, bound time.Time, extra bool) {
		t.Helper()
		dir := filepath.Join(parent, name)
		if err := os.Mkdir(dir, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(dir, mode); err != nil {
			t.Fatal(err)
		}
		sock := filepath.Join(dir, announceSocketName)
		ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
		if err != nil {
			t.Fatal(err)
		}
		if listen {
			t.Cleanup(func() { ln.Close() })
		} else {
			ln.SetUnlinkOnClose(false)
			ln.Close()
		}
		if err := os.Chtimes(sock, bound, bound); err != nil {
			t.Fatal(err)
		}
		if extra {
			if err := os.WriteFile(filepath.Join(dir, "other"), nil, 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	mk("ffcvfs-dead", 0o700, false, old, false)
	mk("ffcvfs-dead2", 0o700, false, old, false)
	mk("ffcvfs-live", 0o700, true, old, false)
	mk("ffcvfs-young", 0o700, false, time.Now(), false)
	mk("ffcvfs-full", 0o700, false, old, true)
	mk("ffcvfs-open", 0o755, false, old, false)
	mk("other-dead", 0o700, false, old, false)
	if n := removeStale(parent, time.Now()); n != 2 {
		t.Errorf("removed %d folders, want 2", n)
	}
	for name, want := range map[string]bool{"ffcvfs-dead": false, "ffcvfs-dead2": false, "ffcvfs-live": true,
		"ffcvfs-young": true, "ffcvfs-full": true, "ffcvfs-open": true, "other-dead": true} {
		_, err := os.Stat(filepath.Join(parent, name, announceSocketName))
		if (err == nil) != want {
			t.Errorf("%s: socket there %v, want %v", name, err == nil, want)
		}
	}
}

// TestAnnounceTrickle: connections that send a byte now and
// then, fast enough never to be idle, used to hold every slot for good, so
// that a real announcement timed out. A whole announcement has a deadline:
// they are dropped with a sentence, and the real one is answered.
func TestAnnounceTrickle(t *testing.T) {
	a, _ := startTestAnnouncer(t, nil)
	a.idle.Store(int64(time.Second))
	a.total.Store(int64(1500 * time.Millisecond))
	stop := make(chan struct{})
	defer close(stop)
	replies := make(chan string, maxAnnounceConns)
	var conns []net.Conn
	for range maxAnnounceConns {
		c, err := net.Dial("unix", a.Path())
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		go func() {
			// A blank line every 100 ms: never idle, never done.
			tick := time.NewTicker(100 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-stop:
					return
				case <-tick.C:
					if _, err := c.Write([]byte("\n")); err != nil {
						return
					}
				}
			}
		}()
		go func() {
			b, _ := io.ReadAll(c)
			replies <- string(b)
		}()
	}
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	// The real announcement waits for a slot, which the deadline frees.
	done := make(chan string, 1)
	go func() {
		done <- testenv.Announce(t, a.Path(), func(w io.Writer) { io.WriteString(w, "imagefolder\n0\n1\n") })
	}()
	select {
	case got := <-done:
		if got != "ok 2\n" {
			t.Errorf("the real announcement got %q, want ok 2", got)
		}
	case <-time.After(testenv.Patience):
		t.Fatal("the real announcement got no answer: the trickling connections hold every slot")
	}
	for range maxAnnounceConns {
		if got := <-replies; !strings.HasPrefix(got, "error: ") || !strings.Contains(got, "the order was not all in after 1.5s") {
			t.Errorf("a trickling connection got %q", got)
		}
	}
}

// TestAnnounceSurvivesFDExhaustion: when the mount's process
// ran out of file descriptors, the announce socket's accept failed once and
// the socket never accepted again. Now it tries again, and answers the
// connection that waited once descriptors are free. The client is another
// process, whose descriptors do not count.
func TestAnnounceSurvivesFDExhaustion(t *testing.T) {
	py := testenv.LookPath(t, "python3")
	logs := &testenv.OutputBuffer{}
	a, c := startTestAnnouncer(t, slog.New(slog.NewTextHandler(logs, nil)))
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	// Take every descriptor this process may open, under a lowered limit.
	low := lim
	low.Cur = 4096
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &low); err != nil {
		t.Fatal(err)
	}
	var held []int
	release := func() {
		for _, fd := range held {
			syscall.Close(fd)
		}
		held = nil
		syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim)
	}
	defer release()
	for {
		fd, err := syscall.Open("/dev/null", syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
		if err != nil {
			break
		}
		held = append(held, fd)
	}
	client := exec.Command(py, "-c", `
import socket, sys
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
s.sendall(b"imagefolder\n0\n")
s.shutdown(socket.SHUT_WR)
sys.stdout.write(s.recv(4096).decode())
`, a.Path())
	var out strings.Builder
	client.Stdout, client.Stderr = &out, &out
	// Starting it takes descriptors of this process for a moment: free a
	// few, then take them again once it runs.
	for range 8 {
		syscall.Close(held[len(held)-1])
		held = held[:len(held)-1]
	}
	if err := client.Start(); err != nil {
		t.Fatal(err)
	}
	for {
		fd, err := syscall.Open("/dev/null", syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
		if err != nil {
			break
		}
		held = append(held, fd)
	}
	// Wait until the mount has failed to accept the client's connection.
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(testenv.Patience)
	for !strings.Contains(logs.String(), "announce socket: accept failed") {
		select {
		case <-tick.C:
		case <-deadline:
			release()
			client.Wait()
			t.Fatalf("accept never failed with every descriptor taken; the client got %q", out.String())
		}
	}
	release()
	errc := make(chan error, 1)
	go func() { errc <- client.Wait() }()
	select {
	case err := <-errc:
		if err != nil || out.String() != "ok 1\n" {
			t.Errorf("the waiting client: %v, %q; want ok 1", err, out.String())
		}
		// ImageFolder index 0 is sample 99 here. The client has exited,
		// so its plan may be withdrawn by now: what was announced counts.
		if got := c.Announced(); len(got) != 1 || !slices.Equal(got[0], []uint32{99}) {
			t.Errorf("announced %v, want one order of sample 99", got)
		}
	case <-time.After(testenv.Patience):
		client.Process.Kill()
		t.Fatal("the announce socket never accepted again after running out of descriptors")
	}
}
