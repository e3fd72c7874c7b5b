package rollout

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

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
	// consumed is the version record's EpisodesConsumed (0 when not known).
	consumed int64
}

// WeightsPool is the built-in Actor: the current policy plus a stale copy of it (cross-policy sampling),
// and optionally a fixed checkpoint (a saved policy, for instance another run's). The stale copy is the
// current policy as it was at the last multiple of StaleEvery versions; each turn uses it with probability
// StaleProb, and the checkpoint with the probability SetCheckpoint gives. A turn always uses one loaded
// version, whatever loads meanwhile.
type WeightsPool struct {
	staleEvery int64
	staleProb  float64
	greedy     bool

	current    atomic.Pointer[versioned]
	stale      atomic.Pointer[versioned]
	checkpoint atomic.Pointer[versioned]
	// checkpointProb is set with the checkpoint, before the pool is shared.
	checkpointProb float64

	// seed salts every turn's draw (Act).
	seed uint64

	changedMu sync.Mutex
	changed   chan struct{} // closed by the next Set
}

// NewWeightsPool returns an empty pool; Set or Watch loads it.
func NewWeightsPool(staleEvery int64, staleProb float64, greedy bool, seed uint64) *WeightsPool {
	return &WeightsPool{staleEvery: staleEvery, staleProb: staleProb, greedy: greedy, seed: seed}
}

// Set installs a model as the current policy, refreshing the stale copy when its period comes round.
func (p *WeightsPool) Set(m *policy.Model, version int64) {
	p.install(&versioned{model: m, version: version})
}

// SetRecord installs a model loaded from its version record, keeping the record's count of episodes the
// trainer had consumed (the staleness gate's base).
func (p *WeightsPool) SetRecord(m *policy.Model, rec proto.PolicyVersion) {
	p.install(&versioned{model: m, version: rec.Version, consumed: rec.EpisodesConsumed})
}

func (p *WeightsPool) install(v *versioned) {
	version := v.version
	p.current.Store(v)
	if s := p.stale.Load(); s == nil || p.staleEvery <= 0 || version/p.staleEvery > s.version/p.staleEvery {
		p.stale.Store(v)
	}
	p.changedMu.Lock()
	if p.changed != nil {
		close(p.changed)
		p.changed = nil
	}
	p.changedMu.Unlock()
}

// Changed returns a channel that is closed when Set next installs a version (the staleness gate waits on
// it instead of polling for a new version).
func (p *WeightsPool) Changed() <-chan struct{} {
	p.changedMu.Lock()
	defer p.changedMu.Unlock()
	if p.changed == nil {
		p.changed = make(chan struct{})
	}
	return p.changed
}

// SetCheckpoint adds a fixed pool member that each turn uses with probability prob (the stale copy's
// probability applies to the rest). Call it before the pool is shared; prob + StaleProb must be below 1.
func (p *WeightsPool) SetCheckpoint(m *policy.Model, version int64, prob float64) error {
	if m == nil {
		return errors.New("checkpoint: no model")
	}
	if !(prob > 0) || prob+p.staleProb >= 1 {
		return fmt.Errorf("checkpoint probability %v: must be positive and, with the stale copy's %v, below 1", prob, p.staleProb)
	}
	p.checkpointProb = prob
	p.checkpoint.Store(&versioned{model: m, version: version})
	return nil
}

// Version of the current policy, or -1 before the first load.
func (p *WeightsPool) Version() int64 {
	if v := p.current.Load(); v != nil {
		return v.version
	}
	return -1
}

// Consumed is the number of admitted episodes the trainer had consumed at the current version (0 before
// the first load, or when the record does not say).
func (p *WeightsPool) Consumed() int64 {
	if v := p.current.Load(); v != nil {
		return v.consumed
	}
	return 0
}

// Act samples (or, in greedy mode, takes the best) candidate under a policy drawn from the pool. The draws
// (which member of the pool, which candidate) come from the turn's Draw and the pool's seed alone, not
// from the order in which the episodes in play ask.
func (p *WeightsPool) Act(_ context.Context, in policy.Input, d Draw) (Action, error) {
	cur := p.current.Load()
	if cur == nil {
		return Action{}, errors.New("no policy loaded yet")
	}
	if p.greedy {
		choice, lp := cur.model.Greedy(in)
		if choice < 0 {
			return Action{}, fmt.Errorf("policy picked nothing from %d candidates", len(in.Candidates))
		}
		return Action{Choice: choice, LogProb: lp, Version: cur.version, Policy: proto.PolicyCurrent}, nil
	}
	rng := rand.New(rand.NewPCG(policy.Mix64(p.seed^policy.Mix64(d.Seed)), policy.Mix64(uint64(uint32(d.Member))<<32|uint64(uint32(d.Turn)))))
	member, name := cur, proto.PolicyCurrent
	if p.staleProb > 0 || p.checkpointProb > 0 {
		u := rng.Float64()
		if c := p.checkpoint.Load(); c != nil && u < p.checkpointProb {
			member, name = c, proto.PolicyCheckpoint
		} else if s := p.stale.Load(); u >= p.checkpointProb && u < p.checkpointProb+p.staleProb && s != nil && s.version != cur.version {
			member, name = s, proto.PolicyStale
		}
	}
	choice, lp := member.model.Sample(in, rng)
	if choice < 0 {
		return Action{}, fmt.Errorf("policy picked nothing from %d candidates", len(in.Candidates))
	}
	return Action{Choice: choice, LogProb: lp, Version: member.version, Policy: name}, nil
}

// WeightsSource loads published policies: the version record from KV and the weights from the Object Store.
type WeightsSource struct {
	KV      jetstream.KeyValue
	Objects jetstream.ObjectStore
	// OnLoadError, when set, hears every failed attempt of Watch to load a version (it retries).
	OnLoadError func(version int64, err error)
	// js reads the weights' chunks directly (see Load); without it (a WeightsSource built by hand) Load
	// reads through Objects.Get, which hashes the bytes again.
	js jetstream.JetStream
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
	return &WeightsSource{KV: kv, Objects: obj, js: js}, nil
}

// maxWeightsBytes bounds the buffer reserved up front for a weights object (the largest model is 256 MiB).
const maxWeightsBytes = 1 << 30

// loadTimeout bounds one load of a version's weights (Watch retries a failed one).
const loadTimeout = 2 * time.Minute

// Load fetches and verifies the weights that a version record names. The object's SHA-256 digest, which the
// Object Store computed from the bytes as the trainer stored them, must be the record's; the object must be
// exactly as long as its metadata says; and the weight blob's own CRC32, checked as it loads, must hold,
// which catches corruption anywhere between the trainer's MarshalBinary and here. The bytes are not hashed
// again: with several rollouts on a machine, a SHA-256 of every copy of the weights costs more than moving
// them. The chunks go straight into one buffer of the object's size, which the model then uses as its weights.
func (s *WeightsSource) Load(ctx context.Context, rec proto.PolicyVersion) (*policy.Model, error) {
	ctx, cancel := context.WithTimeout(ctx, loadTimeout)
	defer cancel()
	if s.js == nil {
		return s.loadThroughGet(ctx, rec)
	}
	info, err := s.Objects.GetInfo(ctx, rec.Object)
	if err != nil {
		return nil, fmt.Errorf("get %s: %w", rec.Object, err)
	}
	if err := checkWeightsInfo(rec, info); err != nil {
		return nil, err
	}
	b, err := readObjectChunks(ctx, s.js, proto.BucketWeights, info)
	if err != nil {
		return nil, fmt.Errorf("get %s: %w", rec.Object, err)
	}
	return policy.LoadInPlace(b) // b is the model's weights from here on: no second copy
}

// checkWeightsInfo checks an object's metadata against the version record that names it.
func checkWeightsInfo(rec proto.PolicyVersion, info *jetstream.ObjectInfo) error {
	if rec.SHA256 != "" {
		if sum, err := jetstream.DecodeObjectDigest(info.Digest); err != nil || hex.EncodeToString(sum) != rec.SHA256 {
			return fmt.Errorf("weights %s: sha256 mismatch (object digest %q, record %s)", rec.Object, info.Digest, rec.SHA256)
		}
	}
	if info.Size > maxWeightsBytes {
		return fmt.Errorf("weights %s: %d bytes is more than any policy", rec.Object, info.Size)
	}
	return nil
}

// readObjectChunks reads an object's chunks (subject $O.<bucket>.C.<nuid> of stream OBJ_<bucket>, as the
// Object Store lays them out) in order into one buffer of the object's size, with a few chunks read ahead.
func readObjectChunks(ctx context.Context, js jetstream.JetStream, bucket string, info *jetstream.ObjectInfo) ([]byte, error) {
	b := make([]byte, info.Size)
	if info.Size == 0 {
		return b, nil
	}
	stream := "OBJ_" + bucket
	cons, err := js.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{"$O." + bucket + ".C." + info.NUID}, InactiveThreshold: 30 * time.Second})
	if err != nil {
		return nil, err
	}
	it, err := cons.Messages(jetstream.PullMaxMessages(4))
	if err != nil {
		return nil, err
	}
	defer func() {
		it.Stop()
		// Delete the consumer now rather than leave one per load for the server to expire.
		if ci := cons.CachedInfo(); ci != nil {
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			_ = js.DeleteConsumer(dctx, stream, ci.Name)
			cancel()
		}
	}()
	off := 0
	for n := uint32(0); n < info.Chunks; n++ {
		m, err := it.Next(jetstream.NextContext(ctx))
		if err != nil {
			return nil, fmt.Errorf("chunk %d of %d: %w", n+1, info.Chunks, err)
		}
		if off+len(m.Data()) > len(b) {
			return nil, fmt.Errorf("chunks run past the object's %d bytes", info.Size)
		}
		off += copy(b[off:], m.Data())
	}
	if off != len(b) {
		return nil, fmt.Errorf("%d chunks hold %d bytes, not the object's %d", info.Chunks, off, info.Size)
	}
	return b, nil
}

// loadThroughGet is Load through the Object Store client's Get, which checks the bytes against the digest.
func (s *WeightsSource) loadThroughGet(ctx context.Context, rec proto.PolicyVersion) (*policy.Model, error) {
	res, err := s.Objects.Get(ctx, rec.Object)
	if err != nil {
		return nil, fmt.Errorf("get %s: %w", rec.Object, err)
	}
	defer func() { _ = res.Close() }()
	info, err := res.Info()
	if err != nil {
		return nil, fmt.Errorf("get %s: %w", rec.Object, err)
	}
	if err := checkWeightsInfo(rec, info); err != nil {
		return nil, err
	}
	b := make([]byte, info.Size)
	if _, err := io.ReadFull(res, b); err != nil {
		return nil, fmt.Errorf("get %s: %w", rec.Object, err)
	}
	// The digest is checked by the read that meets the end of the object.
	if n, err := res.Read(make([]byte, 1)); n != 0 || err != io.EOF {
		return nil, fmt.Errorf("get %s: not %d bytes long, or damaged: %v", rec.Object, info.Size, err)
	}
	return policy.LoadInPlace(b)
}

// CheckpointVersionKey is the object metadata key that records the version a saved policy had in its run.
const CheckpointVersionKey = "jetrl-version"

// LoadCheckpoint fetches a saved policy from the weights Object Store, with the version its metadata
// records (0 when it records none).
func (s *WeightsSource) LoadCheckpoint(ctx context.Context, object string) (*policy.Model, int64, error) {
	info, err := s.Objects.GetInfo(ctx, object)
	if err != nil {
		return nil, 0, fmt.Errorf("checkpoint %s: %w", object, err)
	}
	b, err := s.Objects.GetBytes(ctx, object)
	if err != nil {
		return nil, 0, fmt.Errorf("checkpoint %s: %w", object, err)
	}
	m, err := policy.Load(b)
	if err != nil {
		return nil, 0, fmt.Errorf("checkpoint %s: %w", object, err)
	}
	var v int64
	if s := info.Metadata[CheckpointVersionKey]; s != "" {
		if v, err = strconv.ParseInt(s, 10, 64); err != nil {
			return nil, 0, fmt.Errorf("checkpoint %s: metadata %s=%q: %w", object, CheckpointVersionKey, s, err)
		}
	}
	return m, v, nil
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
// A load that fails is retried with backoff (50 ms doubling to 2 s) until it succeeds or a newer record
// arrives, which is then loaded instead. On a JetStream cluster the version record can arrive before the
// server that answers the read holds the whole object ("object not found", "digests do not match"); a
// replica that gave up would stay on the old version, and at the staleness gate no newer one may come.
// OnLoadError (may be nil) hears each failed attempt.
func (s *WeightsSource) Watch(ctx context.Context, js jetstream.JetStream, pool *WeightsPool, log zerolog.Logger, onLoad func(int64)) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var mu sync.Mutex
	var latest *proto.PolicyVersion // the newest record seen
	wake := make(chan struct{}, 1)
	loaderDone := make(chan struct{})
	go func() {
		defer close(loaderDone)
		var backoff time.Duration
		failures := 0
		for {
			var retry <-chan time.Time
			if backoff > 0 {
				retry = time.After(backoff)
			}
			select {
			case <-ctx.Done():
				return
			case <-wake:
			case <-retry:
			}
			mu.Lock()
			rec := latest
			mu.Unlock()
			if rec == nil || rec.Version <= pool.Version() {
				backoff, failures = 0, 0
				continue
			}
			lctx, lcancel := context.WithTimeout(ctx, 30*time.Second)
			m, err := s.Load(lctx, *rec)
			lcancel()
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				failures++
				if s.OnLoadError != nil {
					s.OnLoadError(rec.Version, err)
				}
				// Usual on a cluster for an attempt or two (counted by OnLoadError); worth a warning if it lasts.
				ev := log.Debug()
				if failures == 5 || failures%20 == 0 {
					ev = log.Warn()
				}
				ev.Err(err).Int64("version", rec.Version).Int("attempt", failures).Msg("load weights: retrying")
				backoff = min(max(2*backoff, 50*time.Millisecond), 2*time.Second)
				continue
			}
			backoff, failures = 0, 0
			pool.SetRecord(m, *rec)
			if onLoad != nil {
				onLoad(rec.Version)
			}
		}
	}()
	err := bus.WatchPolicyVersion(ctx, js, log, func(rec proto.PolicyVersion) {
		mu.Lock()
		if latest == nil || rec.Version > latest.Version {
			latest = &rec
		}
		mu.Unlock()
		select {
		case wake <- struct{}{}:
		default:
		}
	})
	cancel()
	<-loaderDone
	return err
}
