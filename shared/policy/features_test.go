package policy

import (
	"hash/fnv"
	"slices"
	"testing"
)

func words(s string) []uint64 { return appendWords(nil, s, 100) }

func TestTokenize(t *testing.T) {
	for _, tc := range []struct{ given, expected string }{
		{"Fridge 1", "fridge 1"},
		{"  put apple-2 in/on Fridge_1. ", "put apple 2 in on fridge 1"},
		{"ÄPFEL über Straße", "äpfel über straße"},
		{"", ""},
		{"--", ""},
	} {
		if got, want := words(tc.given), words(tc.expected); !slices.Equal(got, want) {
			t.Errorf("words(%q) = %v, want words(%q) = %v", tc.given, got, tc.expected, want)
		}
	}
	if n := len(words("go to cabinet 12")); n != 4 {
		t.Errorf("%d words in %q", n, "go to cabinet 12")
	}
	if n := len(appendWords(nil, "a b c d e", 3)); n != 3 {
		t.Errorf("limit 3 gave %d words", n)
	}
}

// TestHashGolden pins the word hash (FNV-1a 64) and the token combiner across machines and releases.
func TestHashGolden(t *testing.T) {
	std := fnv.New64a()
	std.Write([]byte("fridge"))
	if got := words("Fridge"); got[0] != hashString("fridge") || got[0] != std.Sum64() {
		t.Errorf("hash of fridge = %#x, FNV-1a says %#x", got[0], std.Sum64())
	}
	if got := combine(nsVerb, hashString("go")); got != 0xb95a1cd140ecb910 {
		t.Errorf("combine(v:, go) = %#x", got)
	}
}

func TestRelations(t *testing.T) {
	in := Input{
		Instruction: "Open the red door.",
		Observation: "The red door is locked. It opens with the silver key.",
		History:     []string{"Look", "take Silver-key"},
		Candidates:  []string{"take silver key", "open red door", "look"},
	}
	f := extract(in, false)
	has := func(j int, verb string, code int) bool {
		sp := f.spans[j]
		return slices.Contains(f.tok[sp.rel:sp.end], combine(combine(nsRel, hashString(verb)), uint64(code)))
	}
	for _, tc := range []struct {
		cand int
		verb string
		code int
		want bool
	}{
		{0, "take", relDone, true},
		{0, "take", relRepeat, true},
		{0, "take", relObsMatch + 2, true},
		{0, "take", relInstrMiss + 2, true},
		{0, "take", relInHistory, true},
		{1, "open", relInstrMatch + 2, true},
		{1, "open", relInstrMiss + 0, true},
		{1, "open", relDone, false},
		{2, "look", relNoArgs, true},
		{2, "look", relDone, true},
		{2, "look", relRepeat, false},
	} {
		if got := has(tc.cand, tc.verb, tc.code); got != tc.want {
			t.Errorf("candidate %q relation %d: %v, want %v", in.Candidates[tc.cand], tc.code, got, tc.want)
		}
	}
}
