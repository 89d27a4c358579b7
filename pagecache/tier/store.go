package tier

// Lock order: Store.mu is never held while the rank function runs (it
// takes the page cache's lock), nor during I/O.

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"time"
)

// Never is the rank of a page no announced order reads again.
const Never = math.MaxInt

// candidates is how many of the least recently used entries an eviction
// ranks: the one read farthest in the future goes (no further use first).
const candidates = 16

// queueLen is how many pages may wait to be stored; a page offered while
// they wait is not taken (the cache offers it again later: see package
// pagecache's backfill).
const queueLen = 4

// Geometry is the shape of the pages a Store holds.
type Geometry struct {
	PageSize int64
	NumPages int
	// Layout cuts data page dp into chunks (see Chunk), covering the
	// page.
	Layout func(dp int32) []Chunk
}

// Options configures a Store.
type Options struct {
	// Budget is the most bytes the Store's entries take (on disk, in
	// 4 KiB blocks; in memory, in OS pages).
	Budget int64
	// Compress stores pages compressed when that saves at least 20 % of
	// their bytes.
	Compress bool
	Logger   *slog.Logger
	// Stored, if set, is called from the Store's writer each time it is
	// done with a page offered (stored or not).
	Stored func()
}

// Stats are a Store's counters.
type Stats struct {
	Kind  string `json:"kind"` // "ram" or "disk"
	Dir   string `json:"dir,omitempty"`
	State string `json:"state"` // "on", "shared" (reads only), or "off: why"

	BudgetBytes int64 `json:"budget_bytes"`
	Bytes       int64 `json:"bytes"`     // what the entries take
	RawBytes    int64 `json:"raw_bytes"` // the pages they hold
	Entries     int   `json:"entries"`
	// CompressionRatio is RawBytes over their stored bytes.
	CompressionRatio float64 `json:"compression_ratio"`

	Hits     uint64 `json:"hits"`
	HitBytes uint64 `json:"hit_bytes"`
	Misses   uint64 `json:"misses"`
	// DecodeTime is the time hits spent reading and decoding entries.
	DecodeTime time.Duration `json:"decode_ns"`

	Stored    uint64 `json:"stored"`    // pages written
	Skipped   uint64 `json:"skipped"`   // pages offered while the queue was full
	Refused   uint64 `json:"refused"`   // pages not worth a place (needed later than all others)
	Evictions uint64 `json:"evictions"` // entries removed for room
	// ChecksumFailures counts entries found corrupt (dropped, and read
	// from storage instead).
	ChecksumFailures uint64 `json:"checksum_failures"`
	Errors           uint64 `json:"errors"` // I/O errors of the tier
}

// backend keeps the entries' bytes: in memory or in files.
type backend interface {
	// read fills p with bytes of page dp's entry from off on.
	read(e *entry, p []byte, off int64) error
	// write stores the entry's bytes.
	write(e *entry, data []byte) error
	// remove deletes the entry's bytes; no reader holds it.
	remove(e *entry)
	// lookup finds an entry the Store does not know of (written by
	// another process), or returns nil.
	lookup(dp int32) *entry
	close()
}

// entry is one stored page.
//
// INVARIANT: in Store.entries under its page and in its LRU list (elem:
// Store.kept if kept, else Store.lru) while live; size is counted in
// Store.used.
type entry struct {
	dp   int32
	n    int64  // its bytes
	size int64  // bytes taken: n in whole 4 KiB blocks
	ix   *index // the decoded index, once read; nil for shared entries
	mem  []byte // the memory backend's mapping
	refs int32  // readers of mem
	dead bool   // removed; its mapping goes with the last reader
	kept bool   // a page SetKeep names: in Store.kept, not Store.lru
	elem *list.Element
}

// Store is one tier: page entries within a byte budget, written by a
// goroutine of its own, read by any goroutine. It is safe for concurrent
// use.
type Store struct {
	// Immutable after construction.
	kind   string
	dir    string
	geom   Geometry
	opts   Options
	id     uint64
	be     backend
	shared bool // another process owns the folder: reads only
	queue  chan putJob
	done   chan struct{}

	mu sync.Mutex
	// Guarded by mu.
	entries map[int32]*entry
	// pending holds the pages taken and not yet stored, readable
	// meanwhile (the caller's buffers, until their done).
	pending map[int32][]byte
	room    chan struct{} // closed when the writer next takes a page; nil if nobody waits
	lru     list.List     // *entry, most recently used first
	kept    list.List     // *entry of the pages keep names, most recently used first
	keep    func(dp int32) bool
	used    int64
	raw     int64
	stored  int64 // the entries' bytes before rounding
	rank    func(dp int32) int
	off     string // why the tier stopped storing; "" while it stores
	closed  bool
	st      Stats
}

type putJob struct {
	dp   int32
	page []byte
	done func()
}

func newStore(kind, dir string, geom Geometry, opts Options, id uint64, be backend, shared bool) *Store {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	s := &Store{
		kind: kind, dir: dir, geom: geom, opts: opts, id: id, be: be, shared: shared,
		queue: make(chan putJob, queueLen), done: make(chan struct{}),
		entries: map[int32]*entry{}, pending: map[int32][]byte{},
	}
	go s.writer()
	return s
}

// SetRank gives the Store the distance to each page's next use (Never: no
// order reads it again): evictions take the page needed last, and a page
// needed later than every candidate is not stored. Without it, the least
// recently used page goes.
func (s *Store) SetRank(rank func(dp int32) int) {
	s.mu.Lock()
	s.rank = rank
	s.mu.Unlock()
}

// SetKeep names the pages to keep before any other (those a node owns for
// its cluster: package peer): a page keep names displaces any other,
// however far its next use, and its entry goes only when no other is left
// and keep no longer names it, or for another page keep names when all the
// room is theirs (the least recently used, or needed last, goes). Without
// it, no page is kept so.
func (s *Store) SetKeep(keep func(dp int32) bool) {
	s.mu.Lock()
	s.keep = keep
	s.mu.Unlock()
}

// listOf returns the LRU list e is in. Called with mu held.
func (s *Store) listOf(e *entry) *list.List {
	if e.kept {
		return &s.kept
	}
	return &s.lru
}

// Wants reports whether the Store would take page dp now.
func (s *Store) Wants(dp int32) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.wants(dp)
}

// wants is Wants, called with mu held.
func (s *Store) wants(dp int32) bool {
	return s.stores() && s.entries[dp] == nil && s.pending[dp] == nil
}

// stores reports whether the Store takes pages at all: not when it reads
// only (shared), is off or closed. Called with mu held.
func (s *Store) stores() bool { return !s.shared && s.off == "" && !s.closed }

// Complete reports whether the Store will take no page any more: it
// holds every page of the source, or it does not store (reads only, off,
// closed).
func (s *Store) Complete() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return !s.stores() || len(s.entries) >= s.geom.NumPages
}

// HasRoom reports whether the Store would take page dp now without
// evicting an entry for it: it wants the page and has a raw page's bytes
// of its budget free.
func (s *Store) HasRoom(dp int32) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.wants(dp) && s.used+blocks(s.geom.PageSize) <= s.opts.Budget
}

// Read copies bytes [lo, lo+len(p)) of data page dp to p from the Store,
// and reports whether it could: false for a page it does not hold, or
// whose entry turned out corrupt or unreadable (then dropped, logged and
// counted). Bytes that did not check out are never left in p as if read.
func (s *Store) Read(dp int32, lo int64, p []byte) bool {
	start := time.Now()
	s.mu.Lock()
	e := s.entries[dp]
	if e == nil && s.shared && !s.closed {
		s.mu.Unlock()
		e = s.be.lookup(dp)
		s.mu.Lock()
	}
	if pg := s.pending[dp]; e == nil && pg != nil && !s.closed && lo >= 0 && lo+int64(len(p)) <= int64(len(pg)) {
		// Taken, not yet stored: from the page offered.
		copy(p, pg[lo:])
		s.st.Hits++
		s.st.HitBytes += uint64(len(p))
		s.mu.Unlock()
		return true
	}
	if e == nil || s.closed {
		s.st.Misses++
		s.mu.Unlock()
		return false
	}
	if e.elem != nil {
		s.listOf(e).MoveToFront(e.elem)
	}
	e.refs++
	ix := e.ix
	s.mu.Unlock()
	var err error
	if ix == nil {
		ix, err = s.readIndex(e)
	}
	if err == nil {
		err = s.readSpan(e, ix, p, lo)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.release(e)
	if err != nil {
		s.st.Misses++
		if errors.Is(err, ErrCorrupt) {
			s.st.ChecksumFailures++
		} else {
			s.st.Errors++
		}
		s.opts.Logger.Warn(fmt.Sprintf("%s cache: page %d: %v; read from storage instead", s.kind, dp, err))
		if cur := s.entries[dp]; cur == e {
			s.drop(e)
		}
		return false
	}
	if e.ix == nil && !s.shared {
		e.ix = ix
	}
	s.st.Hits++
	s.st.HitBytes += uint64(len(p))
	s.st.DecodeTime += time.Since(start)
	return true
}

// readIndex reads and checks an entry's header and index.
func (s *Store) readIndex(e *entry) (*index, error) {
	b := getScratch(4096)
	defer scratchPool.Put(b)
	*b = (*b)[:min(int64(len(*b)), e.n)]
	if err := s.be.read(e, *b, 0); err != nil {
		return nil, err
	}
	hl := headerLen(*b)
	if hl == 0 {
		return nil, fmt.Errorf("%w: no entry header", ErrCorrupt)
	}
	if hl > len(*b) {
		*b = append((*b)[:0], make([]byte, hl)...)
		if err := s.be.read(e, *b, 0); err != nil {
			return nil, err
		}
	}
	return parseIndex(*b, uint32(e.dp), uint32(s.geom.PageSize), s.id, e.n)
}

// readSpan reads and decodes the chunks that hold [lo, lo+len(p)).
func (s *Store) readSpan(e *entry, ix *index, p []byte, lo int64) error {
	if lo < 0 || lo+int64(len(p)) > int64(ix.pageSize) {
		return fmt.Errorf("bytes %d to %d are not in the page", lo, lo+int64(len(p)))
	}
	first, last := ix.span(lo, lo+int64(len(p)))
	if first < 0 {
		return nil
	}
	from := int64(ix.chunks[first].storedOff)
	to := int64(ix.chunks[last].storedOff) + int64(ix.chunks[last].storedLen)
	if e.mem != nil {
		return ix.decodeSpan(p, lo, first, last, e.mem[from:to])
	}
	if ix.rawSpan(lo, lo+int64(len(p)), first, last) {
		// Stored as they are, and exactly the bytes asked for (a page,
		// or a sample's allocations): read into p, then check.
		if err := s.be.read(e, p, from); err != nil {
			return err
		}
		return ix.checkSpan(p, first, last)
	}
	b := getScratch(int(to - from))
	defer scratchPool.Put(b)
	if err := s.be.read(e, *b, from); err != nil {
		return err
	}
	return ix.decodeSpan(p, lo, first, last, *b)
}

// release ends a read of e.
func (s *Store) release(e *entry) {
	e.refs--
	if e.dead && e.refs == 0 {
		s.be.remove(e)
	}
}

// drop removes a live entry.
func (s *Store) drop(e *entry) {
	delete(s.entries, e.dp)
	if e.elem != nil {
		s.listOf(e).Remove(e.elem)
		e.elem = nil
	}
	s.used -= e.size
	s.raw -= s.geom.PageSize
	s.stored -= e.n
	e.dead = true
	if e.refs == 0 {
		s.be.remove(e)
	}
}

// Put offers page dp for storing, and reports whether the Store took it:
// then it calls done once it no longer needs page (after storing it), from
// its own goroutine; until then Read serves it from page. Put never
// waits: a page offered while the queue is full is not taken.
func (s *Store) Put(dp int32, page []byte, done func()) bool {
	return s.put(context.Background(), false, dp, page, done)
}

// PutWait is Put, but waits while the queue is full, until ctx ends: for
// a page that would otherwise be read from storage again (a page this
// node keeps for a cluster: package peer).
func (s *Store) PutWait(ctx context.Context, dp int32, page []byte, done func()) bool {
	return s.put(ctx, true, dp, page, done)
}

// put is Put, waiting for room in the queue (until ctx ends) if wait.
func (s *Store) put(ctx context.Context, wait bool, dp int32, page []byte, done func()) bool {
	for {
		s.mu.Lock()
		if !s.wants(dp) || int64(len(page)) != s.geom.PageSize {
			s.mu.Unlock()
			return false
		}
		select {
		case s.queue <- putJob{dp: dp, page: page, done: done}:
			s.pending[dp] = page
			s.mu.Unlock()
			return true
		default:
		}
		if !wait {
			s.st.Skipped++
			s.mu.Unlock()
			return false
		}
		if s.room == nil {
			s.room = make(chan struct{})
		}
		room := s.room
		s.mu.Unlock()
		select {
		case <-room:
		case <-ctx.Done():
			s.mu.Lock()
			s.st.Skipped++
			s.mu.Unlock()
			return false
		}
	}
}

func (s *Store) writer() {
	defer close(s.done)
	defer func() {
		s.mu.Lock()
		if s.room != nil {
			close(s.room) // closed: no PutWait waits on
			s.room = nil
		}
		s.mu.Unlock()
	}()
	var buf []byte
	for j := range s.queue {
		s.mu.Lock()
		if s.room != nil {
			close(s.room) // a PutWait may queue its page
			s.room = nil
		}
		s.mu.Unlock()
		var err error
		buf, err = encodeEntry(buf[:0], j.page, uint32(j.dp), s.id, s.geom.Layout(j.dp), s.opts.Compress)
		if err == nil {
			s.store(j.dp, buf)
		} else {
			s.opts.Logger.Error(fmt.Sprintf("%s cache: page %d: %v", s.kind, j.dp, err))
		}
		s.mu.Lock()
		delete(s.pending, j.dp)
		s.mu.Unlock()
		j.done()
		if s.opts.Stored != nil {
			s.opts.Stored()
		}
		if cap(buf) > 2*int(s.geom.PageSize)+64<<10 {
			buf = nil
		}
	}
}

// blocks rounds n up to what it takes: 4 KiB blocks on disk and pages in
// memory alike.
func blocks(n int64) int64 { return (n + 4095) &^ 4095 }

// store makes room for and writes an encoded entry.
func (s *Store) store(dp int32, data []byte) {
	need := blocks(int64(len(data)))
	s.mu.Lock()
	keep := s.keep
	s.mu.Unlock()
	kept := keep != nil && keep(dp)
	if !s.makeRoom(dp, need, kept) {
		return
	}
	e := &entry{dp: dp, n: int64(len(data)), size: need, kept: kept}
	err := s.be.write(e, data)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		s.st.Errors++
		s.used -= need // reserved by makeRoom
		s.stopStoring(err)
		return
	}
	s.stored += e.n
	s.raw += s.geom.PageSize
	e.elem = s.listOf(e).PushFront(e)
	s.entries[dp] = e
	s.st.Stored++
}

// stopStoring turns the tier to reads only, once, with one warning.
func (s *Store) stopStoring(err error) {
	if s.off != "" {
		return
	}
	s.off = err.Error()
	s.opts.Logger.Warn(fmt.Sprintf("%s cache: stopped storing pages: %v; reads go on from the pages it has and from storage", s.kind, err))
}

// makeRoom evicts entries until need more bytes fit, and reserves them;
// false if page dp should not be stored (bigger than the budget, needed
// later than every candidate for eviction, or all the room is the pages
// SetKeep names). kept says whether SetKeep names dp: then it displaces
// any page it does not name, and, where all the room is such pages, the
// least recently used (or needed last) of them.
func (s *Store) makeRoom(dp int32, need int64, kept bool) bool {
	refuse := func() bool {
		s.mu.Lock()
		s.st.Refused++
		s.mu.Unlock()
		return false
	}
	if need > s.opts.Budget {
		return refuse()
	}
	for {
		s.mu.Lock()
		if s.used+need <= s.opts.Budget {
			s.used += need
			s.mu.Unlock()
			return true
		}
		// The least recently used of the pages not kept; failing those,
		// of the kept ones, of which those keep no longer names may go.
		list, fromKept := &s.lru, false
		if s.lru.Len() == 0 {
			list, fromKept = &s.kept, true
		}
		var cand []*entry
		for el := list.Back(); el != nil && len(cand) < candidates; el = el.Prev() {
			if e := el.Value.(*entry); e.refs == 0 {
				cand = append(cand, e)
			}
		}
		rank, keep := s.rank, s.keep
		s.mu.Unlock()
		if len(cand) == 0 {
			return false
		}
		// Entries keep names now (stored before it did, or named since)
		// join the kept; the others are the candidates.
		var others []*entry
		for _, e := range cand {
			if keep != nil && keep(e.dp) {
				s.promote(e)
			} else {
				others = append(others, e)
			}
		}
		if len(others) == 0 {
			if !fromKept {
				continue // promoted: look again
			}
			if !kept {
				return refuse() // every page here is one to keep
			}
			// All the room is pages to keep, and dp is one too: it
			// displaces the one used least lately (or needed last), so
			// that a share larger than the budget is read from storage
			// once a pass, not once a read of it.
			others = cand
		}
		victim, far := others[0], Never
		if rank != nil {
			far = -1
			for _, e := range others {
				if d := rank(e.dp); d > far {
					victim, far = e, d
				}
			}
			if !kept && far != Never && rank(dp) >= far {
				return refuse()
			}
		}
		s.mu.Lock()
		if s.entries[victim.dp] == victim && victim.refs == 0 {
			s.drop(victim)
			s.st.Evictions++
		}
		s.mu.Unlock()
	}
}

// promote moves a live entry of the pages not kept to the kept.
func (s *Store) promote(e *entry) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.entries[e.dp] != e || e.kept || e.elem == nil {
		return
	}
	s.lru.Remove(e.elem)
	e.kept = true
	e.elem = s.kept.PushFront(e)
}

// Stats returns the Store's counters.
func (s *Store) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.st
	st.Kind, st.Dir, st.BudgetBytes = s.kind, s.dir, s.opts.Budget
	st.Bytes, st.RawBytes, st.Entries = s.used, s.raw, len(s.entries)
	if s.stored > 0 {
		st.CompressionRatio = float64(s.raw) / float64(s.stored)
	}
	switch {
	case s.off != "":
		st.State = "off: " + s.off
	case s.shared:
		st.State = "shared"
	default:
		st.State = "on"
	}
	return st
}

// Close stops taking pages, stores those it took, and releases the tier's
// resources (a disk tier's files stay, for the next mount).
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	close(s.queue)
	<-s.done
	s.mu.Lock()
	if s.kind == "ram" {
		for _, e := range s.entries {
			s.drop(e)
		}
	}
	s.mu.Unlock()
	s.be.close()
	return nil
}
