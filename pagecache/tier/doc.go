// Package tier keeps pages of a beton below the page cache's RAM slots: in
// memory, compressed (Options.Compress, --compress-ram), or in files on a
// local disk (--disk-cache), within a byte budget each. A read the slots
// miss asks the tiers before storage; a page read from storage is offered
// to them.
//
// # Entries
//
// A page is stored as its chunks: one per allocation (a sample's image,
// array or bytes) and one per gap between them, each with the CRC-32C of
// its bytes, so that a read of one sample decodes and checks that sample's
// chunks alone and never serves a byte that does not check out (see
// entry.go). A page whose largest chunk does not shrink by a fifth is
// stored as it is (JPEG): compressing it would cost every read and save
// nothing. Raw RGB pixels are predicted from their neighbours (LOCO-I's
// median edge detector, which needs each image's width, hence chunks
// that follow the beton's allocations) and the residuals Huffman-coded
// with klauspost/compress's huff0; other chunks go through its zstd at
// the fastest level. On real photos of 64 px, huff0 after prediction
// stores pixels in about half their bytes, where zstd or S2 on the pixels
// themselves save about a tenth: general-purpose compressors look for
// repeated strings, which photos do not have.
//
// The format, the eviction and the folder layout are written here: no
// library keeps checksummed, partially readable entries under an
// eviction order that the page cache's announced orders decide.
//
// # Eviction
//
// When an entry must make room, the least recently used entries are
// ranked by the page cache (SetRank: the distance to their next use in the
// announced orders) and the one needed farthest away goes; a page needed
// later than all of them is not stored. Without announced orders, the
// least recently used goes. The pages SetKeep names (those a node owns for
// its cluster) come before all others: each displaces any other page, and
// goes only when no other is left and it is no longer named, or when all
// the room is theirs and another of them needs it (the least recently used
// goes, or the one needed last): a share larger than the budget is read
// once a pass over it, not once a read.
//
// # Concurrency
//
// A Store is safe for concurrent use. Reads run in the callers'
// goroutines; pages offered are encoded and written by one goroutine per
// Store, from a queue of queueLen pages: an offer never waits, and a page
// offered while the queue is full is not stored then (PutWait, for pages
// a node keeps for its cluster, waits for room). A page taken is read from
// the caller's buffer until it is stored. One mutex guards a
// Store's state; it is held during no I/O and no call to the rank
// function.
//
// Two processes may share a disk folder: the one that holds its lock
// writes, the others read what it wrote (state "shared"). A write is a
// temporary file renamed into place, so a reader sees whole entries.
//
// # What it must never do
//
// Serve bytes that fail their checksum, or bytes of another version of the
// source (entries are keyed by its identity: URL with ETag, or path with
// size and modification time); exceed its budget; make a reader wait for
// a write; fail a read because the tier failed (a full or failing disk
// turns the tier to reads of what it holds, with one warning, and reads go
// to storage).
package tier
