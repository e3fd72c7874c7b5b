package trainer_test

import (
	"testing"

	"github.com/jetrl/jetrl/proto"
	"github.com/jetrl/jetrl/services/trainer"
)

// PublishWeights stores a blob of several chunks and a record whose sha256 is the blob's (m.current checks
// the record against the bytes it names).
func TestPublishWeights(t *testing.T) {
	m := newMesh(t)
	ctx := testCtx(t)
	objects, err := m.js.ObjectStore(ctx, proto.BucketWeights)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := m.js.KeyValue(ctx, proto.BucketPolicy)
	if err != nil {
		t.Fatal(err)
	}
	blob := make([]byte, 2*trainer.WeightsChunkSize+12345)
	for i := range blob {
		blob[i] = byte(i * 7)
	}
	rec, err := trainer.PublishWeights(ctx, objects, kv, proto.PolicyVersion{Version: 7, EpisodesTrained: 99, BatchID: "b-7"}, blob)
	if err != nil {
		t.Fatal(err)
	}
	got, w := m.current(t)
	if got != rec || got.Version != 7 || got.EpisodesTrained != 99 || got.BatchID != "b-7" || got.Schema != proto.SchemaVersion || string(w) != string(blob) {
		t.Fatalf("published %+v, KV holds %+v", rec, got)
	}
	info, err := objects.GetInfo(ctx, rec.Object)
	if err != nil {
		t.Fatal(err)
	}
	if info.Chunks != 3 || info.Opts == nil || info.Opts.ChunkSize != trainer.WeightsChunkSize {
		t.Fatalf("object has %d chunks, options %+v; want 3 chunks of %d bytes", info.Chunks, info.Opts, trainer.WeightsChunkSize)
	}
}
