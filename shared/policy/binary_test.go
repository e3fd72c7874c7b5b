package policy

import (
	"encoding/binary"
	"errors"
	"hash/crc32"
	"math"
	"slices"
	"testing"
)

func TestMarshalRoundTrip(t *testing.T) {
	m := newModel(t, Config{Bits: 12, Seed: 4, Temperature: 0.8})
	b, err := m.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	if want := 24 + 4<<12 + 4; len(b) != want {
		t.Fatalf("weight file is %d bytes, want %d", len(b), want)
	}
	got, err := Load(b)
	if err != nil {
		t.Fatal(err)
	}
	if got.Bits != m.Bits || got.Temperature != m.Temperature || !slices.Equal(got.Weights, m.Weights) {
		t.Fatal("round trip changed the model")
	}
	if s, want := got.Scores(testInput()), m.Scores(testInput()); !slices.Equal(s, want) {
		t.Fatalf("scores after round trip %v, want %v", s, want)
	}
}

// reframe recomputes the CRC so a test can reach the checks behind it.
func reframe(b []byte) []byte {
	body := b[:len(b)-4]
	return binary.LittleEndian.AppendUint32(slices.Clone(body), crc32.ChecksumIEEE(body))
}

func TestUnmarshalRejectsBadInput(t *testing.T) {
	m := newModel(t, Config{Bits: 10, Seed: 4})
	good, err := m.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	mutate := func(f func(b []byte) []byte) []byte { return f(slices.Clone(good)) }
	for _, tc := range []struct {
		name  string
		given []byte
	}{
		{"empty", nil},
		{"header only", good[:24]},
		{"truncated by one byte", good[:len(good)-1]},
		{"truncated by half", good[:len(good)/2]},
		{"extra byte", append(slices.Clone(good), 0)},
		{"flipped weight byte", mutate(func(b []byte) []byte { b[100] ^= 0x10; return b })},
		{"flipped checksum", mutate(func(b []byte) []byte { b[len(b)-1] ^= 1; return b })},
		{"wrong magic", mutate(func(b []byte) []byte { copy(b, "JETRLADM"); return reframe(b) })},
		{"future version", mutate(func(b []byte) []byte { b[8] = 2; return reframe(b) })},
		{"bits out of range", mutate(func(b []byte) []byte { b[12] = 40; return reframe(b) })},
		{"bits disagree with size", mutate(func(b []byte) []byte { b[12] = 11; return reframe(b) })},
		{"zero temperature", mutate(func(b []byte) []byte { clear(b[16:24]); return reframe(b) })},
		{"NaN weight", mutate(func(b []byte) []byte {
			binary.LittleEndian.PutUint32(b[24:], math.Float32bits(float32(math.NaN())))
			return reframe(b)
		})},
	} {
		before := m.Clone()
		if err := m.UnmarshalBinary(tc.given); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: UnmarshalBinary() = %v, want ErrCorrupt", tc.name, err)
		}
		if !slices.Equal(m.Weights, before.Weights) || m.Bits != before.Bits {
			t.Errorf("%s: a refused UnmarshalBinary changed the model", tc.name)
		}
		if got, err := Load(tc.given); err == nil || got != nil {
			t.Errorf("%s: Load() = %v, %v", tc.name, got, err)
		}
	}
}

func TestMarshalRejectsInconsistentModel(t *testing.T) {
	m := newModel(t, Config{Bits: 10})
	m.Weights = m.Weights[:100]
	if _, err := m.MarshalBinary(); err == nil {
		t.Fatal("marshalled 100 weights as Bits 10")
	}
}
