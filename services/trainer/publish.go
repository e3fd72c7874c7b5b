package trainer

import (
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/jetrl/jetrl/proto"
	"github.com/jetrl/jetrl/shared/codec"
	"github.com/nats-io/nats.go/jetstream"
)

// WeightsChunkSize is the Object Store chunk size of published weights. The client's default (128 KiB)
// makes 512 messages, each acknowledged, of 64 MB of weights; 1 MiB chunks carry the same bytes in an
// eighth of the messages and stay far below the mesh's 8 MB max payload.
const WeightsChunkSize = 1 << 20

// chunkSize is the Object Store chunk size of an n-byte object: WeightsChunkSize, or n when smaller. The
// client allocates (and zeroes) a whole chunk for every put, so a small policy's weights and checkpoint,
// written with every version, would otherwise cost a megabyte each.
func chunkSize(n int) uint32 {
	return uint32(max(min(n, WeightsChunkSize), 1))
}

// PublishWeights makes the weight blob w visible as policy version rec.Version: it puts w in the weights
// Object Store as proto.WeightsObject(rec.Version), then the version record in the policy KV bucket, which
// every rollout watches. It fills in the record's Schema, Object, Size, SHA256 and PublishedAt and returns
// it. SHA256 is the digest the Object Store computed while storing the chunks (and that every Get checks
// the bytes against), so the weights are hashed once, not twice.
func PublishWeights(ctx context.Context, objects jetstream.ObjectStore, kv jetstream.KeyValue, rec proto.PolicyVersion, w []byte) (proto.PolicyVersion, error) {
	rec, _, err := publishWeights(ctx, objects, rec, w, func(data []byte) (uint64, error) { return kv.Put(ctx, proto.KeyPolicyCurrent, data) })
	return rec, err
}

// publishWeights is PublishWeights with the version record written by put, which returns its revision.
func publishWeights(ctx context.Context, objects jetstream.ObjectStore, rec proto.PolicyVersion, w []byte, put func([]byte) (uint64, error)) (proto.PolicyVersion, uint64, error) {
	rec.Schema, rec.Object, rec.Size = proto.SchemaVersion, proto.WeightsObject(rec.Version), int64(len(w))
	info, err := objects.Put(ctx, jetstream.ObjectMeta{Name: rec.Object, Opts: &jetstream.ObjectMetaOptions{ChunkSize: chunkSize(len(w))}}, bytes.NewReader(w))
	if err != nil {
		return rec, 0, fmt.Errorf("put weights %s: %w", rec.Object, err)
	}
	sum, err := jetstream.DecodeObjectDigest(info.Digest)
	if err != nil {
		return rec, 0, fmt.Errorf("weights %s: digest %q: %w", rec.Object, info.Digest, err)
	}
	rec.SHA256, rec.PublishedAt = hex.EncodeToString(sum), time.Now().UnixNano()
	data, err := codec.Marshal(rec, 0)
	if err != nil {
		return rec, 0, err
	}
	rev, err := put(data)
	if err != nil {
		return rec, 0, fmt.Errorf("put policy version: %w", err)
	}
	return rec, rev, nil
}
