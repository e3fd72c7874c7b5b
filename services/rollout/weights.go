package rollout

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"

	"github.com/jetrl/jetrl/proto"
	"github.com/jetrl/jetrl/shared/bus"
	"github.com/jetrl/jetrl/shared/codec"
	"github.com/jetrl/jetrl/shared/policy"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
)

// versioned is one loaded policy and the version it was published as.
type versioned struct {
	model   *policy.Model
	version int64
}

// WeightsPool is the built-in Actor: the current policy plus a stale copy of it (cross-policy sampling).
// The stale copy is the current policy as it was at the last multiple of StaleEvery versions; each turn
// uses it with probability StaleProb. A turn always uses one loaded version, whatever loads meanwhile.
type WeightsPool struct {
	staleEvery int64
	staleProb  float64
	greedy     bool

	current atomic.Pointer[versioned]
	stale   atomic.Pointer[versioned]

	mu  sync.Mutex
	rng *rand.Rand
}

// NewWeightsPool returns an empty pool; Set or Watch loads it.
func NewWeightsPool(staleEvery int64, staleProb float64, greedy bool, seed uint64) *WeightsPool {
	return &WeightsPool{staleEvery: staleEvery, staleProb: staleProb, greedy: greedy, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
}

// Set installs a model as the current policy, refreshing the stale copy when its period comes round.
func (p *WeightsPool) Set(m *policy.Model, version int64) {
	v := &versioned{model: m, version: version}
	p.current.Store(v)
	if s := p.stale.Load(); s == nil || p.staleEvery <= 0 || version/p.staleEvery > s.version/p.staleEvery {
		p.stale.Store(v)
	}
}

// Version of the current policy, or -1 before the first load.
func (p *WeightsPool) Version() int64 {
	if v := p.current.Load(); v != nil {
		return v.version
	}
	return -1
}

// Act samples (or, in greedy mode, takes the best) candidate under a policy drawn from the pool.
func (p *WeightsPool) Act(_ context.Context, in policy.Input) (Action, error) {
	cur := p.current.Load()
	if cur == nil {
		return Action{}, errors.New("no policy loaded yet")
	}
	member, name := cur, proto.PolicyCurrent
	p.mu.Lock()
	useStale := p.staleProb > 0 && !p.greedy && p.rng.Float64() < p.staleProb
	var seed1, seed2 uint64 = p.rng.Uint64(), p.rng.Uint64()
	p.mu.Unlock()
	if s := p.stale.Load(); useStale && s != nil && s.version != cur.version {
		member, name = s, proto.PolicyStale
	}
	var choice int
	var lp float64
	if p.greedy {
		choice, lp = member.model.Greedy(in)
	} else {
		choice, lp = member.model.Sample(in, rand.New(rand.NewPCG(seed1, seed2)))
	}
	if choice < 0 {
		return Action{}, fmt.Errorf("policy picked nothing from %d candidates", len(in.Candidates))
	}
	return Action{Choice: choice, LogProb: lp, Version: member.version, Policy: name}, nil
}

// WeightsSource loads published policies: the version record from KV and the weights from the Object Store.
type WeightsSource struct {
	KV      jetstream.KeyValue
	Objects jetstream.ObjectStore
}

// NewWeightsSource binds the policy buckets.
func NewWeightsSource(ctx context.Context, js jetstream.JetStream) (*WeightsSource, error) {
	kv, err := js.KeyValue(ctx, proto.BucketPolicy)
	if err != nil {
		return nil, fmt.Errorf("kv %s: %w", proto.BucketPolicy, err)
	}
	obj, err := js.ObjectStore(ctx, proto.BucketWeights)
	if err != nil {
		return nil, fmt.Errorf("object store %s: %w", proto.BucketWeights, err)
	}
	return &WeightsSource{KV: kv, Objects: obj}, nil
}

// Load fetches and verifies the weights that a version record names.
func (s *WeightsSource) Load(ctx context.Context, rec proto.PolicyVersion) (*policy.Model, error) {
	b, err := s.Objects.GetBytes(ctx, rec.Object)
	if err != nil {
		return nil, fmt.Errorf("get %s: %w", rec.Object, err)
	}
	if sum := sha256.Sum256(b); rec.SHA256 != "" && hex.EncodeToString(sum[:]) != rec.SHA256 {
		return nil, fmt.Errorf("weights %s: sha256 mismatch", rec.Object)
	}
	return policy.Load(b)
}

// Current reads the version record; ok is false when no policy has been published yet.
func (s *WeightsSource) Current(ctx context.Context) (rec proto.PolicyVersion, ok bool, err error) {
	e, err := s.KV.Get(ctx, proto.KeyPolicyCurrent)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return rec, false, nil
	}
	if err != nil {
		return rec, false, err
	}
	if err := codec.Unmarshal(e.Value(), &rec); err != nil {
		return rec, false, err
	}
	return rec, true, nil
}

// Watch keeps pool on the newest published version until ctx ends; onLoad (may be nil) hears each load.
func (s *WeightsSource) Watch(ctx context.Context, js jetstream.JetStream, pool *WeightsPool, log zerolog.Logger, onLoad func(int64)) error {
	return bus.WatchPolicyVersion(ctx, js, log, func(rec proto.PolicyVersion) {
		if rec.Version <= pool.Version() {
			return
		}
		m, err := s.Load(ctx, rec)
		if err != nil {
			if ctx.Err() == nil {
				log.Error().Err(err).Int64("version", rec.Version).Msg("load weights")
			}
			return
		}
		pool.Set(m, rec.Version)
		if onLoad != nil {
			onLoad(rec.Version)
		}
	})
}
