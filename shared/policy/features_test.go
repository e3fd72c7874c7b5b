package policy

import (
	"hash/fnv"
	"math"
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

// Candidates share tokens, and each distinct token's pairs with the context are visited once per pass; the
// scores and the gradient are those of visiting every candidate's every token.
func TestSharedTokensVisitedOnce(t *testing.T) {
	m := newModel(t, Config{Seed: 5, InitScale: 0.2})
	in := benchInput()
	f := extract(in, m.TaskSalt)
	for i, u := range f.ref {
		if f.uniq[u] != f.tok[i] {
			t.Fatalf("token %d refers to %x, is %x", i, f.uniq[u], f.tok[i])
		}
	}
	for _, part := range [][]uint64{f.uniq[:f.nLex], f.uniq[f.nLex:]} {
		if d := slices.Clone(part); dedupe(d) != len(part) {
			t.Fatal("a token is listed twice in its part")
		}
	}
	var pairsEach, pairsOnce int
	for _, sp := range f.spans {
		pairsEach += int(sp.rel-sp.lex)*len(f.ctx) + int(sp.end-sp.rel)*f.nState
	}
	pairsOnce = f.nLex*len(f.ctx) + (len(f.uniq)-f.nLex)*f.nState
	t.Logf("%d candidates: %d tokens, %d distinct; %d pairs per pass, %d visiting every token", len(in.Candidates), len(f.tok), len(f.uniq), pairsOnce, pairsEach)
	if len(f.uniq) >= len(f.tok) || pairsOnce >= pairsEach {
		t.Fatalf("nothing shared: %d of %d tokens, %d of %d pairs", len(f.uniq), len(f.tok), pairsOnce, pairsEach)
	}

	// Every token visited, as if nothing were shared.
	w := m.Weights
	each := func(j int) float64 {
		sp := f.spans[j]
		var alone, lex, rel float64
		for _, c := range f.tok[sp.lex:sp.end] {
			alone += float64(signed(w, c))
		}
		for _, c := range f.tok[sp.lex:sp.rel] {
			lex += pairSum(w, f.ctx, c)
		}
		for _, c := range f.tok[sp.rel:sp.end] {
			rel += pairSum(w, f.ctx[:f.nState], c)
		}
		return alone + lex*f.lexScale + rel*f.stateScale
	}
	scores := m.Scores(in)
	for j := range scores {
		if want := each(j); scores[j] != want {
			t.Fatalf("candidate %d: score %v, want %v", j, scores[j], want)
		}
	}
	const choice = 4
	grad := make([]float64, m.NumParams())
	lp := m.AccumulateGrad(in, choice, 1, grad)
	want := make([]float64, m.NumParams())
	for j := range scores {
		g := -math.Exp(m.LogProb(in, j))
		if j == choice {
			g++
		}
		g /= m.Temperature
		sp := f.spans[j]
		for _, c := range f.tok[sp.lex:sp.end] {
			addSigned(want, c, g)
		}
		for _, c := range f.tok[sp.lex:sp.rel] {
			for _, x := range f.ctx {
				addSigned(want, mix64(x+c), g*f.lexScale)
			}
		}
		for _, c := range f.tok[sp.rel:sp.end] {
			for _, x := range f.ctx[:f.nState] {
				addSigned(want, mix64(x+c), g*f.stateScale)
			}
		}
	}
	if lp != m.LogProb(in, choice) {
		t.Fatalf("log-probability %v, want %v", lp, m.LogProb(in, choice))
	}
	for k := range grad {
		if math.Abs(grad[k]-want[k]) > 1e-12+1e-9*math.Abs(want[k]) {
			t.Fatalf("coordinate %d: %v, every token visited %v", k, grad[k], want[k])
		}
	}
}
