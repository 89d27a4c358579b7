package fs

import (
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/ffcvfs/ffcvfs/control"
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
			t.Fatalf("plans %v still live %v after their reader (pid %d) exited", planIDs(v), 5*leaseCheck, cmd.Process.Pid)
		}
		time.Sleep(leaseCheck / 10)
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
	time.Sleep(2 * leaseCheck)
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
	mnt, v := testMount(t, fixture(t, "imagefolder-jpg.beton"), Options{PlanLease: leaseCheck})
	if _, err := os.ReadFile(control.Path(mnt, control.OrdersDir, "quasi-random/0/0")); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(testenv.Patience)
	for len(planIDs(v)) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("plans %v still live %v after a lease of %v with no read", planIDs(v), 5*leaseCheck, leaseCheck)
		}
		time.Sleep(leaseCheck / 10)
	}
}
