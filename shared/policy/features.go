package policy

import (
	"math"
	"slices"
	"unicode"
	"unicode/utf8"
)

// Caps on the words read from each text, so one huge observation cannot make a forward pass slow.
const (
	maxInstructionWords = 64
	maxObservationWords = 256
	maxCallWords        = 32 // per candidate or history entry
	recentHistoryWords  = 3  // the last this-many history entries contribute "h:" words
)

// Token namespaces ("i:", "o:", ...). They are fixed: changing one changes every weight's meaning.
const (
	nsTask        uint64 = 0x8a5cd789635d2dff // t:
	nsHistoryLen  uint64 = 0x121fd2155c472f96 // n:
	nsHistoryWord uint64 = 0x7bc1e5f1b2d64b41 // h:
	nsHistoryCall uint64 = 0x5b2c3f0a9e8d7c61 // H:
	nsLastCall    uint64 = 0xd1b54a32d192ed03 // L:
	nsInstr       uint64 = 0x9e6c63d0676a9a99 // i:
	nsInstrBi     uint64 = 0xcb2ad3a35f0b1c77 // i: bigrams
	nsObs         uint64 = 0x2127599bf4325c37 // o:
	nsObsBi       uint64 = 0x4f7d1e2a8b3c6d59 // o: bigrams
	nsCandWord    uint64 = 0xa0761d6478bd642f // c:
	nsVerb        uint64 = 0xe7037ed1a0b428db // v:
	nsCall        uint64 = 0x8ebc6af09c88c6e3 // C:
	nsRel         uint64 = 0x589965cc75374cc3 // r:<verb>:
	nsRelAnyVerb  uint64 = 0x1d8e4e27c47d124f // r:*:
	seedSeq       uint64 = 0x3c6ef372fe94f82b // hash of a whole call's word sequence
	seedNoVerb    uint64 = 0x6a09e667f3bcc909 // verb of a candidate without words
)

// Relation codes, each emitted under the candidate's verb and under "any verb".
const (
	relInstrMatch = 1  // + min(#args found in the instruction, 3)
	relInstrMiss  = 5  // + min(#args not found in the instruction, 3)
	relObsMatch   = 9  // + min(#args found in the observation, 3)
	relObsMiss    = 13 // + min(#args not found in the observation, 3)
	relInHistory  = 17 // some argument word occurs in a history call
	relDone       = 18 // the same call was already made (within the window)
	relRepeat     = 19 // the same call as the last one
	relNoArgs     = 20 // a bare verb
)

const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
	golden    = 0x9e3779b97f4a7c15
)

// mix64 is the murmur3 finalizer: a cheap bijection that spreads every input bit over the output.
func mix64(z uint64) uint64 {
	z ^= z >> 33
	z *= 0xff51afd7ed558ccd
	z ^= z >> 33
	z *= 0xc4ceb9fe1a85ec53
	z ^= z >> 33
	return z
}

// Mix64 is mix64 for other packages that key their own draws (the rollout's per-turn sampling).
func Mix64(z uint64) uint64 { return mix64(z) }

// HashString is hashString (FNV-1a 64) for other packages.
func HashString(s string) uint64 { return hashString(s) }

// combine hashes an ordered pair; combine(a, b) != combine(b, a).
func combine(a, b uint64) uint64 { return mix64(a*golden + b) }

// hashString is FNV-1a 64 of the raw bytes.
func hashString(s string) uint64 {
	h := uint64(fnvOffset)
	for i := 0; i < len(s); i++ {
		h = (h ^ uint64(s[i])) * fnvPrime
	}
	return h
}

// appendWords appends the FNV-1a hash of each lowercased alphanumeric word of s, at most limit words.
func appendWords(dst []uint64, s string, limit int) []uint64 {
	h, in, n := uint64(fnvOffset), false, 0
	for i := 0; i < len(s); {
		c := s[i]
		word := false
		if c < utf8.RuneSelf {
			i++
			if 'A' <= c && c <= 'Z' {
				c += 'a' - 'A'
			}
			if word = 'a' <= c && c <= 'z' || '0' <= c && c <= '9'; word {
				h = (h ^ uint64(c)) * fnvPrime
			}
		} else {
			r, size := utf8.DecodeRuneInString(s[i:])
			i += size
			if word = unicode.IsLetter(r) || unicode.IsDigit(r); word {
				var buf [utf8.UTFMax]byte
				for _, b := range buf[:utf8.EncodeRune(buf[:], unicode.ToLower(r))] {
					h = (h ^ uint64(b)) * fnvPrime
				}
			}
		}
		switch {
		case word:
			in = true
		case in:
			dst = append(dst, h)
			if n++; n >= limit {
				return dst
			}
			h, in = fnvOffset, false
		}
	}
	if in {
		dst = append(dst, h)
	}
	return dst
}

// seqHash identifies a call by its normalized words, so "Open red-door" equals "open red door".
func seqHash(words []uint64) uint64 {
	h := seedSeq
	for _, w := range words {
		h = combine(h, w)
	}
	return h
}

// span locates one candidate's tokens in features.tok: lexical in [lex, rel), relations in [rel, end).
type span struct{ lex, rel, end int32 }

// features are the hashed tokens of one Input, shared by the forward and backward passes.
type features struct {
	ctx        []uint64 // context tokens premultiplied by golden; the first nState are the "state" tokens
	nState     int
	lexScale   float64 // 1/sqrt(len(ctx)): the lexical pair sum stays O(1) whatever the text length
	stateScale float64 // 1/sqrt(nState)
	tok        []uint64
	spans      []span

	// Candidates share many tokens (every "go to …" has the verb "go", most relations recur), and a
	// token's pairs with the context are the costly part. uniq holds each distinct token once, lexical ones
	// (paired with the whole context) in [0, nLex), relations (paired with the state) after; ref maps each
	// position of tok to its entry in uniq. A pass visits each entry's pairs once.
	uniq []uint64
	ref  []int32
	nLex int

	pairs []float64 // pairs[u]: the pair sum of uniq[u] under the weights of the current pass
	coefs []float64 // coefs[u]: the gradient coefficient gathered for uniq[u]'s pairs
}

// containsSorted reports whether sorted holds w.
func containsSorted(sorted []uint64, w uint64) bool {
	_, ok := slices.BinarySearch(sorted, w)
	return ok
}

// extract hashes the tokens of in; see the package comment for the feature set.
func extract(in Input, taskSalt bool) *features {
	hist := HistoryWindow(in.History)
	words := make([]uint64, 0, 128)

	iw := appendWords(words, in.Instruction, maxInstructionWords)
	words = iw[len(iw):]
	ow := appendWords(words, in.Observation, maxObservationWords)
	words = ow[len(ow):]

	f := &features{ctx: make([]uint64, 0, 8+len(hist)+3*recentHistoryWords+2*(len(iw)+len(ow)))}
	add := func(h uint64) { f.ctx = append(f.ctx, h*golden) }

	// State tokens: what has been done so far, and in which task.
	add(combine(nsTask, hashString(in.Task)))
	add(combine(nsHistoryLen, uint64(len(hist))))
	histSeq := make([]uint64, len(hist))
	var hw []uint64 // words of every history call, for the "argument seen in history" relation
	for k, call := range hist {
		start := len(hw)
		hw = appendWords(hw, call, maxCallWords)
		histSeq[k] = seqHash(hw[start:])
		add(combine(nsHistoryCall, histSeq[k]))
		if k >= len(hist)-recentHistoryWords {
			for _, w := range hw[start:] {
				add(combine(nsHistoryWord, w))
			}
		}
	}
	if len(hist) > 0 {
		add(combine(nsLastCall, histSeq[len(hist)-1]))
	}
	f.nState = dedupe(f.ctx)
	f.ctx = f.ctx[:f.nState]

	// Lexical tokens: the words and bigrams of the instruction and the observation.
	for _, text := range [...]struct {
		w       []uint64
		uni, bi uint64
	}{{iw, nsInstr, nsInstrBi}, {ow, nsObs, nsObsBi}} {
		for k, w := range text.w {
			add(combine(text.uni, w))
			if k > 0 {
				add(combine(combine(text.bi, text.w[k-1]), w))
			}
		}
	}
	f.ctx = f.ctx[:f.nState+dedupe(f.ctx[f.nState:])]
	f.lexScale = 1 / math.Sqrt(float64(len(f.ctx)))
	f.stateScale = 1 / math.Sqrt(float64(f.nState))

	// Sorted copies make the relation look-ups O(log n).
	slices.Sort(iw)
	slices.Sort(ow)
	slices.Sort(hw)

	f.tok = make([]uint64, 0, len(in.Candidates)*20)
	f.spans = make([]span, len(in.Candidates))
	var cw []uint64
	for j, cand := range in.Candidates {
		cw = appendWords(cw[:0], cand, maxCallWords)
		seq := seqHash(cw)
		verb, args := seedNoVerb, cw
		if len(cw) > 0 {
			verb, args = cw[0], cw[1:]
		}
		sp := span{lex: int32(len(f.tok))}
		f.tok = append(f.tok, combine(nsVerb, verb), combine(nsCall, seq))
		for _, w := range args {
			f.tok = append(f.tok, combine(nsCandWord, w))
		}
		sp.rel = int32(len(f.tok))

		relVerb := combine(nsRel, verb)
		rel := func(code int) {
			f.tok = append(f.tok, combine(relVerb, uint64(code)), combine(nsRelAnyVerb, uint64(code)))
		}
		if len(args) == 0 {
			rel(relNoArgs)
		} else {
			var inInstr, inObs, inHist int
			for _, w := range args {
				inInstr += b2i(containsSorted(iw, w))
				inObs += b2i(containsSorted(ow, w))
				inHist += b2i(containsSorted(hw, w))
			}
			rel(relInstrMatch + min(inInstr, 3))
			rel(relInstrMiss + min(len(args)-inInstr, 3))
			rel(relObsMatch + min(inObs, 3))
			rel(relObsMiss + min(len(args)-inObs, 3))
			if inHist > 0 {
				rel(relInHistory)
			}
		}
		if slices.Contains(histSeq, seq) {
			rel(relDone)
			if histSeq[len(histSeq)-1] == seq {
				rel(relRepeat)
			}
		}
		sp.end = int32(len(f.tok))
		f.spans[j] = sp
	}
	if taskSalt {
		salt := combine(nsTask, hashString(in.Task))
		for i := range f.tok {
			f.tok[i] = combine(f.tok[i], salt)
		}
	}
	f.index()
	return f
}

// index fills uniq, ref and nLex from tok and spans. Tokens are hashes already, so an open-addressed table
// keyed by their low bits finds the repeats.
func (f *features) index() {
	size := 1
	for size < 2*len(f.tok) {
		size <<= 1
	}
	buf := make([]int32, len(f.tok)+size)
	table := buf[len(f.tok):] // 1 + an index into uniq; 0 is empty
	f.ref = buf[:len(f.tok)]
	mask := uint64(size - 1)
	f.uniq = make([]uint64, 0, len(f.tok))
	for part := range 2 {
		if part == 1 {
			f.nLex = len(f.uniq)
			clear(table)
		}
		for _, sp := range f.spans {
			from, to := sp.lex, sp.rel
			if part == 1 {
				from, to = sp.rel, sp.end
			}
			for i := from; i < to; i++ {
				c := f.tok[i]
				k := c & mask
				for table[k] != 0 && f.uniq[table[k]-1] != c {
					k = (k + 1) & mask
				}
				if table[k] == 0 {
					f.uniq = append(f.uniq, c)
					table[k] = int32(len(f.uniq))
				}
				f.ref[i] = table[k] - 1
			}
		}
	}
	sums := make([]float64, 2*len(f.uniq))
	f.pairs, f.coefs = sums[:len(f.uniq)], sums[len(f.uniq):]
}

// dedupe sorts xs, moves its distinct values to the front and returns their count: features are
// present or absent, so "a cabinet 1, a cabinet 2" does not weigh "a" six times.
func dedupe(xs []uint64) int {
	slices.Sort(xs)
	return len(slices.Compact(xs))
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// signed reads the weight of hash h with its hashed sign (the top bit), without a branch.
func signed(w []float32, h uint64) float32 {
	return math.Float32frombits(math.Float32bits(w[h&uint64(len(w)-1)]) ^ uint32(h>>63)<<31)
}

// pairSum is Σ_x ±W[h(x, c)] over the context tokens; two accumulators keep the adds in flight.
func pairSum(w []float32, ctx []uint64, c uint64) float64 {
	var s0, s1 float32
	for len(ctx) >= 2 {
		s0 += signed(w, mix64(ctx[0]+c))
		s1 += signed(w, mix64(ctx[1]+c))
		ctx = ctx[2:]
	}
	if len(ctx) == 1 {
		s0 += signed(w, mix64(ctx[0]+c))
	}
	return float64(s0 + s1)
}

// pairSums computes every distinct token's pair sum under w, once for the pass.
func (f *features) pairSums(w []float32) {
	for u, c := range f.uniq {
		if u < f.nLex {
			f.pairs[u] = pairSum(w, f.ctx, c)
		} else {
			f.pairs[u] = pairSum(w, f.ctx[:f.nState], c)
		}
	}
}

// dot is the raw score of candidate j; pairSums must have run under the same weights.
func (f *features) dot(w []float32, j int) float64 {
	sp := f.spans[j]
	var alone, lexSum, relSum float64
	for _, c := range f.tok[sp.lex:sp.end] {
		alone += float64(signed(w, c))
	}
	for _, u := range f.ref[sp.lex:sp.rel] {
		lexSum += f.pairs[u]
	}
	for _, u := range f.ref[sp.rel:sp.end] {
		relSum += f.pairs[u]
	}
	return alone + lexSum*f.lexScale + relSum*f.stateScale
}

// scores fills s (one per candidate) with the raw scores under w.
func (f *features) scores(w []float32, s []float64) {
	f.pairSums(w)
	for j := range s {
		s[j] = f.dot(w, j)
	}
}

// addSigned adds ±v to the gradient coordinate of hash h, with the same sign as signed.
func addSigned(grad []float64, h uint64, v float64) {
	grad[h&uint64(len(grad)-1)] += math.Float64frombits(math.Float64bits(v) ^ h>>63<<63)
}

// addGrad gathers g · ∂score_j/∂W: the lone weights go into grad at once, the pairs' coefficient is
// gathered per distinct token for addGrads.
func (f *features) addGrad(grad []float64, j int, g float64) {
	sp := f.spans[j]
	for _, c := range f.tok[sp.lex:sp.end] {
		addSigned(grad, c, g)
	}
	gl, gs := g*f.lexScale, g*f.stateScale
	for _, u := range f.ref[sp.lex:sp.rel] {
		f.coefs[u] += gl
	}
	for _, u := range f.ref[sp.rel:sp.end] {
		f.coefs[u] += gs
	}
}

// addGrads adds the gathered pair coefficients into grad, each distinct token's pairs once, and clears
// them.
func (f *features) addGrads(grad []float64) {
	for u, g := range f.coefs {
		if g == 0 {
			continue
		}
		ctx := f.ctx
		if u >= f.nLex {
			ctx = f.ctx[:f.nState]
		}
		c := f.uniq[u]
		for _, x := range ctx {
			addSigned(grad, mix64(x+c), g)
		}
		f.coefs[u] = 0
	}
}
