package trainer

import (
	"encoding/binary"
	"fmt"
	"testing"

	"github.com/jetrl/jetrl/proto"
	"github.com/jetrl/jetrl/shared/codec"
	"github.com/nats-io/nuid"
)

// BenchmarkCheckpointEncode encodes the trainer's checkpoint, written with every version, at the bound of
// remembered groups: as it is kept (the count, the keys being in StreamTrainedGroups), and as it was kept
// before (every remembered group's 8-byte key, and before that its id).
func BenchmarkCheckpointEncode(b *testing.B) {
	logged := checkpoint{GroupsRemembered: proto.MaxGroupsRemembered}
	keys := checkpoint{}
	ids := checkpoint{}
	for range proto.MaxGroupsRemembered {
		id := nuid.Next()
		ids.Groups = append(ids.Groups, id)
		keys.GroupKeys = binary.LittleEndian.AppendUint64(keys.GroupKeys, groupKey(id))
	}
	for _, c := range []struct {
		name string
		cp   checkpoint
	}{{"logged", logged}, {"keys", keys}, {"ids", ids}} {
		b.Run(fmt.Sprintf("%s=%d", c.name, proto.MaxGroupsRemembered), func(b *testing.B) {
			data, err := codec.Marshal(c.cp, 0)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := codec.Marshal(c.cp, 0); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(len(data)), "bytes")
		})
	}
}

// The group keys are the FNV-1a hash of the id, stable across processes (a resumed trainer recomputes them).
func TestGroupKeyIsFNV1a(t *testing.T) {
	// FNV-1a 64 of "" is its offset basis; of "a", the published test vector.
	if groupKey("") != 0xcbf29ce484222325 || groupKey("a") != 0xaf63dc4c8601ec8c {
		t.Fatalf("groupKey: %x, %x", groupKey(""), groupKey("a"))
	}
}

func TestChunkSize(t *testing.T) {
	for _, tc := range []struct {
		givenBytes    int
		expectedChunk uint32
	}{
		{givenBytes: 0, expectedChunk: 1},
		{givenBytes: 4096, expectedChunk: 4096},
		{givenBytes: WeightsChunkSize, expectedChunk: WeightsChunkSize},
		{givenBytes: 64 << 20, expectedChunk: WeightsChunkSize},
	} {
		if got := chunkSize(tc.givenBytes); got != tc.expectedChunk {
			t.Errorf("chunkSize(%d) = %d, want %d", tc.givenBytes, got, tc.expectedChunk)
		}
	}
}
