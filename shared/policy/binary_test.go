package policy

import (
	"encoding/binary"
	"errors"
	"hash/crc32"
	"math"
	"slices"
	"testing"
	"unsafe"
)

func TestMarshalRoundTrip(t *testing.T) {
	m := newModel(t, Config{Bits: 12, Seed: 4, Temperature: 0.8})
	b, err := m.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	if want := 28 + 4<<12 + 4; len(b) != want {
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
		{"future version", mutate(func(b []byte) []byte { b[8] = 3; return reframe(b) })},
		{"unknown flag", mutate(func(b []byte) []byte { b[24] |= 2; return reframe(b) })},
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

// A task-salted model keeps its flag through the weight file, and version 1 files (no flags) still load.
func TestTaskSaltRoundTripAndVersion1(t *testing.T) {
	m := newModel(t, Config{Bits: 10, Seed: 2, TaskSalt: true})
	b, err := m.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	got, err := Load(b)
	if err != nil || !got.TaskSalt {
		t.Fatalf("Load = %+v, %v; want TaskSalt kept", got != nil && got.TaskSalt, err)
	}
	// The same model in the version 1 layout: no flags word.
	v1 := append([]byte(nil), b[:24]...)
	v1[8] = 1
	v1 = append(v1, b[28:len(b)-4]...)
	v1 = reframe(append(v1, 0, 0, 0, 0))
	old, err := Load(v1)
	if err != nil || old.TaskSalt || !slices.Equal(old.Weights, m.Weights) {
		t.Fatalf("version 1 file: %v (TaskSalt %v)", err, old != nil && old.TaskSalt)
	}
}

// With TaskSalt, two tasks with the same texts score independently: training one leaves the other as it was.
func TestTaskSaltSeparatesTasks(t *testing.T) {
	m := newModel(t, Config{Bits: 20, Seed: 1, TaskSalt: true}) // large enough that hash collisions between the tasks are unlikely
	in := Input{Task: "a", Instruction: "open the red door", Observation: "doors: red, blue", Candidates: []string{"open red door", "open blue door"}}
	other := in
	other.Task = "b"
	before := m.Scores(other)
	grad := make([]float64, m.NumParams())
	m.AccumulateGrad(in, 0, 1, grad)
	for i, g := range grad {
		m.Weights[i] += float32(g)
	}
	if after := m.Scores(other); !slices.Equal(before, after) {
		t.Fatalf("training task a moved task b's scores: %v -> %v", before, after)
	}
	if s := m.Scores(in); s[0] <= s[1] {
		t.Fatalf("training task a did not move its own scores: %v", s)
	}
}

// LoadInPlace reads what Load reads, shares the blob's memory where it can, and refuses what Load refuses.
func TestLoadInPlace(t *testing.T) {
	cfg := Config{Bits: 10, Seed: 3}
	cfg.SetDefaults()
	m, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	blob, err := m.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	got, err := LoadInPlace(blob)
	if err != nil {
		t.Fatal(err)
	}
	if got.Bits != m.Bits || got.Temperature != m.Temperature || !slices.Equal(got.Weights, m.Weights) {
		t.Fatalf("LoadInPlace = %d bits, temperature %v; want the marshalled model", got.Bits, got.Temperature)
	}
	if littleEndian && &got.Weights[0] != (*float32)(unsafe.Pointer(&blob[modelHeader])) {
		t.Fatal("LoadInPlace copied the weights on a little-endian machine")
	}
	bad := slices.Clone(blob)
	binary.LittleEndian.PutUint32(bad[modelHeader+8:], math.Float32bits(float32(math.NaN())))
	binary.LittleEndian.PutUint32(bad[len(bad)-4:], crc32.ChecksumIEEE(bad[:len(bad)-4]))
	if _, err := LoadInPlace(bad); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("LoadInPlace of a NaN weight: %v, want ErrCorrupt", err)
	}
	if _, err := LoadInPlace(blob[:len(blob)-1]); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("LoadInPlace of a truncated blob: %v, want ErrCorrupt", err)
	}
}
