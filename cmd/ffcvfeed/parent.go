package main

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"syscall"
)

// exitWithParentEnv, set to 1, ends the server when the process that
// started it exits, however it exits: the Python Loader that owns a server
// sets it, so that no server outlives its training process.
const exitWithParentEnv = "FFCVFEED_EXIT_WITH_PARENT"

// ownedFolderEnv names the folder that the process which started the
// server made for it (the Python Loader's, holding the socket and the
// server's log), for the server to remove when it outlives that process,
// which can then no longer do so.
const ownedFolderEnv = "FFCVFEED_OWNED_FOLDER"

// removeOwnedFolder removes the folder of ownedFolderEnv if the parent is
// gone and the folder is the socket's own: the socket's parent folder, a
// real folder (not a link) of this user's, mode 0700, holding no folder.
// Anything else is left as it is, with a warning.
func removeOwnedFolder(parentGone func() bool, socket string) {
	dir := os.Getenv(ownedFolderEnv)
	if dir == "" || !parentGone() {
		return
	}
	if err := checkOwnedFolder(dir, socket); err != nil {
		slog.Warn("leaving the folder of a parent that is gone", "folder", dir, "err", err)
		return
	}
	if err := os.RemoveAll(dir); err != nil {
		slog.Warn("removing the folder of a parent that is gone", "folder", dir, "err", err)
	}
}

// checkOwnedFolder says why dir is not the socket's private folder, if it
// is not.
func checkOwnedFolder(dir, socket string) error {
	if filepath.Clean(dir) != filepath.Dir(filepath.Clean(socket)) {
		return fmt.Errorf("it is not the folder of the socket %s", socket)
	}
	st, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	switch {
	case !st.IsDir():
		return fmt.Errorf("not a folder (%s)", st.Mode().Type())
	case !ok || sys.Uid != uint32(os.Getuid()):
		return fmt.Errorf("not this user's")
	case st.Mode().Perm() != 0o700:
		return fmt.Errorf("mode %v, not 0700", st.Mode().Perm())
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range ents {
		if e.IsDir() {
			return fmt.Errorf("it holds a folder, %s", e.Name())
		}
	}
	return nil
}
