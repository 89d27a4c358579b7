package cudafeed

// Lock order: Server.mu, then nothing. umaskMu is taken only around Listen.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// ErrClosed is returned by AcquireSlot and Publish after Close.
var ErrClosed = errors.New("cudafeed: server closed")

// ErrLiveSocket is returned by NewServer when another server answers on the socket path.
var ErrLiveSocket = errors.New("socket path is in use by a live server")

// maxMessage bounds one line from a consumer.
const maxMessage = 4096

// Options configures a Server.
type Options struct {
	// SocketPath is the Unix socket to listen on. Required.
	SocketPath string
	// BatchesPerEpoch is announced in the hello. Required, ≥ 1.
	BatchesPerEpoch int
	// Epochs is announced in the hello; publishing batch BatchesPerEpoch-1 of
	// epoch Epochs-1 ends the stream. 0 means unbounded: call Finish to end it.
	Epochs int
	// Logger receives connection events and protocol errors. Default: slog.Default().
	Logger *slog.Logger
	// Device, when set, is the device side of the ring (a *DeviceRing):
	// Publish copies each batch to it before announcing the batch,
	// AcquireSlot waits until the last copy out of a slot is done, the
	// hello carries a "cuda" object and each batch message an "event".
	// Nil: the host ring only, and the messages of the CPU protocol.
	Device DeviceSlots
	// StartEpoch and StartBatch are where the stream starts, announced in
	// the hello: a stream resumed mid-epoch (ffcvfeed serve --start-epoch,
	// --start-batch) starts at batch StartBatch of epoch StartEpoch.
	StartEpoch, StartBatch int
	// Stream describes the stream for resuming it, announced in the hello
	// as it is: the order's world size and batch size, and the parts of
	// StartEpoch read before at other world sizes (ffcvfeed serve
	// --resume), as [world size, position] pairs.
	Stream StreamInfo
}

// StreamInfo is what a consumer needs, beyond where the stream starts, to
// resume it elsewhere: at another world size, the rest of an epoch is
// named by the parts read before.
type StreamInfo struct {
	WorldSize int      `json:"world_size"`
	BatchSize int      `json:"batch_size"`
	Segments  [][2]int `json:"segments"`
	// Mixture is the fingerprint of the mixture of sources the stream
	// reads (package order's Mixture); "" for one source.
	Mixture string `json:"mixture,omitempty"`
}

// Validate checks the options.
func (o Options) Validate() error {
	if o.SocketPath == "" {
		return errors.New("cudafeed: Options.SocketPath is empty")
	}
	if o.BatchesPerEpoch < 1 {
		return fmt.Errorf("cudafeed: Options.BatchesPerEpoch is %d, want ≥ 1", o.BatchesPerEpoch)
	}
	if o.Epochs < 0 {
		return fmt.Errorf("cudafeed: Options.Epochs is %d, want ≥ 0", o.Epochs)
	}
	if o.StartEpoch < 0 || o.Epochs > 0 && o.StartEpoch >= o.Epochs {
		return fmt.Errorf("cudafeed: Options.StartEpoch is %d, want 0 to Epochs-1 (%d)", o.StartEpoch, o.Epochs-1)
	}
	if o.StartBatch < 0 || o.StartBatch >= o.BatchesPerEpoch {
		return fmt.Errorf("cudafeed: Options.StartBatch is %d, want 0 to BatchesPerEpoch-1 (%d)", o.StartBatch, o.BatchesPerEpoch-1)
	}
	return nil
}

type slotState uint8

const (
	slotFree      slotState = iota // in Server.free
	slotFilling                    // held by the producer
	slotQueued                     // published, waiting in the send queue
	slotDelivered                  // sent to the connection in owner; awaiting release
)

type slotInfo struct {
	state              slotState
	owner              *consumerConn // slotDelivered only
	epoch, batch, size int
}

// Server hands the batches of a Ring to one consumer at a time.
type Server struct {
	// Immutable after construction.
	ring  *Ring
	opts  Options
	log   *slog.Logger
	hello []byte
	ln    *net.UnixListener
	dev   DeviceSlots   // nil: host ring only
	event [][]byte      // dev != nil: `,"event":"HEX"` of each slot's batch messages
	free  chan int      // free slots; capacity Slots
	kick  chan struct{} // capacity 1: the queue or finished changed
	done  chan struct{} // closed by Close
	wg    sync.WaitGroup

	mu sync.Mutex
	// Guarded by mu.
	slots    []slotInfo
	queue    []int // ring buffer of queued slots, capacity Slots
	qHead    int
	qLen     int
	finished bool
	endSent  bool // the end message reached a consumer's socket
	active   *consumerConn
	closed   bool
	// Counters for Stats.
	published, connections, refused uint64
}

// Stats are a Server's state and counters.
type Stats struct {
	// Slots by state: free, being filled by the producer, published and
	// waiting to be sent, delivered to the consumer and not yet released.
	SlotsFree, SlotsFilling, SlotsQueued, SlotsDelivered int
	// Connected is 1 while a consumer is connected, else 0.
	Connected int
	// Published counts the batches published; Connections the consumers
	// served, Refused those turned away (a consumer was connected).
	Published, Connections, Refused uint64
}

// Stats returns the server's state and counters.
func (s *Server) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := Stats{Published: s.published, Connections: s.connections, Refused: s.refused}
	for _, sl := range s.slots {
		switch sl.state {
		case slotFree:
			st.SlotsFree++
		case slotFilling:
			st.SlotsFilling++
		case slotQueued:
			st.SlotsQueued++
		case slotDelivered:
			st.SlotsDelivered++
		}
	}
	if s.active != nil {
		st.Connected = 1
	}
	return st
}

type consumerConn struct {
	conn   *net.UnixConn
	closed chan struct{} // closed when the reader ends
}

// NewServer listens on opts.SocketPath and starts serving ring. The socket
// is created with mode 0600. An existing socket that no server answers on is
// removed; a live one, or any other file, is an error.
func NewServer(ring *Ring, opts Options) (*Server, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	s := &Server{
		ring:  ring,
		opts:  opts,
		log:   opts.Logger,
		free:  make(chan int, ring.Slots()),
		kick:  make(chan struct{}, 1),
		done:  make(chan struct{}),
		slots: make([]slotInfo, ring.Slots()),
		queue: make([]int, ring.Slots()),
		dev:   opts.Device,
	}
	if s.dev != nil {
		info := s.dev.Info()
		if err := info.validate(ring.Slots()); err != nil {
			return nil, err
		}
		for _, h := range info.EventHandles {
			s.event = append(s.event, []byte(`,"event":"`+h+`"`))
		}
	}
	for i := 0; i < ring.Slots(); i++ {
		s.free <- i
	}
	var err error
	if s.hello, err = s.helloMessage(); err != nil {
		return nil, err
	}
	if s.ln, err = listenPrivate(opts.SocketPath); err != nil {
		return nil, err
	}
	s.wg.Add(1)
	go s.acceptLoop()
	return s, nil
}

type helloMsg struct {
	Hello           int         `json:"hello"`
	Shm             string      `json:"shm"`
	Slots           int         `json:"slots"`
	SlotBytes       int         `json:"slot_bytes"`
	Fields          []FieldInfo `json:"fields"`
	BatchesPerEpoch int         `json:"batches_per_epoch"`
	Epochs          int         `json:"epochs"`
	StartEpoch      int         `json:"start_epoch"`
	StartBatch      int         `json:"start_batch"`
	StreamInfo
	CUDA *DeviceInfo `json:"cuda,omitempty"` // Options.Device set only
}

func (s *Server) helloMessage() ([]byte, error) {
	m := helloMsg{Hello: 1, Shm: s.ring.Path(), Slots: s.ring.Slots(),
		SlotBytes: s.ring.SlotBytes(), Fields: s.ring.Fields(),
		BatchesPerEpoch: s.opts.BatchesPerEpoch, Epochs: s.opts.Epochs,
		StartEpoch: s.opts.StartEpoch, StartBatch: s.opts.StartBatch, StreamInfo: s.opts.Stream}
	if m.Segments == nil {
		m.Segments = [][2]int{}
	}
	if s.dev != nil {
		info := s.dev.Info()
		m.CUDA = &info
	}
	b, err := json.Marshal(m)
	return append(b, '\n'), err
}

// umaskMu serialises the process-wide umask change in listenPrivate.
var umaskMu sync.Mutex

// listenPrivate listens on path with a socket born 0600.
func listenPrivate(path string) (*net.UnixListener, error) {
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("cudafeed: %s exists and is not a socket; refusing to replace it", path)
		}
		c, err := net.DialTimeout("unix", path, time.Second)
		if err == nil {
			c.Close()
			return nil, fmt.Errorf("cudafeed: %s: %w", path, ErrLiveSocket)
		}
		if !errors.Is(err, syscall.ECONNREFUSED) {
			return nil, fmt.Errorf("cudafeed: probing existing socket %s: %w", path, err)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("cudafeed: removing stale socket %s: %w", path, err)
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("cudafeed: %s: %w", path, err)
	}
	umaskMu.Lock()
	old := syscall.Umask(0o177)
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	syscall.Umask(old)
	umaskMu.Unlock()
	if err != nil {
		return nil, fmt.Errorf("cudafeed: listening on %s: %w", path, err)
	}
	return ln, nil
}

// SocketPath returns the path the server listens on.
func (s *Server) SocketPath() string { return s.opts.SocketPath }

// AcquireSlot returns a free slot for the producer to fill, blocking until
// one is free, ctx is done or the server is closed. With a Device, it also
// waits until the last copy out of the slot's host memory is done.
func (s *Server) AcquireSlot(ctx context.Context) (int, error) {
	select {
	case i := <-s.free:
		if s.dev != nil {
			if err := s.dev.WaitCopied(i); err != nil {
				s.free <- i // never blocks: i was just taken out
				return -1, fmt.Errorf("cudafeed: slot %d: waiting for its last copy to the device: %w", i, err)
			}
		}
		s.mu.Lock()
		s.slots[i].state = slotFilling
		s.mu.Unlock()
		return i, nil
	case <-ctx.Done():
		return -1, ctx.Err()
	case <-s.done:
		return -1, ErrClosed
	}
}

// Publish queues a filled slot for the consumer: batch `batch` of epoch
// `epoch`, whose first size rows are valid. Publishing the last batch of
// the last epoch (when Options.Epochs > 0) ends the stream. With a Device,
// Publish first enqueues the copy of the batch to the device (it does not
// wait for it: the consumer waits on the slot's event).
func (s *Server) Publish(slot, epoch, batch, size int) error {
	s.mu.Lock()
	if err := s.checkPublish(slot, size); err != nil {
		s.mu.Unlock()
		return err
	}
	if s.dev != nil {
		// The slot stays slotFilling, the producer's, while mu is not held.
		s.mu.Unlock()
		if err := s.dev.CopyToDevice(slot, size); err != nil {
			return fmt.Errorf("cudafeed: Publish(slot %d): copying to the device: %w", slot, err)
		}
		s.mu.Lock()
		if err := s.checkPublish(slot, size); err != nil {
			s.mu.Unlock()
			return err
		}
	}
	defer s.mu.Unlock()
	s.slots[slot] = slotInfo{state: slotQueued, epoch: epoch, batch: batch, size: size}
	s.queue[(s.qHead+s.qLen)%len(s.queue)] = slot
	s.qLen++
	s.published++
	if s.opts.Epochs > 0 && epoch == s.opts.Epochs-1 && batch == s.opts.BatchesPerEpoch-1 {
		s.finished = true
	}
	s.kickWriter()
	return nil
}

// checkPublish checks the arguments of Publish. Called with mu held.
func (s *Server) checkPublish(slot, size int) error {
	if s.closed {
		return ErrClosed
	}
	if slot < 0 || slot >= len(s.slots) || s.slots[slot].state != slotFilling {
		return fmt.Errorf("cudafeed: Publish(slot %d): not a slot acquired with AcquireSlot", slot)
	}
	if size < 1 || size > s.ring.BatchSize() {
		return fmt.Errorf("cudafeed: Publish(slot %d): size %d outside 1..%d", slot, size, s.ring.BatchSize())
	}
	if s.finished {
		return fmt.Errorf("cudafeed: Publish(slot %d): the stream has ended", slot)
	}
	return nil
}

// Finish ends the stream: once every published batch is sent, consumers get
// {"end":true}. Publish fails afterwards.
func (s *Server) Finish() {
	s.mu.Lock()
	s.finished = true
	s.kickWriter()
	s.mu.Unlock()
}

// kickWriter wakes the active connection's writer. Called with mu held.
func (s *Server) kickWriter() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// Drain waits until the end of the stream has been written to the consumer,
// or no consumer is connected, or ctx ends: call it before Close so that a
// consumer still reading gets the end rather than a closed connection.
func (s *Server) Drain(ctx context.Context) error {
	for {
		s.mu.Lock()
		done := s.endSent || s.active == nil || s.closed
		s.mu.Unlock()
		if done {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// Close stops listening, disconnects the consumer and unblocks AcquireSlot.
// It does not close the ring.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	close(s.done)
	if s.active != nil {
		s.active.conn.Close()
	}
	s.mu.Unlock()
	err := s.ln.Close()
	s.wg.Wait()
	return err
}

func (s *Server) acceptLoop() {
	defer s.wg.Done()
	for {
		conn, err := s.ln.AcceptUnix()
		if err != nil {
			select {
			case <-s.done:
				return
			default:
			}
			s.log.Error("cudafeed: accept", "socket", s.opts.SocketPath, "err", err)
			time.Sleep(10 * time.Millisecond)
			continue
		}
		s.wg.Add(1)
		go s.serveConn(conn)
	}
}

// serveConn runs one connection: its writer here, its reader in a goroutine.
func (s *Server) serveConn(conn *net.UnixConn) {
	defer s.wg.Done()
	c := &consumerConn{conn: conn, closed: make(chan struct{})}
	s.mu.Lock()
	if s.closed || s.active != nil {
		s.refused++
		s.mu.Unlock()
		s.log.Warn("cudafeed: refusing a second consumer", "socket", s.opts.SocketPath)
		_, _ = conn.Write([]byte(`{"error":"another consumer is connected"}` + "\n"))
		conn.Close()
		return
	}
	s.active = c
	s.connections++
	s.mu.Unlock()
	s.log.Info("a consumer connected", "socket", s.opts.SocketPath)

	go s.readLoop(c)
	s.writeLoop(c)
	conn.Close()
	<-c.closed

	s.mu.Lock()
	freed := 0
	for i := range s.slots {
		if s.slots[i].state == slotDelivered && s.slots[i].owner == c {
			s.slots[i] = slotInfo{state: slotFree}
			s.free <- i
			freed++
		}
	}
	s.active = nil
	s.mu.Unlock()
	s.log.Info("cudafeed: consumer disconnected", "socket", s.opts.SocketPath, "slots_freed", freed)
}

// writeLoop sends the hello, then queued batches and the end, until the
// connection or the server closes.
func (s *Server) writeLoop(c *consumerConn) {
	if _, err := c.conn.Write(s.hello); err != nil {
		return
	}
	buf := make([]byte, 0, 256)
	endSent := false
	for {
		s.mu.Lock()
		switch {
		case s.qLen > 0:
			i := s.queue[s.qHead]
			s.qHead = (s.qHead + 1) % len(s.queue)
			s.qLen--
			si := &s.slots[i]
			si.state, si.owner = slotDelivered, c
			buf = appendBatchMsg(buf[:0], i, si.epoch, si.batch, si.size)
			if s.dev != nil {
				buf = append(buf[:len(buf)-2], s.event[i]...) // before "}\n"
				buf = append(buf, "}\n"...)
			}
		case s.finished && !endSent:
			buf = append(buf[:0], `{"end":true}`+"\n"...)
			endSent = true
			s.mu.Unlock()
			_, err := c.conn.Write(buf)
			s.mu.Lock()
			s.endSent = err == nil
			s.mu.Unlock()
			if err != nil {
				return
			}
			continue
		default:
			s.mu.Unlock()
			select {
			case <-s.kick:
				continue
			case <-c.closed:
				return
			case <-s.done:
				return
			}
		}
		s.mu.Unlock()
		if _, err := c.conn.Write(buf); err != nil {
			return
		}
	}
}

func appendBatchMsg(b []byte, slot, epoch, batch, size int) []byte {
	b = append(b, `{"slot":`...)
	b = strconv.AppendInt(b, int64(slot), 10)
	b = append(b, `,"epoch":`...)
	b = strconv.AppendInt(b, int64(epoch), 10)
	b = append(b, `,"batch":`...)
	b = strconv.AppendInt(b, int64(batch), 10)
	b = append(b, `,"size":`...)
	b = strconv.AppendInt(b, int64(size), 10)
	return append(b, "}\n"...)
}

type consumerMsg struct {
	Release *int `json:"release"`
}

// readLoop handles the consumer's releases; a bad message closes the
// connection.
func (s *Server) readLoop(c *consumerConn) {
	defer close(c.closed)
	defer c.conn.Close()
	sc := bufio.NewScanner(c.conn)
	sc.Buffer(make([]byte, 0, 256), maxMessage)
	for sc.Scan() {
		if err := s.handleLine(c, sc.Bytes()); err != nil {
			s.log.Warn("cudafeed: bad message from consumer; closing the connection",
				"socket", s.opts.SocketPath, "err", err)
			return
		}
	}
	if err := sc.Err(); err != nil && !errors.Is(err, net.ErrClosed) && !errors.Is(err, io.EOF) {
		s.log.Warn("cudafeed: reading from consumer; closing the connection",
			"socket", s.opts.SocketPath, "err", err)
	}
}

func (s *Server) handleLine(c *consumerConn, line []byte) error {
	i, ok := parseRelease(line)
	if !ok {
		var m consumerMsg
		if err := json.Unmarshal(line, &m); err != nil {
			return fmt.Errorf("message %.80q: %w", line, err)
		}
		if m.Release == nil {
			return fmt.Errorf("message %.80q: no release", line)
		}
		i = *m.Release
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if i < 0 || i >= len(s.slots) || s.slots[i].state != slotDelivered || s.slots[i].owner != c {
		return fmt.Errorf("release of slot %d, which this consumer does not hold", i)
	}
	s.slots[i] = slotInfo{state: slotFree}
	s.free <- i // never blocks: capacity Slots, and i was not in it
	return nil
}

// parseRelease reads the common form {"release":N} (spaces allowed) without
// allocating; anything else is left to encoding/json.
func parseRelease(b []byte) (int, bool) {
	skip := func() {
		for len(b) > 0 && (b[0] == ' ' || b[0] == '\t' || b[0] == '\r') {
			b = b[1:]
		}
	}
	lit := func(s string) bool {
		skip()
		if len(b) < len(s) || string(b[:len(s)]) != s {
			return false
		}
		b = b[len(s):]
		return true
	}
	if !lit("{") || !lit(`"release"`) || !lit(":") {
		return 0, false
	}
	skip()
	n, digits := 0, 0
	for len(b) > 0 && b[0] >= '0' && b[0] <= '9' && digits < 9 {
		n = n*10 + int(b[0]-'0')
		b, digits = b[1:], digits+1
	}
	if digits == 0 || !lit("}") {
		return 0, false
	}
	skip()
	return n, len(b) == 0
}
