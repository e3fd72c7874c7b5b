package alfworld

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/jetrl/jetrl/proto"
)

// canonical renders everything generated: task, goal, layout and placements.
func (g *game) canonical() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s|%s|%s", g.kind, g.goalObj, g.goalRecep)
	for _, r := range g.receps {
		fmt.Fprintf(&b, "|%s:", r.name)
		for _, o := range r.contents {
			fmt.Fprintf(&b, "%s,", g.objs[o].name)
		}
	}
	return b.String()
}

func TestManyDistinctInstances(t *testing.T) {
	seen := map[string]bool{}
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
	for seed := range uint64(2000) {
		for _, split := range []string{proto.SplitTrain, proto.SplitHeldout} {
			g, err := generate(split, seed)
			if err != nil {
				t.Fatal(err)
			}
			if held := g.splitKey()%heldoutModulus == 0; held != (split == proto.SplitHeldout) {
				t.Fatalf("%s seed %d has split key %d", split, seed, g.splitKey())
			}
		}
	}
	if _, err := New().New("test", 1); !errors.Is(err, proto.ErrUnknownSplit) {
		t.Fatalf("unknown split: %v", err)
	}
}

func TestGeneratedRooms(t *testing.T) {
	kinds := map[kind]int{}
	for seed := range uint64(3000) {
		g, err := generate(proto.SplitHeldout, seed)
		if err != nil {
			t.Fatal(err)
		}
		kinds[g.kind]++
		if n := len(g.receps); n < minReceps || n > maxReceps {
			t.Fatalf("seed %d: %d receptacles", seed, n)
		}
		if g.satisfied() {
			t.Fatalf("seed %d: goal holds at the start: %s", seed, g.canonical())
		}
		if strings.Contains(g.opening.Observation, g.goalObj+" ") {
			t.Fatalf("seed %d: opening reveals the %s: %s", seed, g.goalObj, g.opening.Observation)
		}
		if g.kind == lookAtObjInLight && g.lamp < 0 {
			t.Fatalf("seed %d: no desklamp", seed)
		}
		if g.kind != lookAtObjInLight && len(g.recepsOf([]string{g.goalRecep})) == 0 {
			t.Fatalf("seed %d: no %s", seed, g.goalRecep)
		}
	}
	for k := range numKinds {
		if kinds[k] < 3000/int(numKinds)/2 {
			t.Errorf("%s: %d of 3000", k, kinds[k])
		}
	}
}

// TestRandomPerKind reports how often a uniformly random policy wins each task type.
func TestRandomPerKind(t *testing.T) {
	wins, games := map[kind]int{}, map[kind]int{}
	for seed := range uint64(2000) {
		g, err := generate(proto.SplitHeldout, seed)
		if err != nil {
			t.Fatal(err)
		}
		rng := rand.New(rand.NewPCG(seed, 3))
		games[g.kind]++
		for range MaxTurns {
			as := g.admissible()
			g.apply(as[rng.IntN(len(as))])
			if g.satisfied() {
				wins[g.kind]++
				break
			}
		}
	}
	for k := range numKinds {
		rate := float64(wins[k]) / float64(games[k])
		t.Logf("%-22s random success %.3f (%d of %d)", k, rate, wins[k], games[k])
		if rate > 0.15 {
			t.Errorf("%s: random success %.3f", k, rate)
		}
	}
}

func step(t *testing.T, g *game, action string) string {
	t.Helper()
	r := g.Step(callOf(action))
	return r.Observation
}

// TestPhrasing plays a fixed room and checks ALFWorld's wording.
func TestPhrasing(t *testing.T) {
	g := &game{kind: pickCleanThenPlace, scene: kitchen(), goalObj: "mug", goalRecep: "cabinet", loc: -1, held: -1, lamp: -1,
		receps: []recep{
			{name: "cabinet 1", kind: "cabinet", openable: true},
			{name: "countertop 1", kind: "countertop"},
			{name: "sinkbasin 1", kind: sinkbasin},
		},
		objs: []object{{name: "mug 1", kind: "mug", at: 0}, {name: "apple 1", kind: "apple", at: 1}, {name: "knife 1", kind: "knife", at: 1}},
	}
	g.receps[0].contents = []int{0}
	g.receps[1].contents = []int{1, 2}
	g.recepIndex = map[string]int{"cabinet 1": 0, "countertop 1": 1, "sinkbasin 1": 2}
	g.objIndex = map[string]int{"mug 1": 0, "apple 1": 1, "knife 1": 2}
	if got, want := g.instruction(), "Your task is to: put a clean mug in cabinet."; got != want {
		t.Errorf("instruction %q, want %q", got, want)
	}
	for _, c := range []struct{ action, want string }{
		{"look", "You are in the middle of a room. Looking quickly around you, you see a cabinet 1, a countertop 1, and a sinkbasin 1."},
		{"go to countertop 1", "You arrive at countertop 1. On the countertop 1, you see a apple 1, and a knife 1."},
		{"take mug 1 from countertop 1", `"take mug 1 from countertop 1" is not admissible here: there is no mug 1 in/on the countertop 1. Nothing happens.`},
		{"go to cabinet 1", "You arrive at cabinet 1. The cabinet 1 is closed."},
		{"take mug 1 from cabinet 1", `"take mug 1 from cabinet 1" is not admissible here: the cabinet 1 is closed; open it first. Nothing happens.`},
		{"open cabinet 1", "You open the cabinet 1. The cabinet 1 is open. In it, you see a mug 1."},
		{"Take  Mug 1 from cabinet 1", "You pick up the mug 1 from the cabinet 1."},
		{"inventory", "You are carrying: a mug 1."},
		{"examine mug 1", "There's nothing special about mug 1."},
		{"put mug 1 in cabinet 1", "You put the mug 1 in/on the cabinet 1."},
		{"take mug 1 from cabinet 1", "You pick up the mug 1 from the cabinet 1."},
		{"clean mug 1 with sinkbasin 1", `"clean mug 1 with sinkbasin 1" is not admissible here: you are not at the sinkbasin 1; go to it first. Nothing happens.`},
		{"go to sinkbasin 1", "You arrive at sinkbasin 1. On the sinkbasin 1, you see nothing."},
		{"heat mug 1 with sinkbasin 1", `"heat mug 1 with sinkbasin 1" is not admissible here: you can only heat with a microwave. Nothing happens.`},
		{"clean mug 1 with sinkbasin 1", "You clean the mug 1 using the sinkbasin 1."},
		{"examine mug 1", "The mug 1 is clean."},
		{"go to cabinet 1", "You arrive at cabinet 1. The cabinet 1 is open. In it, you see nothing."},
		{"look", "You are facing the cabinet 1. The cabinet 1 is open. In it, you see nothing."},
	} {
		if got := step(t, g, c.action); got != c.want {
			t.Errorf("%s:\n got %q\nwant %q", c.action, got, c.want)
		}
	}
	r := g.Step(callOf("put mug 1 on cabinet 1"))
	if !r.Done || r.Reward != 1 || r.Status != proto.StatusCompleted || r.Observation != "You put the mug 1 in/on the cabinet 1." {
		t.Fatalf("final put: %+v", r)
	}
}

func TestBadCallObservations(t *testing.T) {
	g, err := generate(proto.SplitTrain, 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		call proto.ToolCall
		want string
	}{
		{proto.ToolCall{Name: "foo", Arguments: `{"action":"look"}`}, `unknown tool "foo"; available: take_action`},
		{proto.ToolCall{Name: ToolName, Arguments: `{"action":`}, "bad arguments: not a JSON object"},
		{proto.ToolCall{Name: ToolName, Arguments: ``}, "bad arguments: empty"},
		{proto.ToolCall{Name: ToolName, Arguments: `[]`}, "bad arguments: not a JSON object"},
		{proto.ToolCall{Name: ToolName, Arguments: `null`}, "bad arguments: not a JSON object"},
		{proto.ToolCall{Name: ToolName, Arguments: `{}`}, `bad arguments: missing required "action"`},
		{proto.ToolCall{Name: ToolName, Arguments: `{"action":["look"]}`}, `bad arguments: "action" must be a string`},
		{proto.ToolCall{Name: ToolName, Arguments: `{"action":"look","x":1}`}, `bad arguments: unknown argument "x"`},
		{proto.ToolCall{Name: ToolName, Arguments: `{"action":"  "}`}, `bad arguments: "action" is empty`},
		{proto.ToolCall{Name: ToolName, Arguments: `{"action":"dance"}`}, `"dance" is not admissible here: unknown action`},
		{proto.ToolCall{Name: ToolName, Arguments: `{"action":"go to moon 1"}`}, `"go to moon 1" is not admissible here: there is no moon 1 in this room`},
		{proto.ToolCall{Name: ToolName, Arguments: `{"action":"take apple 9 from desk 1"}`}, `"take apple 9 from desk 1" is not admissible here`},
	} {
		r := g.Step(c.call)
		if !strings.HasPrefix(r.Observation, c.want) || r.Done || r.Status != proto.StatusRunning || len(r.Admissible) == 0 {
			t.Errorf("%s %s: %+v, want an observation starting %q", c.call.Name, c.call.Arguments, r, c.want)
		}
	}
	if g.loc != -1 || g.held != -1 {
		t.Fatal("bad calls changed the state")
	}
}

func TestSolverFromAnyState(t *testing.T) {
	// After random play the solver still finishes, given enough turns: it plans from the current state.
	for seed := range uint64(500) {
		g, err := generate(proto.SplitTrain, seed)
		if err != nil {
			t.Fatal(err)
		}
		rng := rand.New(rand.NewPCG(seed, 5))
		for range 15 {
			as := g.admissible()
			g.apply(as[rng.IntN(len(as))])
			if g.satisfied() {
				break
			}
		}
		g.done = g.satisfied()
		for n := 0; !g.done; n++ {
			if n > 12 {
				t.Fatalf("seed %d: solver did not finish from a random state: %s", seed, g.canonical())
			}
			if r := g.Step(g.Solve()); strings.Contains(r.Observation, "not admissible") {
				t.Fatalf("seed %d: solver call inadmissible: %s", seed, r.Observation)
			}
		}
	}
}

func TestMaxSolverLength(t *testing.T) {
	longest, total := 0, 0
	const n = 3000
	for seed := range uint64(n) {
		g, err := generate(proto.SplitHeldout, seed)
		if err != nil {
			t.Fatal(err)
		}
		calls := 0
		for !g.done {
			g.Step(g.Solve())
			calls++
			if calls > MaxTurns {
				t.Fatalf("seed %d: solver exceeds %d calls", seed, MaxTurns)
			}
		}
		longest, total = max(longest, calls), total+calls
	}
	t.Logf("solver: mean %.2f calls, longest %d", float64(total)/n, longest)
}
