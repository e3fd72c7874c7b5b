package codec_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/jetrl/jetrl/proto"
	"github.com/jetrl/jetrl/shared/codec"
	"github.com/vmihailenco/msgpack/v5"
)

func TestMarshal(t *testing.T) {
	small := proto.EnvCancelRequest{Schema: proto.SchemaVersion, SessionID: "h1-1"}
	smallBytes, err := msgpack.Marshal(small)
	if err != nil {
		t.Fatal(err)
	}
	big := proto.Episode{Schema: proto.SchemaVersion, ID: "e", Instruction: strings.Repeat("x", 2000)}
	tests := []struct {
		name          string
		givenValue    any
		givenLimit    int
		expectedErr   error
		expectedBytes []byte
	}{
		{name: "no limit", givenValue: small, givenLimit: 0, expectedBytes: smallBytes},
		{name: "exactly at the limit", givenValue: small, givenLimit: len(smallBytes), expectedBytes: smallBytes},
		{name: "one byte over the limit", givenValue: small, givenLimit: len(smallBytes) - 1, expectedErr: proto.ErrPayloadTooLarge},
		{name: "large message under a small limit", givenValue: big, givenLimit: 1000, expectedErr: proto.ErrPayloadTooLarge},
		{name: "large message under the episode limit", givenValue: big, givenLimit: proto.MaxEpisodeBytes},
		{name: "unencodable value", givenValue: map[string]any{"c": make(chan int)}, expectedErr: proto.ErrMalformed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b, err := codec.Marshal(tc.givenValue, tc.givenLimit)
			if !errors.Is(err, tc.expectedErr) {
				t.Fatalf("Marshal error = %v, want %v", err, tc.expectedErr)
			}
			if tc.expectedErr != nil {
				if b != nil {
					t.Fatalf("Marshal returned %d bytes with an error", len(b))
				}
				return
			}
			if tc.givenLimit > 0 && len(b) > tc.givenLimit {
				t.Fatalf("Marshal returned %d bytes over limit %d", len(b), tc.givenLimit)
			}
			if tc.expectedBytes != nil && string(b) != string(tc.expectedBytes) {
				t.Fatalf("Marshal = %x, want %x", b, tc.expectedBytes)
			}
		})
	}
}

func TestUnmarshal(t *testing.T) {
	enc := func(v any) []byte {
		t.Helper()
		b, err := msgpack.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	good := proto.EnvStartRequest{Schema: proto.SchemaVersion, Task: "alfworld", Split: proto.SplitTrain, Seed: 7, EpisodeID: "g-0"}
	tests := []struct {
		name        string
		givenData   []byte
		expectedErr error
		expected    proto.EnvStartRequest
	}{
		{name: "valid", givenData: enc(good), expected: good},
		{name: "future schema", givenData: enc(proto.EnvStartRequest{Schema: proto.SchemaVersion + 1, Task: "alfworld"}), expectedErr: proto.ErrSchema},
		{name: "missing schema", givenData: enc(map[string]any{"task": "alfworld"}), expectedErr: proto.ErrSchema},
		{name: "msgpack nil", givenData: []byte{0xc0}, expectedErr: proto.ErrSchema},
		{name: "plain text", givenData: []byte("this is not msgpack"), expectedErr: proto.ErrMalformed},
		{name: "JSON", givenData: []byte(`{"schema":1,"task":"alfworld"}`), expectedErr: proto.ErrMalformed},
		{name: "empty", givenData: nil, expectedErr: proto.ErrMalformed},
		{name: "truncated", givenData: enc(good)[:10], expectedErr: proto.ErrMalformed},
		{name: "never-used code", givenData: []byte{0xc1}, expectedErr: proto.ErrMalformed},
		{name: "wrong field type", givenData: enc(map[string]any{"schema": 1, "seed": "seven"}), expectedErr: proto.ErrMalformed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var got proto.EnvStartRequest
			err := codec.Unmarshal(tc.givenData, &got)
			if !errors.Is(err, tc.expectedErr) {
				t.Fatalf("Unmarshal error = %v, want %v", err, tc.expectedErr)
			}
			if tc.expectedErr == nil && got != tc.expected {
				t.Fatalf("Unmarshal = %+v, want %+v", got, tc.expected)
			}
		})
	}
}

// A value without a Schema field (a map, a struct of another package) is decoded without the schema check.
func TestUnmarshalWithoutSchemaField(t *testing.T) {
	b, err := codec.Marshal(map[string]int{"a": 1}, 0)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]int
	if err := codec.Unmarshal(b, &m); err != nil {
		t.Fatalf("Unmarshal into a map: %v", err)
	}
	if m["a"] != 1 {
		t.Fatalf("decoded %v, want a=1", m)
	}
}

func TestRoundTrip(t *testing.T) {
	in := proto.Episode{
		Schema: proto.SchemaVersion, ID: "g-1", GroupID: "g", GroupSize: 2, Task: "alfworld", Reward: 1,
		Status: proto.StatusCompleted, StartVersion: 3,
		Turns: []proto.Turn{{Observation: "o", Candidates: []string{"a", "b"}, Chosen: 1, LogProb: -0.5, Version: 3, Policy: proto.PolicyStale}},
	}
	b, err := codec.Marshal(in, proto.MaxEpisodeBytes)
	if err != nil {
		t.Fatal(err)
	}
	var out proto.Episode
	if err := codec.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	if out.ID != in.ID || out.StartVersion != 3 || len(out.Turns) != 1 || out.Turns[0].LogProb != -0.5 || out.Turns[0].Policy != proto.PolicyStale {
		t.Fatalf("round trip = %+v, want %+v", out, in)
	}
}
