package rollout_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"slices"
	"testing"

	"github.com/jetrl/jetrl/proto"
	"github.com/jetrl/jetrl/services/rollout"
	"github.com/jetrl/jetrl/shared/policy"
	"github.com/nats-io/nats.go/jetstream"
)

// Load reads an object of many chunks straight from the stream, refuses a blob whose own checksum fails (the
// digest matching it or not), and leaves no consumer behind.
func TestWeightsSourceLoadsChunksDirectly(t *testing.T) {
	m := newMesh(t)
	ctx := testCtx(t)
	src, err := rollout.NewWeightsSource(ctx, m.js)
	if err != nil {
		t.Fatal(err)
	}
	objects, err := m.js.ObjectStore(ctx, proto.BucketWeights)
	if err != nil {
		t.Fatal(err)
	}
	put := func(v int64, blob []byte) proto.PolicyVersion {
		t.Helper()
		name := proto.WeightsObject(v)
		if _, err := objects.Put(ctx, jetstream.ObjectMeta{Name: name, Opts: &jetstream.ObjectMetaOptions{ChunkSize: 1000}}, bytes.NewReader(blob)); err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(blob)
		return proto.PolicyVersion{Schema: proto.SchemaVersion, Version: v, Object: name, Size: int64(len(blob)), SHA256: hex.EncodeToString(sum[:])}
	}
	pm := newModel(t, 4) // 2^10 weights: a 4 KiB blob in 5 chunks of 1000 bytes
	blob, err := pm.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	for v := range int64(3) {
		got, err := src.Load(ctx, put(v, blob))
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got.Weights, pm.Weights) {
			t.Fatalf("version %d: loaded weights differ from the published ones", v)
		}
	}
	bad := slices.Clone(blob)
	bad[100] ^= 0x40
	if _, err := src.Load(ctx, put(3, bad)); !errors.Is(err, policy.ErrCorrupt) {
		t.Fatalf("Load of a damaged blob: %v, want policy.ErrCorrupt", err)
	}
	st, err := m.js.Stream(ctx, "OBJ_"+proto.BucketWeights)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Consumers != 0 {
		t.Fatalf("%d consumers left on the weights stream after the loads", info.State.Consumers)
	}
}
