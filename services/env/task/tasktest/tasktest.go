// Package tasktest is the conformance suite every task family passes, in the manner of Watermill's shared
// pub/sub tests: a family's test calls RunConformance with the family and its thresholds.
//
// Conventions the suite checks: an unknown tool's observation contains UnknownToolMarker and the tool's
// name; a call whose arguments are not valid JSON, miss a required property or give one the wrong type
// gets an observation containing BadArgumentsMarker; neither ends the game, and each costs a turn.
package tasktest

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/jetrl/jetrl/proto"
	"github.com/jetrl/jetrl/services/env/task"
)

// Markers that error observations contain.
const (
	UnknownToolMarker  = "unknown tool"
	BadArgumentsMarker = "bad arguments"
)

// Options are the family-specific thresholds; zero values take the defaults in brackets.
type Options struct {
	// Seed is the first instance seed of every sample [1].
	Seed uint64
	// SolverEpisodes is how many held-out instances the scripted solver plays [500].
	SolverEpisodes int
	// MinSolverSuccess is the solver's required success rate [1].
	MinSolverSuccess float64
	// MinSolverCalls is the least mean number of calls the solver may need, so tasks are multi-turn [3].
	MinSolverCalls float64
	// RandomEpisodes is how many held-out instances the uniformly random policy plays [500].
	RandomEpisodes int
	// MaxRandomSuccess bounds the random policy's success rate [0.15].
	MaxRandomSuccess float64
	// MaxRandomMeanReward bounds the random policy's mean reward; 0 only reports it.
	MaxRandomMeanReward float64
	// SplitSample is how many instances of each split the disjointness check compares [2000].
	SplitSample int
	// MinDistinct is how many distinct instances the train sample must hold [90% of SplitSample].
	MinDistinct int
	// FractionalReward allows rewards strictly between 0 and 1 (webshop); otherwise rewards are 0 or 1.
	FractionalReward bool
	// NegativeReward allows rewards down to -1.
	NegativeReward bool
	// InadmissibleMarker, if set, is text the observation of an inadmissible argument must contain
	// (alfworld: "not admissible"); families that accept any string (a shell command) leave it empty.
	InadmissibleMarker string
	// BadArgument makes an inadmissible call from the opening; nil replaces the first string argument of
	// the first admissible call. ok false skips the check.
	BadArgument func(task.Opening) (call proto.ToolCall, ok bool)
	// SolverCallsAdmissible requires every solver call to be one of the listed admissible calls.
	SolverCallsAdmissible bool
	// AdmissibleInstances is how many instances have every admissible call stepped at every state along
	// the solver's path [20].
	AdmissibleInstances int
}

func (o Options) withDefaults() Options {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	deff := func(v *float64, d float64) {
		if *v == 0 {
			*v = d
		}
	}
	if o.Seed == 0 {
		o.Seed = 1
	}
	def(&o.SolverEpisodes, 500)
	def(&o.RandomEpisodes, 500)
	def(&o.SplitSample, 2000)
	def(&o.MinDistinct, o.SplitSample*9/10)
	def(&o.AdmissibleInstances, 20)
	deff(&o.MinSolverSuccess, 1)
	deff(&o.MinSolverCalls, 3)
	deff(&o.MaxRandomSuccess, 0.15)
	return o
}

// RunConformance runs the suite against f.
func RunConformance(t *testing.T, f task.Family, opts Options) {
	t.Helper()
	o := opts.withDefaults()
	c := &suite{f: f, o: o}
	c.sigs = sync.OnceValues(c.signatures)
	t.Run("Tools", c.tools)
	t.Run("UnknownSplit", c.unknownSplit)
	t.Run("Determinism", c.determinism)
	t.Run("DisjointSplits", c.disjoint)
	t.Run("Distinct", c.distinct)
	t.Run("TurnLimit", c.turnLimit)
	t.Run("BadCalls", c.badCalls)
	t.Run("AdmissibleCalls", c.admissibleCalls)
	t.Run("RewardRange", c.rewardRange)
	t.Run("Solver", c.solver)
	t.Run("Random", c.random)
	t.Run("Concurrent", c.concurrent)
}

type suite struct {
	f    task.Family
	o    Options
	sigs func() (map[string][]string, error)
}

var toolName = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

// schema is the part of a JSON schema the suite understands.
type schema struct {
	Type       string                     `json:"type"`
	Properties map[string]json.RawMessage `json:"properties"`
	Required   []string                   `json:"required"`
}

func (s schema) propType(name string) string {
	var p struct {
		Type string `json:"type"`
	}
	_ = json.Unmarshal(s.Properties[name], &p) // an unparsable property reads as untyped
	return p.Type
}

func parseSchema(t proto.Tool) (schema, error) {
	var s schema
	if t.Parameters == "" {
		return s, errors.New("no parameters schema")
	}
	if err := json.Unmarshal([]byte(t.Parameters), &s); err != nil {
		return s, fmt.Errorf("parameters are not a JSON object schema: %w", err)
	}
	if s.Type != "object" {
		return s, fmt.Errorf("parameters type %q, want \"object\"", s.Type)
	}
	for _, r := range s.Required {
		if _, ok := s.Properties[r]; !ok {
			return s, fmt.Errorf("required %q is not a property", r)
		}
	}
	for name, raw := range s.Properties {
		var p map[string]any
		if err := json.Unmarshal(raw, &p); err != nil {
			return s, fmt.Errorf("property %q is not an object: %w", name, err)
		}
		if _, ok := p["type"].(string); !ok {
			return s, fmt.Errorf("property %q has no type", name)
		}
	}
	return s, nil
}

func (c *suite) schemas(t *testing.T) map[string]schema {
	t.Helper()
	out := map[string]schema{}
	for _, tl := range c.f.Tools() {
		s, err := parseSchema(tl)
		if err != nil {
			t.Fatalf("tool %q: %v", tl.Name, err)
		}
		out[tl.Name] = s
	}
	return out
}

func (c *suite) tools(t *testing.T) {
	if c.f.Name() == "" || c.f.MaxTurns() < 1 {
		t.Fatalf("name %q, max turns %d", c.f.Name(), c.f.MaxTurns())
	}
	tools := c.f.Tools()
	if len(tools) == 0 {
		t.Fatal("no tools")
	}
	seen := map[string]bool{}
	for _, tl := range tools {
		if !toolName.MatchString(tl.Name) {
			t.Errorf("tool name %q is not a valid OpenAI function name", tl.Name)
		}
		if seen[tl.Name] {
			t.Errorf("tool %q listed twice", tl.Name)
		}
		seen[tl.Name] = true
		if strings.TrimSpace(tl.Description) == "" {
			t.Errorf("tool %q has no description", tl.Name)
		}
		if _, err := parseSchema(tl); err != nil {
			t.Errorf("tool %q: %v", tl.Name, err)
		}
		fn, _ := tl.OpenAI()["function"].(map[string]any)
		if params, ok := fn["parameters"].(map[string]any); !ok || params["type"] != "object" {
			t.Errorf("tool %q renders parameters %v", tl.Name, fn["parameters"])
		}
	}
}

func (c *suite) unknownSplit(t *testing.T) {
	if _, err := c.f.New("validation", c.o.Seed); !errors.Is(err, proto.ErrUnknownSplit) {
		t.Errorf("New(\"validation\") error %v, want one wrapping proto.ErrUnknownSplit", err)
	}
	if _, _, err := task.NewSession(c.f, "", c.o.Seed); !errors.Is(err, proto.ErrUnknownSplit) {
		t.Errorf("NewSession(\"\") error %v, want one wrapping proto.ErrUnknownSplit", err)
	}
}

func (c *suite) newInstance(t testing.TB, split string, seed uint64) task.Instance {
	t.Helper()
	inst, err := c.f.New(split, seed)
	if err != nil {
		t.Fatalf("New(%s, %d): %v", split, seed, err)
	}
	return inst
}

// determinism: two instances of one (split, seed), both made before either is stepped, give the same
// opening, results and solver calls for one call sequence mixing solver and random admissible calls. The
// second is stepped after the first's whole episode, so a family that serves later sessions of an
// instance from what it generated for the first (task.Recent) is checked to keep their play apart.
func (c *suite) determinism(t *testing.T) {
	for _, split := range []string{proto.SplitTrain, proto.SplitHeldout} {
		for i := range uint64(20) {
			seed := c.o.Seed + i
			a, b := c.newInstance(t, split, seed), c.newInstance(t, split, seed)
			oa, ob := a.Start(), b.Start()
			if !reflect.DeepEqual(oa, ob) {
				t.Fatalf("%s seed %d: openings differ:\n%+v\n%+v", split, seed, oa, ob)
			}
			rng := rand.New(rand.NewPCG(seed, 7))
			var seq []proto.ToolCall
			var got []task.Result
			adm := oa.Admissible
			for range c.f.MaxTurns() {
				call := a.Solve()
				if rng.IntN(2) == 0 && len(adm) > 0 {
					call = adm[rng.IntN(len(adm))]
				}
				r := a.Step(call)
				seq, got = append(seq, call), append(got, r)
				if r.Done {
					break
				}
				adm = r.Admissible
			}
			for j, call := range seq {
				if r := b.Step(call); !reflect.DeepEqual(r, got[j]) {
					t.Fatalf("%s seed %d step %d (%s): results differ:\n%+v\n%+v", split, seed, j, call.Text(), got[j], r)
				}
			}
			if c2, c1 := b.Solve(), a.Solve(); c1 != c2 {
				t.Fatalf("%s seed %d: solver calls differ after the same steps: %v vs %v", split, seed, c1, c2)
			}
		}
	}
}

// signature is an instance as an agent can know it: the opening and the solver's whole trajectory.
func (c *suite) signature(split string, seed uint64) (string, error) {
	s, open, err := task.NewSession(c.f, split, seed)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s\n%s\n", open.Instruction, open.Observation)
	for !s.Done() {
		call := s.Solve()
		r, err := s.Step(call)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(&b, "> %s %s\n%s\n", call.Name, call.Arguments, r.Observation)
	}
	return b.String(), nil
}

// signatures of SplitSample instances of each split, computed once for DisjointSplits and Distinct.
func (c *suite) signatures() (map[string][]string, error) {
	out := map[string][]string{}
	for _, split := range []string{proto.SplitTrain, proto.SplitHeldout} {
		for i := range c.o.SplitSample {
			sig, err := c.signature(split, c.o.Seed+uint64(i))
			if err != nil {
				return nil, err
			}
			out[split] = append(out[split], sig)
		}
	}
	return out, nil
}

func (c *suite) disjoint(t *testing.T) {
	sigs, err := c.sigs()
	if err != nil {
		t.Fatal(err)
	}
	train := map[string]int{}
	for i, s := range sigs[proto.SplitTrain] {
		train[s] = i
	}
	shared := 0
	for i, s := range sigs[proto.SplitHeldout] {
		if j, ok := train[s]; ok {
			if shared == 0 {
				t.Errorf("heldout seed %d is train seed %d:\n%s", c.o.Seed+uint64(i), c.o.Seed+uint64(j), s)
			}
			shared++
		}
	}
	if shared > 0 {
		t.Errorf("%d of %d held-out instances also occur in train", shared, len(sigs[proto.SplitHeldout]))
	}
}

func (c *suite) distinct(t *testing.T) {
	sigs, err := c.sigs()
	if err != nil {
		t.Fatal(err)
	}
	for _, split := range []string{proto.SplitTrain, proto.SplitHeldout} {
		n := len(distinctOf(sigs[split]))
		t.Logf("%s: %d distinct instances among %d seeds", split, n, len(sigs[split]))
		if n < c.o.MinDistinct {
			t.Errorf("%s: %d distinct instances among %d seeds, want at least %d", split, n, len(sigs[split]), c.o.MinDistinct)
		}
	}
}

func distinctOf(ss []string) map[string]bool {
	m := make(map[string]bool, len(ss))
	for _, s := range ss {
		m[s] = true
	}
	return m
}

// badCall is a call the family must answer with an error observation containing marker.
type badCall struct {
	what   string
	call   proto.ToolCall
	marker []string
}

// badCalls builds one call per kind of mistake from the tools and the opening.
func (c *suite) badCallsFor(t *testing.T, open task.Opening) []badCall {
	t.Helper()
	tools := c.f.Tools()
	first := tools[0].Name
	out := []badCall{
		{"unknown tool", proto.ToolCall{Name: "no_such_tool", Arguments: "{}"}, []string{UnknownToolMarker, "no_such_tool"}},
		{"invalid JSON", proto.ToolCall{Name: first, Arguments: `{"`}, []string{BadArgumentsMarker}},
	}
	for _, tl := range tools {
		s, _ := parseSchema(tl) // Tools checks the schemas
		if len(s.Required) == 0 {
			continue
		}
		req := s.Required[0]
		out = append(out, badCall{"missing argument", proto.ToolCall{Name: tl.Name, Arguments: "{}"}, []string{BadArgumentsMarker}})
		var wrong any = 12345
		if ty := s.propType(req); ty == "number" || ty == "integer" || ty == "boolean" {
			wrong = "not a " + ty
		}
		args, _ := json.Marshal(map[string]any{req: wrong})
		out = append(out, badCall{"wrong-typed argument", proto.ToolCall{Name: tl.Name, Arguments: string(args)}, []string{BadArgumentsMarker}})
		break
	}
	bad, ok := proto.ToolCall{}, false
	if c.o.BadArgument != nil {
		bad, ok = c.o.BadArgument(open)
	} else {
		bad, ok = replaceStringArg(open.Admissible)
	}
	if ok {
		var m []string
		if c.o.InadmissibleMarker != "" {
			m = []string{c.o.InadmissibleMarker}
		}
		out = append(out, badCall{"inadmissible argument", bad, m})
	}
	return out
}

// replaceStringArg turns the first admissible call with a string argument into one naming nothing that exists.
func replaceStringArg(adm []proto.ToolCall) (proto.ToolCall, bool) {
	for _, call := range adm {
		var args map[string]any
		if json.Unmarshal([]byte(call.Arguments), &args) != nil {
			continue
		}
		keys := make([]string, 0, len(args))
		for k := range args {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			if _, ok := args[k].(string); ok {
				args[k] = "take zorkmid 9 from nowhere 42"
				b, _ := json.Marshal(args)
				return proto.ToolCall{Name: call.Name, Arguments: string(b)}, true
			}
		}
	}
	return proto.ToolCall{}, false
}

// badCalls: each bad call gets an observation saying what is wrong, costs a turn, changes nothing, ends nothing.
func (c *suite) badCalls(t *testing.T) {
	for i := range uint64(10) {
		seed := c.o.Seed + i
		s, open, err := task.NewSession(c.f, proto.SplitHeldout, seed)
		if err != nil {
			t.Fatal(err)
		}
		before := s.Solve()
		for _, bc := range c.badCallsFor(t, open) {
			if s.Done() {
				break
			}
			turn := s.Turn()
			r, err := s.Step(bc.call)
			if err != nil {
				t.Fatalf("seed %d %s: %v", seed, bc.what, err)
			}
			if s.Turn() != turn+1 {
				t.Errorf("seed %d %s: turn %d -> %d, want it to count", seed, bc.what, turn, s.Turn())
			}
			if r.Done && r.Status != proto.StatusTurnLimit {
				t.Errorf("seed %d %s (%s %s) ended the game: %+v", seed, bc.what, bc.call.Name, bc.call.Arguments, r)
			}
			if r.Reward != 0 {
				t.Errorf("seed %d %s: reward %v", seed, bc.what, r.Reward)
			}
			if strings.TrimSpace(r.Observation) == "" {
				t.Errorf("seed %d %s: empty observation", seed, bc.what)
			}
			for _, m := range bc.marker {
				if !strings.Contains(strings.ToLower(r.Observation), strings.ToLower(m)) {
					t.Errorf("seed %d %s (%s %s): observation %q does not contain %q", seed, bc.what, bc.call.Name, bc.call.Arguments, r.Observation, m)
				}
			}
			if !r.Done && len(r.Admissible) == 0 {
				t.Errorf("seed %d %s: no admissible calls after the error", seed, bc.what)
			}
		}
		if after := s.Solve(); !s.Done() && after != before {
			t.Errorf("seed %d: bad calls changed the solver's next call from %v to %v", seed, before, after)
		}
	}
}

// turnLimit: calls that never finish end the session at MaxTurns with turn-limit and reward 0, after which
// Step fails with proto.ErrSessionDone.
func (c *suite) turnLimit(t *testing.T) {
	s, _, err := task.NewSession(c.f, proto.SplitHeldout, c.o.Seed)
	if err != nil {
		t.Fatal(err)
	}
	idle := proto.ToolCall{Name: "no_such_tool", Arguments: "{}"}
	for turn := 1; turn <= c.f.MaxTurns(); turn++ {
		r, err := s.Step(idle)
		if err != nil {
			t.Fatalf("turn %d: %v", turn, err)
		}
		last := turn == c.f.MaxTurns()
		if r.Done != last {
			t.Fatalf("turn %d of %d: done %v", turn, c.f.MaxTurns(), r.Done)
		}
		if last && (r.Status != proto.StatusTurnLimit || r.Reward != 0) {
			t.Fatalf("last turn: status %q reward %v, want %q and 0", r.Status, r.Reward, proto.StatusTurnLimit)
		}
		if !last && r.Status != proto.StatusRunning {
			t.Fatalf("turn %d: status %q, want %q", turn, r.Status, proto.StatusRunning)
		}
	}
	if _, err := s.Step(s.Solve()); !errors.Is(err, proto.ErrSessionDone) {
		t.Fatalf("step after the limit: error %v, want one wrapping proto.ErrSessionDone", err)
	}
}

// admissibleCalls: every listed call names a tool with well-formed arguments, and stepping it (from a
// fresh instance replayed to that state) never draws an unknown-tool, bad-arguments or inadmissible reply.
func (c *suite) admissibleCalls(t *testing.T) {
	schemas := c.schemas(t)
	for i := range uint64(c.o.AdmissibleInstances) {
		seed := c.o.Seed + i
		inst := c.newInstance(t, proto.SplitHeldout, seed)
		adm := inst.Start().Admissible
		var path []proto.ToolCall
		for range c.f.MaxTurns() {
			if len(adm) == 0 {
				t.Fatalf("seed %d after %d calls: no admissible calls while running", seed, len(path))
			}
			for _, call := range adm {
				c.checkCallShape(t, schemas, call)
				probe := c.newInstance(t, proto.SplitHeldout, seed)
				probe.Start()
				for _, p := range path {
					probe.Step(p)
				}
				r := probe.Step(call)
				c.checkResult(t, r)
				low := strings.ToLower(r.Observation)
				for _, m := range []string{UnknownToolMarker, BadArgumentsMarker, strings.ToLower(c.o.InadmissibleMarker)} {
					if m != "" && strings.Contains(low, m) {
						t.Errorf("seed %d after %d calls: admissible %s %s got %q", seed, len(path), call.Name, call.Arguments, r.Observation)
					}
				}
			}
			call := inst.Solve()
			r := inst.Step(call)
			path = append(path, call)
			if r.Done {
				break
			}
			adm = r.Admissible
		}
	}
}

// checkCallShape checks that a call names a tool and its arguments fit that tool's schema.
func (c *suite) checkCallShape(t *testing.T, schemas map[string]schema, call proto.ToolCall) {
	t.Helper()
	s, ok := schemas[call.Name]
	if !ok {
		t.Errorf("admissible call names unknown tool %q", call.Name)
		return
	}
	var args map[string]json.RawMessage
	if err := json.Unmarshal([]byte(call.Arguments), &args); err != nil || args == nil {
		t.Errorf("admissible %s arguments %q are not a JSON object", call.Name, call.Arguments)
		return
	}
	for _, r := range s.Required {
		if _, ok := args[r]; !ok {
			t.Errorf("admissible %s %s misses required %q", call.Name, call.Arguments, r)
		}
	}
	for k := range args {
		if _, ok := s.Properties[k]; !ok {
			t.Errorf("admissible %s %s has argument %q not in the schema", call.Name, call.Arguments, k)
		}
	}
}

// checkResult checks one result's reward and status.
func (c *suite) checkResult(t *testing.T, r task.Result) {
	t.Helper()
	lo := 0.0
	if c.o.NegativeReward {
		lo = -1
	}
	switch {
	case math.IsNaN(r.Reward) || math.IsInf(r.Reward, 0) || r.Reward < lo || r.Reward > 1:
		t.Errorf("reward %v outside [%v, 1]", r.Reward, lo)
	case !c.o.FractionalReward && r.Reward != 0 && r.Reward != 1 && r.Reward != -1:
		t.Errorf("reward %v, want a whole number (set FractionalReward if partial credit is meant)", r.Reward)
	case !r.Done && r.Reward != 0:
		t.Errorf("reward %v before the end", r.Reward)
	case r.Done && !slices.Contains([]string{proto.StatusCompleted, proto.StatusInvalidAction, proto.StatusTurnLimit}, r.Status):
		t.Errorf("finished with status %q", r.Status)
	case !r.Done && r.Status != proto.StatusRunning:
		t.Errorf("running with status %q", r.Status)
	}
	for k, v := range r.Metrics {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			t.Errorf("metric %s = %v", k, v)
		}
	}
}

// rewardRange plays solver and random episodes through sessions and checks every result.
func (c *suite) rewardRange(t *testing.T) {
	for i := range uint64(100) {
		seed := c.o.Seed + i
		rng := rand.New(rand.NewPCG(seed, 11))
		for _, random := range []bool{false, true} {
			s, open, err := task.NewSession(c.f, proto.SplitHeldout, seed)
			if err != nil {
				t.Fatal(err)
			}
			adm := open.Admissible
			for !s.Done() {
				call := s.Solve()
				if random {
					call = adm[rng.IntN(len(adm))]
				}
				r, err := s.Step(call)
				if err != nil {
					t.Fatal(err)
				}
				c.checkResult(t, r)
				if !r.Done && len(r.Admissible) == 0 {
					t.Fatalf("seed %d turn %d: no admissible calls while running", seed, s.Turn())
				}
				adm = r.Admissible
			}
		}
	}
}

// solver: the scripted solver wins every held-out instance, in at least MinSolverCalls calls on average.
func (c *suite) solver(t *testing.T) {
	if c.o.SolverCallsAdmissible {
		for i := range uint64(100) {
			s, open, err := task.NewSession(c.f, proto.SplitHeldout, c.o.Seed+i)
			if err != nil {
				t.Fatal(err)
			}
			adm := open.Admissible
			for !s.Done() {
				call := s.Solve()
				if !slices.Contains(adm, call) {
					t.Fatalf("seed %d turn %d: solver call %s %s is not admissible", c.o.Seed+i, s.Turn(), call.Name, call.Arguments)
				}
				r, err := s.Step(call)
				if err != nil {
					t.Fatal(err)
				}
				adm = r.Admissible
			}
		}
	}
	b, err := task.SolverRate(c.f, proto.SplitHeldout, c.o.SolverEpisodes, c.o.Seed)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("solver on %d held-out: success %.3f, mean reward %.3f, mean calls %.2f", b.Episodes, b.SuccessRate, b.MeanReward, b.MeanTurns)
	if b.SuccessRate < c.o.MinSolverSuccess {
		t.Errorf("solver success %.3f, want at least %.3f", b.SuccessRate, c.o.MinSolverSuccess)
	}
	if b.MeanTurns < c.o.MinSolverCalls {
		t.Errorf("solver needs %.2f calls on average, want at least %.2f", b.MeanTurns, c.o.MinSolverCalls)
	}
}

// random: a uniformly random policy over the admissible calls mostly loses.
func (c *suite) random(t *testing.T) {
	b, err := task.RandomRate(c.f, proto.SplitHeldout, c.o.RandomEpisodes, c.o.Seed)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("random on %d held-out: success %.3f, mean reward %.3f, mean calls %.2f", b.Episodes, b.SuccessRate, b.MeanReward, b.MeanTurns)
	if b.SuccessRate > c.o.MaxRandomSuccess {
		t.Errorf("random success %.3f, want at most %.3f", b.SuccessRate, c.o.MaxRandomSuccess)
	}
	if c.o.MaxRandomMeanReward > 0 && b.MeanReward > c.o.MaxRandomMeanReward {
		t.Errorf("random mean reward %.3f, want at most %.3f", b.MeanReward, c.o.MaxRandomMeanReward)
	}
}

// concurrent: one family value serves many goroutines, each with its own instances (run with -race).
func (c *suite) concurrent(t *testing.T) {
	const workers, each = 8, 10
	want := make([]task.Baseline, workers)
	for w := range workers {
		b, err := task.SolverRate(c.f, proto.SplitTrain, each, c.o.Seed+uint64(w*each))
		if err != nil {
			t.Fatal(err)
		}
		want[w] = b
	}
	got := make([]task.Baseline, workers)
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			got[w], errs[w] = task.SolverRate(c.f, proto.SplitTrain, each, c.o.Seed+uint64(w*each))
		})
	}
	wg.Wait()
	for w := range workers {
		if errs[w] != nil {
			t.Fatal(errs[w])
		}
		if got[w] != want[w] {
			t.Errorf("worker %d: concurrent %+v, sequential %+v", w, got[w], want[w])
		}
	}
}

// BenchStep measures Step on random admissible calls; making new instances is not timed.
func BenchStep(b *testing.B, f task.Family) {
	rng := rand.New(rand.NewPCG(1, 2))
	seed := uint64(0)
	next := func() (task.Instance, []proto.ToolCall) {
		seed++
		inst, err := f.New(proto.SplitTrain, seed)
		if err != nil {
			b.Fatal(err)
		}
		return inst, inst.Start().Admissible
	}
	inst, adm := next()
	turn := 0
	b.ReportAllocs()
	for b.Loop() {
		r := inst.Step(adm[rng.IntN(len(adm))])
		turn++
		if r.Done || turn >= f.MaxTurns() || len(r.Admissible) == 0 {
			b.StopTimer()
			inst, adm = next()
			turn = 0
			b.StartTimer()
			continue
		}
		adm = r.Admissible
	}
}

// BenchNew measures generating and starting an instance.
func BenchNew(b *testing.B, f task.Family) {
	seed := uint64(0)
	b.ReportAllocs()
	for b.Loop() {
		seed++
		inst, err := f.New(proto.SplitTrain, seed)
		if err != nil {
			b.Fatal(err)
		}
		inst.Start()
	}
}

// Sessions makes n instances of each of the training seeds 0 .. seeds-1, the way an env host makes a
// group's sessions: for a family that keeps what it generated for an instance (task.Recent), the
// first of each seed's is generated and the others served from it.
func Sessions(t testing.TB, f task.Family, seeds, n int) [][]task.Instance {
	t.Helper()
	out := make([][]task.Instance, seeds)
	for seed := range out {
		for range n {
			inst, err := f.New(proto.SplitTrain, uint64(seed))
			if err != nil {
				t.Fatalf("New(%s, %d): %v", proto.SplitTrain, seed, err)
			}
			out[seed] = append(out[seed], inst)
		}
	}
	return out
}
