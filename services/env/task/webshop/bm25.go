package webshop

import (
	"math"
	"slices"
	"strings"
	"unicode"
)

// BM25 parameters, Lucene's defaults (WebShop searches with pyserini, i.e. Lucene).
const (
	bm25K1 = 1.2
	bm25B  = 0.75
)

// posting is one document holding a term, with the term's frequency there.
type posting struct{ doc, tf int }

// bm25 is an inverted index of tokenized documents, ranked by Okapi BM25.
type bm25 struct {
	postings map[string][]posting
	docLen   []int
	avgLen   float64
}

// newBM25 indexes docs, each a list of tokens; document i is returned as i.
func newBM25(docs [][]string) *bm25 {
	ix := &bm25{postings: map[string][]posting{}, docLen: make([]int, len(docs))}
	total := 0
	for d, toks := range docs {
		ix.docLen[d] = len(toks)
		total += len(toks)
		tf := map[string]int{}
		for _, t := range toks {
			tf[t]++
		}
		keys := make([]string, 0, len(tf))
		for t := range tf {
			keys = append(keys, t)
		}
		slices.Sort(keys)
		for _, t := range keys {
			ix.postings[t] = append(ix.postings[t], posting{d, tf[t]})
		}
	}
	if len(docs) > 0 {
		ix.avgLen = float64(total) / float64(len(docs))
	}
	return ix
}

// idf is Lucene's BM25 inverse document frequency, always positive.
func (ix *bm25) idf(df int) float64 {
	n := float64(len(ix.docLen))
	return math.Log(1 + (n-float64(df)+0.5)/(float64(df)+0.5))
}

// score is the BM25 score of every document for the query's distinct terms.
func (ix *bm25) score(query []string) []float64 {
	scores := make([]float64, len(ix.docLen))
	seen := map[string]bool{}
	for _, q := range query {
		if seen[q] {
			continue
		}
		seen[q] = true
		ps := ix.postings[q]
		if len(ps) == 0 {
			continue
		}
		idf := ix.idf(len(ps))
		for _, p := range ps {
			tf := float64(p.tf)
			norm := bm25K1 * (1 - bm25B + bm25B*float64(ix.docLen[p.doc])/ix.avgLen)
			scores[p.doc] += idf * tf * (bm25K1 + 1) / (tf + norm)
		}
	}
	return scores
}

// rank returns the documents matching some query term, best first; ties keep document order.
func (ix *bm25) rank(query []string) []int {
	scores := ix.score(query)
	var out []int
	for d, s := range scores {
		if s > 0 {
			out = append(out, d)
		}
	}
	slices.SortStableFunc(out, func(a, b int) int {
		switch {
		case scores[a] > scores[b]:
			return -1
		case scores[a] < scores[b]:
			return 1
		}
		return 0
	})
	return out
}

// words lowercases s and splits it into letter-or-digit runs, as the built-in policy reads text.
func words(s string) []string {
	return strings.FieldsFunc(strings.ToLower(s), func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) })
}
