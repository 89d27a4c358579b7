// Package peerstats is what a node's peer tier did: one type, of which
// the cache reading through the tier (package pagecache) fills the reads
// and package peer the tier's own figures, and the reasons a read went to
// storage, named once for both. It needs nothing of the project, so that
// neither the cache nor the tier reaches the other.
package peerstats

// Why a read below the cache's tiers went to storage (Stats.StorageReasons;
// the peer tier's errors name them).
const (
	// ReasonOwned: this node owns the page; the cluster's one read of it.
	ReasonOwned = "owned"
	// ReasonOwnerTimeout: the owner did not answer in time.
	ReasonOwnerTimeout = "owner_timeout"
	// ReasonOwnerGone: the owner could not be reached (refused, reset, no
	// route), or failed lately and was not asked; also a page this node
	// fills for a peer without owning it (its owner is down for that peer).
	ReasonOwnerGone = "owner_gone"
	// ReasonOwnerError: the owner answered with an error (its own storage
	// read failed, or it refused this node's request).
	ReasonOwnerError = "owner_error"
	// ReasonCorrupt: a value failed its check (tag, length).
	ReasonCorrupt = "corrupt_value"
)

// Reasons are the Reason* names, in the order the peer tier indexes them.
var Reasons = [...]string{ReasonOwned, ReasonOwnerTimeout, ReasonOwnerGone, ReasonOwnerError, ReasonCorrupt}

// Stats are what a node's peer tier did: stats.json's peers section and
// the ffcvfs_peer_* metrics.
type Stats struct {
	// The cache's reads through the tier (package pagecache).

	Reads     uint64 `json:"reads"`      // reads below the cache's tiers
	BytesRead uint64 `json:"bytes_read"` // their bytes: from peers or storage
	// StorageReads and StorageBytes are the reads below the tiers that
	// went to storage; StorageReasons counts them by why (every Reasons
	// name present), and they sum to StorageReads.
	StorageReads   uint64            `json:"storage_reads"`
	StorageBytes   uint64            `json:"storage_bytes"`
	StorageReasons map[string]uint64 `json:"storage_reasons"`
	// HeldReads counts the values served to peers from the slots and
	// tiers, without reading storage.
	HeldReads uint64 `json:"held_reads"`
	// CacheBytes is the pages the peer tier's RAM (--peer-cache-size)
	// holds.
	CacheBytes int64 `json:"cache_bytes"`

	// The tier's own figures (package peer).

	Corrupt        uint64 `json:"corrupt"`         // values from peers that failed their check
	PeerLoads      int64  `json:"peer_loads"`      // values peers served
	PeerErrors     int64  `json:"peer_errors"`     // requests to peers that failed
	ServerRequests int64  `json:"server_requests"` // requests peers sent this node
	// Members is how many nodes the pages are placed on now;
	// MemberChanges how often that set changed (peers file, DNS);
	// PagesMoved how many of the beton's pages changed owner at the last
	// change.
	Members       int    `json:"members"`
	MemberChanges uint64 `json:"member_changes"`
	PagesMoved    int64  `json:"pages_moved"`
	// PagesOwned is how many of the beton's pages this node owns now, and
	// PagesLimit the most any node may own (bounded loads).
	PagesOwned int64 `json:"pages_owned"`
	PagesLimit int64 `json:"pages_limit"`
}
