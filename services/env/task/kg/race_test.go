//go:build race

package kg

const raceEnabled = true
