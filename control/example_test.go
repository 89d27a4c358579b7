package control_test

import (
	"bufio"
	"context"
	"fmt"
	"log"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/ffcvfs/ffcvfs/control"
)

// Announce tells a mount the order a process will read its samples in, so
// that the mount's cache reads ahead along it. Here the mount is played by
// a socket that answers as one does: ok and the count, or error: and why.
// As a mount does, it keeps the socket in a short folder (a socket's path
// may have 107 bytes at most) and links it from .ffcvfs/announce.
func ExampleAnnounce() {
	mnt, err := os.MkdirTemp("", "control-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(mnt)
	if err := os.Mkdir(control.Path(mnt), 0o700); err != nil {
		log.Fatal(err)
	}
	sockDir, err := os.MkdirTemp("/tmp", "ffcvfs-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(sockDir)
	sock := filepath.Join(sockDir, "announce.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		log.Fatal(err)
	}
	if err := os.Symlink(sock, control.Path(mnt, control.AnnounceFile)); err != nil {
		log.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			n := 0
			for sc := bufio.NewScanner(c); sc.Scan(); n++ {
			}
			fmt.Fprintf(c, "ok %d\n", n)
			c.Close()
		}
	}()

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err = control.Announce(ctx, mnt, []uint32{5, 3, 9, 0}, false)
	fmt.Println("announced:", err)
	// Output:
	// announced: <nil>
}
