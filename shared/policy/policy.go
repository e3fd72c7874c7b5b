// Package policy is jetrl's built-in policy: it scores the admissible tool calls of a turn, written as
// text, and picks one by softmax. It learns on a couple of CPU cores in minutes.
//
// # Model
//
// The score of a candidate is a linear function of hashed sparse features, equivalently a full-rank
// bilinear (dot-product) model between hashed context tokens and hashed candidate tokens:
//
//	score(c) = Σ_{t ∈ cand(c)} ±W[h(t)]
//	         + 1/√|ctx|   Σ_{x ∈ ctx}   Σ_{t ∈ lex(c)} ±W[h(x,t)]
//	         + 1/√|state| Σ_{x ∈ state} Σ_{t ∈ rel(c)} ±W[h(x,t)]
//
// W is one dense []float32 of 2^Bits weights; h is a fixed 64-bit hash (FNV-1a for words, the murmur3
// finalizer for combinations), whose low bits pick the weight and whose top bit picks the sign ± (signed
// hashing makes collisions cancel on average instead of biasing). Log π is concave in W for one turn.
//
// Text is lowercased and split on anything that is not a letter or digit ("Fridge-1" → "fridge", "1").
// Features are binary: a context token that occurs twice counts once.
//
// Context tokens (ctx), computed once per turn:
//   - state: "t:"+task, "n:"+len(history), "H:"+each history call (whole), "L:"+the last call (whole),
//     "h:"+each word of the last 3 history calls;
//   - lexical: "i:" words and bigrams of the instruction (first 64 words), "o:" words and bigrams of
//     the observation (first 256 words).
//
// Candidate tokens: lexical lex(c) = "v:"+first word (the verb), "C:"+the whole call, "c:"+each other
// word (argument); relations rel(c) = "r:"+verb+":"+relation and "r:*:"+relation, where the relations
// count how many arguments occur in the instruction and how many do not (0, 1, 2, 3+), the same for the
// observation, whether some argument occurs in a history call, whether this very call was already made,
// and whether it repeats the last call. Relations carry no instance words, so what they learn ("take the
// key the observation names", "open the door the instruction names, after taking a key") transfers to
// unseen instances. cand(c) = lex(c) ∪ rel(c) alone acts as the context's bias token.
//
// History is what the policy remembers of earlier turns: the texts of the chosen calls, at most the last
// MaxHistory of them (see HistoryWindow); earlier observations are not remembered.
//
// # Use
//
// A forward pass over 20 ALFWorld-sized candidates takes about 40 µs on one core, a gradient about 90 µs.
//
// A Model is safe for concurrent reads (Scores, Probs, Sample, AccumulateGrad into separate gradients);
// updating Weights (Adam.Step) needs exclusive access. The trainer accumulates coef·∇log π over a batch
// with AccumulateGrad and applies Adam.Step; weights travel as MarshalBinary blobs.
package policy

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
)

// Defaults and limits of Config.
const (
	DefaultBits        = 18
	DefaultTemperature = 1.0
	DefaultInitScale   = 0.01
	MinBits            = 10
	MaxBits            = 26
)

// Errors callers can test with errors.Is.
var (
	ErrConfig   = errors.New("policy: invalid config")
	ErrCorrupt  = errors.New("policy: corrupt or unsupported data")
	ErrGradient = errors.New("policy: unusable gradient")
)

// Input is what the policy sees at one turn.
type Input struct {
	Task        string
	Instruction string
	Observation string
	History     []string // texts of the calls chosen in earlier turns, oldest first; only the last MaxHistory count
	Candidates  []string // admissible calls as text; the policy picks one index
}

// Config sets up a new Model. New does not apply defaults: call SetDefaults first, so that
// InitScale 0 can still mean an all-zero start.
type Config struct {
	Bits        int     // log2 of the weight vector size; default 18
	Temperature float64 // softmax temperature; default 1
	InitScale   float64 // std of the initial weights; default 0.01; 0 starts at all zeros (uniform policy)
	Seed        int64   // init seed
	TaskSalt    bool    // key candidate features by task (see Model.TaskSalt)
}

// SetDefaults fills the zero fields.
func (c *Config) SetDefaults() {
	if c.Bits == 0 {
		c.Bits = DefaultBits
	}
	if c.Temperature == 0 {
		c.Temperature = DefaultTemperature
	}
	if c.InitScale == 0 {
		c.InitScale = DefaultInitScale
	}
}

// Validate explains what is wrong with c.
func (c Config) Validate() error {
	if err := validateShape(c.Bits, c.Temperature); err != nil {
		return err
	}
	if !(c.InitScale >= 0) || math.IsInf(c.InitScale, 0) {
		return fmt.Errorf("%w: InitScale %v must be finite and >= 0", ErrConfig, c.InitScale)
	}
	return nil
}

func validateShape(bits int, temperature float64) error {
	if bits < MinBits || bits > MaxBits {
		return fmt.Errorf("%w: Bits %d must be in [%d, %d] (default %d)", ErrConfig, bits, MinBits, MaxBits, DefaultBits)
	}
	if !(temperature > 0) || math.IsInf(temperature, 0) {
		return fmt.Errorf("%w: Temperature %v must be finite and > 0 (default %v)", ErrConfig, temperature, DefaultTemperature)
	}
	return nil
}

// Model is the policy: its weights and its softmax temperature. len(Weights) must stay 1<<Bits.
type Model struct {
	Bits        int
	Temperature float64
	Weights     []float32
	// TaskSalt keys every candidate feature by the task, so tasks trained together share no weights
	// (no interference between families, at the price of no transfer between them).
	TaskSalt bool
}

// New builds a model with Gaussian initial weights drawn deterministically from cfg.Seed.
func New(cfg Config) (*Model, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	m := &Model{Bits: cfg.Bits, Temperature: cfg.Temperature, Weights: make([]float32, 1<<cfg.Bits), TaskSalt: cfg.TaskSalt}
	if cfg.InitScale > 0 {
		rng := rand.New(rand.NewPCG(uint64(cfg.Seed), 0x6a6574726c706f6c)) // "jetrlpol"
		for i := range m.Weights {
			m.Weights[i] = float32(rng.NormFloat64() * cfg.InitScale)
		}
	}
	return m, nil
}

// Clone returns a deep copy.
func (m *Model) Clone() *Model {
	c := *m
	c.Weights = append([]float32(nil), m.Weights...)
	return &c
}

// NumParams is the length of the weight vector and of every gradient.
func (m *Model) NumParams() int { return len(m.Weights) }

// usable reports whether the weights can be indexed by a hash mask (a power-of-two length).
func (m *Model) usable() bool {
	n := len(m.Weights)
	return n > 0 && n&(n-1) == 0
}

// Scores returns the raw score of every candidate.
func (m *Model) Scores(in Input) []float64 {
	scores := make([]float64, len(in.Candidates))
	if len(scores) == 0 || !m.usable() {
		return scores
	}
	extract(in, m.TaskSalt).scores(m.Weights, scores)
	return scores
}

// logSoftmax turns raw scores into log-probabilities at temperature t, in place; it subtracts the
// maximum first so that no exponential overflows.
func logSoftmax(s []float64, t float64) []float64 {
	if len(s) == 0 {
		return s
	}
	hi := math.Inf(-1)
	for i := range s {
		s[i] /= t
		hi = max(hi, s[i])
	}
	var sum float64
	for _, z := range s {
		sum += math.Exp(z - hi)
	}
	lse := hi + math.Log(sum)
	for i := range s {
		s[i] -= lse
	}
	return s
}

func (m *Model) logProbs(in Input) []float64 { return logSoftmax(m.Scores(in), m.Temperature) }

// Probs returns softmax(scores / Temperature).
func (m *Model) Probs(in Input) []float64 {
	p := m.logProbs(in)
	for i := range p {
		p[i] = math.Exp(p[i])
	}
	return p
}

// LogProb returns log π(choice | in), or NaN when choice is not a candidate index.
func (m *Model) LogProb(in Input, choice int) float64 {
	if choice < 0 || choice >= len(in.Candidates) {
		return math.NaN()
	}
	return m.logProbs(in)[choice]
}

// Sample draws a candidate from π(· | in) using rng (the global source when rng is nil) and returns it
// with its log-probability; (-1, 0) when there are no candidates.
func (m *Model) Sample(in Input, rng *rand.Rand) (choice int, logprob float64) {
	lp := m.logProbs(in)
	if len(lp) == 0 {
		return -1, 0
	}
	u := rand.Float64()
	if rng != nil {
		u = rng.Float64()
	}
	for i, l := range lp {
		if u -= math.Exp(l); u < 0 {
			return i, l
		}
	}
	return len(lp) - 1, lp[len(lp)-1] // rounding left u a hair above zero
}

// Greedy returns the most probable candidate (the first on ties) and its log-probability; (-1, 0) when
// there are no candidates.
func (m *Model) Greedy(in Input) (choice int, logprob float64) {
	lp := m.logProbs(in)
	if len(lp) == 0 {
		return -1, 0
	}
	best := 0
	for i, l := range lp {
		if l > lp[best] {
			best = i
		}
	}
	return best, lp[best]
}

// AccumulateGrad adds coef · ∂log π(choice|in)/∂W into grad and returns log π(choice|in). When choice is
// not a candidate index or len(grad) != NumParams it adds nothing and returns NaN.
func (m *Model) AccumulateGrad(in Input, choice int, coef float64, grad []float64) float64 {
	if choice < 0 || choice >= len(in.Candidates) || len(grad) != len(m.Weights) || !m.usable() {
		return math.NaN()
	}
	f := extract(in, m.TaskSalt)
	lp := m.logProbsOf(f, len(in.Candidates))
	if coef == 0 {
		return lp[choice]
	}
	// ∂log π_a/∂s_j = (1[j=a] − π_j) / T.
	for j, l := range lp {
		g := -math.Exp(l)
		if j == choice {
			g++
		}
		f.addGrad(grad, j, coef*g/m.Temperature)
	}
	f.addGrads(grad)
	return lp[choice]
}

// Entropy is −Σ π log π of the action distribution, in nats; 0 without candidates.
func (m *Model) Entropy(in Input) float64 {
	return entropy(m.logProbs(in))
}

func entropy(lp []float64) float64 {
	var h float64
	for _, l := range lp {
		h -= math.Exp(l) * l
	}
	return h
}

// AccumulateEntropyGrad adds coef · ∂H/∂W into grad and returns the entropy H. When len(grad) !=
// NumParams it adds nothing and returns NaN.
func (m *Model) AccumulateEntropyGrad(in Input, coef float64, grad []float64) float64 {
	if len(grad) != len(m.Weights) || !m.usable() {
		return math.NaN()
	}
	if len(in.Candidates) == 0 {
		return 0
	}
	f := extract(in, m.TaskSalt)
	lp := m.logProbsOf(f, len(in.Candidates))
	h := entropy(lp)
	if coef == 0 {
		return h
	}
	// ∂H/∂s_j = −π_j (log π_j + H) / T.
	for j, l := range lp {
		f.addGrad(grad, j, -coef*math.Exp(l)*(l+h)/m.Temperature)
	}
	f.addGrads(grad)
	return h
}

// AccumulateTurn is AccumulateGrad and AccumulateEntropyGrad of one turn in a single pass over its
// features: it computes log π(choice|in) and the entropy H, asks coef for the policy-gradient coefficient
// given that log-probability (the clipped PPO derivative, say), and adds coef · ∂log π(choice|in)/∂W +
// entropyCoef · ∂H/∂W into grad. It returns the log-probability and H, or NaNs (adding nothing) when choice
// is not a candidate index or len(grad) != NumParams.
func (m *Model) AccumulateTurn(in Input, choice int, coef func(logp float64) float64, entropyCoef float64, grad []float64) (logp, h float64) {
	if choice < 0 || choice >= len(in.Candidates) || len(grad) != len(m.Weights) || !m.usable() {
		return math.NaN(), math.NaN()
	}
	return m.AccumulatePrepared(m.Prepare(in), choice, coef, entropyCoef, grad)
}

// Prepared is an Input's hashed features, extracted once for the passes a trainer makes over the same
// turn (one per epoch, and the reference policy's): they depend on the input and the model's shape, not
// on its weights. A Prepared is used by one goroutine at a time.
type Prepared struct {
	f        *features
	n        int
	taskSalt bool
}

// Prepare extracts in's features for the Prepared passes of m and of models of the same shape.
func (m *Model) Prepare(in Input) *Prepared {
	return &Prepared{f: extract(in, m.TaskSalt), n: len(in.Candidates), taskSalt: m.TaskSalt}
}

// fits reports whether p was prepared for a model of m's shape.
func (m *Model) fits(p *Prepared) bool { return p != nil && p.taskSalt == m.TaskSalt && m.usable() }

// LogProbPrepared is LogProb of a prepared input; NaN when choice is not a candidate index or p was
// prepared for a model of another shape.
func (m *Model) LogProbPrepared(p *Prepared, choice int) float64 {
	if !m.fits(p) || choice < 0 || choice >= p.n {
		return math.NaN()
	}
	return m.logProbsOf(p.f, p.n)[choice]
}

// AccumulatePrepared is AccumulateTurn of a prepared input; NaNs (adding nothing) also when p was
// prepared for a model of another shape.
func (m *Model) AccumulatePrepared(p *Prepared, choice int, coef func(logp float64) float64, entropyCoef float64, grad []float64) (logp, h float64) {
	if !m.fits(p) || choice < 0 || choice >= p.n || len(grad) != len(m.Weights) {
		return math.NaN(), math.NaN()
	}
	f := p.f
	lp := m.logProbsOf(f, p.n)
	h = entropy(lp)
	c := coef(lp[choice])
	if c == 0 && entropyCoef == 0 {
		return lp[choice], h
	}
	// ∂log π_a/∂s_j = (1[j=a] − π_j) / T and ∂H/∂s_j = −π_j (log π_j + H) / T.
	for j, l := range lp {
		p := math.Exp(l)
		g := -p
		if j == choice {
			g++
		}
		if d := c*g - entropyCoef*p*(l+h); d != 0 {
			f.addGrad(grad, j, d/m.Temperature)
		}
	}
	f.addGrads(grad)
	return lp[choice], h
}

func (m *Model) logProbsOf(f *features, n int) []float64 {
	s := make([]float64, n)
	f.scores(m.Weights, s)
	return logSoftmax(s, m.Temperature)
}
