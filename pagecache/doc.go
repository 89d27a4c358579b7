// Package pagecache reads a beton page by page from storage (a local or NFS
// file, S3, HTTP) into a fixed RAM budget, and prefetches along the orders
// its consumers announce.
//
// # What it owns
//
// Sources: ranged reads only, each a whole page, with retries and deadlines
// for network storage and the object pinned by ETag, so a changed object is
// an error, never mixed bytes.
//
// The Cache: Options.Budget bytes of page slots, allocated once. A page is
// pinned (Acquire…/Release) while someone copies out of it; when every slot
// is pinned, readers wait: the budget never grows. Consumers announce plans
// (sample orders); the cache maps each to the sequence of pages it will
// touch, follows the consumer's progress from the samples it actually reads
// (reads may come out of order within Options.Window), prefetches the pages
// needed soonest, and evicts the page whose next use across all plans is
// farthest away. A prefetch never evicts a page needed before the page it
// fetches, so prefetching adds no source reads to what the eviction policy
// needs. Without plans, reads are demand-only and the cache evicts first
// pages whose samples have all been read this epoch, then the least
// recently used.
//
// # Concurrency
//
// Cache is safe for concurrent use. One mutex guards its state and is never
// held during I/O. Options.Readers goroutines perform prefetches; a demand
// load is performed by the goroutine that needs the page, and concurrent
// requests for one page share one load.
//
// # What it must never do
//
// Exceed its budget, read a page for a consumer without a plan more often
// than the consumer reads samples, mix bytes of two versions of an object,
// or log credentials.
package pagecache
