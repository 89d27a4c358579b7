// Package s3test runs a real S3 server for tests: versitygw with its posix
// backend, on 127.0.0.1, with a fresh data folder and random credentials.
//
// # Use
//
//	srv := s3test.Start(t)          // stopped by t.Cleanup
//	srv.CreateBucket(t, "data")
//	srv.PutObject(t, "data", "train.beton", b)
//	srv.Setenv(t)                   // AWS_* for code under test in this process
//	cmd.Env = append(os.Environ(), srv.Env()...) // or for a child process
//
// Stop and Restart (same address, same data) let tests take the storage away
// and bring it back.
//
// # Finding versitygw
//
// $FFCVFS_VERSITYGW, then PATH, then $(go env GOBIN), $(go env GOPATH)/bin,
// ~/go/bin and /root/go/bin. When it is missing the test ends through
// testenv.Missing: a skip on a developer's machine, a failure in CI.
// scripts/test.sh installs it.
//
// # Concurrency
//
// A Server's methods may be called from several goroutines, but those that
// take a testing.TB must be called from that test's goroutine.
package s3test
