package policy

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math"
	"unsafe"
)

// Weight file layout, little-endian: magic "JETRLPOL", format version uint32, Bits uint32, Temperature
// float64, (version 2) flags uint32, 1<<Bits float32 weights, then the IEEE CRC32 of everything before it.
// Version 1 files (no flags) are still read.
const (
	modelMagic     = "JETRLPOL"
	modelVersion   = 2
	modelHeaderV1  = len(modelMagic) + 4 + 4 + 8
	modelHeader    = modelHeaderV1 + 4
	flagTaskSalted = 1 << 0
)

// MarshalBinary encodes the model in the weight file layout.
func (m *Model) MarshalBinary() ([]byte, error) {
	if err := validateShape(m.Bits, m.Temperature); err != nil {
		return nil, err
	}
	if len(m.Weights) != 1<<m.Bits {
		return nil, fmt.Errorf("%w: %d weights for Bits %d", ErrConfig, len(m.Weights), m.Bits)
	}
	b := make([]byte, 0, modelHeader+4*len(m.Weights)+4)
	b = append(b, modelMagic...)
	b = binary.LittleEndian.AppendUint32(b, modelVersion)
	b = binary.LittleEndian.AppendUint32(b, uint32(m.Bits))
	b = binary.LittleEndian.AppendUint64(b, math.Float64bits(m.Temperature))
	var flags uint32
	if m.TaskSalt {
		flags |= flagTaskSalted
	}
	b = binary.LittleEndian.AppendUint32(b, flags)
	b = appendFloat32s(b, m.Weights)
	return binary.LittleEndian.AppendUint32(b, crc32.ChecksumIEEE(b)), nil
}

// UnmarshalBinary decodes the weight file layout; on error m is left unchanged.
func (m *Model) UnmarshalBinary(b []byte) error { return m.unmarshal(b, false) }

func (m *Model) unmarshal(b []byte, inPlace bool) error {
	body, err := checkFrame(b, modelMagic, modelHeaderV1)
	if err != nil {
		return err
	}
	header, flags := modelHeaderV1, uint32(0)
	switch v := binary.LittleEndian.Uint32(body[8:]); v {
	case 1:
	case modelVersion:
		if len(body) < modelHeader {
			return fmt.Errorf("%w: weight file is %d bytes, shorter than its header", ErrCorrupt, len(b))
		}
		header, flags = modelHeader, binary.LittleEndian.Uint32(body[modelHeaderV1:])
	default:
		return fmt.Errorf("%w: weight format version %d, this build reads 1 and %d", ErrCorrupt, v, modelVersion)
	}
	if flags&^flagTaskSalted != 0 {
		return fmt.Errorf("%w: unknown weight flags %#x", ErrCorrupt, flags)
	}
	bits := int(binary.LittleEndian.Uint32(body[12:]))
	temperature := math.Float64frombits(binary.LittleEndian.Uint64(body[16:]))
	if err := validateShape(bits, temperature); err != nil {
		return fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	if want := header + 4<<bits; len(body) != want {
		return fmt.Errorf("%w: weight file is %d bytes, Bits %d needs %d", ErrCorrupt, len(b), bits, want+4)
	}
	var w []float32
	if inPlace {
		w, err = viewFloat32s(body[header:], 1<<bits)
	} else {
		w, err = readFloat32s(body[header:], 1<<bits)
	}
	if err != nil {
		return err
	}
	m.Bits, m.Temperature, m.Weights, m.TaskSalt = bits, temperature, w, flags&flagTaskSalted != 0
	return nil
}

// Load decodes a model from its weight file.
func Load(b []byte) (*Model, error) {
	m := new(Model)
	if err := m.UnmarshalBinary(b); err != nil {
		return nil, err
	}
	return m, nil
}

// LoadInPlace is Load without copying the weights out of b: on a little-endian machine the model's Weights
// are b's own bytes, so b must not be modified or reused afterwards (elsewhere it copies, as Load does). It
// saves a rollout that has just fetched a large blob a second buffer of its size and the copy into it.
func LoadInPlace(b []byte) (*Model, error) {
	m := new(Model)
	if err := m.unmarshal(b, true); err != nil {
		return nil, err
	}
	return m, nil
}

// littleEndian reports whether float32 bits in memory are in the weight file's byte order.
var littleEndian = binary.NativeEndian.Uint16([]byte{1, 0}) == 1

// viewFloat32s is readFloat32s without the copy where memory order and alignment allow it.
func viewFloat32s(b []byte, n int) ([]float32, error) {
	if !littleEndian || len(b) < 4*n || n == 0 || uintptr(unsafe.Pointer(&b[0]))%4 != 0 {
		return readFloat32s(b, n)
	}
	w := unsafe.Slice((*float32)(unsafe.Pointer(&b[0])), n)
	for i, x := range w {
		if x-x != 0 {
			return nil, fmt.Errorf("%w: value %d is %v", ErrCorrupt, i, x)
		}
	}
	return w, nil
}

// checkFrame verifies the magic and the trailing CRC32 and returns b without the CRC.
func checkFrame(b []byte, magic string, header int) ([]byte, error) {
	if len(b) < header+4 {
		return nil, fmt.Errorf("%w: %d bytes is too short for a %s file", ErrCorrupt, len(b), magic)
	}
	if string(b[:len(magic)]) != magic {
		return nil, fmt.Errorf("%w: magic %q, want %q", ErrCorrupt, b[:len(magic)], magic)
	}
	body := b[:len(b)-4]
	if got, want := binary.LittleEndian.Uint32(b[len(body):]), crc32.ChecksumIEEE(body); got != want {
		return nil, fmt.Errorf("%w: %s checksum %08x, computed %08x (truncated or damaged)", ErrCorrupt, magic, got, want)
	}
	return body, nil
}

func appendFloat32s(b []byte, xs []float32) []byte {
	for _, x := range xs {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(x))
	}
	return b
}

// readFloat32s decodes n float32s and refuses any NaN or infinity.
func readFloat32s(b []byte, n int) ([]float32, error) {
	out := make([]float32, n)
	for i := range out {
		x := math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
		if x-x != 0 {
			return nil, fmt.Errorf("%w: value %d is %v", ErrCorrupt, i, x)
		}
		out[i] = x
	}
	return out, nil
}
