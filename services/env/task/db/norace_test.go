//go:build !race

package db

// raceEnabled shrinks the conformance samples: the race detector slows the SQLite engine about 15x.
const raceEnabled = false
