package testenv

import (
	"fmt"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// Daemon is a server process that tests run (versitygw, toxiproxy-server):
// its output is collected for failure messages, and it is killed when the
// test binary dies without stopping it.
type Daemon struct {
	name   string
	cmd    *exec.Cmd
	exited chan struct{} // closed when cmd has exited
	out    OutputBuffer

	stopOnce sync.Once
}

// StartDaemon starts cmd, whose output it takes, and calls ready every 20
// ms until it returns nil, for at most 20 s. It fails, with the process's
// output, when the process exits first or is still not ready then; name
// stands for the process in errors.
func StartDaemon(name string, cmd *exec.Cmd, ready func() error) (*Daemon, error) {
	d := &Daemon{name: name, cmd: cmd, exited: make(chan struct{}), out: OutputBuffer{Limit: 1 << 20}}
	cmd.Stdout = &d.out
	cmd.Stderr = &d.out
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", cmd.Path, err)
	}
	go func() {
		_ = cmd.Wait()
		close(d.exited)
	}()
	deadline := time.Now().Add(20 * time.Second)
	for {
		select {
		case <-d.exited:
			return nil, fmt.Errorf("%s exited at start: %s\n%s", name, cmd.ProcessState, d.out.String())
		default:
		}
		err := ready()
		if err == nil {
			return d, nil
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			<-d.exited
			return nil, fmt.Errorf("%s does not answer after 20 s: %v\n%s", name, err, d.out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Stop stops the process: SIGTERM, then SIGKILL after 5 s. Stopping it
// again does nothing.
func (d *Daemon) Stop() {
	d.stopOnce.Do(func() {
		_ = d.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-d.exited:
		case <-time.After(5 * time.Second):
			_ = d.cmd.Process.Kill()
			<-d.exited
		}
	})
}

// Output returns what the process printed so far (its first MiB).
func (d *Daemon) Output() string { return d.out.String() }
