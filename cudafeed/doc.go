// Package cudafeed delivers finished batches to a training process in another
// program, whatever its framework.
//
// # What it owns
//
// A [Ring] is a POSIX shared-memory file (/dev/shm/NAME, mode 0600) holding a
// fixed number of slots; each slot holds one batch, one 64-byte-aligned region
// per field. A [Server] listens on a Unix socket (born 0600) and speaks
// newline-delimited JSON with one consumer at a time:
//
//	server → consumer, once on connect:
//	  {"hello":1,"shm":"/dev/shm/NAME","slots":N,"slot_bytes":S,
//	   "fields":[{"name":..,"dtype":..,"shape":[..],"offset":O,"bytes":L}],
//	   "batches_per_epoch":K,"epochs":E,"start_epoch":E0,"start_batch":B0,
//	   "world_size":W,"batch_size":B,"segments":[[W0,P0],...]}
//	  field f of slot i lies at bytes [i*S+O, i*S+O+L) of the shm file; shape[0]
//	  is the batch dimension; dtype is NumPy's name of a little-endian number
//	  type or bool. A variable-size field (a beton's bytes or JSON) carries
//	  "ends":"NAME.ends", shape [B, C]: its samples' bytes lie one after
//	  another from its start, and the int64 [B] field NAME.ends says where
//	  each ends (the first starts at 0); C bounds one sample's bytes. The stream starts at batch B0 of epoch E0 (both
//	  0 unless it was resumed mid-way). W and B are the order's world size
//	  and batch size; segments, when not empty, are the parts of epoch E0
//	  read before at other world sizes (ffcvfeed serve --resume): epoch E0
//	  is then this rank's share of the rest, delivered as batches B0 to K-1.
//	server → consumer, per batch:   {"slot":i,"epoch":e,"batch":b,"size":n}
//	  only the first n rows of each field are valid.
//	consumer → server, when done:    {"release":i}
//	server → consumer, after the last batch: {"end":true}
//	server → a second consumer while one is connected: {"error":"..."}, then close.
//
// # CUDA devices (build tag cuda)
//
// With Options.Device set (a [DeviceRing], ffcvfeed serve --device cuda:N),
// the ring's shared memory is registered as pinned host memory
// (cuMemHostRegister), every slot has a device allocation of slot_bytes,
// and Publish enqueues asynchronous copies of the batch's valid rows into
// it, then records the slot's interprocess event, before announcing the
// batch. The messages above stay as they are and gain:
//
//	hello:  "cuda":{"device":N,"device_uuid":"GPU-…","pci_bus_id":"DDDD:BB:DD.0",
//	                "mem_handles":[H0,…,H(slots-1)]}
//	  Hi is slot i's cudaIpcMemHandle (64 bytes as 128 lowercase hex
//	  digits); field f of slot i lies at bytes [O, O+L) of that allocation,
//	  the offsets of the shm slot.
//	batch:  "event":E
//	  E is the cudaIpcEventHandle (hex) of the event recorded after the
//	  copies into the slot: make the stream that uses the batch wait on it
//	  (cudaStreamWaitEvent) before any use.
//
// The consumer may send {"release":i} only once every use of device slot i
// by its streams is done (for example: it recorded an event on each of
// those streams after their last use, and synchronized it): after the
// release the producer copies the next batch into the slot. The host slot
// keeps the same bytes as the device slot until the release, so a consumer
// that ignores "cuda" reads the batch from shared memory as before.
// Disconnecting releases every slot the consumer holds: it must have
// finished its uses of them first.
//
// # Producer
//
// The producer calls [Server.AcquireSlot], fills [Ring.Slot], then
// [Server.Publish]. A slot is free when it is neither being filled nor
// published-but-unreleased, so AcquireSlot blocks while the consumer holds
// every slot, or while nobody is connected and every slot waits to be sent:
// the producer waits for a consumer.
//
// # Consumers that come and go
//
// Published batches are sent in publish order. A batch that was sent to a
// consumer that then disconnects without releasing it is dropped: its slot is
// freed, and it is not sent again. Batches published but not yet sent stay
// queued and go to the next consumer, which therefore resumes with the oldest
// unsent batch. The end message is sent to every consumer that connects after
// the last batch, once the queue has drained.
//
// # Concurrency
//
// One mutex (Server.mu) guards slot states, the send queue and the active
// connection; it is never held across socket I/O. It is taken per batch,
// never per sample, so the pipeline's workers do not meet on it. Each connection has a writer
// (the goroutine that accepted it) and a reader goroutine. AcquireSlot takes
// free slots from a channel of capacity Slots, so it honours its context.
//
// # Never
//
// The server never panics on a consumer's input: a bad message is logged and
// that connection closed. Nothing allocates per batch on the producer side.
// No file without the cuda build tag imports gorgonia.org/cu: its init exits
// the process when no NVIDIA driver is present.
package cudafeed
