package policy

import (
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

func testInput() Input {
	return Input{
		Task:        "alfworld",
		Instruction: "Your task is to: put a clean mug in cabinet 2.",
		Observation: "You arrive at sinkbasin 1. On the sinkbasin 1, you see a mug 1 and a spoon 3.",
		History:     []string{"go to countertop 1", "take mug 1 from countertop 1", "go to sinkbasin 1"},
		Candidates: []string{"clean mug 1 with sinkbasin 1", "go to cabinet 2", "go to countertop 1",
			"take spoon 3 from sinkbasin 1", "look", "inventory"},
	}
}

func newModel(t testing.TB, cfg Config) *Model {
	t.Helper()
	cfg.SetDefaults()
	m, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name    string
		given   Config
		wantErr bool
	}{
		{"defaults", Config{Bits: 18, Temperature: 1, InitScale: 0.01}, false},
		{"zero init", Config{Bits: 10, Temperature: 0.5}, false},
		{"bits too small", Config{Bits: 9, Temperature: 1}, true},
		{"bits too large", Config{Bits: 27, Temperature: 1}, true},
		{"zero temperature", Config{Bits: 18}, true},
		{"NaN temperature", Config{Bits: 18, Temperature: math.NaN()}, true},
		{"infinite temperature", Config{Bits: 18, Temperature: math.Inf(1)}, true},
		{"negative init", Config{Bits: 18, Temperature: 1, InitScale: -1}, true},
		{"NaN init", Config{Bits: 18, Temperature: 1, InitScale: math.NaN()}, true},
	} {
		err := tc.given.Validate()
		if (err != nil) != tc.wantErr || err != nil && !errors.Is(err, ErrConfig) {
			t.Errorf("%s: Validate() = %v, want error %v", tc.name, err, tc.wantErr)
		}
	}
	var c Config
	c.SetDefaults()
	if c != (Config{Bits: DefaultBits, Temperature: DefaultTemperature, InitScale: DefaultInitScale}) {
		t.Errorf("SetDefaults() = %+v", c)
	}
	if _, err := New(Config{}); err == nil {
		t.Error("New(Config{}) accepted Bits 0")
	}
}

func TestNewIsDeterministic(t *testing.T) {
	a, b := newModel(t, Config{Seed: 7}), newModel(t, Config{Seed: 7})
	if !slices.Equal(a.Weights, b.Weights) {
		t.Fatal("two models with the same seed differ")
	}
	if c := newModel(t, Config{Seed: 8}); slices.Equal(a.Weights, c.Weights) {
		t.Fatal("models with different seeds are equal")
	}
	if a.NumParams() != 1<<DefaultBits {
		t.Fatalf("NumParams() = %d", a.NumParams())
	}
	zero, err := New(Config{Bits: 12, Temperature: 1}) // InitScale 0 after SetDefaults would be 0.01
	if err != nil {
		t.Fatal(err)
	}
	if p := zero.Probs(testInput()); math.Abs(p[0]-1/6.0) > 1e-12 {
		t.Fatalf("all-zero start is not uniform: %v", p)
	}
}

// TestGoldenScores pins the feature hashing: if it fails, saved weights mean something else now.
func TestGoldenScores(t *testing.T) {
	m := newModel(t, Config{Seed: 1, InitScale: 0.1})
	got := m.Scores(testInput())
	want := []float64{-0.6587644423724793, -0.020605156498086363, -0.2978170205326044, -0.8214551659273077, -0.3260848888847274, -0.4796223326742693}
	for i := range want {
		if math.Abs(got[i]-want[i]) > 1e-9 {
			t.Fatalf("Scores() = %#v, want %#v", got, want)
		}
	}
}

func TestProbs(t *testing.T) {
	m := newModel(t, Config{Seed: 3, InitScale: 0.3})
	in := testInput()
	s := m.Scores(in)
	for _, temp := range []float64{0.5, 1, 3} {
		m.Temperature = temp
		p := m.Probs(in)
		var sum float64
		for j := range p {
			sum += p[j]
			// softmax ratios: p_j / p_0 = exp((s_j - s_0) / T)
			if want := math.Exp((s[j] - s[0]) / temp); math.Abs(p[j]/p[0]-want) > 1e-9*want {
				t.Errorf("T=%v: p[%d]/p[0] = %v, want %v", temp, j, p[j]/p[0], want)
			}
			if lp := m.LogProb(in, j); math.Abs(lp-math.Log(p[j])) > 1e-12 {
				t.Errorf("T=%v: LogProb(%d) = %v, want %v", temp, j, lp, math.Log(p[j]))
			}
		}
		if math.Abs(sum-1) > 1e-12 {
			t.Errorf("T=%v: probabilities sum to %v", temp, sum)
		}
	}
	m.Temperature = 1
	hot := m.Entropy(in)
	m.Temperature = 0.2
	if cold := m.Entropy(in); !(cold < hot) {
		t.Errorf("entropy at T=0.2 is %v, not below %v at T=1", cold, hot)
	}
}

func TestProbsStayFiniteWithHugeScores(t *testing.T) {
	m := newModel(t, Config{Seed: 3, InitScale: 1e4})
	p := m.Probs(testInput())
	var sum float64
	for _, x := range p {
		if math.IsNaN(x) {
			t.Fatalf("Probs() = %v", p)
		}
		sum += x
	}
	if math.Abs(sum-1) > 1e-12 {
		t.Fatalf("Probs() = %v", p)
	}
}

func TestSampleMatchesProbs(t *testing.T) {
	m := newModel(t, Config{Seed: 5, InitScale: 0.5})
	in := Input{Instruction: "heat an egg", Candidates: []string{"heat egg", "cool egg", "go to microwave 1", "look"}}
	p := m.Probs(in)
	rng := rand.New(rand.NewPCG(1, 1))
	const n = 20000
	counts := make([]float64, len(p))
	for range n {
		c, lp := m.Sample(in, rng)
		if math.Abs(lp-math.Log(p[c])) > 1e-12 {
			t.Fatalf("Sample logprob %v, want %v", lp, math.Log(p[c]))
		}
		counts[c]++
	}
	for j := range p {
		if sd := math.Sqrt(p[j] * (1 - p[j]) / n); math.Abs(counts[j]/n-p[j]) > 6*sd+1e-3 {
			t.Errorf("candidate %d sampled %.4f of the time, probability %.4f", j, counts[j]/n, p[j])
		}
	}
	g, glp := m.Greedy(in)
	if g != slices.Index(p, slices.Max(p)) || math.Abs(glp-math.Log(p[g])) > 1e-12 {
		t.Errorf("Greedy() = %d, %v for probabilities %v", g, glp, p)
	}
	if c, _ := m.Sample(in, nil); c < 0 || c >= len(p) {
		t.Errorf("Sample with a nil rng chose %d", c)
	}
}

// numGrad differentiates f with respect to weight k by central differences.
func numGrad(m *Model, k int, f func() float64) float64 {
	const eps = 1e-3
	w := m.Weights[k]
	up, down := w+eps, w-eps
	m.Weights[k] = up
	fu := f()
	m.Weights[k] = down
	fd := f()
	m.Weights[k] = w
	return (fu - fd) / float64(up-down)
}

// checkGrad compares an accumulated gradient with finite differences on its largest coordinates and
// on a few random touched ones.
func checkGrad(t *testing.T, m *Model, grad []float64, f func() float64) {
	t.Helper()
	var touched []int
	for k, g := range grad {
		if g != 0 {
			touched = append(touched, k)
		}
	}
	if len(touched) < 100 {
		t.Fatalf("only %d coordinates touched", len(touched))
	}
	slices.SortFunc(touched, func(a, b int) int { return -cmpAbs(grad[a], grad[b]) })
	check := touched[:10]
	rng := rand.New(rand.NewPCG(2, 2))
	for range 10 {
		check = append(check, touched[rng.IntN(len(touched))])
	}
	for _, k := range check {
		if num := numGrad(m, k, f); math.Abs(num-grad[k]) > 1e-5+1e-3*math.Abs(num) {
			t.Errorf("coordinate %d: analytic %.8g, numeric %.8g", k, grad[k], num)
		}
	}
}

func cmpAbs(a, b float64) int {
	switch a, b = math.Abs(a), math.Abs(b); {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func TestAccumulateGradMatchesFiniteDifferences(t *testing.T) {
	m := newModel(t, Config{Seed: 11, InitScale: 0.2, Temperature: 0.7})
	in := testInput()
	const choice, coef = 2, 1.5
	grad := make([]float64, m.NumParams())
	lp := m.AccumulateGrad(in, choice, coef, grad)
	if want := m.LogProb(in, choice); lp != want {
		t.Fatalf("AccumulateGrad returned %v, LogProb %v", lp, want)
	}
	checkGrad(t, m, grad, func() float64 { return coef * m.LogProb(in, choice) })
}

func TestAccumulateEntropyGradMatchesFiniteDifferences(t *testing.T) {
	m := newModel(t, Config{Seed: 12, InitScale: 0.2, Temperature: 1.3})
	in := testInput()
	const coef = -0.8
	grad := make([]float64, m.NumParams())
	h := m.AccumulateEntropyGrad(in, coef, grad)
	if want := m.Entropy(in); math.Abs(h-want) > 1e-12 {
		t.Fatalf("AccumulateEntropyGrad returned %v, Entropy %v", h, want)
	}
	checkGrad(t, m, grad, func() float64 { return coef * m.Entropy(in) })
}

// AccumulateTurn is the policy gradient and the entropy gradient in one pass: the same sum as the two
// separate calls, and the finite differences of coef·log π + entropyCoef·H.
func TestAccumulateTurnIsBothGradientsInOnePass(t *testing.T) {
	m := newModel(t, Config{Seed: 13, InitScale: 0.2, Temperature: 0.9})
	in := testInput()
	const choice, entCoef = 1, -0.05
	coef := func(lp float64) float64 { return 0.7 * math.Exp(lp) } // depends on the log-probability, as PPO's does
	grad := make([]float64, m.NumParams())
	lp, h := m.AccumulateTurn(in, choice, coef, entCoef, grad)
	if want := m.LogProb(in, choice); math.Abs(lp-want) > 1e-12 {
		t.Fatalf("log-probability %v, want %v", lp, want)
	}
	if want := m.Entropy(in); math.Abs(h-want) > 1e-12 {
		t.Fatalf("entropy %v, want %v", h, want)
	}
	sep := make([]float64, m.NumParams())
	m.AccumulateGrad(in, choice, coef(lp), sep)
	m.AccumulateEntropyGrad(in, entCoef, sep)
	for k := range grad {
		if math.Abs(grad[k]-sep[k]) > 1e-12+1e-9*math.Abs(sep[k]) {
			t.Fatalf("coordinate %d: one pass %v, separate calls %v", k, grad[k], sep[k])
		}
	}
	c := coef(lp)
	checkGrad(t, m, grad, func() float64 { return c*m.LogProb(in, choice) + entCoef*m.Entropy(in) })

	none := make([]float64, m.NumParams())
	if lp, h := m.AccumulateTurn(in, len(in.Candidates), coef, entCoef, none); !math.IsNaN(lp) || !math.IsNaN(h) {
		t.Fatalf("bad choice: %v, %v", lp, h)
	}
	if lp, _ := m.AccumulateTurn(in, 0, coef, entCoef, none[:10]); !math.IsNaN(lp) {
		t.Fatal("short gradient accepted")
	}
	for _, g := range none {
		if g != 0 {
			t.Fatal("a refused call added to the gradient")
		}
	}
}

func TestBadInputDoesNotPanic(t *testing.T) {
	m := newModel(t, Config{Bits: 12})
	empty := testInput()
	empty.Candidates = nil
	if c, lp := m.Sample(empty, nil); c != -1 || lp != 0 {
		t.Errorf("Sample(no candidates) = %d, %v", c, lp)
	}
	if c, lp := m.Greedy(empty); c != -1 || lp != 0 {
		t.Errorf("Greedy(no candidates) = %d, %v", c, lp)
	}
	if s := m.Scores(empty); len(s) != 0 {
		t.Errorf("Scores(no candidates) = %v", s)
	}
	if h := m.Entropy(empty); h != 0 {
		t.Errorf("Entropy(no candidates) = %v", h)
	}
	grad := make([]float64, m.NumParams())
	in := testInput()
	for _, choice := range []int{-1, len(in.Candidates)} {
		if lp := m.LogProb(in, choice); !math.IsNaN(lp) {
			t.Errorf("LogProb(choice %d) = %v, want NaN", choice, lp)
		}
		if lp := m.AccumulateGrad(in, choice, 1, grad); !math.IsNaN(lp) {
			t.Errorf("AccumulateGrad(choice %d) = %v, want NaN", choice, lp)
		}
	}
	if lp := m.AccumulateGrad(in, 0, 1, grad[:10]); !math.IsNaN(lp) {
		t.Errorf("AccumulateGrad(short grad) = %v, want NaN", lp)
	}
	if h := m.AccumulateEntropyGrad(in, 1, grad[:10]); !math.IsNaN(h) {
		t.Errorf("AccumulateEntropyGrad(short grad) = %v, want NaN", h)
	}
	if slices.ContainsFunc(grad, func(g float64) bool { return g != 0 }) {
		t.Error("a refused call changed the gradient")
	}
	var zero Model
	if s := zero.Scores(in); len(s) != len(in.Candidates) {
		t.Errorf("zero Model Scores() = %v", s)
	}
	if c, _ := zero.Greedy(in); c != 0 {
		t.Errorf("zero Model Greedy() = %d", c)
	}
	weird := Input{Instruction: "日本語 ÄÖÜ \x00\xff", Observation: "", History: make([]string, 50),
		Candidates: []string{"", "\xff\xfe", "go   to  1", "GO TO 1"}}
	if p := m.Probs(weird); len(p) != 4 || math.IsNaN(p[0]) {
		t.Errorf("Probs(odd text) = %v", p)
	}
}

func TestClone(t *testing.T) {
	m := newModel(t, Config{Bits: 12})
	c := m.Clone()
	c.Weights[0]++
	if m.Weights[0] == c.Weights[0] || c.Bits != m.Bits || c.Temperature != m.Temperature {
		t.Fatal("Clone shares weights or lost fields")
	}
}

// A prepared input gives what the input itself gives, after the weights move too (the features do not
// depend on them), and only to models of the shape it was prepared for.
func TestPreparedMatchesInput(t *testing.T) {
	m := newModel(t, Config{Seed: 14, InitScale: 0.2, Temperature: 0.8})
	in := testInput()
	p := m.Prepare(in)
	coef := func(lp float64) float64 { return 0.4 - math.Exp(lp) }
	for step := range 3 {
		for choice := range in.Candidates {
			if got, want := m.LogProbPrepared(p, choice), m.LogProb(in, choice); got != want {
				t.Fatalf("step %d choice %d: prepared %v, input %v", step, choice, got, want)
			}
		}
		got, want := make([]float64, m.NumParams()), make([]float64, m.NumParams())
		lp, h := m.AccumulatePrepared(p, 2, coef, -0.03, got)
		wlp, wh := m.AccumulateTurn(in, 2, coef, -0.03, want)
		if lp != wlp || h != wh || !slices.Equal(got, want) {
			t.Fatalf("step %d: prepared (%v, %v), input (%v, %v), gradients equal %v", step, lp, h, wlp, wh, slices.Equal(got, want))
		}
		for k := range m.Weights {
			m.Weights[k] += float32(0.1 * got[k])
		}
	}
	if !math.IsNaN(m.LogProbPrepared(p, len(in.Candidates))) || !math.IsNaN(m.LogProbPrepared(nil, 0)) {
		t.Fatal("a bad choice or no input gave a log-probability")
	}
	salted := newModel(t, Config{Seed: 14, InitScale: 0.2, TaskSalt: true})
	if !math.IsNaN(salted.LogProbPrepared(p, 0)) {
		t.Fatal("a model of another shape used the prepared features")
	}
	if lp, _ := salted.AccumulatePrepared(p, 0, coef, 0, make([]float64, salted.NumParams())); !math.IsNaN(lp) {
		t.Fatal("a model of another shape accumulated from the prepared features")
	}
}
