package main

import (
	"fmt"
	"strings"

	"github.com/ffcvfs/ffcvfs/beton"
)

// openBeton opens SRC, a .beton path.
func openBeton(src string) (*beton.File, error) {
	if i := strings.Index(src, "://"); i > 0 && !strings.HasPrefix(src, "file://") {
		return nil, fmt.Errorf("%s: %s sources are not supported by this command yet; give a local or NFS path", src, src[:i])
	}
	return beton.OpenFile(strings.TrimPrefix(src, "file://"))
}
