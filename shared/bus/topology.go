package bus

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jetrl/jetrl/proto"
	"github.com/nats-io/nats.go/jetstream"
)

// EnsureTopology creates or updates every stream, KV bucket and Object Store bucket that proto lists.
// It is idempotent, so every service calls it on start; replicas is 1 on one server and 3 on a cluster.
func EnsureTopology(ctx context.Context, js jetstream.JetStream, replicas int) error {
	if replicas < 1 {
		replicas = 1
	}
	for _, s := range proto.Streams {
		_, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
			Name:       s.Name,
			Subjects:   s.Subjects,
			Retention:  jetstream.LimitsPolicy,
			Storage:    jetstream.FileStorage,
			MaxBytes:   s.MaxBytes,
			MaxAge:     s.MaxAge,
			MaxMsgs:    s.MaxMsgs,
			MaxMsgSize: s.MaxMsg,
			Duplicates: proto.DedupWindow,
			Replicas:   replicas,
			Discard:    jetstream.DiscardOld,
		})
		if err != nil {
			return fmt.Errorf("stream %s: %w", s.Name, err)
		}
	}
	for _, b := range proto.KVBuckets {
		_, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
			Bucket:   b.Bucket,
			History:  b.History,
			TTL:      b.TTL,
			Storage:  jetstream.FileStorage,
			Replicas: replicas,
		})
		if err != nil {
			return fmt.Errorf("kv %s: %w", b.Bucket, err)
		}
	}
	for _, b := range proto.ObjectBuckets {
		_, err := js.CreateOrUpdateObjectStore(ctx, jetstream.ObjectStoreConfig{
			Bucket:   b,
			Storage:  jetstream.FileStorage,
			Replicas: replicas,
		})
		if err != nil {
			return fmt.Errorf("object store %s: %w", b, err)
		}
	}
	return nil
}

// ConsumerConfig is the durable pull consumer every stage uses: explicit acks after the effect, no
// delivery limit (a message is never given up on), and a bound on unacked messages.
func ConsumerConfig(durable, filter string, maxAckPending int, ackWait time.Duration) jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:       durable,
		FilterSubject: filter,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       ackWait,
		MaxDeliver:    -1,
		MaxAckPending: maxAckPending,
		DeliverPolicy: jetstream.DeliverAllPolicy,
	}
}

// ResetTopology deletes every stream and bucket of the mesh (for a fresh run on a server that held an
// earlier one). Missing ones are not an error.
func ResetTopology(ctx context.Context, js jetstream.JetStream) error {
	for _, s := range proto.Streams {
		if err := js.DeleteStream(ctx, s.Name); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
			return fmt.Errorf("delete stream %s: %w", s.Name, err)
		}
	}
	for _, b := range proto.KVBuckets {
		if err := js.DeleteKeyValue(ctx, b.Bucket); err != nil && !errors.Is(err, jetstream.ErrBucketNotFound) && !errors.Is(err, jetstream.ErrStreamNotFound) {
			return fmt.Errorf("delete kv %s: %w", b.Bucket, err)
		}
	}
	for _, b := range proto.ObjectBuckets {
		if err := js.DeleteObjectStore(ctx, b); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) && !errors.Is(err, jetstream.ErrBucketNotFound) {
			return fmt.Errorf("delete object store %s: %w", b, err)
		}
	}
	return nil
}
