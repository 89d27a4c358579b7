//go:build !linux

package beton

import (
	"errors"
	"os"
)

// Without O_TMPFILE and flock here, temporary files have names and stale
// ones stay.

func openUnnamed(string) (*os.File, error) { return nil, errors.ErrUnsupported }

func linkUnnamed(*os.File, string, string) (string, error) { return "", errors.ErrUnsupported }

func lock(*os.File) {}

func tryLock(*os.File) bool { return false }
