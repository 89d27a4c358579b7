//go:build race

package pagecache

// raceEnabled reports whether the tests run under the race detector,
// which slows every goroutine several times and so changes which of the
// cache's goroutines gets ahead of which.
const raceEnabled = true
