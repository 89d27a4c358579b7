// Package toxitest runs toxiproxy for tests: a real toxiproxy-server on
// 127.0.0.1, whose proxies stand between the code under test and a real
// server and break the connections through them the ways networks break
// them.
//
// # Use
//
//	tp := toxitest.Start(t)                  // stopped by t.Cleanup
//	p := tp.Proxy(t, "s3", "127.0.0.1:7070") // listens on a free port of 127.0.0.1
//	endpoint := "http://" + p.Addr()
//	p.AddToxic(t, toxitest.Toxic{Name: "cut", Type: "reset_peer"})
//	p.RemoveToxic(t, "cut")
//	p.Disable(t) // connections are closed and refused: the server is gone
//	p.Enable(t)  // back, on the same address
//
// Everything goes through toxiproxy's HTTP API with net/http; the toxiproxy
// client module is not needed.
//
// # Toxics
//
// A toxic acts on the data flowing downstream (server to client, the
// default) or upstream, on every connection (toxicity 1, the default) or on
// a random share of them. The types of toxiproxy 2.5 and their attributes
// (integers; times in milliseconds):
//
//   - latency: latency, jitter: delay the data.
//   - bandwidth: rate (KB/s): throttle it.
//   - slow_close: delay: delay the close.
//   - timeout: timeout: let nothing through, and close after timeout (0:
//     never close; the connection stalls).
//   - reset_peer: timeout: reset the connection (TCP RST) after timeout
//     once data flows.
//   - slicer: average_size, size_variation, delay: cut the data into small
//     pieces.
//   - limit_data: bytes: close the connection after that many bytes.
//
// # Finding toxiproxy-server
//
// $FFCVFS_TOXIPROXY, then PATH, then $(go env GOBIN), $(go env GOPATH)/bin,
// ~/go/bin and /root/go/bin. When it is missing the test ends through
// testenv.Missing: a skip on a developer's machine, a failure in CI.
// ensure_toxiproxy in scripts/lib.sh installs it.
//
// # Concurrency
//
// A Server's and a Proxy's methods may be called from several goroutines,
// but those that take a testing.TB must be called from that test's
// goroutine.
package toxitest
