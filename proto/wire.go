package proto

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"reflect"
	"slices"
	"sync"

	"github.com/vmihailenco/msgpack/v5"
	"github.com/vmihailenco/msgpack/v5/msgpcode"
)

// This file holds the hand-written parts of the wire codec: float slices as one packed blob, and the
// encoders and decoders of the message every training stage reads and writes most (Episode and its Turns):
// the decoders allocate nothing beyond the decoded data itself. They write and read exactly what the struct
// tags in messages.go make the reflecting msgpack codec write and read: wire_test.go holds them to it,
// field by field, and the golden fixtures byte for byte.

// Float64s is a float64 slice that goes on the wire as one msgpack bin: the IEEE 754 bits of each value,
// little-endian, 8 bytes per value, in order. A nil slice is msgpack nil; an empty one is a bin of length 0.
type Float64s []float64

// floatChunk is how many values are converted per write or read through a stack buffer.
const floatChunk = 64

// EncodeMsgpack implements msgpack.CustomEncoder.
func (f Float64s) EncodeMsgpack(e *msgpack.Encoder) error {
	if f == nil {
		return e.EncodeNil()
	}
	if err := e.EncodeBytesLen(8 * len(f)); err != nil {
		return err
	}
	var buf [8 * floatChunk]byte
	for len(f) > 0 {
		n := min(len(f), floatChunk)
		for i, x := range f[:n] {
			binary.LittleEndian.PutUint64(buf[8*i:], math.Float64bits(x))
		}
		if err := write(e, buf[:8*n]); err != nil {
			return err
		}
		f = f[n:]
	}
	return nil
}

// write writes b to the encoder's output; writing to the bytes.Buffer behind msgpack.Marshal directly keeps
// b (a caller's stack buffer) from escaping to the heap.
func write(e *msgpack.Encoder, b []byte) error {
	if w, ok := e.Writer().(*bytes.Buffer); ok {
		_, err := w.Write(b)
		return err
	}
	_, err := e.Writer().Write(bytes.Clone(b))
	return err
}

// DecodeMsgpack implements msgpack.CustomDecoder.
func (f *Float64s) DecodeMsgpack(d *msgpack.Decoder) error {
	n, err := d.DecodeBytesLen()
	if err != nil {
		return err
	}
	if n == -1 {
		*f = nil
		return nil
	}
	if n%8 != 0 {
		return fmt.Errorf("msgpack: float64 blob of %d bytes is not a multiple of 8", n)
	}
	if err := checkRemaining(d, n); err != nil {
		return err
	}
	out := make(Float64s, n/8)
	var buf [8 * floatChunk]byte
	for i := 0; i < len(out); {
		k := min(len(out)-i, floatChunk)
		if err := readFull(d, buf[:8*k]); err != nil {
			return err
		}
		for j := range k {
			out[i+j] = math.Float64frombits(binary.LittleEndian.Uint64(buf[8*j:]))
		}
		i += k
	}
	*f = out
	return nil
}

// checkRemaining refuses a length that claims more bytes than the input holds, before anything is allocated
// for it (when the decoder reads from memory, as codec.Unmarshal's does).
func checkRemaining(d *msgpack.Decoder, n int) error {
	if r, ok := d.Buffered().(*bytes.Reader); ok && n > r.Len() {
		return fmt.Errorf("msgpack: length %d exceeds the %d bytes left", n, r.Len())
	}
	return nil
}

// EncodeMsgpack implements msgpack.CustomEncoder: the bytes the struct tags of Episode make the reflecting
// encoder write (a map of the tagged fields in declaration order, failure omitted when empty, int fields in
// their smallest encoding, int64 and uint64 ones in 8 bytes), without its per-field lookups and boxing.
func (e Episode) EncodeMsgpack(enc *msgpack.Encoder) error {
	n := 18
	if e.Failure == "" {
		n--
	}
	w := wireWriter{enc: enc}
	w.mapLen(n)
	w.key("schema").int(e.Schema)
	w.key("id").str(e.ID)
	w.key("group_id").str(e.GroupID)
	w.key("group_size").int(e.GroupSize)
	w.key("task").str(e.Task)
	w.key("split").str(e.Split)
	w.key("seed").uint64(e.Seed)
	w.key("instruction").str(e.Instruction)
	w.key("turns")
	if e.Turns == nil {
		w.null()
	} else {
		w.arrayLen(len(e.Turns))
		for i := range e.Turns {
			if w.err == nil {
				w.err = e.Turns[i].EncodeMsgpack(enc)
			}
		}
	}
	w.key("reward").float64(e.Reward)
	w.key("status").str(e.Status)
	w.key("infra_failure").bool(e.InfraFailure)
	if e.Failure != "" {
		w.key("failure").str(e.Failure)
	}
	w.key("rollout_id").str(e.RolloutID)
	w.key("host_id").str(e.HostID)
	w.key("started_at").int64(e.StartedAt)
	w.key("finished_at").int64(e.FinishedAt)
	w.key("start_version").int64(e.StartVersion)
	return w.err
}

// EncodeMsgpack implements msgpack.CustomEncoder for Turn, as the reflecting encoder writes its tags.
func (t Turn) EncodeMsgpack(enc *msgpack.Encoder) error {
	w := wireWriter{enc: enc}
	w.mapLen(6)
	w.key("observation").str(t.Observation)
	w.key("candidates")
	if t.Candidates == nil {
		w.null()
	} else {
		w.arrayLen(len(t.Candidates))
		for _, c := range t.Candidates {
			w.str(c)
		}
	}
	w.key("chosen").int(t.Chosen)
	w.key("logprob").float64(t.LogProb)
	w.key("version").int64(t.Version)
	w.key("policy").str(t.Policy)
	return w.err
}

// wireWriter chains encoder calls, keeping the first error.
type wireWriter struct {
	enc *msgpack.Encoder
	err error
}

func (w *wireWriter) key(k string) *wireWriter { w.str(k); return w }

func (w *wireWriter) str(s string) {
	if w.err == nil {
		w.err = w.enc.EncodeString(s)
	}
}

func (w *wireWriter) int(n int) {
	if w.err == nil {
		w.err = w.enc.EncodeInt(int64(n))
	}
}

func (w *wireWriter) int64(n int64) {
	if w.err == nil {
		w.err = w.enc.EncodeInt64(n)
	}
}

func (w *wireWriter) uint64(n uint64) {
	if w.err == nil {
		w.err = w.enc.EncodeUint64(n)
	}
}

func (w *wireWriter) float64(x float64) {
	if w.err == nil {
		w.err = w.enc.EncodeFloat64(x)
	}
}

func (w *wireWriter) bool(b bool) {
	if w.err == nil {
		w.err = w.enc.EncodeBool(b)
	}
}

func (w *wireWriter) null() {
	if w.err == nil {
		w.err = w.enc.EncodeNil()
	}
}

func (w *wireWriter) mapLen(n int) {
	if w.err == nil {
		w.err = w.enc.EncodeMapLen(n)
	}
}

func (w *wireWriter) arrayLen(n int) {
	if w.err == nil {
		w.err = w.enc.EncodeArrayLen(n)
	}
}

// DecodeMsgpack implements msgpack.CustomDecoder: it reads the map that the struct tags of Episode
// produce, in any key order, skipping keys it does not know.
func (e *Episode) DecodeMsgpack(d *msgpack.Decoder) error {
	n, err := d.DecodeMapLen()
	if err != nil {
		return err
	}
	*e = Episode{}
	if n == -1 {
		return nil
	}
	var key [32]byte
	for i := 0; i < n; i++ {
		kn, err := decodeKey(d, &key)
		if err != nil {
			return err
		}
		switch string(key[:kn]) { // compared without a copy
		case "schema":
			e.Schema, err = d.DecodeInt()
		case "id":
			e.ID, err = d.DecodeString()
		case "group_id":
			e.GroupID, err = d.DecodeString()
		case "group_size":
			e.GroupSize, err = d.DecodeInt()
		case "task":
			e.Task, err = d.DecodeString()
		case "split":
			e.Split, err = decodeKnown(d, splits)
		case "seed":
			e.Seed, err = d.DecodeUint64()
		case "instruction":
			e.Instruction, err = d.DecodeString()
		case "turns":
			e.Turns, err = decodeTurns(d)
		case "reward":
			e.Reward, err = d.DecodeFloat64()
		case "status":
			e.Status, err = decodeKnown(d, statuses)
		case "infra_failure":
			e.InfraFailure, err = d.DecodeBool()
		case "failure":
			e.Failure, err = d.DecodeString()
		case "rollout_id":
			e.RolloutID, err = d.DecodeString()
		case "host_id":
			e.HostID, err = d.DecodeString()
		case "started_at":
			e.StartedAt, err = d.DecodeInt64()
		case "finished_at":
			e.FinishedAt, err = d.DecodeInt64()
		case "start_version":
			e.StartVersion, err = d.DecodeInt64()
		default:
			err = d.Skip()
		}
		if err != nil {
			return fmt.Errorf("msgpack: episode field %q: %w", string(key[:kn]), err)
		}
	}
	return nil
}

func decodeTurns(d *msgpack.Decoder) ([]Turn, error) {
	n, err := d.DecodeArrayLen()
	if err != nil || n == -1 {
		return nil, err
	}
	if err := checkRemaining(d, n); err != nil { // every turn takes at least one byte
		return nil, err
	}
	turns := make([]Turn, n)
	for i := range turns {
		if err := turns[i].DecodeMsgpack(d); err != nil {
			return nil, fmt.Errorf("turn %d: %w", i, err)
		}
	}
	return turns, nil
}

// DecodeMsgpack implements msgpack.CustomDecoder for the map that Turn's struct tags produce. The texts of
// a turn (its observation and candidates) share one allocation when the decoder reads from memory.
func (t *Turn) DecodeMsgpack(d *msgpack.Decoder) error {
	n, err := d.DecodeMapLen()
	if err != nil {
		return err
	}
	*t = Turn{}
	if n == -1 {
		return nil
	}
	r, _ := d.Buffered().(*bytes.Reader)
	var sc *turnScratch
	if r != nil {
		sc = scratchPool.Get().(*turnScratch)
		sc.text, sc.ends = sc.text[:0], sc.ends[:0]
		defer sc.release()
	}
	obsEnd := -1 // with sc: the observation is sc.text[:obsEnd] when it came first, else ...
	obsStart := 0
	var key [32]byte
	for i := 0; i < n; i++ {
		kn, err := decodeKey(d, &key)
		if err != nil {
			return err
		}
		switch string(key[:kn]) { // compared without a copy
		case "observation":
			if sc == nil {
				t.Observation, err = d.DecodeString()
				break
			}
			obsStart = len(sc.text)
			sc.text, err = appendText(d, r, sc.text)
			obsEnd = len(sc.text)
		case "candidates":
			if sc == nil {
				t.Candidates, err = decodeStrings(d)
				break
			}
			err = sc.candidates(d, r, t)
		case "chosen":
			t.Chosen, err = d.DecodeInt()
		case "logprob":
			t.LogProb, err = d.DecodeFloat64()
		case "version":
			t.Version, err = d.DecodeInt64()
		case "policy":
			t.Policy, err = decodeKnown(d, policies)
		default:
			err = d.Skip()
		}
		if err != nil {
			return fmt.Errorf("field %q: %w", string(key[:kn]), err)
		}
	}
	if sc != nil && len(sc.text) > 0 {
		text := string(sc.text) // the one allocation of the turn's texts
		if obsEnd >= 0 {
			t.Observation = text[obsStart:obsEnd]
		}
		for i, b := range sc.ends {
			t.Candidates[i] = text[b.start:b.end]
		}
	}
	return nil
}

// turnScratch collects a turn's texts while it is decoded.
type turnScratch struct {
	text []byte
	ends []span
}

type span struct{ start, end int }

var scratchPool = sync.Pool{New: func() any { return &turnScratch{} }}

// release returns the scratch to the pool unless one outsized turn made it large.
func (sc *turnScratch) release() {
	if cap(sc.text) <= 1<<20 {
		scratchPool.Put(sc)
	}
}

// candidates reads the candidates array into t.Candidates (its strings filled in once the turn is read).
func (sc *turnScratch) candidates(d *msgpack.Decoder, r *bytes.Reader, t *Turn) error {
	n, err := d.DecodeArrayLen()
	if err != nil || n == -1 {
		return err
	}
	if n > r.Len() { // every candidate takes at least one byte
		return fmt.Errorf("msgpack: %d candidates in %d bytes", n, r.Len())
	}
	t.Candidates = make([]string, n)
	sc.ends = sc.ends[:0]
	for range n {
		start := len(sc.text)
		if sc.text, err = appendText(d, r, sc.text); err != nil {
			return err
		}
		sc.ends = append(sc.ends, span{start, len(sc.text)})
	}
	return nil
}

// appendText appends the bytes of one msgpack string (nil reads as empty) read straight from r.
func appendText(d *msgpack.Decoder, r *bytes.Reader, b []byte) ([]byte, error) {
	n, err := d.DecodeBytesLen()
	if err != nil || n <= 0 {
		return b, err
	}
	if n > r.Len() {
		return b, io.ErrUnexpectedEOF
	}
	start := len(b)
	b = slices.Grow(b, n)[:start+n]
	_, _ = r.Read(b[start:])
	return b, nil
}

func decodeStrings(d *msgpack.Decoder) ([]string, error) {
	n, err := d.DecodeArrayLen()
	if err != nil || n == -1 {
		return nil, err
	}
	out := make([]string, 0, min(n, 1024)) // a length is only trusted as far as strings arrive
	for range n {
		s, err := d.DecodeString()
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

// decodeKey reads a map key into buf without allocating and returns its length; a key too long for buf
// is consumed and reported as empty (no field has such a key, so its value is skipped).
func decodeKey(d *msgpack.Decoder, buf *[32]byte) (int, error) {
	n, err := d.DecodeBytesLen()
	if err != nil || n <= 0 {
		return 0, err
	}
	if n > len(buf) {
		if err := checkRemaining(d, n); err != nil {
			return 0, err
		}
		return 0, d.ReadFull(make([]byte, n))
	}
	return n, readFull(d, buf[:n])
}

// readFull fills b from the decoder's input. Reading from the bytes.Reader behind codec.Unmarshal directly
// keeps b (a caller's stack buffer) from escaping to the heap, which a read through an io.Reader would force.
func readFull(d *msgpack.Decoder, b []byte) error {
	if r, ok := d.Buffered().(*bytes.Reader); ok {
		if n, _ := r.Read(b); n < len(b) {
			return io.ErrUnexpectedEOF
		}
		return nil
	}
	tmp := make([]byte, len(b)) // any other reader: through a heap buffer
	if err := d.ReadFull(tmp); err != nil {
		return err
	}
	copy(b, tmp)
	return nil
}

// Values of the enumerated string fields, returned as shared constants instead of fresh copies.
var (
	splits   = []string{SplitTrain, SplitHeldout}
	statuses = []string{StatusCompleted, StatusTurnLimit, StatusInvalidAction, StatusError, StatusRunning, StatusStale}
	policies = []string{PolicyCurrent, PolicyStale}
)

// decodeKnown reads a string and returns the matching constant of known when there is one (no allocation),
// or a copy otherwise.
func decodeKnown(d *msgpack.Decoder, known []string) (string, error) {
	c, err := d.PeekCode()
	if err != nil {
		return "", err
	}
	if !msgpcode.IsFixedString(c) {
		return d.DecodeString()
	}
	var buf [31]byte // fixstr: at most 31 bytes
	n, err := d.DecodeBytesLen()
	if err != nil {
		return "", err
	}
	if err := readFull(d, buf[:n]); err != nil {
		return "", err
	}
	for _, k := range known {
		if k == string(buf[:n]) {
			return k, nil
		}
	}
	return string(buf[:n]), nil
}

// The reflecting decoder of msgpack v5.4.1 sizes a slice of structs by the length its header claims,
// however few bytes follow (its allocation limit is never applied), so a message of a few bytes could make
// a stage allocate terabytes and die. The slices of structs in the messages are therefore decoded here,
// refusing a length that claims more elements than there are bytes left. (Strings and blobs it reads in
// chunks of at most 1 MiB, so a length the input cannot hold costs at most that.)
func init() {
	registerSlice[Message]()
	registerSlice[Tool]()
	registerSlice[ToolCall]()
	registerSlice[EnvStartRequest]()
	registerSlice[EnvStepRequest]()
	registerSlice[EnvBatchResult]()
	registerSlice[Episode]()
	registerSlice[TrainEpisode]()
	registerSlice[string]() // msgpack's own caps the claim at a million strings (24 MB) instead
	// Maps it sizes by the claim too, capped at a million entries: tens of MB for a few bytes.
	registerMap[string, TaskStat]()
}

// registerMap makes msgpack decode every map[K]V with decodeMap.
func registerMap[K comparable, V any]() {
	msgpack.Register(map[K]V(nil), nil, func(d *msgpack.Decoder, v reflect.Value) error {
		m, err := decodeMap[K, V](d)
		if err != nil {
			return err
		}
		v.Set(reflect.ValueOf(m))
		return nil
	})
}

// decodeMap reads a map of K to V: nil for msgpack nil, an error for a length the input cannot hold (every
// entry takes at least two bytes).
func decodeMap[K comparable, V any](d *msgpack.Decoder) (map[K]V, error) {
	n, err := d.DecodeMapLen()
	if err != nil || n == -1 {
		return nil, err
	}
	if err := checkRemaining(d, 2*n); err != nil {
		return nil, err
	}
	size := n
	if _, ok := d.Buffered().(*bytes.Reader); !ok {
		size = min(n, sliceChunk)
	}
	m := make(map[K]V, size)
	for i := range n {
		var k K
		if err := d.Decode(&k); err != nil {
			return nil, fmt.Errorf("key %d: %w", i, err)
		}
		var v V
		if err := d.Decode(&v); err != nil {
			return nil, fmt.Errorf("value %d: %w", i, err)
		}
		m[k] = v
	}
	return m, nil
}

// registerSlice makes msgpack decode every []T with decodeSlice.
func registerSlice[T any]() {
	msgpack.Register([]T(nil), nil, func(d *msgpack.Decoder, v reflect.Value) error {
		s, err := decodeSlice[T](d)
		if err != nil {
			return err
		}
		v.Set(reflect.ValueOf(s))
		return nil
	})
}

// sliceChunk is the most elements allocated ahead of their bytes when the decoder does not read from memory
// (and checkRemaining cannot bound a length).
const sliceChunk = 1024

// decodeSlice reads an array of T: nil for msgpack nil, an error for a length the input cannot hold.
func decodeSlice[T any](d *msgpack.Decoder) ([]T, error) {
	n, err := d.DecodeArrayLen()
	if err != nil || n == -1 {
		return nil, err
	}
	if err := checkRemaining(d, n); err != nil { // every element takes at least one byte
		return nil, err
	}
	size := n
	if _, ok := d.Buffered().(*bytes.Reader); !ok {
		size = min(n, sliceChunk)
	}
	s := make([]T, 0, size)
	for i := range n {
		var zero T
		s = append(s, zero)
		if err := d.Decode(&s[i]); err != nil {
			return nil, fmt.Errorf("element %d: %w", i, err)
		}
	}
	return s, nil
}
