// Package orders keeps what a mount knows of the orders its readers
// announce, before they become the cache's plans.
//
// # What it owns
//
//   - The announce socket (Announcer): a Unix socket outside the tree, in a
//     folder of its own (0700) and itself 0600, speaking plain text (see
//     announce.go); the mount's .ffcvfs/announce is a symlink to it.
//   - The plans' leases (Leases): which process announced each plan (by
//     pid and start time), withdrawing a plan when its process exits,
//     announces another the same way, or reads none of its samples for
//     the lease; and the bounds of plans per user and in all (admit).
//
// The order files of .ffcvfs/orders are the view's (package fs), which
// hands their orders to Leases.Announce as the socket does.
//
// # Concurrency
//
// Leases and Announcer are safe for concurrent use; each runs a goroutine
// of its own (the lease check, the socket's accept loop) until Close.
//
// # What it must never do
//
// Let one user's announcements steer another user's plans, or let any
// client hold the socket, a descriptor or memory without bound: every line,
// order, connection and wait is bounded (announce.go).
package orders
