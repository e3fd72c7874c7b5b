package os

import (
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"path"
	"slices"
	"strings"
	"testing"

	"github.com/jetrl/jetrl/proto"
)

// canonical hashes everything generated: the opening, the question and every file with its contents.
func (g *game) canonical() uint64 {
	h := fnv.New64a()
	fmt.Fprintf(h, "%s|%s|%s|", g.instruction, g.openObs, g.q.answer)
	var walk func(n *node)
	walk = func(n *node) {
		fmt.Fprintf(h, "%s:%s|", pathOf(n), n.data)
		for _, c := range n.children {
			walk(c)
		}
	}
	walk(g.fs.root)
	return h.Sum64()
}

func TestManyDistinctInstances(t *testing.T) {
	if raceEnabled {
		t.Skip("generation is single-threaded and deterministic; checked without -race")
	}
	seen := map[uint64]bool{}
	for seed := range uint64(12_000) {
		g, err := generate(proto.SplitTrain, seed)
		if err != nil {
			t.Fatal(err)
		}
		seen[g.canonical()] = true
	}
	if len(seen) < 10_000 {
		t.Fatalf("%d distinct instances among 12,000 train seeds", len(seen))
	}
}

func TestSplitsPartitionByKey(t *testing.T) {
	n := uint64(2000)
	if raceEnabled {
		n = 300
	}
	for seed := range n {
		for _, split := range []string{proto.SplitTrain, proto.SplitHeldout} {
			g, err := generate(split, seed)
			if err != nil {
				t.Fatal(err)
			}
			key := fnv.New64a()
			fmt.Fprintf(key, "%s|%s", g.instruction, g.openObs)
			if held := key.Sum64()%heldoutModulus == 0; held != (split == proto.SplitHeldout) {
				t.Fatalf("%s seed %d has split key %d", split, seed, key.Sum64())
			}
		}
	}
	if _, err := New().New("test", 1); !errors.Is(err, proto.ErrUnknownSplit) {
		t.Fatalf("unknown split: %v", err)
	}
}

// TestGeneratedQuestions checks every question along the solver's path: the answer is what the query
// prints, it is admissible only once the query ran, the query names a file the instruction does not
// always name, and the admissible list stays short.
func TestGeneratedQuestions(t *testing.T) {
	kinds := map[qkind]int{}
	hidden := 0 // queries whose file name the instruction does not give away
	longest := 0
	n := 2000
	if raceEnabled {
		n = 400
	}
	for seed := range uint64(n) {
		g, err := generate(proto.SplitHeldout, seed)
		if err != nil {
			t.Fatal(err)
		}
		kinds[g.q.kind]++
		sh := shell{fs: g.fs, cwd: g.q.base}
		r, err := sh.run(g.query())
		if err != nil || !slices.Contains(valueTokens(r.stdout), g.q.answer) {
			t.Fatalf("seed %d: query %q gives %q (%v), answer %q", seed, g.query(), r.stdout, err, g.q.answer)
		}
		if !strings.Contains(g.instruction, path.Base(g.q.target)) && g.q.kind != qFiles {
			hidden++
		}
		adm := g.Start().Admissible
		ran := false
		for turn := 0; !g.done; turn++ {
			longest = max(longest, len(adm))
			if len(adm) < 5 || len(adm) > 26 {
				t.Fatalf("seed %d turn %d: %d admissible calls", seed, turn, len(adm))
			}
			if slices.Contains(adm, answerCall(g.q.answer)) != ran {
				t.Fatalf("seed %d turn %d: answer %q admissible %v after the query ran %v", seed, turn, g.q.answer, !ran, ran)
			}
			call := g.Solve()
			ran = ran || call == bashCall(g.query())
			res := g.Step(call)
			if res.Done && res.Reward != 1 {
				t.Fatalf("seed %d: solver lost: %s", seed, res.Observation)
			}
			adm = res.Admissible
		}
	}
	for k := range numKinds {
		if kinds[k] < n/int(numKinds)/2 {
			t.Errorf("question kind %d drawn %d times of %d", k, kinds[k], n)
		}
	}
	if hidden < n/2 {
		t.Errorf("only %d of %d queries name a file the instruction does not", hidden, n)
	}
	t.Logf("kinds %v; %d of %d query files named only by an observation; longest admissible list %d", kinds, hidden, n, longest)
}

func TestCalls(t *testing.T) {
	newGame := func() *game {
		g, err := generate(proto.SplitTrain, 3)
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	for _, c := range []struct {
		call proto.ToolCall
		want string
	}{
		{proto.ToolCall{Name: "rm", Arguments: "{}"}, `unknown tool "rm"`},
		{proto.ToolCall{Name: BashTool, Arguments: `{"script": 7}`}, `bad arguments: "script" must be a string`},
		{proto.ToolCall{Name: BashTool, Arguments: `{"cmd": "ls"}`}, `bad arguments: unknown argument "cmd"`},
		{proto.ToolCall{Name: BashTool, Arguments: `{}`}, `bad arguments: missing required "script"`},
		{proto.ToolCall{Name: BashTool, Arguments: `{"script": " "}`}, `bad arguments: "script" is empty`},
		{proto.ToolCall{Name: BashTool, Arguments: `["ls"]`}, `bad arguments: not a JSON object`},
		{proto.ToolCall{Name: AnswerTool, Arguments: `{"answer": true}`}, `bad arguments: "answer" must be a string`},
		{proto.ToolCall{Name: FinishTool, Arguments: `{"why": "done"}`}, `bad arguments: unknown argument "why"`},
		{bashCall("rm -r /"), "bash: rm: command not supported"},
	} {
		g := newGame()
		r := g.Step(c.call)
		if r.Done || !strings.Contains(r.Observation, c.want) || r.Metrics["invalid_call"] != 1 || len(r.Admissible) == 0 {
			t.Errorf("%s %s: %+v, want a running result saying %q", c.call.Name, c.call.Arguments, r, c.want)
		}
	}

	g := newGame()
	r := g.Step(proto.ToolCall{Name: AnswerTool, Arguments: fmt.Sprintf(`{"answer": %s}`, g.q.answer)})
	if g.q.kind == qCount || g.q.kind == qFiles || g.q.kind == qSize {
		if !r.Done || r.Reward != 1 {
			t.Errorf("unquoted numeric answer %s: %+v", g.q.answer, r)
		}
	}
	g = newGame()
	if r := g.Step(answerCall("no such answer")); !r.Done || r.Reward != 0 || r.Status != proto.StatusCompleted {
		t.Errorf("wrong answer: %+v", r)
	}
	if r := g.Step(bashCall("ls")); !r.Done || r.Reward != 0 {
		t.Errorf("step after the end: %+v", r)
	}
	g = newGame()
	if r := g.Step(proto.ToolCall{Name: FinishTool, Arguments: ""}); !r.Done || r.Reward != 0 || r.Status != proto.StatusCompleted {
		t.Errorf("finish: %+v", r)
	}
}

// TestFocus: the admissible commands follow the last listing, and a failed or refused command keeps them.
func TestFocus(t *testing.T) {
	g, err := generate(proto.SplitTrain, 11)
	if err != nil {
		t.Fatal(err)
	}
	g.sh.cwd = "/" // absolute paths in the admissible list, whatever the question
	g.Step(bashCall("ls /home"))
	before := g.admissible()
	if !slices.ContainsFunc(before, func(c proto.ToolCall) bool { return strings.Contains(c.Text(), "find /home/") }) {
		t.Fatalf("after ls /home: %v", before)
	}
	for _, s := range []string{"ls /nope", "rm x", "cat /etc/hostname"} {
		g.Step(bashCall(s))
		if got := g.scripts(); !slices.Equal(got, g.scriptsFor("/home")) {
			t.Fatalf("after %q the scripts changed: %v", s, got)
		}
	}
	if answers := g.answers(); len(answers) == 0 || answers[0] != strings.TrimSpace(g.fs.lookup("/etc/hostname").data) {
		t.Fatalf("answers after cat /etc/hostname: %v", answers)
	}
}

// scriptsFor is the scripts with another focus, for comparisons.
func (g *game) scriptsFor(focus string) []string {
	saved := g.focus
	g.focus = focus
	defer func() { g.focus = saved }()
	return g.scripts()
}

func TestGameRandomCallsNeverPanic(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	junk := []proto.ToolCall{
		{Name: BashTool, Arguments: `{"script": "cat /var/log/*/*"}`},
		{Name: BashTool, Arguments: `{"script": "find / | sort -r | uniq -c | head -n 3"}`},
		{Name: BashTool, Arguments: `{"script": "grep -c '[' /etc/hostname"}`},
		{Name: BashTool, Arguments: `{"script": "ls -l -a /home/*"}`},
		{Name: BashTool, Arguments: `{"script": "\"unterminated"}`},
		{Name: AnswerTool, Arguments: `{"answer": null}`},
		{Name: "", Arguments: ""},
	}
	for seed := range uint64(200) {
		g, err := generate(proto.SplitTrain, seed)
		if err != nil {
			t.Fatal(err)
		}
		adm := g.Start().Admissible
		for range MaxTurns {
			call := adm[rng.IntN(len(adm))]
			if rng.IntN(3) == 0 {
				call = junk[rng.IntN(len(junk))]
			}
			r := g.Step(call)
			if r.Done {
				break
			}
			adm = r.Admissible
		}
	}
}
