package fs

import (
	"bufio"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ffcvfs/ffcvfs/control"
	"github.com/ffcvfs/ffcvfs/fs/orders"
	"github.com/ffcvfs/ffcvfs/internal/testenv"
)

// planIDs returns the ids of the cache's live plans.
func planIDs(v *View) []string {
	var ids []string
	for _, p := range v.cache.Stats().Plans {
		ids = append(ids, p.ID)
	}
	return ids
}

// A plan announced by a process that has exited is withdrawn within a
// lease check or two.
func TestPlanWithdrawnWhenReaderExits(t *testing.T) {
	mnt, v := testMount(t, fixture(t, "imagefolder-jpg.beton"), Options{})
	cmd := exec.Command("cat", control.Path(mnt, control.OrdersDir, "quasi-random/0/0"))
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(testenv.Patience)
	for len(planIDs(v)) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("plans %v still live %v after their reader (pid %d) exited", planIDs(v), 5*orders.LeaseCheck, cmd.Process.Pid)
		}
		time.Sleep(orders.LeaseCheck / 10)
	}
	if owners := v.Stats().PlanOwners; len(owners) != 0 {
		t.Errorf("stats.json plan_owners %v, want none", owners)
	}
}

// A process that announces a second order gives up its first: one reader,
// one order. A live, reading process keeps its plan.
func TestPlanReplacedBySameReader(t *testing.T) {
	mnt, v := testMount(t, fixture(t, "imagefolder-jpg.beton"), Options{})
	for _, name := range []string{"quasi-random/0/0", "random/0/0"} {
		if _, err := os.ReadFile(control.Path(mnt, control.OrdersDir, name)); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(2 * orders.LeaseCheck)
	ids := planIDs(v)
	if len(ids) != 1 || ids[0] != fmt.Sprintf("order:uid-%d:random/0/0-of-1", os.Getuid()) {
		t.Errorf("plans %v, want the second order's alone", ids)
	}
	if pid := v.Stats().PlanOwners[fmt.Sprintf("order:uid-%d:random/0/0-of-1", os.Getuid())]; pid != uint32(os.Getpid()) {
		t.Errorf("stats.json plan_owners: pid %d, want this process's %d", pid, os.Getpid())
	}
}

// A plan of which nothing is read for the lease is withdrawn, though its
// reader lives.
func TestPlanWithdrawnWhenIdle(t *testing.T) {
	mnt, v := testMount(t, fixture(t, "imagefolder-jpg.beton"), Options{PlanLease: orders.LeaseCheck})
	if _, err := os.ReadFile(control.Path(mnt, control.OrdersDir, "quasi-random/0/0")); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(testenv.Patience)
	for len(planIDs(v)) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("plans %v still live %v after a lease of %v with no read", planIDs(v), 5*orders.LeaseCheck, orders.LeaseCheck)
		}
		time.Sleep(orders.LeaseCheck / 10)
	}
}

// TestPlansBounded: every process that reads an order file
// holds a plan, which the cache keeps in memory; 40 processes reading
// orders of a million samples took the mount to 1.4 GB. Plans are bounded
// per user (8× the beton's samples, 64 orders) and in all: an order past
// the bound fails with EBUSY and a sentence in the log, and once a holder
// exits its plan goes and the order is served.
func TestPlansBounded(t *testing.T) {
	sh := testenv.LookPath(t, "sh")
	logs := &testenv.OutputBuffer{}
	mnt, v := testMount(t, fixture(t, "imagefolder-mixed.beton"), Options{Logger: slog.New(slog.NewTextHandler(logs, nil))})
	// holder reads an order file, whole, then waits on its stdin. The shell
	// reads it itself: the process that read an order owns its plan, which
	// goes at the next lease check once that process has exited (a cat
	// would, and a slow machine's check would come before the count).
	holder := func(seed int) (*exec.Cmd, io.WriteCloser, error) {
		path := control.Path(mnt, control.OrdersDir, "random", strconv.Itoa(seed), "0")
		cmd := exec.Command(sh, "-c", `while read -r l || [ -n "$l" ]; do :; done <"$1" && echo ok && read x`, "sh", path)
		in, _ := cmd.StdinPipe()
		out, _ := cmd.StdoutPipe()
		var stderr strings.Builder
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			return nil, nil, err
		}
		line, _ := bufio.NewReader(out).ReadString('\n')
		if line != "ok\n" {
			in.Close()
			cmd.Wait()
			return nil, nil, fmt.Errorf("%s", stderr.String())
		}
		return cmd, in, nil
	}
	var holders []*exec.Cmd
	var stdins []io.WriteCloser
	defer func() {
		for i, c := range holders {
			stdins[i].Close()
			c.Wait()
		}
	}()
	for seed := range orders.MaxUserPlanFactor {
		c, in, err := holder(seed)
		if err != nil {
			t.Fatalf("order %d of %d: %v", seed+1, orders.MaxUserPlanFactor, err)
		}
		holders, stdins = append(holders, c), append(stdins, in)
	}
	if got := len(v.cache.Plans()); got != orders.MaxUserPlanFactor {
		t.Fatalf("%d plans, want %d", got, orders.MaxUserPlanFactor)
	}
	_, _, err := holder(100)
	if err == nil || !strings.Contains(err.Error(), "Device or resource busy") {
		t.Fatalf("a %dth whole-beton order of one user: %v, want EBUSY", orders.MaxUserPlanFactor+1, err)
	}
	want := fmt.Sprintf("would have %d announced orders of %d samples in all; at most %d orders and %d× the beton's",
		orders.MaxUserPlanFactor+1, (orders.MaxUserPlanFactor+1)*v.f.NumSamples(), orders.MaxUserPlans, orders.MaxUserPlanFactor)
	if !strings.Contains(logs.String(), want) {
		t.Errorf("the log lacks %q:\n%s", want, logs.String())
	}
	// A holder ends: its plan goes at the next lease check, and then the
	// order is served.
	stdins[0].Close()
	holders[0].Wait()
	holders, stdins = holders[1:], stdins[1:]
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(testenv.Patience)
	for len(v.cache.Plans()) >= orders.MaxUserPlanFactor {
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatal("the plan of a holder that exited was never withdrawn")
		}
	}
	c, in, err := holder(100)
	if err != nil {
		t.Fatalf("after a holder exited: %v", err)
	}
	holders, stdins = append(holders, c), append(stdins, in)
}
