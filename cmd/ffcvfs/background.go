package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/urfave/cli/v2"
	"golang.org/x/sys/unix"

	"github.com/ffcvfs/ffcvfs/internal/readfile"
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
// share until it is mounted (see mountLog).
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
// that it is mounted, and reports whether it did so. It does nothing in a
// mount run in the foreground.
func signalReady() bool {
	if !startedInBackground() {
		return false
	}
	os.Unsetenv(readyFDEnv)
	f := os.NewFile(3, "ready")
	f.Write([]byte("mounted\n"))
	f.Close()
	return true
}

// startedInBackground reports whether this process is the mount that
// --background started, before it signalled that it is mounted.
func startedInBackground() bool { return os.Getenv(readyFDEnv) == "3" }

// mountLog opens --log-file for appending, and sends the log there: alone
// in the foreground; in a mount started by --background, to the shared
// standard error as well until it is mounted (detachStderr), so that the
// shell sees why a mount failed. It returns nil for no --log-file. The
// file is created 0600; a symbolic link or anything but a regular file is
// refused, so that a link planted in a shared folder cannot send the log
// into another file.
func mountLog(path string) (*os.File, error) {
	if path == "" {
		return nil, nil
	}
	// O_NONBLOCK: the open of a FIFO would wait for a reader for ever.
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0o600)
	switch {
	case errors.Is(err, syscall.ELOOP):
		return nil, fmt.Errorf("--log-file %s is a symbolic link: give the file it points to, if it is the log you mean", path)
	case errors.Is(err, os.ErrNotExist):
		return nil, fmt.Errorf("--log-file %s: the folder %s does not exist", path, filepath.Dir(path))
	case errors.Is(err, syscall.EISDIR):
		return nil, fmt.Errorf("--log-file %s is a folder: give the path of a file", path)
	case errors.Is(err, syscall.ENXIO):
		return nil, fmt.Errorf("--log-file %s is a FIFO, not a regular file: give the path of a file", path)
	case err != nil:
		return nil, fmt.Errorf("--log-file: %w", err)
	}
	if st, err := f.Stat(); err != nil {
		f.Close()
		return nil, fmt.Errorf("--log-file %s: %v", path, err)
	} else if !st.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("--log-file %s is %s, not a regular file: give the path of a file", path, readfile.Kind(st.Mode()))
	}
	if startedInBackground() {
		logOutput.set(io.MultiWriter(f, os.Stderr))
	} else {
		logOutput.set(f)
	}
	return f, nil
}

// detachStderr points this process's standard error (file descriptor 2,
// where the log and any crash report go) at the log file, or at /dev/null
// without one, and the log at it.
func detachStderr(logFile *os.File) error {
	target := logFile
	if target == nil {
		null, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
		if err != nil {
			return err
		}
		defer null.Close()
		target = null
	}
	if err := unix.Dup3(int(target.Fd()), 2, 0); err != nil {
		return fmt.Errorf("redirecting standard error: %w", err)
	}
	logOutput.set(os.Stderr)
	return nil
}
