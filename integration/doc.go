// Package integration holds end-to-end tests that cross process boundaries:
// the ffcvfs and ffcvfeed binaries, real FUSE mounts, a real S3 server on
// loopback, and torchvision's ImageFolder reading what the tools produce.
//
// With CI=true a missing prerequisite (fixtures, /usr/bin/python3 with
// torchvision, /dev/fuse) fails the test instead of skipping it.
package integration
