package policy

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// benchInput is an ALFWorld-sized turn: a one-line goal, a room description and 20 admissible calls.
func benchInput() Input {
	var cands []string
	for i := 1; i <= 6; i++ {
		cands = append(cands, fmt.Sprintf("go to cabinet %d", i), fmt.Sprintf("open drawer %d", i))
	}
	cands = append(cands, "go to countertop 1", "go to fridge 1", "go to sinkbasin 1", "go to stoveburner 2",
		"take mug 1 from countertop 1", "put apple 2 in/on microwave 1", "inventory", "look")
	return Input{
		Task:        "alfworld",
		Instruction: "Your task is to: put a cool mug in cabinet.",
		Observation: "You arrive at countertop 1. On the countertop 1, you see a apple 2, a bread 1, a butterknife 3, " +
			"a dishsponge 1, a mug 1, a peppershaker 2, and a spatula 1. You are in the middle of a room. Looking " +
			"quickly around you, you see a cabinet 6, a cabinet 5, a cabinet 4, a cabinet 3, a cabinet 2, a cabinet 1, " +
			"a coffeemachine 1, a countertop 3, a countertop 2, a countertop 1, a drawer 3, a drawer 2, a drawer 1.",
		History:    []string{"go to fridge 1", "open fridge 1", "close fridge 1", "go to countertop 1"},
		Candidates: cands,
	}
}

func benchModel(b *testing.B) *Model {
	cfg := Config{Seed: 1}
	cfg.SetDefaults()
	m, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	return m
}

func BenchmarkScores(b *testing.B) {
	m, in := benchModel(b), benchInput()
	b.ReportAllocs()
	for b.Loop() {
		m.Scores(in)
	}
}

func BenchmarkAccumulateGrad(b *testing.B) {
	m, in := benchModel(b), benchInput()
	grad := make([]float64, m.NumParams())
	b.ReportAllocs()
	for b.Loop() {
		m.AccumulateGrad(in, 3, 0.5, grad)
	}
}

// BenchmarkAccumulatePrepared is one turn of a trainer's later epochs: the features were extracted once
// for the batch, so only the weights' passes remain.
func BenchmarkAccumulatePrepared(b *testing.B) {
	m, in := benchModel(b), benchInput()
	p := m.Prepare(in)
	grad := make([]float64, m.NumParams())
	coef := func(float64) float64 { return 0.5 }
	b.ReportAllocs()
	for b.Loop() {
		m.AccumulatePrepared(p, 3, coef, 0.01, grad)
	}
}

func BenchmarkAdamStep(b *testing.B) {
	m := benchModel(b)
	opt := NewAdam(m.NumParams(), AdamConfig{})
	grad := make([]float64, m.NumParams())
	for i := range grad {
		grad[i] = float64(i%7-3) * 1e-3
	}
	b.ReportAllocs()
	for b.Loop() {
		if err := opt.Step(m.Weights, grad); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSample is one acting turn of rollout: a forward pass and a softmax draw.
func BenchmarkSample(b *testing.B) {
	m, in := benchModel(b), benchInput()
	rng := rand.New(rand.NewPCG(1, 2))
	b.ReportAllocs()
	for b.Loop() {
		if c, _ := m.Sample(in, rng); c < 0 {
			b.Fatal("no choice")
		}
	}
}

// BenchmarkAccumulateEntropyGrad is the entropy bonus's backward pass of one turn.
func BenchmarkAccumulateEntropyGrad(b *testing.B) {
	m, in := benchModel(b), benchInput()
	grad := make([]float64, m.NumParams())
	b.ReportAllocs()
	for b.Loop() {
		m.AccumulateEntropyGrad(in, 0.01, grad)
	}
}

// BenchmarkWeightsRoundTrip is the weight blob the trainer publishes and every rollout loads (2^18 float32).
func BenchmarkWeightsRoundTrip(b *testing.B) {
	m := benchModel(b)
	blob, err := m.MarshalBinary()
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(blob)))
	b.ReportAllocs()
	for b.Loop() {
		blob, err := m.MarshalBinary()
		if err != nil {
			b.Fatal(err)
		}
		if _, err := Load(blob); err != nil {
			b.Fatal(err)
		}
	}
}
