package storage

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
)

// A Scheme opens the sources of one kind of URL. Each backend registers
// its own from an init function in its file (s3.go, http.go), as
// archive/zip's compressors register themselves: Open, IsNetwork, and
// every help string that lists what a source may be (Locations) know it,
// and a new backend is one file and its test.
type Scheme struct {
	// Names are the URL schemes it opens, in lower case ("http",
	// "https"); each is taken by one Scheme only.
	Names []string
	// Form is how a location of it is written in help: "s3://bucket/key".
	Form string
	// Network says that its reads cross the network: a mount of it then
	// starts on more cores (ffcvfs mount --help).
	Network bool
	// Open opens the source at url (its scheme one of Names), its errors
	// naming url without credentials (redactURL).
	Open func(ctx context.Context, url string, opts Options) (Source, error)
}

var schemes struct {
	sync.RWMutex
	byName map[string]*Scheme
	order  []*Scheme // in registration order, for help
}

// Register adds a scheme. It panics on a scheme without names, Form or
// Open, or one that names a scheme already taken (or "file", a path's):
// mistakes of the program, found when it starts.
func Register(s Scheme) {
	if len(s.Names) == 0 || s.Form == "" || s.Open == nil {
		panic("storage.Register: a Scheme needs Names, Form and Open")
	}
	schemes.Lock()
	defer schemes.Unlock()
	if schemes.byName == nil {
		schemes.byName = map[string]*Scheme{}
	}
	for _, n := range s.Names {
		if n != strings.ToLower(n) || n == "file" || schemes.byName[n] != nil {
			panic(fmt.Sprintf("storage.Register: scheme %q is taken, or not lower case", n))
		}
	}
	p := &s
	for _, n := range s.Names {
		schemes.byName[n] = p
	}
	schemes.order = append(schemes.order, p)
}

// lookup returns the scheme registered for name (lower case).
func lookup(name string) (*Scheme, bool) {
	schemes.RLock()
	defer schemes.RUnlock()
	s, ok := schemes.byName[name]
	return s, ok
}

// SchemeNames lists the registered schemes' names, sorted.
func SchemeNames() []string {
	schemes.RLock()
	defer schemes.RUnlock()
	var names []string
	for n := range schemes.byName {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// Locations says what Open takes, for help strings: "a path, file://,
// s3://bucket/key or http(s)://host/path".
func Locations() string {
	schemes.RLock()
	defer schemes.RUnlock()
	forms := []string{"a path", "file://"}
	for _, s := range schemes.order {
		forms = append(forms, s.Form)
	}
	return strings.Join(forms[:len(forms)-1], ", ") + " or " + forms[len(forms)-1]
}
