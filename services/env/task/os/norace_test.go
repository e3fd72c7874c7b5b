//go:build !race

package os

const raceEnabled = false
