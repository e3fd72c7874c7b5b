package db

import (
	"math"
	"slices"
	"strconv"
	"strings"
)

// normalizeSQL is a statement's canonical text: keywords and names upper-cased, quoted strings kept,
// spacing and a trailing semicolon dropped, so "select x from t;" matches "SELECT x FROM t".
func normalizeSQL(stmt string) string {
	toks, err := lexSQL(stmt)
	if err != nil {
		return strings.Join(strings.Fields(stmt), " ")
	}
	for len(toks) > 0 && toks[len(toks)-1] == ";" {
		toks = toks[:len(toks)-1]
	}
	for i, t := range toks {
		if t[0] != '\'' {
			toks[i] = strings.ToUpper(strings.Trim(t, "\"`[]"))
		}
	}
	return strings.Join(toks, " ")
}

// splitAnswer splits a committed answer into its values.
func splitAnswer(ans string) []string {
	ans = strings.TrimSpace(ans)
	ans = strings.TrimPrefix(strings.TrimSuffix(ans, "]"), "[")
	var out []string
	for _, part := range strings.Split(ans, ",") {
		if v := normValue(part); v != "" {
			out = append(out, v)
		}
	}
	return out
}

// normValue is a value's canonical form: quotes, brackets and case dropped; numbers rounded to 2
// decimals and printed without trailing zeros ("72000.0" → "72000", "61333.3333" → "61333.33").
func normValue(v string) string {
	v = strings.Trim(strings.TrimSpace(v), "'\"`()[] ")
	v = strings.Join(strings.Fields(strings.ToLower(v)), " ")
	if f, err := strconv.ParseFloat(v, 64); err == nil && !math.IsInf(f, 0) && !math.IsNaN(f) {
		return strconv.FormatFloat(math.Round(f*100)/100, 'f', -1, 64)
	}
	return v
}

// sameValue compares two values after normalization.
func sameValue(a, b string) bool { return normValue(a) == normValue(b) }

// sameAnswer compares a committed answer with the expected values as sets, order and repeats ignored.
func sameAnswer(ans string, want []string) bool {
	got := splitAnswer(ans)
	exp := make([]string, 0, len(want))
	for _, w := range want {
		exp = append(exp, normValue(w))
	}
	slices.Sort(got)
	slices.Sort(exp)
	return slices.Equal(slices.Compact(got), slices.Compact(exp))
}
