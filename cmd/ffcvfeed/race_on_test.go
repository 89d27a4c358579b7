//go:build race

package main

// raceEnabled: the race detector's shadow memory multiplies a process's
// RSS, which bounds on RSS allow for.
const raceEnabled = true
