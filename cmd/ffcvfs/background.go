package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"

	"github.com/urfave/cli/v2"
)

// readyFDEnv tells a mount started by --background which file descriptor
// to write to once it is mounted. Its parent waits for that line, so that
// 'ffcvfs mount --background' returns only when the tree can be read, or
// with the child's exit status when mounting failed.
const readyFDEnv = "FFCVFS_MOUNT_READY_FD"

// startBackground runs this very command line again as a child in a
// session of its own (no terminal's Ctrl-C or hang-up reaches it), with
// SRC on its standard input when it came from ours ("-"), and returns when
// the child is mounted, or ends. The child logs to the standard error both
// share.
func startBackground(src string, srcFromStdin bool) error {
	exe, err := os.Executable()
	if err != nil {
		return cli.Exit(fmt.Sprintf("--background: finding this program to start it again: %v", err), 1)
	}
	r, w, err := os.Pipe()
	if err != nil {
		return cli.Exit(fmt.Sprintf("--background: %v", err), 1)
	}
	defer r.Close()
	cmd := exec.Command(exe, os.Args[1:]...)
	cmd.Env = append(os.Environ(), readyFDEnv+"=3")
	cmd.ExtraFiles = []*os.File{w} // fd 3
	cmd.Stderr = os.Stderr
	if srcFromStdin {
		cmd.Stdin = strings.NewReader(src + "\n")
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		w.Close()
		return cli.Exit(fmt.Sprintf("--background: starting the mount: %v", err), 1)
	}
	w.Close()
	var buf [16]byte
	if n, _ := r.Read(buf[:]); n > 0 {
		// Mounted. The child runs on; its standard input, if any, was
		// read in full before it mounted.
		return nil
	}
	// The child ended before mounting, having said why: its status is ours.
	err = cmd.Wait()
	var exit *exec.ExitError
	if errors.As(err, &exit) && exit.ExitCode() > 0 {
		return cli.Exit("", exit.ExitCode())
	}
	msg := "the mount ended before it was mounted"
	if err != nil {
		msg += ": " + err.Error() // killed by a signal
	}
	return cli.Exit(msg, 1)
}

// signalReady tells the parent that started this mount with --background
// that it is mounted. It does nothing in a mount run in the foreground.
func signalReady() {
	if os.Getenv(readyFDEnv) != "3" {
		return
	}
	os.Unsetenv(readyFDEnv)
	f := os.NewFile(3, "ready")
	f.Write([]byte("mounted\n"))
	f.Close()
}
