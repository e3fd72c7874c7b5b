package mesh

import (
	"context"
	"errors"

	"github.com/jetrl/jetrl/services/rollout"
	"github.com/jetrl/jetrl/shared/envclient"
	"github.com/jetrl/jetrl/shared/policy"
	"github.com/nats-io/nats.go/jetstream"
)

// Loaded is a policy loaded from the Object Store and the version it was published as.
type Loaded struct {
	Model   *policy.Model
	Version int64
}

// EvaluateCurrent loads the policy version currently published and evaluates it greedily.
func EvaluateCurrent(ctx context.Context, js jetstream.JetStream, env *envclient.Client, cfg rollout.EvalConfig) (map[string]rollout.EvalResult, Loaded, error) {
	src, err := rollout.NewWeightsSource(ctx, js)
	if err != nil {
		return nil, Loaded{}, err
	}
	rec, ok, err := src.Current(ctx)
	if err != nil {
		return nil, Loaded{}, err
	}
	if !ok {
		return nil, Loaded{}, errors.New("no policy published yet")
	}
	model, err := src.Load(ctx, rec)
	if err != nil {
		return nil, Loaded{}, err
	}
	pool := rollout.NewWeightsPool(0, 0, true, cfg.Seed)
	pool.Set(model, rec.Version)
	res, err := rollout.Evaluate(ctx, env, pool, cfg)
	return res, Loaded{model, rec.Version}, err
}
