package policy

import (
	"errors"
	"math"
	"slices"
	"testing"
)

func TestAdamMinimizesQuadratic(t *testing.T) {
	target := []float64{3, -2, 0.5, 0, 10}
	w := make([]float32, len(target))
	grad := make([]float64, len(target))
	opt := NewAdam(len(w), AdamConfig{LR: 0.1})
	for range 2000 {
		for i := range w {
			grad[i] = 2 * (float64(w[i]) - target[i]) // ∇ Σ (w − target)²
		}
		if err := opt.Step(w, grad); err != nil {
			t.Fatal(err)
		}
	}
	for i := range w {
		if math.Abs(float64(w[i])-target[i]) > 1e-2 {
			t.Fatalf("w = %v, want %v", w, target)
		}
	}
	if opt.Steps() != 2000 {
		t.Fatalf("Steps() = %d", opt.Steps())
	}
}

func TestAdamDefaultsAndClipping(t *testing.T) {
	opt := NewAdam(2, AdamConfig{})
	if opt.Config != (AdamConfig{LR: DefaultLR, Beta1: DefaultBeta1, Beta2: DefaultBeta2, Eps: DefaultEps}) {
		t.Fatalf("defaults %+v", opt.Config)
	}
	// The first Adam step moves every coordinate with a nonzero gradient by about LR, whatever its scale;
	// clipping must keep the direction.
	clipped := NewAdam(2, AdamConfig{LR: 0.1, MaxGradNorm: 1})
	w := []float32{0, 0}
	if err := clipped.Step(w, []float64{300, -400}); err != nil {
		t.Fatal(err)
	}
	if math.Abs(float64(w[0])+0.1) > 1e-6 || math.Abs(float64(w[1])-0.1) > 1e-6 {
		t.Fatalf("w = %v after one clipped step", w)
	}
	bad := NewAdam(2, AdamConfig{Beta1: 1})
	if err := bad.Step(w, []float64{1, 1}); !errors.Is(err, ErrConfig) {
		t.Fatalf("Step with Beta1 = 1: %v", err)
	}
}

func TestAdamRefusesBadGradient(t *testing.T) {
	for _, g := range [][]float64{{1, math.NaN(), 0}, {math.Inf(1), 0, 0}, {0, 0, math.Inf(-1)}, {1, 2}} {
		opt := NewAdam(3, AdamConfig{})
		w := []float32{1, 2, 3}
		if err := opt.Step(w, g); !errors.Is(err, ErrGradient) {
			t.Errorf("Step(%v) = %v, want ErrGradient", g, err)
		}
		if !slices.Equal(w, []float32{1, 2, 3}) || opt.Steps() != 0 {
			t.Errorf("a refused Step(%v) changed the weights or the state", g)
		}
	}
}

func TestAdamStateRoundTrip(t *testing.T) {
	opt := NewAdam(4, AdamConfig{LR: 0.05})
	w := []float32{1, 2, 3, 4}
	for i := range 5 {
		if err := opt.Step(w, []float64{1, -float64(i), 0.5, 0}); err != nil {
			t.Fatal(err)
		}
	}
	b, err := opt.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	restored := NewAdam(4, AdamConfig{LR: 0.05})
	if err := restored.UnmarshalBinary(b); err != nil {
		t.Fatal(err)
	}
	w2 := slices.Clone(w)
	g := []float64{0.3, 0.2, -0.1, 1}
	if err := opt.Step(w, g); err != nil {
		t.Fatal(err)
	}
	if err := restored.Step(w2, g); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(w, w2) || restored.Steps() != 6 {
		t.Fatalf("restored optimizer diverged: %v vs %v", w2, w)
	}

	for name, bad := range map[string][]byte{
		"truncated":   b[:len(b)-3],
		"flipped":     append(slices.Clone(b[:30]), append([]byte{b[30] ^ 4}, b[31:]...)...),
		"model magic": reframe(append([]byte("JETRLPOL"), b[8:]...)),
		"empty":       {},
	} {
		if err := restored.UnmarshalBinary(bad); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: UnmarshalBinary() = %v, want ErrCorrupt", name, err)
		}
	}
	if restored.Steps() != 6 {
		t.Fatal("a refused UnmarshalBinary changed the state")
	}
	if err := NewAdam(5, AdamConfig{}).UnmarshalBinary(b); !errors.Is(err, ErrCorrupt) {
		t.Errorf("state of 4 parameters into an optimizer of 5: %v", err)
	}
	if err := new(Adam).UnmarshalBinary(b); err != nil {
		t.Errorf("state into the zero Adam: %v", err)
	}
}

func TestAdamCloneIsIndependent(t *testing.T) {
	a := NewAdam(4, AdamConfig{})
	w := []float32{1, 2, 3, 4}
	if err := a.Step(w, []float64{0.1, -0.2, 0.3, -0.4}); err != nil {
		t.Fatal(err)
	}
	before, err := a.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	c := a.Clone()
	if err := a.Step(w, []float64{1, 1, 1, 1}); err != nil {
		t.Fatal(err)
	}
	after, err := c.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	if string(after) != string(before) || c.Steps() != 1 || a.Steps() != 2 {
		t.Fatalf("a step of the original moved its clone: steps %d and %d", a.Steps(), c.Steps())
	}
}
