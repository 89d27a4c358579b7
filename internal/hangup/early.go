//go:build cgo && linux

package hangup

import "C" // early.c: SIGHUP held from the process's start (see the package doc)
