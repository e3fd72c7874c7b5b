//go:build race

package codec_test

// raceEnabled: the race detector makes sync.Pool drop values at random, so allocation counts mean nothing.
const raceEnabled = true
