package proto

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// slowText is Text without the fast path: the JSON decoded into a map.
func slowText(c ToolCall) string {
	var args map[string]any
	if err := json.Unmarshal([]byte(c.Arguments), &args); err != nil || len(args) == 0 {
		return c.Name
	}
	keys := make([]string, 0, len(args))
	for k := range args {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	b.WriteString(c.Name)
	for _, k := range keys {
		b.WriteByte(' ')
		fmt.Fprint(&b, args[k])
	}
	return b.String()
}

// The fast path of Text renders exactly what decoding the JSON renders, or steps aside.
func TestTextFastPathMatchesJSON(t *testing.T) {
	cases := []string{
		`{"action":"go to fridge 1"}`, `{}`, ` { } `, `{"b":"2","a":"x"}`, `{"b":2,"a":"x"}`, `{"a":"x","a":"y"}`,
		`{"a":"caf\u00e9"}`, `{"a":"café"}`, `{"a":"tab\there"}`, `{"a":"x"} trailing`, `{"a":"x",}`, `{"a" : "x" , "c":"z"}`,
		`{"a":"\"quoted\""}`, `{"a":true}`, `{"a":null}`, `{"a":{"b":"c"}}`, `{"a":["x"]}`, `not json`, ``, `{"a":"x"`,
		"{\"a\":\"\xff\"}", `{"1":"a","2":"b","3":"c","4":"d","5":"e","6":"f","7":"g","8":"h","9":"i"}`,
		`{"1":"a","2":"b","3":"c","4":"d","5":"e","6":"f","7":"g","8":"h"}`, "{\"a\":\"x\ny\"}", `{"":""}`,
	}
	alphabet := []string{`{`, `}`, `"`, `:`, `,`, ` `, `a`, `b`, `1`, `\`, `é`, "\xff", `"a"`, `"b":"v"`, `true`}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 20000 {
		var b strings.Builder
		for range rng.IntN(12) {
			b.WriteString(alphabet[rng.IntN(len(alphabet))])
		}
		cases = append(cases, b.String())
	}
	for _, args := range cases {
		c := ToolCall{Name: "tool", Arguments: args}
		if got, want := c.Text(), slowText(c); got != want {
			t.Fatalf("Text(%q) = %q, want %q", args, got, want)
		}
	}
}

func BenchmarkToolCallText(b *testing.B) {
	c := ToolCall{Name: "take_action", Arguments: `{"action":"put apple 2 in/on microwave 1"}`}
	b.ReportAllocs()
	for b.Loop() {
		_ = c.Text()
	}
}
