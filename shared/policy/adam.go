package policy

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math"
	"slices"
)

// Adam defaults. Every weight feeds many pair features, so a step of 0.01 per weight already moves a
// score by O(1): on alfworld, 0.01 learned faster than both 0.003 and 0.03.
const (
	DefaultLR    = 0.01
	DefaultBeta1 = 0.9
	DefaultBeta2 = 0.999
	DefaultEps   = 1e-8
)

// AdamConfig sets up Adam; zero fields take the defaults, and MaxGradNorm 0 turns clipping off.
type AdamConfig struct {
	LR, Beta1, Beta2, Eps float64
	MaxGradNorm           float64 // clip the gradient's L2 norm to this before the update; 0 = off
}

// SetDefaults fills the zero fields (except MaxGradNorm, whose zero means "off").
func (c *AdamConfig) SetDefaults() {
	if c.LR == 0 {
		c.LR = DefaultLR
	}
	if c.Beta1 == 0 {
		c.Beta1 = DefaultBeta1
	}
	if c.Beta2 == 0 {
		c.Beta2 = DefaultBeta2
	}
	if c.Eps == 0 {
		c.Eps = DefaultEps
	}
}

// Validate explains what is wrong with c.
func (c AdamConfig) Validate() error {
	switch {
	case !(c.LR > 0) || math.IsInf(c.LR, 0):
		return fmt.Errorf("%w: Adam LR %v must be finite and > 0", ErrConfig, c.LR)
	case !(c.Beta1 >= 0 && c.Beta1 < 1):
		return fmt.Errorf("%w: Adam Beta1 %v must be in [0, 1)", ErrConfig, c.Beta1)
	case !(c.Beta2 >= 0 && c.Beta2 < 1):
		return fmt.Errorf("%w: Adam Beta2 %v must be in [0, 1)", ErrConfig, c.Beta2)
	case !(c.Eps > 0) || math.IsInf(c.Eps, 0):
		return fmt.Errorf("%w: Adam Eps %v must be finite and > 0", ErrConfig, c.Eps)
	case !(c.MaxGradNorm >= 0) || math.IsInf(c.MaxGradNorm, 0):
		return fmt.Errorf("%w: Adam MaxGradNorm %v must be finite and >= 0 (0 = off)", ErrConfig, c.MaxGradNorm)
	}
	return nil
}

// Adam is the Adam optimizer's state for n parameters. It is not safe for concurrent use.
type Adam struct {
	Config AdamConfig
	step   int64
	m, v   []float32
}

// NewAdam returns the zero state for n parameters; zero fields of cfg take the defaults.
func NewAdam(n int, cfg AdamConfig) *Adam {
	cfg.SetDefaults()
	return &Adam{Config: cfg, m: make([]float32, max(n, 0)), v: make([]float32, max(n, 0))}
}

// Clone returns a copy of the state that later steps of either leave apart.
func (a *Adam) Clone() *Adam {
	c := *a
	c.m = slices.Clone(a.m)
	c.v = slices.Clone(a.v)
	return &c
}

// Steps is the number of updates applied so far.
func (a *Adam) Steps() int64 { return a.step }

// Step applies one update that descends the loss whose gradient is grad:
// w -= LR · m̂ / (√v̂ + Eps). It refuses, changing nothing, a gradient with a NaN or an infinity or
// whose length is not the parameter count.
func (a *Adam) Step(w []float32, grad []float64) error {
	c := a.Config
	if err := c.Validate(); err != nil {
		return err
	}
	if len(w) != len(a.m) || len(grad) != len(a.m) {
		return fmt.Errorf("%w: Adam has %d parameters, got %d weights and %d gradients", ErrGradient, len(a.m), len(w), len(grad))
	}
	var sq float64
	for i, g := range grad {
		if g-g != 0 {
			return fmt.Errorf("%w: gradient %d is %v", ErrGradient, i, g)
		}
		sq += g * g
	}
	scale := 1.0
	if norm := math.Sqrt(sq); c.MaxGradNorm > 0 && norm > c.MaxGradNorm {
		scale = c.MaxGradNorm / norm
	}
	a.step++
	t := float64(a.step)
	lr := c.LR / (1 - math.Pow(c.Beta1, t)) // bias corrections folded into the rate
	sqrtBC2 := math.Sqrt(1 - math.Pow(c.Beta2, t))
	b1, b2 := c.Beta1, c.Beta2
	for i, g := range grad {
		g *= scale
		m := b1*float64(a.m[i]) + (1-b1)*g
		v := b2*float64(a.v[i]) + (1-b2)*g*g
		a.m[i], a.v[i] = float32(m), float32(v)
		w[i] -= float32(lr * m / (math.Sqrt(v)/sqrtBC2 + c.Eps))
	}
	return nil
}

// Adam state layout, little-endian: magic "JETRLADM", format version uint32, n uint64, step uint64,
// n float32 first moments, n float32 second moments, then the IEEE CRC32 of everything before it.
const (
	adamMagic   = "JETRLADM"
	adamVersion = 1
	adamHeader  = len(adamMagic) + 4 + 8 + 8
)

// MarshalBinary encodes the optimizer state (not its config) for a checkpoint.
func (a *Adam) MarshalBinary() ([]byte, error) {
	b := make([]byte, 0, adamHeader+8*len(a.m)+4)
	b = append(b, adamMagic...)
	b = binary.LittleEndian.AppendUint32(b, adamVersion)
	b = binary.LittleEndian.AppendUint64(b, uint64(len(a.m)))
	b = binary.LittleEndian.AppendUint64(b, uint64(a.step))
	b = appendFloat32s(b, a.m)
	b = appendFloat32s(b, a.v)
	return binary.LittleEndian.AppendUint32(b, crc32.ChecksumIEEE(b)), nil
}

// UnmarshalBinary restores the state written by MarshalBinary and keeps a.Config (so a restart may
// change the learning rate). A state for another parameter count is refused unless a is empty (the
// zero Adam or NewAdam(0, ...)); on error a is left unchanged.
func (a *Adam) UnmarshalBinary(b []byte) error {
	body, err := checkFrame(b, adamMagic, adamHeader)
	if err != nil {
		return err
	}
	if v := binary.LittleEndian.Uint32(body[8:]); v != adamVersion {
		return fmt.Errorf("%w: Adam format version %d, this build reads %d", ErrCorrupt, v, adamVersion)
	}
	n := binary.LittleEndian.Uint64(body[12:])
	step := binary.LittleEndian.Uint64(body[20:])
	if n > 1<<MaxBits || uint64(len(body)) != uint64(adamHeader)+8*n || step > math.MaxInt64 {
		return fmt.Errorf("%w: Adam state of %d bytes does not hold %d parameters", ErrCorrupt, len(b), n)
	}
	if len(a.m) != 0 && uint64(len(a.m)) != n {
		return fmt.Errorf("%w: Adam state holds %d parameters, this optimizer %d", ErrCorrupt, n, len(a.m))
	}
	m, err := readFloat32s(body[adamHeader:], int(n))
	if err != nil {
		return err
	}
	v, err := readFloat32s(body[adamHeader+4*int(n):], int(n))
	if err != nil {
		return err
	}
	a.step, a.m, a.v = int64(step), m, v
	return nil
}
