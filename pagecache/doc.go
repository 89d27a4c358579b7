// Package pagecache holds pages of one beton in a fixed RAM budget, read
// from a storage.Source, and prefetches along the orders its consumers
// announce.
//
// # What it owns
//
// The Cache: Options.Budget bytes of page slots, allocated once, outside
// the Go heap. A page is pinned (Acquire…/Release) while someone copies
// out of it; when every slot is pinned, readers wait: the budget never
// grows. Concurrent requests for one page share one load (single flight).
// A demand load is made by the goroutine that needs the page, with its
// context: if that ends, the fetch stops, and another reader waiting for
// the page loads it again. Options.Readers goroutines make prefetches.
//
// What to evict and what to prefetch is decided by package policy, pure
// bookkeeping the cache consults under its lock: farthest next use across
// the announced plans first (Belady's MIN), pages no plan needs before
// that (those fully read this epoch, then the least recently used), and
// prefetches in order of first use that never cost a read MIN would not
// make. Its cost per read does not grow with the number of pages.
// Reading bytes from storage (files, S3, HTTP, with retries and ETag
// pinning) is package storage's.
//
// # Ranges
//
// A miss is served by a page or by a range, the bytes of one sample, as
// package policy chooses: a page when enough of its other samples will be
// read while it stays cached, a range otherwise. Ranges share the budget with pages: the slots whose bytes
// ranges use are lent to them and their memory given back to the system.
// Ranges are prefetched along plans as pages are, neighbours in a page in
// one request.
//
// # Below the slots: one chain, in pages
//
// A read the slots miss goes down one chain of levels (chain.go), each of
// which reads bytes of a data page and counts what it served: the tiers'
// stores, a compressed RAM tier (Options.CompressRAM) and then a disk tier
// (Options.DiskDir), kept by package tier; the tiers' fills (tiers.go);
// the cluster's peer tier (Options.Peers, peers.go); storage (source.go).
// A cache without tiers or peers has a chain of storage alone. The slots'
// loads, the tiers' fills and the pages a node reads for its cluster are
// each one keyed single flight (flight.go): concurrent readers of a page
// share one read, and when the reader making it goes away, another reads
// it again. A reader's acquisition of a page or a range is a waiter
// (waiter.go); loads, its own or a prefetcher's, are jobs (load.go).
//
// A tier stores whole pages, so that a random order, served by ranges,
// fills it all the same: each page comes from storage once. Pages the
// tiers could not take when they were read are read again for them later
// (Backfills). The tiers' fill buffers are slots of the budget, handed
// back to pages once no tier takes pages any more. Nothing in a reader's
// path waits for a tier.
//
// On the peer tier, a read asks the page's owner among the nodes; the
// cache reads the pages its node owns itself, once for the node and its
// peers, keeps them before any other page (Options.PeerBudget of RAM, and
// its tiers), and answers peers through ServePeer (peers.go).
//
// # Concurrency
//
// Cache is safe for concurrent use. One mutex guards its state and is
// never held during I/O or while a plan is prepared; with Options.Debug,
// every unlock checks the invariants of the cache and of its policy.
//
// Every reader shares that mutex, and it does not limit cores: a read of a
// sample (AcquireSample and Release) holds it 60 to 470 ns in all
// (BenchmarkAcquireHit, 64 to 16,384 pages, every read a hit or a tenth of
// the pages cached), so it is busy only at some two million samples a
// second, the work of over a thousand decoding cores. Storage reads,
// prefetches and tiers run outside it. At 2 decoding workers all mutex
// waits of ffcvfeed (FFCVFS_MUTEXPROFILE) were under a millisecond in 5 s
// of CPU.
//
// # What it must never do
//
// Exceed its budget, read a page for a consumer without a plan more often
// than the consumer reads samples, or serve bytes of a page whose read
// failed.
package pagecache
