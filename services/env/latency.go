package env

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"time"
)

// z99 is the standard normal's 99th percentile: a lognormal with median m and p99 q has sigma ln(q/m)/z99.
const z99 = 2.3263478740408408

// Lognormal is a step-latency distribution for emulating slow environments: exp(N(ln Median, Sigma²)),
// so half the steps take less than Median and one in a hundred more than P99. Draws come from one seeded
// source and are safe for concurrent use; which session gets which draw depends on the order of steps.
// jetrl bench async-vs-sync uses median 20 ms and p99 400 ms (Sigma = ln(20)/2.326 ≈ 1.29).
type Lognormal struct {
	Median time.Duration
	Sigma  float64

	mu  sync.Mutex
	rng *rand.Rand
}

// NewLognormal returns the lognormal with this median and 99th percentile, drawing from seed.
func NewLognormal(median, p99 time.Duration, seed uint64) (*Lognormal, error) {
	if median <= 0 {
		return nil, fmt.Errorf("step latency median %v must be positive", median)
	}
	if p99 < median {
		return nil, fmt.Errorf("step latency p99 %v must be at least the median %v", p99, median)
	}
	return &Lognormal{
		Median: median,
		Sigma:  math.Log(float64(p99)/float64(median)) / z99,
		rng:    rand.New(rand.NewPCG(seed, seed^0x6c6f676e6f726d)), // "lognorm"
	}, nil
}

// Quantile is the latency below which a fraction q of the draws fall (0 < q < 1).
func (l *Lognormal) Quantile(q float64) time.Duration {
	return time.Duration(float64(l.Median) * math.Exp(l.Sigma*math.Sqrt2*math.Erfinv(2*q-1)))
}

// Mean is the distribution's mean, Median·exp(Sigma²/2).
func (l *Lognormal) Mean() time.Duration {
	return time.Duration(float64(l.Median) * math.Exp(l.Sigma*l.Sigma/2))
}

// Draw returns one latency.
func (l *Lognormal) Draw() time.Duration {
	l.mu.Lock()
	z := l.rng.NormFloat64()
	l.mu.Unlock()
	return time.Duration(float64(l.Median) * math.Exp(l.Sigma*z))
}

// LatencyConfig configures the step latency of a host from settings (flags, environment).
type LatencyConfig struct {
	// Median and P99 of the lognormal; a zero Median means no added latency, a zero P99 a constant one.
	Median, P99 time.Duration
	// Seed of the draws.
	Seed uint64
}

// StepLatency returns the Config.StepLatency these settings give (nil for none).
func (c LatencyConfig) StepLatency() (func() time.Duration, error) {
	if c.Median == 0 && c.P99 == 0 {
		return nil, nil
	}
	if c.Median == 0 {
		return nil, errors.New("step latency p99 set without a median")
	}
	p99 := c.P99
	if p99 == 0 {
		p99 = c.Median
	}
	l, err := NewLognormal(c.Median, p99, c.Seed)
	if err != nil {
		return nil, err
	}
	return l.Draw, nil
}
