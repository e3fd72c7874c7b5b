package bus

import (
	"context"
	"fmt"

	"github.com/jetrl/jetrl/proto"
	"github.com/jetrl/jetrl/shared/codec"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
)

// WatchPolicyVersion calls onUpdate with every version record published under BucketPolicy until ctx ends
// (the current one first, if there is one).
func WatchPolicyVersion(ctx context.Context, js jetstream.JetStream, log zerolog.Logger, onUpdate func(proto.PolicyVersion)) error {
	kv, err := js.KeyValue(ctx, proto.BucketPolicy)
	if err != nil {
		return fmt.Errorf("kv %s: %w", proto.BucketPolicy, err)
	}
	w, err := kv.Watch(ctx, proto.KeyPolicyCurrent)
	if err != nil {
		return fmt.Errorf("watch %s: %w", proto.BucketPolicy, err)
	}
	defer func() { _ = w.Stop() }()
	for {
		select {
		case <-ctx.Done():
			return nil
		case e, ok := <-w.Updates():
			if !ok {
				return nil
			}
			if e == nil || e.Operation() != jetstream.KeyValuePut {
				continue
			}
			var rec proto.PolicyVersion
			if err := codec.Unmarshal(e.Value(), &rec); err != nil {
				log.Error().Err(err).Msg("bad policy version record")
				continue
			}
			onUpdate(rec)
		}
	}
}
