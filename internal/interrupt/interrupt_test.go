package interrupt

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"testing"
)

// TestMain runs the test binary as the child that TestLastWord signals.
func TestMain(m *testing.M) {
	if os.Getenv("INTERRUPT_CHILD") == "1" {
		child()
		return
	}
	os.Exit(m.Run())
}

// child waits for its interrupt, says so, and after a line on standard
// input (sent once the parent has signaled it again) says its last word.
func child() {
	ctx := Context(context.Background())
	fmt.Println("ready")
	<-ctx.Done()
	var e *Error
	if !errors.As(context.Cause(ctx), &e) {
		fmt.Println("no signal in the cause:", context.Cause(ctx))
		os.Exit(1)
	}
	fmt.Println("interrupted by", e.Signal)
	bufio.NewReader(os.Stdin).ReadString('\n')
	fmt.Println("last word")
	os.Exit(130)
}

// TestLastWord: a process interrupted by SIGINT, then sent SIGTERM while it
// cleans up (as the DatasetWriter does to ffcvfs write), still ends by its
// own exit and says its last word. With signal.NotifyContext's stop
// deferred, the SIGTERM killed it silently.
func TestLastWord(t *testing.T) {
	for _, second := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), "INTERRUPT_CHILD=1")
		in, _ := cmd.StdinPipe()
		outp, _ := cmd.StdoutPipe()
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		out := bufio.NewReader(outp)
		if line, _ := out.ReadString('\n'); line != "ready\n" {
			t.Fatalf("the child said %q", line)
		}
		if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
			t.Fatal(err)
		}
		if line, _ := out.ReadString('\n'); line != "interrupted by interrupt\n" {
			t.Fatalf("after SIGINT the child said %q", line)
		}
		if err := cmd.Process.Signal(second); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintln(in, "go")
		last, _ := out.ReadString('\n')
		err := cmd.Wait()
		if last != "last word\n" || cmd.ProcessState.ExitCode() != 130 {
			t.Errorf("after SIGINT then %v: %q, %v; want its last word and its own exit 130", second, last, err)
		}
	}
}
