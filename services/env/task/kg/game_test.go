package kg

import (
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/jetrl/jetrl/proto"
	"github.com/jetrl/jetrl/services/env/task/tasktest"
)

// tiny builds a hand-made graph: two films, three people, two cities, one company, one country.
func tiny(t *testing.T) *graph {
	t.Helper()
	g := &graph{s: newSchema(), byName: map[string]int{}}
	for _, e := range []struct{ name, typ string }{
		{"Aldoria", country}, {"Arlen", city}, {"Belmora", city}, {"Veltrix", company},
		{"Ada Brook", person}, {"Bruno Holm", person}, {"Clara Novak", person},
		{"Silent Harbor", film}, {"Golden Tide", film},
	} {
		g.add(e.name, e.typ)
	}
	id := func(name string) int { return g.byName[normName(name)] }
	for _, l := range []struct{ a, rel, b string }{
		{"Arlen", "city.located_in", "Aldoria"},
		{"Belmora", "city.located_in", "Aldoria"},
		{"Veltrix", "company.headquartered_in", "Arlen"},
		{"Ada Brook", "person.born_in", "Arlen"},
		{"Bruno Holm", "person.born_in", "Belmora"},
		{"Clara Novak", "person.born_in", "Belmora"},
		{"Silent Harbor", "film.directed_by", "Ada Brook"},
		{"Silent Harbor", "film.directed_by", "Bruno Holm"},
		{"Golden Tide", "film.directed_by", "Bruno Holm"},
		{"Golden Tide", "film.starring", "Clara Novak"},
		{"Silent Harbor", "film.produced_by", "Veltrix"},
	} {
		g.link(id(l.a), l.rel, id(l.b))
	}
	for i := range g.ents {
		for range g.s.attrsOf[g.ents[i].typ] {
			g.ents[i].attrs = append(g.ents[i].attrs, 100+i)
		}
	}
	return g
}

func ids(g *graph, names ...string) []int {
	out := make([]int, len(names))
	for i, n := range names {
		out[i] = g.byName[normName(n)]
	}
	slices.Sort(out)
	return out
}

func TestGraphOperations(t *testing.T) {
	g := tiny(t)
	films := value{typ: film, set: ids(g, "Silent Harbor", "Golden Tide")}
	for _, c := range []struct {
		name string
		got  value
		want []int
	}{
		{"directors of both films", g.neighbors(films, "film.directed_by"), ids(g, "Ada Brook", "Bruno Holm")},
		{"inverse edges", g.neighbors(g.single(g.byName["bruno holm"]), "person.filmography"), ids(g, "Silent Harbor", "Golden Tide")},
		{"two hops", g.neighbors(g.neighbors(films, "film.directed_by"), "person.born_in"), ids(g, "Arlen", "Belmora")},
		{"no edge", g.neighbors(g.single(g.byName["golden tide"]), "film.produced_by"), nil},
		{"intersection", intersect(g.neighbors(films, "film.directed_by"), g.neighbors(g.single(g.byName["belmora"]), "city.natives")), ids(g, "Bruno Holm")},
		{"argmax", g.extreme(films, 0, true), ids(g, "Golden Tide")},
		{"argmin", g.extreme(films, 0, false), ids(g, "Silent Harbor")},
	} {
		if !slices.Equal(c.got.set, c.want) {
			t.Errorf("%s: got %v, want %v", c.name, c.got.set, c.want)
		}
	}
	if got, want := g.relationsOf(films), []string{"film.directed_by", "film.produced_by", "film.starring"}; !slices.Equal(got, want) {
		t.Errorf("relations of the films: %v, want %v", got, want)
	}
	if got := g.relationsOf(value{typ: film}); got != nil {
		t.Errorf("relations of no films: %v", got)
	}
	for _, c := range []struct {
		a, b value
		want bool
	}{
		{films, films, true},
		{films, value{typ: film, set: ids(g, "Golden Tide")}, false},
		{value{typ: film}, value{typ: person}, false},
		{value{isNum: true, num: 2}, value{isNum: true, num: 2}, true},
		{value{isNum: true, num: 2}, films, false},
	} {
		if got := c.a.equal(c.b); got != c.want {
			t.Errorf("%+v equal %+v = %v", c.a, c.b, got)
		}
	}
}

// tinyGame asks for the cities where the directors of Silent Harbor were born.
func tinyGame(t *testing.T) *game {
	g := tiny(t)
	sh := g.byName["silent harbor"]
	rels := []string{"film.directed_by", "person.born_in"}
	return newGame(g, question{
		shape:       chain2,
		instruction: "Question: which cities are " + g.phrase(sh, rels) + "?\nEntities: [Silent Harbor]",
		entities:    []int{sh},
		program:     chainProgram(sh, rels),
		typ:         city,
	})
}

func call(tool string, kv ...string) proto.ToolCall { return callOf(tool, kv...) }

// TestPhrasing plays the tiny game and checks the observations, errors included.
func TestPhrasing(t *testing.T) {
	gm := tinyGame(t)
	if got, want := gm.opening.Instruction, "Question: which cities are the city where the people who directed the film Silent Harbor was born?\nEntities: [Silent Harbor]"; got != want {
		t.Errorf("instruction %q, want %q", got, want)
	}
	for _, c := range []struct {
		call proto.ToolCall
		want string
	}{
		{call(toolGetNeighbors, "variable", "Silent Harbor", "relation", "film.filmed_in"), `invalid argument: Silent Harbor has no relation "film.filmed_in"; get_relations(Silent Harbor) lists its relations`},
		{call(toolGetRelations, "variable", "silent  harbor"), "Relations of Silent Harbor: film.directed_by, film.produced_by."},
		{call(toolGetRelations, "variable", "#0"), "invalid argument: there is no variable #0 yet; no call has made a variable"},
		{call(toolGetNeighbors, "variable", "Silent Harbor", "relation", "film.directed_by"), "Variable #0, which are instances of person: Ada Brook, Bruno Holm."},
		{call(toolGetRelations, "variable", "#0"), "Relations of #0: person.filmography, person.born_in."},
		{call(toolIntersection, "variable1", "#0", "variable2", "Arlen"), "invalid argument: #0 holds people and Arlen holds cities; intersection needs two sets of one type"},
		{call(toolIntersection, "variable1", "#0", "variable2", "Bruno Holm"), "Variable #1, which are instances of person: Bruno Holm."},
		{call(toolCount, "variable", "#0"), "Variable #2, which is a number: 2."},
		{call(toolGetRelations, "variable", "#2"), "invalid argument: #2 is a number, not a set of entities"},
		{call(toolGetAttributes, "variable", "#0"), "Attributes of #0: person.birth_year, person.height."},
		{call(toolArgmax, "variable", "#0", "attribute", "city.population"), `invalid argument: #0 (people) has no attribute "city.population"; get_attributes(#0) lists its attributes`},
		{call(toolArgmax, "variable", "#0", "attribute", "person.height"), "Variable #3, which are instances of person: Bruno Holm (person.height 105 cm)."},
		{call(toolArgmin, "variable", "#0", "attribute", "person.height"), "Variable #4, which are instances of person: Ada Brook (person.height 104 cm)."},
		{call(toolGetNeighbors, "variable", "#0", "relation", "person.born_in"), "Variable #5, which are instances of city: Arlen, Belmora."},
		{call(toolAnswer, "variable", "Arlen"), `invalid argument: "Arlen" is not a variable; variables are written #0, #1, ...`},
		{call(toolAnswer, "variable", "#9"), "invalid argument: there is no variable #9; the variables are #0 to #5"},
	} {
		r := gm.Step(c.call)
		if r.Observation != c.want || r.Done || r.Status != proto.StatusRunning || len(r.Admissible) == 0 {
			t.Errorf("%s:\n got %+v\nwant observation %q", c.call.Text(), r, c.want)
		}
	}
	r := gm.Step(call(toolAnswer, "variable", "#5"))
	if !r.Done || r.Reward != 1 || r.Status != proto.StatusCompleted || r.Observation != "Final answer #5: correct." {
		t.Fatalf("answer: %+v", r)
	}
	if again := gm.Step(call(toolAnswer, "variable", "#0")); again.Reward != 1 || !again.Done {
		t.Fatalf("a step after the end changed the result: %+v", again)
	}
}

func TestWrongAnswerEnds(t *testing.T) {
	gm := tinyGame(t)
	gm.Step(call(toolGetNeighbors, "variable", "Silent Harbor", "relation", "film.directed_by"))
	r := gm.Step(call(toolAnswer, "variable", "#0"))
	if !r.Done || r.Reward != 0 || r.Status != proto.StatusCompleted || r.Observation != "Final answer #0: wrong." {
		t.Fatalf("wrong answer: %+v", r)
	}
}

// TestAdmissibleFollowsReveals checks that get_neighbors is offered only along revealed relations, and
// answers only for variables of the asked type.
func TestAdmissibleFollowsReveals(t *testing.T) {
	gm := tinyGame(t)
	texts := func() []string {
		var out []string
		for _, c := range gm.admissible() {
			out = append(out, c.Text())
		}
		return out
	}
	for _, c := range []struct {
		call proto.ToolCall
		want []string
	}{
		{proto.ToolCall{}, []string{"get_relations Silent Harbor"}},
		{call(toolGetRelations, "variable", "Silent Harbor"), []string{"get_relations Silent Harbor",
			"get_neighbors film.directed_by Silent Harbor", "get_neighbors film.produced_by Silent Harbor"}},
		{call(toolGetNeighbors, "variable", "Silent Harbor", "relation", "film.directed_by"), []string{"get_relations Silent Harbor", "get_relations #0",
			"get_neighbors film.directed_by Silent Harbor", "get_neighbors film.produced_by Silent Harbor"}},
		{call(toolGetRelations, "variable", "#0"), []string{"get_relations Silent Harbor", "get_relations #0",
			"get_neighbors film.directed_by Silent Harbor", "get_neighbors film.produced_by Silent Harbor",
			"get_neighbors person.filmography #0", "get_neighbors person.born_in #0"}},
		{call(toolGetNeighbors, "variable", "#0", "relation", "person.born_in"), []string{"get_relations Silent Harbor", "get_relations #0", "get_relations #1",
			"get_neighbors film.directed_by Silent Harbor", "get_neighbors film.produced_by Silent Harbor",
			"get_neighbors person.filmography #0", "get_neighbors person.born_in #0", "answer #1"}},
		{call(toolGetNeighbors, "variable", "Bruno Holm", "relation", "person.born_in"), []string{"get_relations Silent Harbor", "get_relations #1", "get_relations #2",
			"get_neighbors film.directed_by Silent Harbor", "get_neighbors film.produced_by Silent Harbor",
			"intersection #1 #2", "answer #1", "answer #2"}},
	} {
		if c.call.Name != "" {
			gm.Step(c.call)
		}
		if got := texts(); !slices.Equal(got, c.want) {
			t.Errorf("after %s:\n got %q\nwant %q", c.call.Text(), got, c.want)
		}
	}
}

func TestBadCallObservations(t *testing.T) {
	gm := tinyGame(t)
	long := strings.Repeat("x", 500)
	for _, c := range []struct {
		call proto.ToolCall
		want string
	}{
		{proto.ToolCall{Name: "sparql", Arguments: `{}`}, `unknown tool "sparql"; the tools are get_relations, get_neighbors, intersection, get_attributes, argmax, argmin, count, answer`},
		{proto.ToolCall{Name: long, Arguments: `{}`}, `unknown tool "` + long[:maxEcho] + `..."`},
		{proto.ToolCall{Name: toolGetRelations, Arguments: ``}, "bad arguments for get_relations: empty"},
		{proto.ToolCall{Name: toolGetRelations, Arguments: `{"variable":`}, "bad arguments for get_relations: not a JSON object"},
		{proto.ToolCall{Name: toolGetRelations, Arguments: `null`}, "bad arguments for get_relations: not a JSON object"},
		{proto.ToolCall{Name: toolGetRelations, Arguments: `["Arlen"]`}, "bad arguments for get_relations: not a JSON object"},
		{proto.ToolCall{Name: toolGetRelations, Arguments: `{}`}, `bad arguments for get_relations: missing required "variable"`},
		{proto.ToolCall{Name: toolGetNeighbors, Arguments: `{"variable":"Arlen"}`}, `bad arguments for get_neighbors: missing required "relation"`},
		{proto.ToolCall{Name: toolGetRelations, Arguments: `{"variable":7}`}, `bad arguments for get_relations: "variable" must be a string, got 7`},
		{proto.ToolCall{Name: toolGetRelations, Arguments: `{"variable":" "}`}, `bad arguments for get_relations: "variable" is empty`},
		{proto.ToolCall{Name: toolGetRelations, Arguments: `{"variable":"Arlen","x":1}`}, `bad arguments for get_relations: unknown argument "x"; this tool takes variable`},
		{call(toolGetRelations, "variable", "Atlantis"), `invalid argument: "Atlantis" is neither a variable (#0, #1, ...) nor an entity of the knowledge base`},
		{call(toolGetRelations, "variable", "#x"), `invalid argument: "#x" is not a variable`},
		{call(toolGetRelations, "variable", "#-1"), `invalid argument: "#-1" is not a variable`},
		{call(toolGetRelations, "variable", long), `invalid argument: "` + long[:maxEcho] + `..."`},
	} {
		r := gm.Step(c.call)
		if !strings.HasPrefix(r.Observation, c.want) || r.Done || r.Status != proto.StatusRunning || len(r.Admissible) == 0 || r.Metrics["invalid_call"] != 1 {
			t.Errorf("%s %s: %+v, want an observation starting %q", clip(c.call.Name), c.call.Arguments, r, c.want)
		}
	}
	if len(gm.vars) != 0 || len(gm.rels) != 0 {
		t.Fatal("bad calls changed the state")
	}
}

func TestParseArgs(t *testing.T) {
	for _, c := range []struct {
		raw     string
		names   []string
		want    []string
		wantErr string
	}{
		{`{"variable":"#1"}`, []string{"variable"}, []string{"#1"}, ""},
		{` {"relation":"a.b","variable":"X"} `, []string{"variable", "relation"}, []string{"X", "a.b"}, ""},
		{`{"variable":"#1","variable":"#2"}`, []string{"variable"}, []string{"#2"}, ""},
		{`{"variable":null}`, []string{"variable"}, nil, `"variable" must be a string`},
		{`{"variable":{"a":1}}`, []string{"variable"}, nil, `"variable" must be a string`},
		{`"x"`, []string{"variable"}, nil, "not a JSON object"},
		{`{}`, nil, []string{}, ""},
	} {
		got, err := parseArgs(c.raw, c.names)
		switch {
		case c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)):
			t.Errorf("%s: error %v, want %q", c.raw, err, c.wantErr)
		case c.wantErr == "" && (err != nil || !slices.Equal(got, c.want)):
			t.Errorf("%s: %q, %v; want %q", c.raw, got, err, c.want)
		}
	}
}

func TestManyDistinctInstances(t *testing.T) {
	n := 12_000
	if testing.Short() || raceEnabled {
		n = 3_000
	}
	s := newSchema()
	seen := map[string]bool{}
	for seed := range uint64(n) {
		gm, err := generate(s, proto.SplitTrain, seed)
		if err != nil {
			t.Fatal(err)
		}
		seen[gm.q.instruction] = true
	}
	want := 10_000 // the floor the task families are held to on distinct instances, met by the questions alone
	if n < 12_000 {
		want = n * 9 / 10
	}
	if len(seen) < want {
		t.Fatalf("%d distinct questions among %d train seeds, want at least %d", len(seen), n, want)
	}
	t.Logf("%d distinct questions among %d train seeds", len(seen), n)
}

func TestSplitsPartitionByKey(t *testing.T) {
	s := newSchema()
	for seed := range uint64(1000) {
		for _, split := range []string{proto.SplitTrain, proto.SplitHeldout} {
			gm, err := generate(s, split, seed)
			if err != nil {
				t.Fatal(err)
			}
			if held := splitKey(gm.q.instruction)%heldoutModulus == 0; held != (split == proto.SplitHeldout) {
				t.Fatalf("%s seed %d has split key %d", split, seed, splitKey(gm.q.instruction))
			}
		}
	}
	if _, err := New().New("test", 1); !errors.Is(err, proto.ErrUnknownSplit) {
		t.Fatalf("unknown split: %v", err)
	}
}

// TestGeneratedQuestions checks every shape's guarantees: no shortcut to the answer, big enough sets.
func TestGeneratedQuestions(t *testing.T) {
	s := newSchema()
	shapes := map[shape]int{}
	n := 3000
	if raceEnabled {
		n = 1000
	}
	for seed := range uint64(n) {
		gm, err := generate(s, proto.SplitHeldout, seed)
		if err != nil {
			t.Fatal(err)
		}
		q := gm.q
		shapes[q.shape]++
		vals := make([]value, len(q.program))
		for i := range q.program {
			vals[i] = gm.run(q.program[:i+1])
			if !vals[i].isNum && len(vals[i].set) == 0 {
				t.Fatalf("seed %d (%s): step %d is empty", seed, q.shape, i)
			}
		}
		final := vals[len(vals)-1]
		for i, v := range vals[:len(vals)-1] {
			if v.equal(final) {
				t.Fatalf("seed %d (%s): step %d already holds the answer", seed, q.shape, i)
			}
		}
		switch q.shape {
		case extreme1, extreme2:
			if len(vals[len(vals)-2].set) < extremeMinSize {
				t.Fatalf("seed %d: argmax among %d", seed, len(vals[len(vals)-2].set))
			}
		case count2:
			if final.num < 2 || q.extreme != "" || !q.asksCount {
				t.Fatalf("seed %d: count %d", seed, final.num)
			}
		case both:
			if len(q.entities) != 2 || q.entities[0] == q.entities[1] {
				t.Fatalf("seed %d: entities %v", seed, q.entities)
			}
		}
		if !strings.HasPrefix(q.instruction, "Question: ") || strings.Contains(q.instruction, "%!") {
			t.Fatalf("seed %d: instruction %q", seed, q.instruction)
		}
		for _, e := range q.entities {
			if !strings.Contains(q.instruction, gm.g.ents[e].name) {
				t.Fatalf("seed %d: %q does not name %s", seed, q.instruction, gm.g.ents[e].name)
			}
		}
	}
	for sh := range numShapes {
		if shapes[sh] < n/int(numShapes)/2 {
			t.Errorf("%s: %d of %d", sh, shapes[sh], n)
		}
	}
}

// TestAdmissibleBounds plays solver and random episodes and checks the admissible lists stay short and
// always offer the solver's call on the solver's path.
func TestAdmissibleBounds(t *testing.T) {
	s := newSchema()
	longest, n := 0, uint64(1000)
	if raceEnabled {
		n = 300
	}
	for seed := range n {
		for _, random := range []bool{false, true} {
			gm, err := generate(s, proto.SplitHeldout, seed)
			if err != nil {
				t.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(seed, 9))
			adm := gm.Start().Admissible
			for turn := 0; turn < MaxTurns && !gm.done; turn++ {
				longest = max(longest, len(adm))
				if len(adm) == 0 || len(adm) > 25 {
					t.Fatalf("seed %d turn %d: %d admissible calls", seed, turn, len(adm))
				}
				c := gm.Solve()
				if !random && !slices.Contains(adm, c) {
					t.Fatalf("seed %d turn %d: solver call %s not admissible", seed, turn, c.Text())
				}
				if random {
					c = adm[rng.IntN(len(adm))]
				}
				adm = gm.Step(c).Admissible
			}
		}
	}
	t.Logf("longest admissible list: %d", longest)
}

// TestSolverFromAnyState: after random calls the solver still wins, since it plans from the current variables.
func TestSolverFromAnyState(t *testing.T) {
	s := newSchema()
	for seed := range uint64(500) {
		gm, err := generate(s, proto.SplitTrain, seed)
		if err != nil {
			t.Fatal(err)
		}
		rng := rand.New(rand.NewPCG(seed, 5))
		adm := gm.Start().Admissible
		for range 8 {
			c := adm[rng.IntN(len(adm))]
			if c.Name == toolAnswer {
				continue
			}
			adm = gm.Step(c).Admissible
		}
		for n := 0; !gm.done; n++ {
			if n > 10 {
				t.Fatalf("seed %d: solver did not finish from a random state", seed)
			}
			r := gm.Step(gm.Solve())
			if strings.Contains(r.Observation, "invalid argument") {
				t.Fatalf("seed %d: solver call failed: %s", seed, r.Observation)
			}
			if r.Done && r.Reward != 1 {
				t.Fatalf("seed %d: solver answered wrong: %s", seed, r.Observation)
			}
		}
	}
}

// TestRandomPerShape reports how often a uniformly random policy wins each shape.
func TestRandomPerShape(t *testing.T) {
	s := newSchema()
	wins, games := map[shape]int{}, map[shape]int{}
	n := uint64(2000)
	if raceEnabled {
		n = 600
	}
	for seed := range n {
		gm, err := generate(s, proto.SplitHeldout, seed)
		if err != nil {
			t.Fatal(err)
		}
		rng := rand.New(rand.NewPCG(seed, 3))
		games[gm.q.shape]++
		adm := gm.Start().Admissible
		for range MaxTurns {
			r := gm.Step(adm[rng.IntN(len(adm))])
			if r.Done {
				if r.Reward == 1 {
					wins[gm.q.shape]++
				}
				break
			}
			adm = r.Admissible
		}
	}
	for sh := range numShapes {
		rate := float64(wins[sh]) / float64(games[sh])
		t.Logf("%-8s random success %.3f (%d of %d)", sh, rate, wins[sh], games[sh])
		if rate > 0.15 {
			t.Errorf("%s: random success %.3f", sh, rate)
		}
	}
}

// FuzzStep feeds arbitrary calls to an instance: none may panic, end the game unless it is an answer,
// or leave it without admissible calls.
func FuzzStep(f *testing.F) {
	for _, c := range []proto.ToolCall{
		call(toolGetRelations, "variable", "Silent Harbor"),
		call(toolGetNeighbors, "variable", "#0", "relation", "film.directed_by"),
		call(toolIntersection, "variable1", "#0", "variable2", "#1"),
		call(toolArgmax, "variable", "#1", "attribute", "person.height"),
		call(toolAnswer, "variable", "#0"),
		{Name: toolCount, Arguments: `{"variable":"\u0000#9999999999999999999"}`},
	} {
		f.Add(c.Name, c.Arguments, c.Name, c.Arguments)
	}
	f.Fuzz(func(t *testing.T, name1, args1, name2, args2 string) {
		gm := tinyGame(t)
		gm.Step(call(toolGetNeighbors, "variable", "Silent Harbor", "relation", "film.directed_by"))
		for _, c := range []proto.ToolCall{{Name: name1, Arguments: args1}, {Name: name2, Arguments: args2}} {
			if gm.done {
				break
			}
			r := gm.Step(c)
			if r.Done && c.Name != toolAnswer {
				t.Fatalf("%s %s ended the game", c.Name, c.Arguments)
			}
			if !r.Done && len(r.Admissible) == 0 {
				t.Fatalf("%s %s: no admissible calls", c.Name, c.Arguments)
			}
		}
	})
}

// TestRecentInstances: the sessions of an instance after its first share its generated graph; the
// conformance suite's Determinism check plays two sessions of an instance one after the other and
// requires the same results, so what one session does shows in no other.
func TestRecentInstances(t *testing.T) {
	const seeds, sessions = 20, 3
	f := New()
	for seed, insts := range tasktest.Sessions(t, f, seeds, sessions) {
		a, b := insts[0].(*game), insts[sessions-1].(*game)
		if a.g != b.g || a == b {
			t.Fatalf("seed %d: the sessions do not share the instance's graph", seed)
		}
	}
	if st := f.recent.Stats(); st.Kept != seeds || st.Hits != seeds*(sessions-1) || st.Misses != seeds {
		t.Errorf("recent: %d kept, %d hits, %d misses; want %d, %d, %d", st.Kept, st.Hits, st.Misses, seeds, seeds*(sessions-1), seeds)
	}
}

// BenchmarkNewInstance makes an instance by generating it and, for a later session of its group, from the
// family's recent instances.
func BenchmarkNewInstance(b *testing.B) {
	f := New()
	b.Run("generate", func(b *testing.B) {
		seed := uint64(1 << 40)
		for b.Loop() {
			seed++
			if _, err := f.New(proto.SplitTrain, seed); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("recent", func(b *testing.B) {
		if _, err := f.New(proto.SplitTrain, 1); err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			if _, err := f.New(proto.SplitTrain, 1); err != nil {
				b.Fatal(err)
			}
		}
	})
}
