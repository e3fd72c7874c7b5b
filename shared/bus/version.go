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
	return WatchKey(ctx, kv, proto.KeyPolicyCurrent, func(value []byte) {
		var rec proto.PolicyVersion
		if err := codec.Unmarshal(value, &rec); err != nil {
			log.Error().Err(err).Msg("bad policy version record")
			return
		}
		onUpdate(rec)
	})
}

// WatchKey calls onPut with key's value as it is now (if set) and with each value put after, until ctx
// ends; deletes are skipped.
func WatchKey(ctx context.Context, kv jetstream.KeyValue, key string, onPut func(value []byte)) error {
	w, err := kv.Watch(ctx, key)
	if err != nil {
		return fmt.Errorf("watch %s: %w", key, err)
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
				continue // nil: the values as they were have been delivered
			}
			onPut(e.Value())
		}
	}
}
