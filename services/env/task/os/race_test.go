//go:build race

package os

// raceEnabled shrinks the samples of the slow generation tests, which the race detector makes 10x slower.
const raceEnabled = true
