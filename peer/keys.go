// The keys of the values peers exchange: pages and ranges of them.

package peer

import (
	"fmt"
	"strconv"
	"strings"
)

// Keys: PREFIX/PAGE for a page, PREFIX/PAGE@OFF+LEN for LEN bytes of it
// from OFF.
func pageKey(prefix string, p int64) string { return prefix + "/" + strconv.FormatInt(p, 10) }

func rangeKey(prefix string, p, off, n int64) string {
	return pageKey(prefix, p) + "@" + strconv.FormatInt(off, 10) + "+" + strconv.FormatInt(n, 10)
}

// parseKey returns a key's source, page and range (n = 0: the page).
func (nd *Node) parseKey(key string) (s *Object, p, off, n int64, err error) {
	prefix, rest, ok := strings.Cut(key, "/")
	if !ok {
		return nil, 0, 0, 0, fmt.Errorf("bad key %q", key)
	}
	nd.mu.Lock()
	s = nd.objects[prefix]
	nd.mu.Unlock()
	if s == nil {
		return nil, 0, 0, 0, fmt.Errorf("key %q: no such object here", key)
	}
	// One key per value: numbers as FormatInt writes them (no sign, no
	// leading zeros), and no range that is the whole page, so that no
	// page can be filled from storage under several keys.
	page, rng, hasRange := strings.Cut(rest, "@")
	if p, err = strconv.ParseInt(page, 10, 64); err != nil || p < 0 || p >= s.pages || strconv.FormatInt(p, 10) != page {
		return nil, 0, 0, 0, fmt.Errorf("key %q: no such page", key)
	}
	if hasRange {
		a, b, _ := strings.Cut(rng, "+")
		off, err1 := strconv.ParseInt(a, 10, 64)
		n, err2 := strconv.ParseInt(b, 10, 64)
		if err1 != nil || err2 != nil || off < 0 || n <= 0 || off >= s.pageLen(p) || n > s.pageLen(p)-off ||
			off == 0 && n == s.pageLen(p) || rangeKey(prefix, p, off, n) != key {
			return nil, 0, 0, 0, fmt.Errorf("key %q: no such range", key)
		}
		return s, p, off, n, nil
	}
	return s, p, 0, 0, nil
}
